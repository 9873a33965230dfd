//! The group-creation rendezvous over the in-process transport: every member
//! creates the group with identical membership and configuration; a
//! mismatch, a member that never creates it, or a member that is gone makes
//! `create_group` fail with a clear error instead of hanging. The scenarios
//! at the end run on every transport (`mem`, `tcp`, and `ofi` with its
//! feature).

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{
    Algorithm, CompletionMode, Error, GroupConfig, GroupId, GroupSetting, MemCluster,
    MembershipError, Mismatch, Node, NodeConfig, NodeId,
};

mod common;

use common::{
    Fixture, MemFixture, TcpFixture, Tuning, assert_mismatch, assert_node_2_left_out, bounded,
    cluster, create_all, differ, ids, mem_nodes, payload, receive_all, run_group, shutdown,
};

const G: GroupId = GroupId(5);

/// Bound for a rendezvous that must not hang.
const PROMPT: Duration = Duration::from_secs(10);

async fn create(node: &Node, members: &[u32], config: GroupConfig) -> Result<rdmc::Group, Error> {
    create_id(node, G, members, config).await
}

async fn create_id(
    node: &Node,
    id: GroupId,
    members: &[u32],
    config: GroupConfig,
) -> Result<rdmc::Group, Error> {
    node.create_group(id, &ids(members), config).await
}

type Created = Result<rdmc::Group, Error>;

/// Nodes 0 and 1 create group `id` at once, each with its own member list
/// and configuration.
async fn create_both(
    nodes: &[Node],
    id: GroupId,
    (members_0, config_0): (&[u32], GroupConfig),
    (members_1, config_1): (&[u32], GroupConfig),
) -> (Created, Created) {
    bounded(PROMPT, "the rendezvous", async {
        tokio::join!(
            create_id(&nodes[0], id, members_0, config_0),
            create_id(&nodes[1], id, members_1, config_1),
        )
    })
    .await
}

/// Both groups close `Ok`.
async fn close_both(mut a: rdmc::Group, mut b: rdmc::Group) {
    bounded(PROMPT, "closing", async {
        tokio::try_join!(a.close(), b.close())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_creates_later_still_joins_and_others_wait_for_it() {
    let (_cluster, nodes) = mem_nodes(3);
    let members = ids(&[0, 1, 2]);
    let config = GroupConfig::new()
        .with_algorithm(Algorithm::BinomialPipeline)
        .with_block_size(16);
    let early = futures::future::try_join(
        nodes[0].create_group(G, &members, config.clone()),
        nodes[1].create_group(G, &members, config.clone()),
    );
    tokio::pin!(early);
    // Without node 2 nobody gets the group.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), &mut early)
            .await
            .is_err(),
        "the rendezvous completed without node 2"
    );
    let (late, early) = bounded(
        PROMPT,
        "create_group",
        futures::future::join(nodes[2].create_group(G, &members, config.clone()), early),
    )
    .await;
    let (root, g1) = early.unwrap();
    let mut root = root.into_sender().unwrap();
    let mut g1 = g1.into_receiver().unwrap();
    let mut g2 = late.unwrap().into_receiver().unwrap();
    let _queued = root
        .send(Bytes::from_static(b"after the rendezvous"))
        .await
        .unwrap();
    for g in [&mut g1, &mut g2] {
        let msg = bounded(PROMPT, "create_group", g.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&msg.data[..], b"after the rendezvous");
    }
    bounded(PROMPT, "create_group", async {
        tokio::try_join!(root.close(), g1.close(), g2.close())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_root_creating_last_still_delivers() {
    // The receivers finish their part first and post their receives; the
    // root's rendezvous completes last.
    let (_cluster, nodes) = mem_nodes(4);
    let members = ids(&[0, 1, 2, 3]);
    let config = GroupConfig::new()
        .with_algorithm(Algorithm::Chain)
        .with_block_size(7);
    let receivers = futures::future::try_join_all(
        nodes[1..]
            .iter()
            .map(|n| n.create_group(G, &members, config.clone())),
    );
    let root = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        nodes[0].create_group(G, &members, config.clone()).await
    };
    let (root, receivers) = bounded(
        PROMPT,
        "create_group",
        futures::future::join(root, receivers),
    )
    .await;
    let mut root = root.unwrap().into_sender().unwrap();
    let mut receivers: Vec<_> = receivers
        .unwrap()
        .into_iter()
        .map(|g| g.into_receiver().unwrap())
        .collect();
    let _queued = root.send(vec![7u8; 100]).await.unwrap();
    for g in &mut receivers {
        assert_eq!(
            bounded(PROMPT, "create_group", g.next())
                .await
                .unwrap()
                .unwrap()
                .data
                .len(),
            100
        );
    }
    // Every receiver's application closes too: the root's close waits for
    // them (it means every application has every message).
    bounded(PROMPT, "closing", async {
        tokio::try_join!(
            root.close(),
            futures::future::try_join_all(receivers.iter_mut().map(|g| g.close()))
        )
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_different_member_order_fails_on_both_members() {
    let (_cluster, nodes) = mem_nodes(2);
    let config = GroupConfig::new();
    let (a, b) = create_both(&nodes, G, (&[0, 1], config.clone()), (&[1, 0], config)).await;
    let members = differ(&[GroupSetting::Members]);
    assert_mismatch(a, G, &[(1, members.clone())], "node 0");
    assert_mismatch(b, G, &[(0, members)], "node 1");
}

#[tokio::test]
async fn a_different_algorithm_fails_on_both_members() {
    let (_cluster, nodes) = mem_nodes(2);
    let (a, b) = create_both(
        &nodes,
        G,
        (&[0, 1], GroupConfig::new().with_algorithm(Algorithm::Chain)),
        (
            &[0, 1],
            GroupConfig::new().with_algorithm(Algorithm::BinomialTree),
        ),
    )
    .await;
    let algorithm = differ(&[GroupSetting::Algorithm]);
    assert_mismatch(a, G, &[(1, algorithm.clone())], "node 0");
    assert_mismatch(b, G, &[(0, algorithm)], "node 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_member_with_a_different_block_size_fails_every_member() {
    for round in 0..20u64 {
        let (_cluster, nodes) = mem_nodes(3);
        let members = ids(&[0, 1, 2]);
        let same = GroupConfig::new().with_block_size(1024);
        let other = same.clone().with_block_size(2048);
        let g = GroupId(round);
        let results = bounded(
            PROMPT,
            "create_group",
            futures::future::join_all([
                nodes[0].create_group(g, &members, same.clone()),
                nodes[1].create_group(g, &members, same.clone()),
                nodes[2].create_group(g, &members, other.clone()),
            ]),
        )
        .await;
        let block_size = differ(&[GroupSetting::BlockSize]);
        let [a, b, c] = <[_; 3]>::try_from(results).unwrap();
        // Nodes 0 and 1 agree with each other: either may name the other as
        // the one that refused.
        let who = format!("round {round}");
        let a_allowed = [(2, block_size.clone()), (1, Mismatch::Refused)];
        assert_mismatch(a, g, &a_allowed, &format!("{who}, node 0"));
        let b_allowed = [(2, block_size.clone()), (0, Mismatch::Refused)];
        assert_mismatch(b, g, &b_allowed, &format!("{who}, node 1"));
        let c_allowed = [(0, block_size.clone()), (1, block_size)];
        assert_mismatch(c, g, &c_allowed, &format!("{who}, node 2"));
    }
}

#[tokio::test]
async fn different_member_lists_fail_every_creator() {
    let (_cluster, nodes) = mem_nodes(3);
    let (a, b, c) = bounded(PROMPT, "create_group", async {
        tokio::join!(
            create(&nodes[0], &[0, 1, 2], GroupConfig::new()),
            create(&nodes[1], &[0, 1], GroupConfig::new()),
            create(&nodes[2], &[0, 1, 2], GroupConfig::new()),
        )
    })
    .await;
    assert_node_2_left_out([a, b, c], G);
}

#[tokio::test]
async fn a_join_from_a_non_member_is_a_mismatch() {
    let (_cluster, nodes) = mem_nodes(3);
    // Node 2 believes the group is {0, 2}; nodes 0 and 1 that it is {0, 1}.
    let outsider = bounded(PROMPT, "create_group", async {
        tokio::join!(create(&nodes[2], &[0, 2], GroupConfig::new()), async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            create(&nodes[0], &[0, 1], GroupConfig::new()).await
        },)
    })
    .await;
    let members = differ(&[GroupSetting::Members]);
    assert_mismatch(outsider.0, G, &[(0, members)], "node 2");
    assert_mismatch(outsider.1, G, &[(2, Mismatch::NotAMember)], "node 0");
    // Node 0 told node 1, which fails as soon as it creates the group.
    let b = bounded(
        PROMPT,
        "create_group",
        create(&nodes[1], &[0, 1], GroupConfig::new()),
    )
    .await;
    assert_mismatch(b, G, &[(0, Mismatch::Refused)], "node 1");
}

#[tokio::test(start_paused = true)]
async fn a_member_that_never_creates_the_group_times_the_others_out() {
    let (_cluster, nodes) = mem_nodes(3);
    let members = ids(&[0, 1, 2]);
    let config = GroupConfig::new().with_create_timeout(Duration::from_millis(300));
    let start = tokio::time::Instant::now();
    let (a, b) = create_both(
        &nodes,
        G,
        (&[0, 1, 2], config.clone()),
        (&[0, 1, 2], config.clone()),
    )
    .await;
    assert!(start.elapsed() >= Duration::from_millis(300));
    for (who, r) in [("node 0", a), ("node 1", b)] {
        let err = r.unwrap_err();
        // A member that timed out a moment before tells every member that
        // joined (one whose rendezvous completed would wait for it): the
        // other fails naming the same missing member.
        if let Error::GroupFailed {
            suspect,
            reported_by,
            ..
        } = &err
        {
            assert_eq!(*suspect, Some(NodeId(2)), "{who}: {err}");
            assert!(reported_by.is_some(), "{who}: {err}");
            continue;
        }
        assert_eq!(
            err,
            Error::CreateTimedOut {
                group: G,
                missing: vec![NodeId(2)],
                why: None,
            },
            "{who}"
        );
        assert_eq!(
            err.to_string(),
            "group 5: timed out waiting for node 2 to create it"
        );
    }
    // The id stays used after a failed create.
    assert_eq!(
        nodes[0]
            .create_group(G, &members, config.clone())
            .await
            .unwrap_err(),
        Error::GroupIdInUse(G)
    );
    // The latecomer is told the group failed rather than waiting for ever.
    let late = bounded(
        PROMPT,
        "create_group",
        nodes[2].create_group(G, &members, GroupConfig::new()),
    )
    .await;
    assert!(
        matches!(late, Err(Error::GroupFailed { group: G, .. })),
        "{late:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_timeout_names_every_missing_member_in_rank_order() {
    let (_cluster, nodes) = mem_nodes(4);
    let config = GroupConfig::new().with_create_timeout(Duration::from_millis(300));
    let err = bounded(
        PROMPT,
        "create_group",
        create(&nodes[0], &[3, 0, 2, 1], config),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err,
        Error::CreateTimedOut {
            group: G,
            missing: ids(&[3, 2, 1]),
            why: None,
        }
    );
    assert_eq!(
        err.to_string(),
        "group 5: timed out waiting for nodes 3, 2, 1 to create it"
    );
}

#[tokio::test]
async fn a_member_killed_before_the_create_fails_it_naming_the_member() {
    let (cluster, nodes) = mem_nodes(3);
    cluster.kill(NodeId(2));
    let members = ids(&[0, 1, 2]);
    let all: &[u32] = &[0, 1, 2];
    let (a, b) = create_both(
        &nodes,
        G,
        (all, GroupConfig::new()),
        (all, GroupConfig::new()),
    )
    .await;
    for (who, r) in [("node 0", a), ("node 1", b)] {
        match r {
            Err(Error::GroupFailed { group, suspect, .. }) => {
                assert_eq!(group, G, "{who}");
                assert_eq!(suspect, Some(NodeId(2)), "{who}");
            }
            other => panic!("{who}: {other:?}"),
        }
    }
    assert_eq!(
        nodes[1]
            .create_group(G, &members, GroupConfig::new())
            .await
            .unwrap_err(),
        Error::GroupIdInUse(G)
    );
}

#[tokio::test]
async fn a_member_killed_during_the_rendezvous_fails_it_promptly() {
    let (cluster, nodes) = mem_nodes(3);
    let members = ids(&[0, 1, 2]);
    // The default 30 s create timeout: only the kill can end this quickly.
    let creates = futures::future::join(
        nodes[0].create_group(G, &members, GroupConfig::new()),
        nodes[1].create_group(G, &members, GroupConfig::new()),
    );
    let kill = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cluster.kill(NodeId(2));
    };
    let ((a, b), ()) = bounded(PROMPT, "create_group", futures::future::join(creates, kill)).await;
    for (who, r) in [("node 0", a), ("node 1", b)] {
        assert!(
            matches!(
                r,
                Err(Error::GroupFailed {
                    suspect: Some(NodeId(2)),
                    ..
                })
            ),
            "{who}: {r:?}"
        );
    }
}

#[tokio::test]
async fn the_id_stays_used_after_a_mismatch() {
    let (_cluster, nodes) = mem_nodes(2);
    let (a, b) = create_both(
        &nodes,
        G,
        (&[0, 1], GroupConfig::new()),
        (&[0, 1], GroupConfig::new().with_block_size(1)),
    )
    .await;
    let block_size = differ(&[GroupSetting::BlockSize]);
    assert_mismatch(a, G, &[(1, block_size.clone())], "node 0");
    assert_mismatch(b, G, &[(0, block_size)], "node 1");
    for node in &nodes {
        assert_eq!(
            node.create_group(G, &ids(&[0, 1]), GroupConfig::new())
                .await
                .unwrap_err(),
            Error::GroupIdInUse(G)
        );
    }
    // A fresh id works.
    let fresh = GroupId(6);
    let both: &[u32] = &[0, 1];
    let (a, b) = create_both(
        &nodes,
        fresh,
        (both, GroupConfig::new()),
        (both, GroupConfig::new()),
    )
    .await;
    close_both(a.unwrap(), b.unwrap()).await;
}

#[tokio::test]
async fn local_settings_may_differ_between_members() {
    let (_cluster, nodes) = mem_nodes(2);
    let (a, b) = create_both(
        &nodes,
        G,
        (
            &[0, 1],
            GroupConfig::new().with_create_timeout(Duration::from_secs(5)),
        ),
        (&[0, 1], GroupConfig::new().with_receive_window(Some(1))),
    )
    .await;
    close_both(a.unwrap(), b.unwrap()).await;
}

#[tokio::test]
async fn the_mismatch_error_reads_well() {
    let e = |mismatch| Error::MembershipMismatch {
        group: G,
        peer: NodeId(3),
        mismatch,
    };
    let read = [
        (
            differ(&[
                GroupSetting::Members,
                GroupSetting::Racks,
                GroupSetting::MaxBatch,
            ]),
            "created it with a different member list, racks and small-message batching",
        ),
        (
            differ(&[]),
            "created it with other settings (which ones could not be told)",
        ),
        (
            Mismatch::NotAMember,
            "created it but is not in the member list",
        ),
        (
            Mismatch::Refused,
            "refused it because another member created it otherwise",
        ),
        (
            Mismatch::IdInUse,
            "refused it: the id is in use there (a group with it runs or ended recently)",
        ),
    ];
    for (mismatch, words) in read {
        assert_eq!(e(mismatch).to_string(), format!("group 5: node 3 {words}"));
    }
    assert_eq!(
        std::io::Error::from(Error::CreateTimedOut {
            group: G,
            missing: vec![NodeId(1)],
            why: None,
        })
        .kind(),
        std::io::ErrorKind::TimedOut
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeout_fires_in_polling_and_hybrid_modes_too() {
    for mode in [
        CompletionMode::Polling,
        CompletionMode::Hybrid {
            window: Duration::from_millis(50),
        },
        CompletionMode::default(), // adaptive
    ] {
        let cluster = MemCluster::new(2);
        let node = Node::in_memory(
            &cluster,
            NodeId(0),
            NodeConfig::new().with_completion_mode(mode),
        )
        .unwrap();
        // Node 1 runs but never creates the group.
        let _idle = Node::in_memory(&cluster, NodeId(1), NodeConfig::new()).unwrap();
        let config = GroupConfig::new().with_create_timeout(Duration::from_millis(200));
        let err = bounded(PROMPT, "create_group", create(&node, &[0, 1], config))
            .await
            .unwrap_err();
        let missing = vec![NodeId(1)];
        let why = None;
        assert_eq!(
            err,
            Error::CreateTimedOut {
                group: G,
                missing,
                why
            },
            "{mode:?}"
        );
    }
}

#[tokio::test]
async fn a_group_of_one_is_created_at_once() {
    let (_cluster, nodes) = mem_nodes(2);
    let g = bounded(
        PROMPT,
        "create_group",
        create(&nodes[1], &[1], GroupConfig::new()),
    )
    .await
    .unwrap();
    let mut g = g.into_sender().unwrap();
    g.send(Bytes::from_static(b"alone"))
        .await
        .unwrap()
        .delivered()
        .await
        .unwrap();
    g.close().await.unwrap();
}

/// A create future dropped and never made again: its group, complete,
/// waits to be adopted for the create timeout, and is then left — which
/// the other members see as the node leaving.
#[tokio::test]
async fn a_cancelled_create_nobody_adopts_is_left_after_its_create_timeout() {
    let (_cluster, nodes) = mem_nodes(2);
    let members = ids(&[0, 1]);
    let short = GroupConfig::new().with_create_timeout(Duration::from_millis(300));
    // Node 1's create is abandoned before node 0 creates the group.
    let abandoned = nodes[1].create_group(G, &members, short);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), abandoned)
            .await
            .is_err()
    );
    let created = create(&nodes[0], &[0, 1], GroupConfig::new());
    let mut g = bounded(PROMPT, "create_group", created).await.unwrap();
    let error = bounded(PROMPT, "close", g.close()).await.unwrap_err();
    match error {
        Error::GroupFailed {
            suspect: Some(NodeId(1)),
            kind: rdmc::FailureKind::LocalShutdown,
            reported_by: Some(NodeId(1)),
            ..
        } => {}
        other => panic!("{other:?}"),
    }
}

/// A create future dropped with the group already in its answer (the
/// rendezvous completed, the future was not polled since) gives the group
/// back: made again, the create resolves with it, messages sent meanwhile
/// included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_dropped_with_its_group_in_its_answer_gives_the_group_back() {
    let (_cluster, nodes) = mem_nodes(2);
    let members = ids(&[0, 1]);
    let mut first = Box::pin(nodes[1].create_group(G, &members, GroupConfig::new()));
    assert!(
        futures::poll!(first.as_mut()).is_pending(),
        "the request went out"
    );
    let root = bounded(
        PROMPT,
        "node 0's create",
        create(&nodes[0], &[0, 1], GroupConfig::new()),
    );
    let mut root = root.await.unwrap().into_sender().unwrap();
    let sent = root.send(Bytes::from_static(b"meanwhile")).await.unwrap();
    bounded(PROMPT, "the send", sent.sent()).await.unwrap();
    // Node 1's actor, which received the message, puts the group in the
    // answer meanwhile (its rendezvous completed before: node 0's Join
    // came before its blocks).
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(first);
    let again = create(&nodes[1], &[0, 1], GroupConfig::new());
    let mut receiver = bounded(PROMPT, "made again", again)
        .await
        .unwrap()
        .into_receiver()
        .unwrap();
    let meanwhile = Bytes::from_static(b"meanwhile");
    bounded(
        PROMPT,
        "the message",
        receive_all(&mut receiver, &[meanwhile]),
    )
    .await;
    bounded(PROMPT, "closing", async {
        tokio::try_join!(root.close(), receiver.close())
    })
    .await
    .unwrap();
}

// ---------------------------------------------------------------------------
// On every transport.

/// Each scenario, as a module of that name with a test per transport.
macro_rules! on_every_transport {
    ($($scenario:ident),* $(,)?) => {
        $(
            mod $scenario {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn mem() {
                    super::$scenario::<super::MemFixture>().await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn tcp() {
                    super::$scenario::<super::TcpFixture>().await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn tcp_on_demand() {
                    super::$scenario::<super::common::TcpOnDemandFixture>().await;
                }

                #[cfg(feature = "ofi")]
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn ofi() {
                    use super::Fixture;
                    type F = super::common::OfiFixture;
                    match F::available() {
                        Ok(()) => super::$scenario::<F>().await,
                        Err(why) => eprintln!("ofi: skipped: {why}"),
                    }
                }
            }
        )*
    };
}

on_every_transport!(
    a_node_outside_the_cluster_is_an_unknown_node,
    a_member_that_used_the_id_refuses_it_and_says_so,
    a_create_cancelled_after_a_millisecond_and_made_again_succeeds_everywhere,
);

/// A member list naming a node outside the cluster fails `create_group`
/// at once, naming that node (not as a member gone: it never was one);
/// nothing is sent and the id stays free.
async fn a_node_outside_the_cluster_is_an_unknown_node<F: Fixture>() {
    let (nodes, _layout) = cluster::<F>(3, Tuning::default()).await;
    for (members, unknown) in [(&[0, 1, 3][..], 3), (&[0, 7, 1], 7), (&[9, 0], 9)] {
        let created = create(&nodes[0], members, GroupConfig::new());
        let error = bounded(PROMPT, "create_group", created).await.unwrap_err();
        let named = MembershipError::UnknownNode(NodeId(unknown));
        assert_eq!(error, Error::Membership(named), "{members:?}");
        assert_eq!(
            error.to_string(),
            format!("invalid membership: node {unknown} is not in the cluster")
        );
    }
    let groups = create_all(&nodes, G, &ids(&[0, 1, 2]), GroupConfig::new()).await;
    run_group(groups, &[payload(1, 1000)]).await;
    shutdown(nodes).await;
}

/// Nodes 0 and 1 ran group 5; node 2 creates a group 5 with them: they
/// refuse the id (their applications get `GroupIdInUse`), and node 2's
/// create fails at once saying the id is in use at one of them — not a
/// timeout after the create timeout, not "a different membership".
async fn a_member_that_used_the_id_refuses_it_and_says_so<F: Fixture>() {
    let (nodes, _layout) = cluster::<F>(3, Tuning::default()).await;
    let groups = create_all(&nodes[..2], G, &ids(&[0, 1]), GroupConfig::new()).await;
    run_group(groups, &[payload(2, 100)]).await;
    let all = ids(&[0, 1, 2]);
    let creates = nodes
        .iter()
        .map(|n| n.create_group(G, &all, GroupConfig::new()));
    let created = bounded(PROMPT, "the creates", futures::future::join_all(creates)).await;
    let [a, b, c] = <[_; 3]>::try_from(created).unwrap();
    assert_eq!(a.unwrap_err(), Error::GroupIdInUse(G));
    assert_eq!(b.unwrap_err(), Error::GroupIdInUse(G));
    let in_use = [(0, Mismatch::IdInUse), (1, Mismatch::IdInUse)];
    assert_mismatch(c, G, &in_use, "node 2");
    shutdown(nodes).await;
}

/// `node`'s create of `id`, given up after 1 ms and made again if it had
/// not resolved by then.
async fn impatient(node: &Node, id: GroupId, members: &[NodeId]) -> Result<rdmc::Group, Error> {
    let create = || node.create_group(id, members, GroupConfig::new());
    match tokio::time::timeout(Duration::from_millis(1), create()).await {
        Ok(created) => created,
        Err(_) => create().await,
    }
}

/// A `create_group` cancelled after 1 ms, and made again with the same id,
/// succeeds at every member — whether the rendezvous was still going on,
/// or had completed meanwhile — and the group carries messages.
async fn a_create_cancelled_after_a_millisecond_and_made_again_succeeds_everywhere<F: Fixture>() {
    let (nodes, _layout) = cluster::<F>(3, Tuning::default()).await;
    let all = ids(&[0, 1, 2]);
    let create = |node: &Node, id| node.create_group(id, &all, GroupConfig::new());
    let cancelled = |node: &Node, id| {
        let created = tokio::time::timeout(Duration::from_millis(1), create(node, id));
        async { assert!(created.await.is_err(), "nobody else created it yet") }
    };
    let run = async |groups: Vec<rdmc::Group>, seed| {
        run_group(groups, &[payload(seed, 70_000), payload(seed + 1, 10)]).await;
    };

    // Node 0 gives up while the others have not created the group, and
    // makes it again as they do.
    let g = GroupId(1);
    cancelled(&nodes[0], g).await;
    let creates = nodes.iter().map(|n| create(n, g));
    let groups = bounded(
        PROMPT,
        "the creates",
        futures::future::try_join_all(creates),
    )
    .await;
    run(groups.unwrap(), 1).await;

    // Node 0 gives up; the others create the group, whose rendezvous
    // completes (node 0's Join went out); node 0 makes it again after.
    let g = GroupId(2);
    cancelled(&nodes[0], g).await;
    let creates = nodes[1..].iter().map(|n| create(n, g));
    let others = bounded(
        PROMPT,
        "the creates",
        futures::future::try_join_all(creates),
    )
    .await;
    let again = bounded(PROMPT, "the create made again", create(&nodes[0], g)).await;
    let mut groups = vec![again.unwrap()];
    groups.extend(others.unwrap());
    run(groups, 3).await;

    // Everyone impatient at once, a few times: some creates resolve within
    // the millisecond, the others are made again.
    for round in 0..5 {
        let g = GroupId(10 + round);
        let creates = nodes.iter().map(|n| impatient(n, g, &all));
        let groups = bounded(
            PROMPT,
            "the creates",
            futures::future::try_join_all(creates),
        )
        .await;
        run(groups.unwrap(), 10 * round).await;
    }

    // The id of a cancelled creation is not free for another group.
    let g = GroupId(30);
    cancelled(&nodes[0], g).await;
    let other = nodes[0].create_group(g, &ids(&[0, 1]), GroupConfig::new());
    assert_eq!(other.await.unwrap_err(), Error::GroupIdInUse(g));
    shutdown(nodes).await;
}
