//! What a group moved, three ways that must agree: the typed snapshots
//! (`Sender::stats`, `Receiver::stats`, `Node::stats`), the `metrics`
//! facade (a recorder installed for this test binary), and the schedule:
//! every receiver takes every byte of every message exactly once.

use std::collections::HashMap;

use bytes::Bytes;
use futures::StreamExt;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use rdmc::{Algorithm, Group, GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId};

const NODES: usize = 5;
/// Odd sizes: partial last blocks, one of a single block.
const SIZES: [usize; 3] = [100_003, 1, 40_000];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_the_metrics_facade_and_the_schedule_agree() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");

    let nodes = Node::in_memory_all(&MemCluster::new(NODES), NodeConfig::new()).unwrap();
    let members: Vec<NodeId> = (0..NODES as u32).map(NodeId).collect();
    let config = GroupConfig::new()
        .with_algorithm(Algorithm::BinomialPipeline)
        .with_block_size(8192);
    let groups = futures::future::try_join_all(
        nodes
            .iter()
            .map(|n| n.create_group(GroupId(7), &members, config.clone())),
    )
    .await
    .unwrap();
    assert!(nodes.iter().all(|n| n.stats().groups_open == 1));
    let mut groups = groups.into_iter();
    let Some(Group::Root(mut root)) = groups.next() else {
        panic!("node 0 is the root")
    };
    let mut receivers: Vec<_> = groups.map(|g| g.into_receiver().unwrap()).collect();
    for (i, &size) in SIZES.iter().enumerate() {
        root.send(Bytes::from(vec![i as u8; size])).await.unwrap();
    }
    let readers = receivers.iter_mut().map(|r| async move {
        for &size in &SIZES {
            assert_eq!(r.next().await.unwrap().unwrap().data.len(), size);
        }
    });
    futures::future::join_all(readers).await;
    // Close everywhere at once (the root's close waits for the receivers').
    let closes = receivers.iter_mut().map(|r| async move {
        assert!(r.next().await.is_none());
        r.close().await
    });
    let (root_closed, closed) = tokio::join!(root.close(), futures::future::join_all(closes));
    root_closed.unwrap();
    assert!(closed.iter().all(Result::is_ok), "{closed:?}");

    // The snapshots: the root completed every message, every receiver
    // delivered each, every receiver took every byte once, and what was
    // sent was received.
    let total: u64 = SIZES.iter().map(|&s| s as u64).sum();
    let root_stats = root.stats();
    assert_eq!(root_stats.messages_sent, SIZES.len() as u64);
    assert_eq!(root_stats.bytes_received, 0);
    let mut sent = root_stats.bytes_sent;
    let mut blocks_sent = root_stats.blocks_sent;
    let mut blocks_received = 0;
    for r in &receivers {
        let s = r.stats();
        assert_eq!(s.messages_delivered, SIZES.len() as u64);
        assert_eq!(s.bytes_received, total);
        sent += s.bytes_sent;
        blocks_sent += s.blocks_sent;
        blocks_received += s.blocks_received;
    }
    let moved = (NODES as u64 - 1) * total;
    assert_eq!(sent, moved);
    assert_eq!(blocks_sent, blocks_received);

    // Per peer: what node a sent to node b, node b received from node a.
    let per_node: Vec<_> = nodes.iter().map(Node::stats).collect();
    for (a, stats) in per_node.iter().enumerate() {
        assert_eq!(stats.groups_open, 0, "node {a} closed its group");
        for p in &stats.peers {
            let back = per_node[p.node.index()]
                .peers
                .iter()
                .find(|q| q.node == NodeId(a as u32))
                .expect("the peer counted the other way too");
            assert_eq!(p.bytes_sent, back.bytes_received);
            assert_eq!(p.blocks_sent, back.blocks_received);
        }
    }

    // The facade: the same bytes per peer, and one latency sample per
    // message at the root and per message and receiver.
    let mut counters: HashMap<String, u64> = HashMap::new();
    let mut samples: HashMap<String, usize> = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let name = key.key().name().to_owned();
        let role = key
            .key()
            .labels()
            .find(|l| l.key() == "role")
            .map(|l| l.value().to_owned());
        match value {
            DebugValue::Counter(n) => *counters.entry(name).or_default() += n,
            DebugValue::Histogram(values) => {
                *samples
                    .entry(format!("{name}/{}", role.unwrap()))
                    .or_default() += values.len();
            }
            DebugValue::Gauge(_) => {}
        }
    }
    assert_eq!(counters["rdmc_bytes_sent_total"], moved);
    assert_eq!(counters["rdmc_bytes_received_total"], moved);
    assert_eq!(counters["rdmc_blocks_sent_total"], blocks_sent);
    assert_eq!(counters["rdmc_messages_sent_total"], SIZES.len() as u64);
    let delivered = (NODES - 1) * SIZES.len();
    assert_eq!(counters["rdmc_messages_delivered_total"], delivered as u64);
    assert_eq!(samples["rdmc_message_seconds/root"], SIZES.len());
    assert_eq!(samples["rdmc_message_seconds/receiver"], delivered);
    for node in nodes {
        node.shutdown().await;
    }
}
