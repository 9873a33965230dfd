//! Whole clusters over the `tcp` transport, in one process on loopback:
//! byte-exact delivery for every algorithm, overlapping groups sharing links
//! without head-of-line blocking, strangers and garbage at the listening
//! ports, membership mismatches, and failures (a member shut down, a member
//! crashed, a member gone silent) reported promptly and exactly once.
//!
//! Every node listens on a loopback listener bound to port 0 beforehand and
//! handed to [`TcpConfig::with_listener`], so there are no port races.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{
    Algorithm, ClusterKey, CompletionMode, Error, FailureKind, Group, GroupConfig, GroupId, Node,
    NodeConfig, NodeId, TcpConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const KEY: &[u8] = b"tcp cluster test key, 32 bytes!!";

/// Bound for creating groups and for whole transfers.
const LONG: Duration = Duration::from_secs(60);

fn key() -> ClusterKey {
    ClusterKey::from_bytes(KEY.to_vec()).unwrap()
}

fn node_config() -> NodeConfig {
    NodeConfig::new().with_completion_mode(CompletionMode::Interrupt)
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
    tune: impl Fn(TcpConfig) -> TcpConfig,
) -> Vec<Node> {
    let starts = listeners.into_iter().enumerate().map(|(id, listener)| {
        let tcp = TcpConfig::new(addrs.clone(), NodeId(id as u32), key())
            .with_listener(listener)
            .with_connect_timeout(Duration::from_secs(20));
        Node::tcp(tune(tcp), node_config())
    });
    bounded(LONG, "connecting the cluster", async {
        futures::future::try_join_all(starts).await.unwrap()
    })
    .await
}

/// `n` nodes on loopback, connected.
async fn cluster(n: usize, tune: impl Fn(TcpConfig) -> TcpConfig) -> (Vec<Node>, Vec<SocketAddr>) {
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

/// A TCP proxy on loopback in front of one member: it forwards every
/// connection to `target`, both ways, optionally slowly, until frozen —
/// then it forwards nothing more but keeps the connections open, like a
/// peer that hangs or a network that drops everything.
struct Proxy {
    addr: SocketAddr,
    freeze: CancellationToken,
}

impl Proxy {
    /// Start a proxy to `target`; with `pause`, it waits that long after
    /// forwarding each read of at most 64 KiB (a slow link).
    async fn start(target: SocketAddr, pause: Option<Duration>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let freeze = CancellationToken::new();
        let frozen = freeze.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = tokio::net::TcpStream::connect(target).await else {
                    continue;
                };
                let (ri, wi) = inbound.into_split();
                let (ro, wo) = outbound.into_split();
                tokio::spawn(pump(ri, wo, pause, frozen.clone()));
                tokio::spawn(pump(ro, wi, pause, frozen.clone()));
            }
        });
        Proxy { addr, freeze }
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    pause: Option<Duration>,
    freeze: CancellationToken,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            biased;
            () = freeze.cancelled() => break,
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
        };
        if freeze.is_cancelled() || to.write_all(&buf[..n]).await.is_err() {
            break;
        }
        if let Some(pause) = pause {
            tokio::time::sleep(pause).await;
        }
    }
    // Frozen: hold both ends open, silent, until the test ends.
    std::future::pending::<()>().await;
    drop((from, to));
}

// ---------------------------------------------------------------------------
// 1. Every algorithm, odd group sizes, odd message sizes, byte-exact.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_delivers_odd_sizes_to_odd_groups_over_tcp() {
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
async fn many_messages_in_a_row_over_tcp() {
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
// 2. Overlapping groups share the links, fairly and without head-of-line
//    blocking.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_groups_with_different_roots_deliver_concurrently_over_tcp() {
    let (nodes, _) = cluster(5, |c| c.with_chunk_size(16 * 1024)).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_group_is_not_stuck_behind_another_groups_large_block() {
    // Node 1 reaches node 0 through a slow proxy (about 64 MB/s), so the
    // big block takes about a second on the wire: long enough that when the
    // test's tasks notice an arrival does not matter.
    let listeners = [loopback(), loopback()];
    let proxy = Proxy::start(
        listeners[0].local_addr().unwrap(),
        Some(Duration::from_millis(1)),
    )
    .await;
    let addrs = vec![proxy.addr, listeners[1].local_addr().unwrap()];
    let nodes = start(addrs, listeners.into(), |c| c).await;
    let members = ids(&[0, 1]);
    const BIG: usize = 64 << 20;
    let big_config = GroupConfig::new()
        .with_algorithm(Algorithm::Sequential)
        .with_block_size(BIG);
    let small_config = GroupConfig::new()
        .with_algorithm(Algorithm::Sequential)
        .with_block_size(4096);
    let mut big = create_all(&nodes, GroupId(1), &members, big_config).await;
    let mut small = create_all(&nodes, GroupId(2), &members, small_config).await;
    let (mut big_rx, big_root) = (big.pop().unwrap(), big.pop().unwrap());
    let (mut small_rx, small_root) = (small.pop().unwrap(), small.pop().unwrap());
    let big_message = payload(1, BIG);
    let small_messages: Vec<Bytes> = (0..5).map(|i| payload(10 + i, 1000)).collect();

    // The 64 MiB block of group 1 is queued on the link from node 0 to node
    // 1 first (a node handles commands in order); group 2's messages come
    // after it on the same connection. Were blocks sent whole, none of them
    // could arrive before the big one.
    let start = Instant::now();
    let big_send = big_root.send(big_message.clone());
    let small_sends: Vec<_> = small_messages
        .iter()
        .map(|m| small_root.send(m.clone()))
        .collect();
    let big_arrival = tokio::spawn(async move {
        let got = big_rx.next().await.unwrap().unwrap();
        (Instant::now(), got, big_rx)
    });
    let expected = small_messages.clone();
    let small_arrivals = tokio::spawn(async move {
        let mut at = Vec::new();
        for (i, m) in expected.iter().enumerate() {
            let got = small_rx.next().await.unwrap().unwrap();
            at.push(Instant::now());
            assert_eq!(got.seq, i as u64);
            assert!(got.data == m, "small message {i} differs");
        }
        (at, small_rx)
    });
    let (big_at, got, big_rx) = bounded(LONG, "the big message", big_arrival)
        .await
        .unwrap();
    assert!(got.data == big_message, "the big message differs");
    let (small_at, small_rx) = bounded(LONG, "the small messages", small_arrivals)
        .await
        .unwrap();
    let big_took = big_at - start;
    for (i, at) in small_at.iter().enumerate() {
        // Well before the big block's end, not just before it. (Each small
        // message still waits behind what of the big block the kernel
        // buffers already hold, a few MB on loopback.)
        assert!(
            *at + big_took / 4 < big_at,
            "small message {i} took {:?}; the big one {big_took:?}",
            *at - start
        );
    }
    bounded(LONG, "the sends", async {
        big_send.await.unwrap();
        for s in small_sends {
            s.await.unwrap();
        }
    })
    .await;
    bounded(LONG, "closing", async {
        tokio::try_join!(
            big_root.close(),
            big_rx.close(),
            small_root.close(),
            small_rx.close()
        )
    })
    .await
    .unwrap();
    drop((big_root, big_rx, small_root, small_rx));
    shutdown(nodes).await;
}
