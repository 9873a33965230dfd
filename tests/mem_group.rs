//! Whole groups over the in-process transport, through the public API.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{
    Algorithm, CompletionMode, Error, GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId,
};

/// Algorithms under test (the binomial pipeline joins once its schedule lands).
const ALGORITHMS: &[Algorithm] = &[
    Algorithm::Sequential,
    Algorithm::Chain,
    Algorithm::BinomialTree,
];

fn payload(seed: u64, len: usize) -> Bytes {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

fn node_config() -> NodeConfig {
    NodeConfig::new().with_completion_mode(CompletionMode::Interrupt)
}

/// Run one group of `n` nodes sending `sizes`; return what each receiver got.
async fn multicast(n: usize, config: GroupConfig, sizes: &[usize]) -> Vec<Vec<Bytes>> {
    let cluster = MemCluster::new(n);
    let nodes = Node::in_memory_all(&cluster, node_config()).unwrap();
    let members: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
    let messages: Vec<Bytes> = sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| payload(i as u64, len))
        .collect();
    let mut tasks = Vec::new();
    for node in nodes {
        let members = members.clone();
        let config = config.clone();
        let messages = messages.clone();
        tasks.push(tokio::spawn(async move {
            let mut group = node
                .create_group(GroupId(7), &members, config)
                .await
                .unwrap();
            let mut got = Vec::new();
            if group.is_root() {
                let sends: Vec<_> = messages.iter().map(|m| group.send(m.clone())).collect();
                for s in sends {
                    s.await.unwrap();
                }
                group.close().await.unwrap();
            } else {
                while let Some(msg) = group.next().await {
                    let msg = msg.unwrap();
                    assert_eq!(msg.seq, got.len() as u64);
                    got.push(msg.data);
                }
                group.close().await.unwrap();
            }
            drop(group);
            drop(node);
            got
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(
            tokio::time::timeout(Duration::from_secs(30), t)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    for (rank, got) in out.iter().enumerate().skip(1) {
        assert_eq!(got.len(), messages.len(), "rank {rank} message count");
        for (i, (a, b)) in got.iter().zip(&messages).enumerate() {
            assert!(
                a == b,
                "rank {rank} message {i} differs ({} vs {} bytes)",
                a.len(),
                b.len()
            );
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_delivers_odd_sizes_to_odd_groups() {
    for &algorithm in ALGORITHMS {
        for n in [1, 2, 3, 5, 7, 13] {
            let config = GroupConfig::new()
                .with_algorithm(algorithm)
                .with_block_size(1000);
            multicast(n, config, &[10_007, 1, 0, 999, 1000, 1001, 65_536]).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_messages_in_a_row() {
    for &algorithm in ALGORITHMS {
        let config = GroupConfig::new()
            .with_algorithm(algorithm)
            .with_block_size(64);
        let sizes: Vec<usize> = (0..100).map(|i| (i * 37) % 300).collect();
        multicast(6, config, &sizes).await;
    }
}

#[tokio::test]
async fn a_non_root_send_is_an_error() {
    let cluster = MemCluster::new(2);
    let nodes = Node::in_memory_all(&cluster, node_config()).unwrap();
    let members = [NodeId(0), NodeId(1)];
    let config = GroupConfig::new().with_algorithm(Algorithm::Chain);
    let (_g0, g1) = tokio::join!(
        nodes[0].create_group(GroupId(1), &members, config.clone()),
        nodes[1].create_group(GroupId(1), &members, config.clone()),
    );
    let g1 = g1.unwrap();
    assert_eq!(
        g1.send(Bytes::from_static(b"x")).await,
        Err(Error::NotRoot(GroupId(1)))
    );
}

#[tokio::test]
async fn a_killed_member_fails_the_group_everywhere() {
    let n = 4;
    let cluster = MemCluster::new(n);
    let nodes = Node::in_memory_all(&cluster, node_config()).unwrap();
    let members: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
    let config = GroupConfig::new()
        .with_algorithm(Algorithm::Chain)
        .with_block_size(16);
    let mut groups = Vec::new();
    for node in &nodes {
        groups.push(node.create_group(GroupId(3), &members, config.clone()));
    }
    let mut groups: Vec<_> = futures::future::join_all(groups)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    groups[0].send(payload(1, 100)).await.unwrap();
    for g in &mut groups[1..] {
        g.next().await.unwrap().unwrap();
    }
    cluster.kill(NodeId(2));
    // Queued while the group is failing; its outcome shows in `close`.
    drop(groups[0].send(payload(2, 100)));
    for (rank, g) in groups.iter_mut().enumerate() {
        if rank == 2 {
            continue;
        }
        let err = g.close().await.unwrap_err();
        match err {
            Error::GroupFailed { suspect, .. } => {
                assert_eq!(suspect, Some(NodeId(2)), "rank {rank}")
            }
            other => panic!("rank {rank}: unexpected {other:?}"),
        }
    }
}
