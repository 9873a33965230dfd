//! Whole groups over the in-process transport, through the public API.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{Algorithm, Error, GroupConfig, GroupId, NodeId};

mod common;

use common::{create_all, mem_nodes, payload, run_group};

/// The whole-group scenarios every transport runs are in
/// `tests/whole_group.rs` (`mem::...`); this one goes with them, in
/// smaller blocks and up to larger groups than the suite's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_delivers_odd_sizes_in_small_blocks_to_groups_of_up_to_thirteen() {
    let (_cluster, nodes) = mem_nodes(13);
    let messages: Vec<Bytes> = [10_007, 1, 0, 999, 1000, 1001, 65_536]
        .into_iter()
        .enumerate()
        .map(|(i, len)| payload(i as u64, len))
        .collect();
    let mut id = 0;
    for &algorithm in &Algorithm::ALL {
        for n in [1, 2, 3, 5, 7, 13] {
            id += 1;
            let members: Vec<NodeId> = (0..n).map(NodeId).collect();
            let config = GroupConfig::new()
                .with_algorithm(algorithm)
                .with_block_size(1000);
            let groups = create_all(&nodes, GroupId(id), &members, config).await;
            run_group(groups, &messages).await;
        }
    }
    // A hundred small messages in a row, in 64-byte blocks, to six members.
    let six: Vec<NodeId> = (0..6).map(NodeId).collect();
    let messages: Vec<Bytes> = (0..100u64)
        .map(|i| payload(100 + i, ((i * 37) % 300) as usize))
        .collect();
    for (a, &algorithm) in Algorithm::ALL.iter().enumerate() {
        let config = GroupConfig::new()
            .with_algorithm(algorithm)
            .with_block_size(64);
        let groups = create_all(&nodes, GroupId(100 + a as u64), &six, config).await;
        run_group(groups, &messages).await;
    }
}

#[tokio::test]
async fn a_non_root_send_is_an_error() {
    let (_cluster, nodes) = mem_nodes(2);
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
    let (cluster, nodes) = mem_nodes(n);
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

#[tokio::test]
async fn membership_errors_are_reported() {
    let (_cluster, nodes) = mem_nodes(3);
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
    let (_cluster, nodes) = mem_nodes(1);
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
    let (_cluster, nodes) = mem_nodes(3);
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
    let (_cluster, nodes) = mem_nodes(3);
    let members = [NodeId(0), NodeId(1), NodeId(2)];
    let config = GroupConfig::new()
        .with_algorithm(Algorithm::BinomialPipeline)
        .with_block_size(8)
        .with_receive_window(Some(2))
        // The window counts transfers, and a batch is one: each message
        // its own transfer here.
        .with_small_message_batching(None);
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
    let (_cluster, nodes) = mem_nodes(n);
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

/// The hybrid over racks dealt out interleaved, and the binomial pipeline
/// and the hybrid with members named slow: byte-exact everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racks_and_slow_members_deliver_byte_exact() {
    let (_cluster, nodes) = mem_nodes(11);
    let messages: Vec<Bytes> = [70_001, 0, 1, 999, 4096]
        .into_iter()
        .enumerate()
        .map(|(i, len)| payload(500 + i as u64, len))
        .collect();
    let mut id = 200;
    for n in [2u32, 3, 6, 11] {
        let members: Vec<NodeId> = (0..n).map(NodeId).collect();
        let interleaved: Vec<u32> = (0..n).map(|r| r % 3).collect();
        let configs = [
            GroupConfig::new()
                .with_algorithm(Algorithm::Hybrid)
                .with_racks(interleaved.clone()),
            GroupConfig::new()
                .with_algorithm(Algorithm::Hybrid)
                .with_racks(interleaved)
                .with_slow_members([n as usize - 1, 1]),
            GroupConfig::new()
                .with_algorithm(Algorithm::BinomialPipeline)
                .with_slow_members([1]),
        ];
        for config in configs {
            id += 1;
            let groups =
                create_all(&nodes, GroupId(id), &members, config.with_block_size(1000)).await;
            run_group(groups, &messages).await;
        }
    }
}

/// Members that disagree on the racks or the slow members fail creation;
/// a rack list of the wrong length or a slow rank outside the group is
/// refused before anything is sent.
#[tokio::test]
async fn racks_are_part_of_the_group_identity() {
    let (_cluster, nodes) = mem_nodes(3);
    let members: Vec<NodeId> = (0..3).map(NodeId).collect();
    let base = GroupConfig::new()
        .with_algorithm(Algorithm::Hybrid)
        .with_create_timeout(Duration::from_secs(5));
    for (g, other) in [
        base.clone().with_racks(vec![0, 1, 0]),
        base.clone().with_slow_members([2]),
    ]
    .into_iter()
    .enumerate()
    {
        let id = GroupId(300 + g as u64);
        let results = futures::future::join_all([
            nodes[0].create_group(id, &members, base.clone().with_racks(vec![0, 1, 1])),
            nodes[1].create_group(id, &members, base.clone().with_racks(vec![0, 1, 1])),
            nodes[2].create_group(id, &members, other),
        ])
        .await;
        for r in results {
            assert!(
                matches!(r, Err(Error::MembershipMismatch { .. })),
                "{:?}",
                r.map(|_| ())
            );
        }
    }
    let err = nodes[0]
        .create_group(GroupId(310), &members, base.clone().with_racks(vec![0, 1]))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidTopology(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "invalid group topology: 2 racks given for a group of 3 members (one per member, in rank order)"
    );
    let err = nodes[0]
        .create_group(GroupId(311), &members, base.with_slow_members([3]))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidTopology(_)), "{err:?}");
}
