//! Whole groups over the in-process transport, through the public API.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{Algorithm, Error, Group, GroupConfig, GroupId, NodeId, Receipt};

mod common;

use common::{create_all, mem_nodes, payload, roles, run_group};

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

/// The first member gets the sending handle, every other a receiving one
/// (a receiver cannot even name `send`: see the `compile_fail` examples on
/// `Group`); asking a receiver for the sender's handle gives the receiver
/// back, still a member.
#[tokio::test]
async fn only_the_first_member_gets_the_sending_handle() {
    let (_cluster, nodes) = mem_nodes(2);
    let members = [NodeId(0), NodeId(1)];
    let config = GroupConfig::new().with_algorithm(Algorithm::Chain);
    let (g0, g1) = tokio::try_join!(
        nodes[0].create_group(GroupId(1), &members, config.clone()),
        nodes[1].create_group(GroupId(1), &members, config.clone()),
    )
    .unwrap();
    assert!(g0.is_root() && matches!(g0, Group::Root(_)));
    assert!(!g1.is_root() && matches!(g1, Group::Receiver(_)));
    assert_eq!((g0.rank(), g1.rank()), (0, 1));
    assert_eq!((g0.id(), g1.members()), (GroupId(1), &members[..]));
    let mut receiver = g1.into_sender().expect_err("node 1 is not the root");
    assert_eq!(receiver.rank(), 1);
    let mut root = g0.into_receiver().expect_err("node 0 is the root");
    assert_eq!(root.members(), &members[..]);
    // Both handles came back whole: the group works.
    let _queued = root.send(Bytes::from_static(b"x")).await.unwrap();
    assert_eq!(&receiver.next().await.unwrap().unwrap().data[..], b"x");
    tokio::try_join!(root.close(), receiver.close()).unwrap();
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
    let mut groups = futures::future::try_join_all(groups).await.unwrap();
    let Group::Root(root) = &groups[0] else {
        panic!("rank 0 is the root")
    };
    root.send(payload(1, 100))
        .await
        .unwrap()
        .sent()
        .await
        .unwrap();
    for g in &mut groups[1..] {
        let Group::Receiver(receiver) = g else {
            panic!("every other rank receives")
        };
        receiver.next().await.unwrap().unwrap();
    }
    cluster.kill(NodeId(2));
    // Queued (or refused) while the group is failing; its outcome shows in
    // `close` (the role's, through `Group::close`).
    if let Group::Root(root) = &groups[0] {
        let _ = root.send(payload(2, 100)).await;
    }
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
    let mut solo = nodes[0]
        .create_group(GroupId(2), &[NodeId(0)], config.clone())
        .await
        .unwrap()
        .into_sender()
        .unwrap();
    let (sent, delivered) = solo
        .send(Bytes::from_static(b"alone"))
        .await
        .unwrap()
        .split();
    sent.await.unwrap();
    delivered.await.unwrap();
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
        .unwrap()
        .into_sender()
        .unwrap();
    // Refused where it is sent, taking no room.
    let too_large = Error::MessageTooLarge { size: 11, max: 10 };
    assert_eq!(g.send(vec![0u8; 11]).await.unwrap_err(), too_large);
    assert_eq!(g.in_flight(), 0, "a refused message takes no room");
    g.send(vec![0u8; 10]).await.unwrap().sent().await.unwrap();
}

#[tokio::test]
async fn dropping_a_member_fails_the_group_for_the_others() {
    let (_cluster, nodes) = mem_nodes(3);
    let members = [NodeId(0), NodeId(1), NodeId(2)];
    let config = GroupConfig::new().with_algorithm(Algorithm::Chain);
    let (root, g1, g2) = tokio::try_join!(
        nodes[0].create_group(GroupId(1), &members, config.clone()),
        nodes[1].create_group(GroupId(1), &members, config.clone()),
        nodes[2].create_group(GroupId(1), &members, config.clone()),
    )
    .unwrap();
    let (mut root, mut g2) = (root.into_sender().unwrap(), g2.into_receiver().unwrap());
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
    let groups = tokio::try_join!(
        nodes[0].create_group(GroupId(1), &members, config.clone()),
        nodes[1].create_group(GroupId(1), &members, config.clone()),
        nodes[2].create_group(GroupId(1), &members, config.clone()),
    )
    .unwrap();
    let (mut root, receivers) = roles(vec![groups.0, groups.1, groups.2]);
    let [mut fast, mut slow] = <[_; 2]>::try_from(receivers).unwrap();
    let mut receipts = Vec::new();
    for i in 0..4 {
        receipts.push(root.send(payload(i, 20)).await.unwrap());
    }
    let mut sends = receipts.into_iter().map(Receipt::sent);
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
            let timings = match &mut group {
                Group::Root(root) => {
                    let before = std::time::Instant::now();
                    let t = root.send(data).await.unwrap().sent().await.unwrap();
                    assert!(t.started >= before, "root starts at its send");
                    assert_eq!(t.copy, Duration::ZERO, "the root copies nothing");
                    t
                }
                Group::Receiver(receiver) => {
                    let msg = receiver.next().await.unwrap().unwrap();
                    assert_eq!(msg.data, data);
                    msg.timings
                }
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

#[tokio::test]
async fn every_node_sees_its_peers_come_a_killed_one_go_and_one_shut_down_leave() {
    let (cluster, mut nodes) = common::mem_nodes(3);
    let mut events = nodes[0].peer_events();
    let mut up = Vec::new();
    while up.len() < 2 {
        match common::bounded(common::LONG, "peers up", events.next()).await {
            Some(rdmc::PeerEvent::Up { node, .. }) => up.push(node),
            other => panic!("expected a peer up, got {other:?}"),
        }
    }
    up.sort();
    assert_eq!(up, common::ids(&[1, 2]));
    cluster.kill(NodeId(2));
    match common::bounded(common::LONG, "peer down", events.next()).await {
        Some(rdmc::PeerEvent::Down { node, reason, .. }) => {
            assert_eq!(node, NodeId(2));
            assert_eq!(reason, "killed");
        }
        other => panic!("expected node 2 down, got {other:?}"),
    }
    let peers = nodes[0].peers().await.unwrap();
    let up: Vec<(NodeId, bool)> = peers.iter().map(|p| (p.node, p.up)).collect();
    assert_eq!(up, vec![(NodeId(1), true), (NodeId(2), false)]);
    // Node 1 shuts down: it left, as it said (no failure).
    nodes.remove(1).shutdown().await;
    assert_eq!(
        common::bounded(common::LONG, "peer left", events.next()).await,
        Some(rdmc::PeerEvent::Left {
            node: NodeId(1),
            incarnation: 0
        })
    );
    let peers = nodes[0].peers().await.unwrap();
    assert!(peers.iter().all(|p| !p.up), "{peers:?}");
    // It may start again (a killed one may not).
    let back = rdmc::Node::in_memory(&cluster, NodeId(1), common::node_config()).unwrap();
    match common::bounded(common::LONG, "peer back", events.next()).await {
        Some(rdmc::PeerEvent::Up { node, .. }) => assert_eq!(node, NodeId(1)),
        other => panic!("expected node 1 up again, got {other:?}"),
    }
    assert!(rdmc::Node::in_memory(&cluster, NodeId(2), common::node_config()).is_err());
    nodes.push(back);
    common::shutdown(nodes).await;
}
