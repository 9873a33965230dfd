//! Whole clusters over the `ofi` transport (libfabric's `tcp` provider),
//! in one process on loopback — the `tcp_cluster` tests again, over the
//! RDMA-style data path: byte-exact delivery for every algorithm, odd group
//! and message sizes, many messages, overlapping groups, and a member dying
//! mid-transfer reported to every survivor exactly once.
//!
//! Every node's rendezvous listener is bound to port 0 on 127.0.0.1
//! beforehand; the fabric endpoints bind to 127.0.0.1 too. To run these
//! tests on another provider (say `verbs` over Soft-RoCE in a VM), set
//! `RDMC_OFI_PROVIDER` and `RDMC_OFI_FABRIC_ADDR` (the local address the
//! provider's device has).

#![cfg(feature = "ofi")]

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{
    Algorithm, ClusterKey, CompletionMode, Error, FailureKind, Group, GroupConfig, GroupId, Node,
    NodeConfig, NodeId, OfiConfig,
};
use tokio::time::Instant;

const KEY: &[u8] = b"ofi cluster test key, 32 bytes!!";

/// Bound for creating groups and for whole transfers.
const LONG: Duration = Duration::from_secs(60);

fn key() -> ClusterKey {
    ClusterKey::from_bytes(KEY.to_vec()).unwrap()
}

fn node_config() -> NodeConfig {
    NodeConfig::new().with_completion_mode(CompletionMode::Interrupt)
}

/// The provider and fabric address from the environment (default: `tcp`
/// on the rendezvous address, loopback).
fn fabric(config: OfiConfig) -> OfiConfig {
    let config = match std::env::var("RDMC_OFI_PROVIDER") {
        Ok(p) if !p.is_empty() => config.with_provider(p),
        _ => config,
    };
    match std::env::var("RDMC_OFI_FABRIC_ADDR") {
        Ok(a) if !a.is_empty() => config.with_fabric_addr(a.parse().expect("an IP address")),
        _ => config,
    }
}

fn loopback() -> std::net::TcpListener {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap()
}

/// `f`, or a test failure naming `what` if it takes longer than `limit`.
async fn bounded<F: Future>(limit: Duration, what: &str, f: F) -> F::Output {
    match tokio::time::timeout(limit, f).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: still waiting after {limit:?}"),
    }
}

/// Start the nodes of a cluster whose member `i` listens at `addrs[i]` on
/// `listeners[i]`, each tuned by `tune`.
async fn start(
    addrs: Vec<SocketAddr>,
    listeners: Vec<std::net::TcpListener>,
    tune: impl Fn(OfiConfig) -> OfiConfig,
) -> Vec<Node> {
    let starts = listeners.into_iter().enumerate().map(|(id, listener)| {
        let ofi = OfiConfig::new(addrs.clone(), NodeId(id as u32), key())
            .with_listener(listener)
            .with_connect_timeout(Duration::from_secs(20));
        Node::ofi(tune(fabric(ofi)), node_config())
    });
    bounded(LONG, "connecting the cluster", async {
        futures::future::try_join_all(starts).await.unwrap()
    })
    .await
}

/// `n` nodes on loopback, connected.
async fn cluster(n: usize, tune: impl Fn(OfiConfig) -> OfiConfig) -> (Vec<Node>, Vec<SocketAddr>) {
    let listeners: Vec<_> = (0..n).map(|_| loopback()).collect();
    let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    (start(addrs.clone(), listeners, tune).await, addrs)
}

async fn shutdown(nodes: Vec<Node>) {
    bounded(
        Duration::from_secs(20),
        "shutting the nodes down",
        futures::future::join_all(nodes.into_iter().map(Node::shutdown)),
    )
    .await;
}

fn ids(ids: &[u32]) -> Vec<NodeId> {
    ids.iter().copied().map(NodeId).collect()
}

/// `len` pseudo-random bytes, different for every `seed`.
fn payload(seed: u64, len: usize) -> Bytes {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out.into()
}

/// Every member of `members` creates group `id` (concurrently).
async fn create_all(
    nodes: &[Node],
    id: GroupId,
    members: &[NodeId],
    config: GroupConfig,
) -> Vec<Group> {
    bounded(
        LONG,
        "creating a group",
        futures::future::try_join_all(
            members
                .iter()
                .map(|m| nodes[m.index()].create_group(id, members, config.clone())),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("creating group {id}: {e}"))
}

/// The root sends `messages`; every receiver checks it gets each of them,
/// whole, in order; then every member closes `Ok` and the streams end.
async fn run_group(groups: Vec<Group>, messages: &[Bytes]) {
    let runs = groups.into_iter().map(|mut g| async move {
        let id = g.id();
        if g.is_root() {
            let sends: Vec<_> = messages.iter().map(|m| g.send(m.clone())).collect();
            for s in sends {
                s.await.unwrap_or_else(|e| panic!("group {id}: send: {e}"));
            }
        } else {
            let rank = g.rank();
            for (i, m) in messages.iter().enumerate() {
                let got = g
                    .next()
                    .await
                    .unwrap_or_else(|| panic!("group {id} rank {rank}: stream ended at {i}"))
                    .unwrap_or_else(|e| panic!("group {id} rank {rank}: {e}"));
                assert_eq!(got.seq, i as u64, "group {id} rank {rank}");
                assert!(
                    got.data == m,
                    "group {id} rank {rank}: message {i} differs ({} vs {} bytes)",
                    got.data.len(),
                    m.len()
                );
            }
        }
        g.close()
            .await
            .unwrap_or_else(|e| panic!("group {id}: close: {e}"));
        assert!(g.next().await.is_none(), "group {id}: stream after close");
    });
    bounded(LONG, "a group's transfer", futures::future::join_all(runs)).await;
}

// ---------------------------------------------------------------------------
// 1. Every algorithm, odd group sizes, odd message sizes, byte-exact.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_delivers_odd_sizes_to_odd_groups_over_ofi() {
    let (nodes, _) = cluster(7, |c| c).await;
    let block = 100_003;
    let sizes = [
        0,
        1,
        block - 1,
        block,
        block + 1,
        3 * (1 << 20) + 7,
        5,
        2 * block + 1,
    ];
    let mut id = 0;
    for (a, &algorithm) in Algorithm::ALL.iter().enumerate() {
        for (s, n) in [1u32, 2, 3, 5, 7].into_iter().enumerate() {
            id += 1;
            // Rotate the members so that the root (and the ranks) vary.
            let shift = (a + s) as u32;
            let members: Vec<NodeId> = (0..n).map(|i| NodeId((i + shift) % 7)).collect();
            let config = GroupConfig::new()
                .with_algorithm(algorithm)
                .with_block_size(block);
            let messages: Vec<Bytes> = sizes
                .iter()
                .enumerate()
                .map(|(i, &len)| payload(id * 100 + i as u64, len))
                .collect();
            let groups = create_all(&nodes, GroupId(id), &members, config).await;
            run_group(groups, &messages).await;
        }
    }
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_messages_in_a_row_over_ofi() {
    let (nodes, _) = cluster(5, |c| c).await;
    for (a, &algorithm) in Algorithm::ALL.iter().enumerate() {
        let members: Vec<NodeId> = (0..5).map(|i| NodeId((i + a as u32) % 5)).collect();
        let config = GroupConfig::new()
            .with_algorithm(algorithm)
            .with_block_size(4099);
        // More messages than the default receive window of 64.
        let messages: Vec<Bytes> = (0..150u64)
            .map(|i| payload(1000 * a as u64 + i, ((i * 7919) % 30_011) as usize))
            .collect();
        let groups = create_all(&nodes, GroupId(a as u64), &members, config).await;
        run_group(groups, &messages).await;
    }
    shutdown(nodes).await;
}

// ---------------------------------------------------------------------------
// 2. Overlapping groups.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_groups_with_different_roots_deliver_concurrently_over_ofi() {
    let (nodes, _) = cluster(5, |c| c).await;
    // Every group has another root; groups 3 and 4 cover part of the nodes.
    let memberships: Vec<Vec<NodeId>> = vec![
        ids(&[0, 1, 2, 3, 4]),
        ids(&[1, 2, 3, 4, 0]),
        ids(&[2, 3, 4, 0, 1]),
        ids(&[3, 0, 4]),
        ids(&[4, 1, 2, 3]),
    ];
    let mut created = Vec::new();
    for (g, members) in memberships.iter().enumerate() {
        let config = GroupConfig::new()
            .with_algorithm(Algorithm::ALL[g % Algorithm::ALL.len()])
            .with_block_size(65_537 + 1000 * g);
        created.push(create_all(&nodes, GroupId(g as u64), members, config));
    }
    let groups = futures::future::join_all(created).await;
    let messages: Vec<Vec<Bytes>> = (0..memberships.len() as u64)
        .map(|g| {
            (0..6u64)
                .map(|i| payload(100 * g + i, 300_000 + 77_777 * i as usize))
                .collect()
        })
        .collect();
    bounded(
        LONG,
        "overlapping groups",
        futures::future::join_all(
            groups
                .into_iter()
                .zip(&messages)
                .map(|(groups, messages)| run_group(groups, messages)),
        ),
    )
    .await;
    shutdown(nodes).await;
}

// ---------------------------------------------------------------------------
// 3. A member dies mid-transfer.

/// Failures show up as the fabric endpoints shutting down; no timeout is
/// involved, so they must be reported about this promptly.
const FAILURE_TIMEOUT: Duration = Duration::from_secs(1);

/// What a surviving receiver saw: the whole messages it got, then exactly
/// one failure, then the end of the stream.
struct Survivor {
    delivered: usize,
    error: Error,
    failed_at: Instant,
}

/// Read `group` to its end, checking every delivered message is whole and
/// in order, and that it ends with exactly one failure; `first` messages
/// were read already.
async fn read_until_failure(mut group: Group, expected: Vec<Bytes>, first: usize) -> Survivor {
    let (id, rank) = (group.id(), group.rank());
    let mut delivered = first;
    let (error, failed_at) = loop {
        match group.next().await {
            Some(Ok(m)) => {
                assert_eq!(m.seq, delivered as u64, "group {id} rank {rank}");
                assert!(
                    m.data == expected[delivered],
                    "group {id} rank {rank}: message {delivered} is not whole"
                );
                delivered += 1;
            }
            Some(Err(e)) => break (e, Instant::now()),
            None => panic!("group {id} rank {rank}: the stream ended without a failure"),
        }
    };
    assert!(
        group.next().await.is_none(),
        "group {id} rank {rank}: more after the failure"
    );
    assert_eq!(
        group.close().await.unwrap_err(),
        error,
        "group {id} rank {rank}: close"
    );
    Survivor {
        delivered,
        error,
        failed_at,
    }
}

fn assert_failed(error: &Error, group: GroupId, suspect: u32, who: &str) {
    match error {
        Error::GroupFailed {
            group: g,
            suspect: s,
            kind,
        } => {
            assert_eq!(*g, group, "{who}");
            assert_eq!(*s, Some(NodeId(suspect)), "{who}: {error}");
            assert!(
                matches!(kind, FailureKind::Unreachable | FailureKind::ReportedBy(_)),
                "{who}: {error}"
            );
        }
        other => panic!("{who}: expected group {group} to fail, got {other:?}"),
    }
}

#[derive(Clone, Copy, Debug)]
enum Death {
    /// The node and its group handle are dropped without a close: its node
    /// says goodbye (fails its groups, flushes) and closes its connections.
    Dropped,
    /// The runtime the node runs on is shut down: its tasks vanish, the
    /// connections close without a word.
    Crashed,
}

/// Node 2 of 4 dies in the middle of group 1 (all four nodes; node 2 holds
/// it back by not reading). Group 3 (nodes 3 and 2, idle) fails too; group
/// 2 (nodes 1, 3, 0) carries on.
async fn a_member_dies_mid_transfer(death: Death) {
    let listeners: Vec<_> = (0..4).map(|_| loopback()).collect();
    let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let ofi = |id: usize, listener| {
        fabric(OfiConfig::new(addrs.clone(), NodeId(id as u32), key()).with_listener(listener))
    };
    // The victim runs on a runtime of its own, so that it can crash.
    let mut victim_rt = Some(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap(),
    );
    let mut listeners: Vec<_> = listeners.into_iter().map(Some).collect();
    let victim = victim_rt.as_ref().unwrap().spawn(Node::ofi(
        ofi(2, listeners[2].take().unwrap()),
        node_config(),
    ));
    let others = futures::future::try_join_all(
        [0, 1, 3].map(|i| Node::ofi(ofi(i, listeners[i].take().unwrap()), node_config())),
    );
    let (victim, others) =
        bounded(LONG, "connecting", async { tokio::join!(victim, others) }).await;
    let victim = victim.unwrap().unwrap();
    let mut others = others.unwrap().into_iter();
    let (n0, n1, n3) = (
        others.next().unwrap(),
        others.next().unwrap(),
        others.next().unwrap(),
    );
    let node = |i: u32| match i {
        0 => &n0,
        1 => &n1,
        2 => &victim,
        _ => &n3,
    };

    let x = GroupId(1);
    let x_members = ids(&[0, 1, 2, 3]);
    let x_config = GroupConfig::new().with_block_size(64 * 1024);
    let y = GroupId(2);
    let y_members = ids(&[1, 3, 0]);
    let z = GroupId(3);
    let z_members = ids(&[3, 2]);
    let (xs, ys, zs) = bounded(LONG, "creating the groups", async {
        tokio::join!(
            futures::future::try_join_all(x_members.iter().map(|&m| {
                // The victim's small receive window holds the group back.
                let config = if m == NodeId(2) {
                    x_config.clone().with_receive_window(Some(3))
                } else {
                    x_config.clone()
                };
                node(m.0).create_group(x, &x_members, config)
            })),
            futures::future::try_join_all(y_members.iter().map(|&m| node(m.0).create_group(
                y,
                &y_members,
                GroupConfig::new()
            ))),
            futures::future::try_join_all(z_members.iter().map(|&m| node(m.0).create_group(
                z,
                &z_members,
                GroupConfig::new()
            ))),
        )
    })
    .await;
    let mut xs = xs.unwrap().into_iter();
    let (x_root, x1, mut x2, x3) = (
        xs.next().unwrap(),
        xs.next().unwrap(),
        xs.next().unwrap(),
        xs.next().unwrap(),
    );
    let mut ys = ys.unwrap().into_iter();
    let (y_root, y3, y0) = (ys.next().unwrap(), ys.next().unwrap(), ys.next().unwrap());
    let mut zs = zs.unwrap().into_iter();
    let (z3, z2) = (zs.next().unwrap(), zs.next().unwrap());

    let x_messages: Vec<Bytes> = (0..40)
        .map(|i| payload(i, (1 << 20) + i as usize))
        .collect();
    let y_messages: Vec<Bytes> = (0..10).map(|i| payload(100 + i, 100_000)).collect();

    // Group 1: the root queues everything; node 2 reads two messages and
    // then nothing, so the transfer is in full swing, and stuck, when it dies.
    let x_sends: Vec<_> = x_messages.iter().map(|m| x_root.send(m.clone())).collect();
    let survivors = [x1, x3].map(|g| tokio::spawn(read_until_failure(g, x_messages.clone(), 0)));
    let z_survivor = tokio::spawn(read_until_failure(z3, Vec::new(), 0));
    for expected in &x_messages[..2] {
        let m = bounded(LONG, "node 2's first messages", x2.next())
            .await
            .unwrap()
            .unwrap();
        assert!(m.data == expected);
    }
    // Group 2 is under way too.
    for m in &y_messages[..5] {
        drop(y_root.send(m.clone()));
    }
    let y_receivers = [y3, y0].map(|mut g| {
        let expected = y_messages.clone();
        tokio::spawn(async move {
            for (i, m) in expected.iter().enumerate() {
                let got = g.next().await.unwrap().unwrap();
                assert_eq!(got.seq, i as u64);
                assert!(got.data == m);
            }
            g.close().await.unwrap();
            assert!(g.next().await.is_none());
        })
    });

    let killed = Instant::now();
    match death {
        Death::Dropped => {
            drop((x2, z2));
            drop(victim);
        }
        Death::Crashed => {
            victim_rt.take().unwrap().shutdown_background();
            drop((x2, z2, victim));
        }
    }

    // Every survivor of groups 1 and 3 learns of it once, promptly.
    let limit = FAILURE_TIMEOUT + Duration::from_millis(500);
    let root = async {
        let mut ok = 0;
        let mut error = None;
        for s in x_sends {
            match s.await {
                Ok(_) if error.is_none() => ok += 1,
                Ok(_) => panic!("a send completed after an earlier one failed"),
                Err(e) => {
                    if let Some(first) = &error {
                        assert_eq!(&e, first, "every pending send fails alike");
                    } else {
                        error = Some(e);
                    }
                }
            }
        }
        let failed_at = Instant::now();
        let error = error.expect("not every message can have been sent");
        assert_eq!(x_root.close().await.unwrap_err(), error, "root: close");
        (ok, error, failed_at)
    };
    let (root_outcome, outcomes, z_outcome) = bounded(limit * 2, "the failure reports", async {
        tokio::join!(root, futures::future::join_all(survivors), z_survivor)
    })
    .await;
    let (sent, root_error, root_failed_at) = root_outcome;
    assert_failed(&root_error, x, 2, "group 1 root");
    assert!(
        root_failed_at - killed < limit,
        "{:?}",
        root_failed_at - killed
    );
    assert!(
        sent < x_messages.len(),
        "the transfer was over before the death"
    );
    for (who, outcome) in ["group 1 node 1", "group 1 node 3"]
        .into_iter()
        .zip(outcomes)
    {
        let s = outcome.unwrap();
        assert_failed(&s.error, x, 2, who);
        assert!(
            s.failed_at - killed < limit,
            "{who}: {:?}",
            s.failed_at - killed
        );
        assert!(s.delivered < x_messages.len(), "{who}");
    }
    let z = z_outcome.unwrap();
    assert_failed(&z.error, GroupId(3), 2, "group 3 node 3");
    assert!(z.failed_at - killed < limit);
    assert_eq!(z.delivered, 0);

    // Group 2 never had node 2: it finishes its messages and closes Ok.
    for m in &y_messages[5..] {
        drop(y_root.send(m.clone()));
    }
    bounded(LONG, "group 2 after the death", async {
        y_root.close().await.unwrap();
        for r in y_receivers {
            r.await.unwrap();
        }
    })
    .await;
    drop((x_root, y_root));
    shutdown(vec![n0, n1, n3]).await;
    if let Some(rt) = victim_rt {
        rt.shutdown_background();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_dropped_mid_transfer_fails_its_groups_once_and_only_its_groups() {
    a_member_dies_mid_transfer(Death::Dropped).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_crashed_mid_transfer_fails_its_groups_once_and_only_its_groups() {
    a_member_dies_mid_transfer(Death::Crashed).await;
}
