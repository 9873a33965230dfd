//! Nodes on the `ofi` transport give back what they open: after a node
//! shuts down (and its delivered messages are dropped), its endpoints,
//! queues, memory registrations and their file descriptors are gone. The
//! only test in its binary, so nothing else opens descriptors meanwhile.

#![cfg(feature = "ofi")]

use std::time::Duration;

use bytes::Bytes;
use rdmc::{GroupConfig, GroupId, Node, NodeId};

mod common;

use common::{OfiFixture, Tuning, cluster, create_all, run_group, shutdown};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

async fn round(n: usize) {
    let (nodes, _) = cluster::<OfiFixture>(n, Tuning::default()).await;
    let members: Vec<NodeId> = nodes.iter().map(Node::id).collect();
    let config = GroupConfig::new().with_block_size(4096);
    let groups = create_all(&nodes, GroupId(1), &members, config).await;
    run_group(groups, &[Bytes::from(vec![7u8; 100_001])]).await;
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_give_back_their_fabric_resources() {
    let mut counts = Vec::new();
    for _ in 0..6 {
        tokio::time::timeout(Duration::from_secs(30), round(3))
            .await
            .expect("a round in time");
        tokio::time::sleep(Duration::from_millis(50)).await;
        counts.push(open_fds());
    }
    // The first round may open libfabric's lazily created descriptors.
    assert!(
        counts[5] <= counts[1],
        "file descriptors grow with every cluster: {counts:?}"
    );
}
