//! Nodes on the `ofi` transport give back what they open: after a node
//! shuts down (and its delivered messages are dropped), its endpoints,
//! queues, memory registrations and their file descriptors are gone. The
//! only test in its binary, so nothing else opens descriptors meanwhile.

#![cfg(feature = "ofi")]

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{ClusterKey, CompletionMode, GroupConfig, GroupId, Node, NodeConfig, NodeId, OfiConfig};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

async fn round(n: usize) {
    let listeners: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let key = ClusterKey::from_bytes(b"ofi resources test key, 32 bytes".to_vec()).unwrap();
    let nodes = futures::future::try_join_all(listeners.into_iter().enumerate().map(|(i, l)| {
        let config = OfiConfig::new(addrs.clone(), NodeId(i as u32), key.clone()).with_listener(l);
        Node::ofi(
            config,
            NodeConfig::new().with_completion_mode(CompletionMode::Interrupt),
        )
    }))
    .await
    .unwrap();
    let members: Vec<NodeId> = nodes.iter().map(Node::id).collect();
    let config = GroupConfig::new().with_block_size(4096);
    let groups = futures::future::try_join_all(
        nodes
            .iter()
            .map(|node| node.create_group(GroupId(1), &members, config.clone())),
    )
    .await
    .unwrap();
    let data = Bytes::from(vec![7u8; 100_001]);
    futures::future::join_all(groups.into_iter().map(|mut g| {
        let data = data.clone();
        async move {
            if g.is_root() {
                g.send(data).await.unwrap();
            } else {
                assert_eq!(g.next().await.unwrap().unwrap().data, data);
            }
            g.close().await.unwrap();
        }
    }))
    .await;
    futures::future::join_all(nodes.into_iter().map(Node::shutdown)).await;
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
