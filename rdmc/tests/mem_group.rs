//! Whole groups over the in-process transport, through the public API.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{
    Algorithm, CompletionMode, Error, GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId,
};

/// Every algorithm.
const ALGORITHMS: &[Algorithm] = &Algorithm::ALL;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_groups_with_different_roots_deliver_concurrently() {
    let n = 6;
    let cluster = MemCluster::new(n);
    let nodes: Vec<_> = Node::in_memory_all(&cluster, node_config())
        .unwrap()
        .into_iter()
        .map(std::sync::Arc::new)
        .collect();
    // Group g has root g and a rotated membership; groups 3 and 4 cover only part of the nodes.
    let memberships: Vec<Vec<NodeId>> = vec![
        (0..6).map(NodeId).collect(),
        (1..6).chain(0..1).map(NodeId).collect(),
        (2..6).chain(0..2).map(NodeId).collect(),
        vec![NodeId(3), NodeId(0), NodeId(5)],
        vec![NodeId(4), NodeId(1), NodeId(2), NodeId(3)],
    ];
    let mut tasks = Vec::new();
    for (g, members) in memberships.iter().enumerate() {
        let algorithm = ALGORITHMS[g % ALGORITHMS.len()];
        let config = GroupConfig::new()
            .with_algorithm(algorithm)
            .with_block_size(512);
        let messages: Vec<Bytes> = (0..4)
            .map(|i| payload(100 * g as u64 + i, 5_000 + 333 * i as usize))
            .collect();
        for &member in members {
            let node = std::sync::Arc::clone(&nodes[member.index()]);
            let members = members.clone();
            let config = config.clone();
            let messages = messages.clone();
            tasks.push(tokio::spawn(async move {
                let mut group = node
                    .create_group(GroupId(g as u64), &members, config)
                    .await
                    .unwrap();
                if group.is_root() {
                    for m in &messages {
                        drop(group.send(m.clone()));
                    }
                } else {
                    for (i, m) in messages.iter().enumerate() {
                        let got = group.next().await.unwrap().unwrap();
                        assert_eq!(got.seq, i as u64);
                        assert!(got.data == m, "group {g} message {i} differs at {member}");
                    }
                }
                group.close().await.unwrap();
                assert!(group.next().await.is_none(), "the stream ends after close");
            }));
        }
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .unwrap()
            .unwrap();
    }
}

#[tokio::test]
async fn membership_errors_are_reported() {
    let cluster = MemCluster::new(3);
    let nodes = Node::in_memory_all(&cluster, node_config()).unwrap();
    let config = GroupConfig::new();
    let err = nodes[0]
        .create_group(GroupId(1), &[], config.clone())
        .await
        .unwrap_err();
    assert_eq!(err, Error::Membership(rdmc::MembershipError::Empty));
    let err = nodes[0]
        .create_group(GroupId(1), &[NodeId(1), NodeId(2)], config.clone())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::Membership(rdmc::MembershipError::NotAMember(NodeId(0)))
    );
    let err = nodes[0]
        .create_group(
            GroupId(1),
            &[NodeId(0), NodeId(1), NodeId(0)],
            config.clone(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::Membership(rdmc::MembershipError::Duplicate(NodeId(0)))
    );
    let err = nodes[0]
        .create_group(GroupId(1), &[NodeId(0)], config.clone().with_block_size(0))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)));
    // A group of one: sends complete at once, close succeeds.
    let solo = nodes[0]
        .create_group(GroupId(2), &[NodeId(0)], config.clone())
        .await
        .unwrap();
    solo.send(Bytes::from_static(b"alone")).await.unwrap();
    solo.close().await.unwrap();
    drop(solo);
    let err = nodes[0]
        .create_group(GroupId(2), &[NodeId(0)], config)
        .await
        .unwrap_err();
    assert_eq!(err, Error::GroupIdInUse(GroupId(2)));
}

#[tokio::test]
async fn a_message_above_the_limit_is_refused() {
    let cluster = MemCluster::new(1);
    let nodes = Node::in_memory_all(&cluster, node_config()).unwrap();
    let config = GroupConfig::new().with_max_message_size(10);
    let g = nodes[0]
        .create_group(GroupId(1), &[NodeId(0)], config)
        .await
        .unwrap();
    assert_eq!(
        g.send(vec![0u8; 11]).await,
        Err(Error::MessageTooLarge { size: 11, max: 10 })
    );
    g.send(vec![0u8; 10]).await.unwrap();
}

#[tokio::test]
async fn dropping_a_member_fails_the_group_for_the_others() {
    let cluster = MemCluster::new(3);
    let nodes = Node::in_memory_all(&cluster, node_config()).unwrap();
    let members = [NodeId(0), NodeId(1), NodeId(2)];
    let config = GroupConfig::new().with_algorithm(Algorithm::Chain);
    let (root, g1, mut g2) = tokio::try_join!(
        nodes[0].create_group(GroupId(1), &members, config.clone()),
        nodes[1].create_group(GroupId(1), &members, config.clone()),
        nodes[2].create_group(GroupId(1), &members, config.clone()),
    )
    .unwrap();
    drop(g1);
    let err = g2.next().await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            Error::GroupFailed {
                suspect: Some(NodeId(1)),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(g2.next().await.is_none());
    assert!(matches!(
        root.close().await,
        Err(Error::GroupFailed {
            suspect: Some(NodeId(1)),
            ..
        })
    ));
    assert!(matches!(
        root.send(Bytes::new()).await,
        Err(Error::GroupFailed { .. })
    ));
}

#[tokio::test]
async fn a_full_receive_window_holds_the_root_back_until_the_reader_catches_up() {
    let cluster = MemCluster::new(3);
    let nodes = Node::in_memory_all(&cluster, node_config()).unwrap();
    let members = [NodeId(0), NodeId(1), NodeId(2)];
    let config = GroupConfig::new()
        .with_algorithm(Algorithm::BinomialPipeline)
        .with_block_size(8)
        .with_receive_window(Some(2));
    let (root, mut fast, mut slow) = tokio::try_join!(
        nodes[0].create_group(GroupId(1), &members, config.clone()),
        nodes[1].create_group(GroupId(1), &members, config.clone()),
        nodes[2].create_group(GroupId(1), &members, config.clone()),
    )
    .unwrap();
    let sends: Vec<_> = (0..4).map(|i| root.send(payload(i, 20))).collect();
    let mut sends = sends.into_iter();
    // With n = 3 the pipeline's root sends to both receivers directly, so
    // once the slow reader holds two unread messages the third cannot start.
    sends.next().unwrap().await.unwrap();
    sends.next().unwrap().await.unwrap();
    for i in 0..2 {
        assert_eq!(fast.next().await.unwrap().unwrap().seq, i);
    }
    let mut third = sends.next().unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), &mut third)
            .await
            .is_err(),
        "the third message must wait for the slow reader"
    );
    // Reading one message makes room for one more.
    assert_eq!(slow.next().await.unwrap().unwrap().seq, 0);
    third.await.unwrap();
    let fourth = sends.next().unwrap();
    for i in 1..4 {
        assert_eq!(slow.next().await.unwrap().unwrap().seq, i);
    }
    fourth.await.unwrap();
    assert_eq!(fast.next().await.unwrap().unwrap().seq, 2);
    assert_eq!(fast.next().await.unwrap().unwrap().seq, 3);
    tokio::try_join!(root.close(), fast.close(), slow.close()).unwrap();
}

/// Every member reports where its time went, and the parts add up to no
/// more than the whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_carry_consistent_timings() {
    let n = 4;
    let cluster = MemCluster::new(n);
    let nodes = Node::in_memory_all(&cluster, node_config()).unwrap();
    let members: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
    let config = GroupConfig::new()
        .with_algorithm(Algorithm::BinomialPipeline)
        .with_block_size(64 * 1024);
    let data = payload(3, 4 * 1024 * 1024 + 17);
    let mut tasks = Vec::new();
    for node in nodes {
        let members = members.clone();
        let config = config.clone();
        let data = data.clone();
        tasks.push(tokio::spawn(async move {
            let mut group = node
                .create_group(GroupId(9), &members, config)
                .await
                .unwrap();
            let timings = if group.is_root() {
                let before = std::time::Instant::now();
                let t = group.send(data).await.unwrap();
                assert!(t.started >= before, "root starts at its send");
                assert_eq!(t.copy, Duration::ZERO, "the root copies nothing");
                t
            } else {
                let msg = group.next().await.unwrap().unwrap();
                assert_eq!(msg.data, data);
                msg.timings
            };
            group.close().await.unwrap();
            timings
        }));
    }
    for (rank, t) in tasks.into_iter().enumerate() {
        let t = tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .unwrap()
            .unwrap();
        let parts = t.setup + t.copy + t.transferring + t.waiting;
        assert!(parts <= t.total, "rank {rank}: {t:?}");
        assert!(t.total > Duration::ZERO, "rank {rank}: {t:?}");
        assert!(
            t.transferring > Duration::ZERO,
            "rank {rank}: 65 blocks took no transfer time: {t:?}"
        );
    }
}
