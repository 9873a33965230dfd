//! What the runtime-level tests share: payloads, timeouts, starting a
//! cluster on any transport ([`fixture`]), running a group to its end, and
//! the whole-group scenarios every transport runs ([`suite`]).
//!
//! Each test file that needs it says `mod common;`; not every file uses
//! every helper.

#![allow(dead_code, unused_imports, unused_macros)]

pub mod delivered_suite;
pub mod fixture;
pub mod member_failure_suite;
pub mod relay;
pub mod scratch;
#[macro_use]
pub mod storage_suite;
#[macro_use]
pub mod suite;

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{
    ClusterKey, CompletionMode, Error, FailureKind, Group, GroupConfig, GroupId, GroupSetting,
    MemCluster, Mismatch, Node, NodeConfig, NodeId, Receipt, Receiver, Sender,
};
use tokio::time::Instant;

#[cfg(feature = "ofi")]
pub use fixture::OfiFixture;
#[cfg(feature = "rdma")]
pub use fixture::RdmaFixture;
pub use fixture::{Fixture, Layout, MemFixture, TcpFixture, TcpOnDemandFixture, Tuning, cluster};

/// Bound for connecting a cluster, creating groups and whole transfers.
pub const LONG: Duration = Duration::from_secs(60);

/// The cluster key of the test clusters.
pub fn key() -> ClusterKey {
    ClusterKey::from_bytes(b"rdmc test cluster key, 32 bytes!".to_vec()).unwrap()
}

/// The next `Up` of `node` in `events`, skipping the others.
pub async fn next_up(events: &mut rdmc::PeerEvents, node: u32) -> u64 {
    bounded(LONG, "peer up", async {
        loop {
            match events.next().await {
                Some(rdmc::PeerEvent::Up {
                    node: n,
                    incarnation,
                    ..
                }) if n == NodeId(node) => return incarnation,
                Some(_) => {}
                None => panic!("the node shut down"),
            }
        }
    })
    .await
}

/// The next `Down` or `Left` of `node` in `events`, skipping the others.
pub async fn next_gone(events: &mut rdmc::PeerEvents, node: u32) -> rdmc::PeerEvent {
    bounded(LONG, "peer gone", async {
        loop {
            match events.next().await {
                Some(
                    gone @ (rdmc::PeerEvent::Down { node: n, .. }
                    | rdmc::PeerEvent::Left { node: n, .. }),
                ) if n == NodeId(node) => return gone,
                Some(_) => {}
                None => panic!("the node shut down"),
            }
        }
    })
    .await
}

/// A watcher of the peer events of each of `nodes`, each having seen
/// `node` up in run `incarnation`.
pub async fn watch_up(nodes: &[Node], node: u32, incarnation: u64) -> Vec<rdmc::PeerEvents> {
    let mut watch: Vec<rdmc::PeerEvents> = nodes.iter().map(Node::peer_events).collect();
    for w in &mut watch {
        assert_eq!(next_up(w, node).await, incarnation);
    }
    watch
}

/// Every watcher in `watch` sees `node` up in run `incarnation`, and
/// every node of `nodes` lists it up in that run.
pub async fn assert_up_everywhere(
    watch: &mut [rdmc::PeerEvents],
    nodes: &[Node],
    node: u32,
    incarnation: u64,
) {
    for w in watch {
        assert_eq!(next_up(w, node).await, incarnation);
    }
    for n in nodes {
        let peers = n.peers().await.unwrap();
        let it = peers.iter().find(|p| p.node == NodeId(node)).unwrap();
        assert!(it.up && it.incarnation == incarnation, "{peers:?}");
    }
}

/// `n` nodes started with `start(members, id, listener)` at free loopback
/// addresses, each on its listener: the addresses, and the nodes.
pub async fn start_at_loopback<F>(
    n: u32,
    start: impl Fn(&[std::net::SocketAddr], u32, std::net::TcpListener) -> F,
) -> (Vec<std::net::SocketAddr>, Vec<Node>)
where
    F: Future<Output = Result<Node, Error>>,
{
    let listeners: Vec<_> = (0..n).map(|_| loopback()).collect();
    let members: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let starts = listeners
        .into_iter()
        .zip(0..n)
        .map(|(listener, id)| start(&members, id, listener));
    let nodes = bounded(LONG, "start", futures::future::try_join_all(starts))
        .await
        .unwrap();
    (members, nodes)
}

/// The node configuration of the test clusters.
pub fn node_config() -> NodeConfig {
    NodeConfig::new().with_completion_mode(CompletionMode::Interrupt)
}

/// A listener on a free loopback port.
pub fn loopback() -> std::net::TcpListener {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap()
}

/// `d` times `RDMC_TEST_TIME_SCALE` (default 1; more where the tests run
/// emulated, as in `ci/softroce-vm.sh`'s VM, where a 1 s failure timeout
/// also finds live but starved members).
pub fn scaled(d: Duration) -> Duration {
    let scale = std::env::var("RDMC_TEST_TIME_SCALE").map_or(1, |s| s.parse().unwrap_or(1));
    d * scale.max(1)
}

/// `f`, or a test failure naming `what` if it takes longer than `limit`
/// ([`scaled`]).
pub async fn bounded<F: Future>(limit: Duration, what: &str, f: F) -> F::Output {
    let limit = scaled(limit);
    match tokio::time::timeout(limit, f).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: still waiting after {limit:?}"),
    }
}

/// Node ids from their numbers.
pub fn ids(ids: &[u32]) -> Vec<NodeId> {
    ids.iter().copied().map(NodeId).collect()
}

/// `len` pseudo-random bytes, different for every `seed`.
pub fn payload(seed: u64, len: usize) -> Bytes {
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

/// `n` in-process nodes of a fresh [`MemCluster`], and the cluster (to
/// kill nodes with).
pub fn mem_nodes(n: usize) -> (MemCluster, Vec<Node>) {
    let cluster = MemCluster::new(n);
    let nodes = Node::in_memory_all(&cluster, node_config()).unwrap();
    (cluster, nodes)
}

/// Shut every node down, in bounded time.
pub async fn shutdown(nodes: Vec<Node>) {
    bounded(
        Duration::from_secs(20),
        "shutting the nodes down",
        futures::future::join_all(nodes.into_iter().map(Node::shutdown)),
    )
    .await;
}

/// Every member of `members` creates group `id` (concurrently).
pub async fn create_all(
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

/// The root's handle and the receivers', in rank order, from the groups
/// of [`create_all`] (the first member is the root).
pub fn roles(groups: Vec<Group>) -> (Sender, Vec<Receiver>) {
    let mut groups = groups.into_iter();
    let root = groups.next().expect("a group has a root");
    let root = root.into_sender().expect("the first member is the root");
    let receivers = groups
        .map(|g| g.into_receiver().expect("every other member receives"))
        .collect();
    (root, receivers)
}

/// The root's handle and the receiver's of a two-member group.
pub fn pair(groups: Vec<Group>) -> (Sender, Receiver) {
    let (root, mut receivers) = roles(groups);
    assert_eq!(receivers.len(), 1, "a group of two");
    (root, receivers.remove(0))
}

/// The root queues each of `messages` (waiting for room as its bound
/// requires); their receipts, in order.
pub async fn queue_all(root: &Sender, messages: &[Bytes]) -> Vec<Receipt> {
    let mut receipts = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let receipt = root
            .send(m.clone())
            .await
            .unwrap_or_else(|e| panic!("group {}: queueing message {i}: {e}", root.id()));
        receipts.push(receipt);
    }
    receipts
}

/// Every message of `receipts` is sent (`Ok`).
pub async fn all_sent(group: GroupId, receipts: Vec<Receipt>) {
    for (i, receipt) in receipts.into_iter().enumerate() {
        receipt
            .sent()
            .await
            .unwrap_or_else(|e| panic!("group {group}: send {i}: {e}"));
    }
}

/// Take `messages.len()` messages from `receiver` and check that each is
/// the next of `messages`, whole, with its sequence number.
pub async fn receive_all(receiver: &mut Receiver, messages: &[Bytes]) {
    let (id, rank) = (receiver.id(), receiver.rank());
    for (i, m) in messages.iter().enumerate() {
        let got = receiver
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

/// The root sends `messages`; every receiver checks it gets each of them,
/// whole, in order; then every member closes `Ok` and the streams end.
pub async fn run_group(groups: Vec<Group>, messages: &[Bytes]) {
    let runs = groups.into_iter().map(|g| async move {
        let id = g.id();
        match g {
            Group::Root(mut root) => {
                let receipts = queue_all(&root, messages).await;
                all_sent(id, receipts).await;
                root.close()
                    .await
                    .unwrap_or_else(|e| panic!("group {id}: close: {e}"));
                assert_eq!(root.closed().await, Ok(()), "group {id}: closed");
                assert_eq!(root.in_flight(), 0, "group {id}: in flight after close");
            }
            Group::Receiver(mut receiver) => {
                receive_all(&mut receiver, messages).await;
                receiver
                    .close()
                    .await
                    .unwrap_or_else(|e| panic!("group {id}: close: {e}"));
                assert!(
                    receiver.next().await.is_none(),
                    "group {id}: stream after close"
                );
            }
        }
    });
    bounded(LONG, "a group's transfer", futures::future::join_all(runs)).await;
}

/// `result` is a membership mismatch of `group` naming one of the nodes
/// `allowed`, with what that node differs in (or why it refused); `who` is
/// the creator, for the failure message.
#[track_caller]
pub fn assert_mismatch(
    result: Result<Group, Error>,
    group: GroupId,
    allowed: &[(u32, Mismatch)],
    who: &str,
) {
    match result {
        Err(Error::MembershipMismatch {
            group: g,
            peer,
            mismatch,
        }) => {
            assert_eq!(g, group, "{who}");
            assert!(
                allowed.contains(&(peer.0, mismatch.clone())),
                "{who}: named node {peer} for {mismatch:?}, expected one of {allowed:?}"
            );
        }
        other => panic!("{who}, group {group}: expected a mismatch, got {other:?}"),
    }
}

/// Nodes 0 and 2 created group `group` with members {0, 1, 2}, node 1
/// with {0, 1} (`created`, in node order): each says what differs — the
/// member list, or that a member that agrees with it refused; node 2 is
/// not in node 1's list.
#[track_caller]
pub fn assert_node_2_left_out(created: [Result<Group, Error>; 3], group: GroupId) {
    let [a, b, c] = created;
    let members = differ(&[GroupSetting::Members]);
    let refused = Mismatch::Refused;
    let a_allowed = [(1, members.clone()), (2, refused.clone())];
    assert_mismatch(a, group, &a_allowed, "node 0");
    let b_allowed = [(0, members.clone()), (2, Mismatch::NotAMember)];
    assert_mismatch(b, group, &b_allowed, "node 1");
    assert_mismatch(c, group, &[(1, members), (0, refused)], "node 2");
}

/// The mismatch of a peer that created the group with other `settings`.
pub fn differ(settings: &[GroupSetting]) -> Mismatch {
    Mismatch::Settings(settings.to_vec())
}

/// `error` is the failure of `group` naming node `suspect` for `kind`.
///
/// Every member that survives a fault is checked against the same
/// `suspect` and `kind`: one fault, one cause, however each member learned
/// of it (found it, or heard of it from the member that did).
#[track_caller]
pub fn assert_failed(error: &Error, group: GroupId, suspect: u32, kind: FailureKind, who: &str) {
    match error {
        Error::GroupFailed {
            group: g,
            suspect: s,
            kind: k,
            ..
        } => {
            assert_eq!(*g, group, "{who}");
            assert_eq!(*s, Some(NodeId(suspect)), "{who}: {error}");
            assert_eq!(*k, kind, "{who}: {error}");
        }
        other => panic!("{who}: expected group {group} to fail, got {other:?}"),
    }
}

/// What a surviving receiver saw: the whole messages it got, then exactly
/// one failure, then the end of the stream.
pub struct Survivor {
    pub delivered: usize,
    pub error: Error,
    pub failed_at: Instant,
}

/// Read `group` to its end, checking every delivered message is whole and
/// in order, and that it ends with exactly one failure; `first` messages
/// were read already.
pub async fn read_until_failure(
    mut group: Receiver,
    expected: Vec<Bytes>,
    first: usize,
) -> Survivor {
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
