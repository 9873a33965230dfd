//! Tests of the mesh's bring-up on loopback: who is refused before anything
//! listens, and meshes of different purposes at the same addresses.

use std::time::Duration;

use tokio::net::TcpStream;

use super::formation::{Direction, Message};
use super::*;

const KEY: &[u8] = b"mesh unit test key, 32 bytes!!!!";

/// `n` loopback listeners bound to port 0, and their addresses.
fn loopback(n: usize) -> (Vec<std::net::TcpListener>, Vec<SocketAddr>) {
    let listeners: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    (listeners, addrs)
}

/// Node `id` of the cluster at `members`, on `listener`.
fn member(
    members: &[SocketAddr],
    id: u32,
    listener: std::net::TcpListener,
    connect_timeout: Duration,
) -> ClusterConfig {
    let mut cluster = ClusterConfig::new(
        members.to_vec(),
        NodeId(id),
        ClusterKey::from_bytes(KEY).unwrap(),
    );
    cluster.listener = Some(listener);
    cluster.connect_timeout = connect_timeout;
    cluster
}

#[tokio::test]
async fn members_of_one_purpose_connect() {
    let (listeners, addrs) = loopback(3);
    let ups = listeners.into_iter().zip(0..).map(|(l, id)| {
        bring_up(
            member(&addrs, id, l, Duration::from_secs(20)),
            MeshPurpose::OfiRendezvous,
        )
    });
    let meshes = futures::future::try_join_all(ups).await.unwrap();
    for (id, mesh) in meshes.iter().enumerate() {
        let mut peers: Vec<_> = mesh.peers.keys().map(|p| p.0).collect();
        peers.sort_unstable();
        let others: Vec<_> = (0..3).filter(|&p| p != id as u32).collect();
        assert_eq!(peers, others, "node {id}");
    }
}

#[tokio::test]
async fn a_cluster_of_one_is_up_at_once() {
    let (mut listeners, addrs) = loopback(1);
    let listener = listeners.pop().unwrap();
    let alone = member(&addrs, 0, listener, Duration::from_secs(300));
    let mesh = tokio::time::timeout(Duration::from_secs(120), bring_up(alone, MeshPurpose::Tcp))
        .await
        .expect("a cluster of one waited for its connect timeout")
        .unwrap();
    assert!(mesh.peers.is_empty());
}

#[tokio::test]
async fn a_tcp_node_and_an_ofi_node_at_the_same_addresses_refuse_each_other() {
    let (mut listeners, addrs) = loopback(2);
    let timeout = Duration::from_millis(500);
    let one = member(&addrs, 1, listeners.pop().unwrap(), timeout);
    let zero = member(&addrs, 0, listeners.pop().unwrap(), timeout);
    let (zero, one) = tokio::join!(
        bring_up(zero, MeshPurpose::Tcp),
        bring_up(one, MeshPurpose::OfiRendezvous),
    );
    for (me, other, outcome) in [(0, 1, zero), (1, 0, one)] {
        match outcome {
            Err(MeshError::TimedOut { missing, .. }) => {
                assert_eq!(missing, vec![NodeId(other)], "node {me}")
            }
            Err(e) => panic!("node {me}: {e}"),
            Ok(_) => panic!("node {me} connected across purposes"),
        }
    }
}

#[tokio::test]
async fn a_node_outside_the_cluster_is_refused_before_it_listens() {
    let (mut listeners, addrs) = loopback(2);
    let cluster = member(&addrs, 2, listeners.pop().unwrap(), Duration::from_secs(1));
    let refused = bring_up(cluster, MeshPurpose::Tcp).await.err().unwrap();
    assert_eq!(refused.to_string(), "node 2 is not in a cluster of 2");
}

#[tokio::test]
async fn a_member_address_in_use_is_a_listening_error() {
    let (listeners, addrs) = loopback(2);
    // No listener handed over: node 0 binds its member address, which
    // `listeners[0]` holds.
    let cluster = ClusterConfig::new(addrs, NodeId(0), ClusterKey::from_bytes(KEY).unwrap());
    let refused = bring_up(cluster, MeshPurpose::Tcp).await.err().unwrap();
    assert!(matches!(refused, MeshError::Listen(_)), "{refused:?}");
    assert!(refused.to_string().starts_with("listening: "), "{refused}");
    drop(listeners);
}

/// Node `id` of the cluster at `members` holding `key`, on `listener`.
fn member_with_key(
    members: &[SocketAddr],
    id: u32,
    listener: std::net::TcpListener,
    key: &[u8],
) -> ClusterConfig {
    let mut cluster = member(members, id, listener, Duration::from_millis(1500));
    cluster.key = ClusterKey::from_bytes(key.to_vec()).unwrap();
    cluster
}

#[tokio::test]
async fn a_mesh_that_does_not_form_says_why() {
    // Another key: the acceptor knows the dialler failed its proof; the
    // dialler only sees the connection closed, and says what that means.
    let (mut listeners, addrs) = loopback(2);
    let one = member_with_key(
        &addrs,
        1,
        listeners.pop().unwrap(),
        b"another key, also 32 bytes long!",
    );
    let zero = member_with_key(&addrs, 0, listeners.pop().unwrap(), KEY);
    let (zero, one) = tokio::join!(
        bring_up(zero, MeshPurpose::Tcp),
        bring_up(one, MeshPurpose::Tcp)
    );
    let zero = zero.err().unwrap().to_string();
    assert!(
        zero.starts_with("no connection to node(s) 1 within 1.5s ("),
        "{zero}"
    );
    assert!(
        zero.contains("peer failed to prove it holds the cluster key"),
        "{zero}"
    );
    let one = one.err().unwrap().to_string();
    assert!(
        one.contains(&format!(
            "node 0 at {}: it closed the connection during the handshake",
            addrs[0]
        )),
        "{one}"
    );
    assert!(!one.contains('\n') && !zero.contains('\n'));

    // Another member list: the acceptor names the mismatch.
    let (mut listeners, addrs) = loopback(2);
    let mut one = member_with_key(&addrs, 1, listeners.pop().unwrap(), KEY);
    let stranger: SocketAddr = "127.0.0.1:9".parse().unwrap();
    one.members.push(stranger);
    let zero = member_with_key(&addrs, 0, listeners.pop().unwrap(), KEY);
    let (zero, _one) = tokio::join!(
        bring_up(zero, MeshPurpose::Tcp),
        bring_up(one, MeshPurpose::Tcp)
    );
    let zero = zero.err().unwrap().to_string();
    assert!(zero.contains("cluster digest mismatch"), "{zero}");

    // Nobody listening: the dialler says so.
    let (mut listeners, addrs) = loopback(2);
    let one = member(
        &addrs,
        1,
        listeners.pop().unwrap(),
        Duration::from_millis(300),
    );
    drop(listeners);
    let one = bring_up(one, MeshPurpose::Tcp)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        one.contains(&format!("node 0 at {}: connecting: ", addrs[0])),
        "{one}"
    );
}

/// Whether the other end closed `stream` within `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut byte = [0];
    matches!(
        tokio::time::timeout(within, stream.read(&mut byte)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// A node's mesh coming up in the background.
type ComingUp = tokio::task::JoinHandle<Result<Mesh, MeshError>>;

/// Node 0 of two coming up in the background; node 1's listener and the
/// addresses.
fn zero_coming_up() -> (ComingUp, std::net::TcpListener, Vec<SocketAddr>) {
    let (mut listeners, addrs) = loopback(2);
    let one_listener = listeners.pop().unwrap();
    let zero = member(&addrs, 0, listeners.pop().unwrap(), Duration::from_secs(20));
    (
        tokio::spawn(bring_up(zero, MeshPurpose::Tcp)),
        one_listener,
        addrs,
    )
}

#[tokio::test]
async fn silent_connections_are_capped_let_go_and_turned_away_once_the_mesh_is_up() {
    let (zero, one_listener, addrs) = zero_coming_up();
    // More silent connections than the cap (within the std listener's
    // backlog of 128, so that every connect completes).
    let extra = 40;
    let mut silent = Vec::new();
    for _ in 0..MAX_PENDING_HANDSHAKES + extra {
        silent.push(TcpStream::connect(addrs[0]).await.unwrap());
    }
    // The oldest beyond the cap are displaced (closed) at once, the others
    // closed after the first-hello timeout.
    let mut closed_at_once = 0;
    for stream in &mut silent {
        if closed_within(stream, Duration::from_millis(20)).await {
            closed_at_once += 1;
        }
    }
    assert!(
        closed_at_once >= extra && closed_at_once < MAX_PENDING_HANDSHAKES + extra,
        "{closed_at_once} of {} closed at once",
        silent.len()
    );
    tokio::time::sleep(FIRST_HELLO_TIMEOUT).await;
    for (i, stream) in silent.iter_mut().enumerate() {
        assert!(
            closed_within(stream, Duration::from_millis(500)).await,
            "silent connection {i} still open after the first-hello timeout"
        );
    }
    // The genuine member still gets in.
    let one = member(&addrs, 1, one_listener, Duration::from_secs(20));
    let one = bring_up(one, MeshPurpose::Tcp).await.unwrap();
    let zero = zero.await.unwrap().unwrap();
    assert_eq!(zero.peers.len(), 1);
    assert_eq!(one.peers.len(), 1);
    // Nobody else is admitted: a newcomer is closed at once.
    let mut late = TcpStream::connect(addrs[0]).await.unwrap();
    assert!(
        closed_within(&mut late, Duration::from_millis(200)).await,
        "a connection after the mesh was complete stayed open"
    );
}

#[test]
fn invalid_configurations_are_refused_with_one_line_reasons() {
    use super::{ClusterConfigError as E, MAX_TIMEOUT};
    let key = || ClusterKey::from_bytes(KEY).unwrap();
    let addr = |s: &str| -> SocketAddr { s.parse().unwrap() };
    let ok = vec![addr("127.0.0.1:7000"), addr("127.0.0.1:7001")];
    let check = |members: Vec<SocketAddr>, id: u32, tweak: &dyn Fn(&mut ClusterConfig)| {
        let mut cluster = ClusterConfig::new(members, NodeId(id), key());
        tweak(&mut cluster);
        cluster.validate()
    };
    assert_eq!(check(ok.clone(), 1, &|_| ()), Ok(()));
    assert_eq!(check(vec![], 0, &|_| ()), Err(E::NoMembers));
    assert_eq!(
        check(ok.clone(), 2, &|_| ()),
        Err(E::NotAMember {
            id: NodeId(2),
            members: 2
        })
    );
    let dup = vec![ok[0], ok[1], ok[0]];
    let err = check(dup, 0, &|_| ()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "nodes 0 and 2 have the same address 127.0.0.1:7000"
    );
    let zero_port = vec![ok[0], addr("10.0.0.2:0")];
    assert_eq!(
        check(zero_port, 0, &|_| ()).unwrap_err().to_string(),
        "node 1's address 10.0.0.2:0 has port 0, which the other members cannot dial"
    );
    let unspecified = vec![addr("0.0.0.0:7000"), ok[1]];
    assert!(matches!(
        check(unspecified, 1, &|_| ()),
        Err(E::Unspecified { id: NodeId(0), .. })
    ));
    let zero = check(ok.clone(), 0, &|c| c.failure_timeout = Duration::ZERO).unwrap_err();
    assert_eq!(
        zero.to_string(),
        "the failure timeout must be longer than zero"
    );
    let long = check(ok.clone(), 0, &|c| {
        c.connect_timeout = Duration::from_secs_f64(1e19)
    })
    .unwrap_err();
    assert!(
        matches!(
            long,
            E::TimeoutTooLong {
                what: "connect timeout",
                ..
            }
        ),
        "{long}"
    );
    assert!(
        long.to_string().starts_with("the connect timeout of "),
        "{long}"
    );
    assert_eq!(check(ok, 0, &|c| c.handshake_timeout = MAX_TIMEOUT), Ok(()));
}

#[tokio::test]
async fn a_member_gets_in_while_a_flood_keeps_the_acceptor_full() {
    let (zero, one_listener, addrs) = zero_coming_up();
    // Silent connections, opened faster than the acceptor lets them go:
    // every place among the pending handshakes stays taken.
    let stop = CancellationToken::new();
    let counted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let flood = tokio::spawn({
        let stop = stop.clone();
        let target = addrs[0];
        let counted = Arc::clone(&counted);
        async move {
            let mut held: Vec<TcpStream> = Vec::new();
            let mut opened = 0usize;
            while !stop.is_cancelled() && opened < 1_000_000 {
                // Keep the connections the acceptor has not closed.
                held.retain(|s| {
                    matches!(s.try_read(&mut [0]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
                });
                if held.len() < 4 * MAX_PENDING_HANDSHAKES
                    && let Ok(s) = TcpStream::connect(target).await
                {
                    held.push(s);
                    opened += 1;
                    counted.store(opened, std::sync::atomic::Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            opened
        }
    });
    // The acceptor is full before the member comes (however slow this
    // machine is: bounded at 30 s).
    for _ in 0..3000 {
        if counted.load(std::sync::atomic::Ordering::Relaxed) > MAX_PENDING_HANDSHAKES {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let one = member(&addrs, 1, one_listener, Duration::from_secs(5));
    let one = bring_up(one, MeshPurpose::Tcp).await;
    stop.cancel();
    let one = one.unwrap();
    let zero = zero.await.unwrap().unwrap();
    let opened = flood.await.unwrap();
    assert!(opened > MAX_PENDING_HANDSHAKES, "the flood opened {opened}");
    assert_eq!((zero.peers.len(), one.peers.len()), (1, 1));
}

/// A member played by the test: the highest-ranked one, so that it dials
/// every other member (nobody dials it); its connections, each with both
/// directions of its formation messages.
struct Played {
    id: NodeId,
    n: usize,
    handshake: Handshake,
    conns: HashMap<NodeId, (TcpStream, Direction, Direction)>,
}

impl Played {
    /// The last member of the cluster at `addrs`.
    fn last(addrs: &[SocketAddr]) -> Self {
        let id = NodeId(addrs.len() as u32 - 1);
        let entries: Vec<String> = addrs
            .iter()
            .map(|a| MeshPurpose::Tcp.digest_entry(a))
            .collect();
        Played {
            id,
            n: addrs.len(),
            handshake: Handshake::new(
                ClusterKey::from_bytes(KEY).unwrap(),
                ClusterDigest::of_members(&entries),
                id,
                addrs.len(),
            ),
            conns: HashMap::default(),
        }
    }

    /// Connect to member `to` and send it our `Info` (giving up within
    /// `remaining`).
    async fn connect(&mut self, addrs: &[SocketAddr], to: u32, remaining: Duration) {
        let to = NodeId(to);
        let mut stream = TcpStream::connect(addrs[to.index()]).await.unwrap();
        let key = self
            .handshake
            .initiate_keyed(&mut stream, to)
            .await
            .unwrap()
            .key;
        let out = Direction::new(key.clone(), self.id, to);
        let incoming = Direction::new(key, to, self.id);
        self.conns.insert(to, (stream, out, incoming));
        let remaining_ms = remaining.as_millis() as u64;
        self.send(&[to.0], Message::Info { remaining_ms }).await;
    }

    /// Send `message` to each of `to`.
    async fn send(&mut self, to: &[u32], message: Message) {
        use tokio::io::AsyncWriteExt;
        for to in to {
            let (stream, out, _) = self.conns.get_mut(&NodeId(*to)).unwrap();
            stream.write_all(&out.seal(&message)).await.unwrap();
        }
    }

    /// The next message from member `from`.
    async fn next(&mut self, from: u32) -> Message {
        let (stream, _, incoming) = self.conns.get_mut(&NodeId(from)).unwrap();
        incoming.open(stream, self.n).await.unwrap()
    }
}

/// Members `0..n-1` of a cluster of `n` coming up in the background, each
/// with the connect timeout `connect[i]` and failure timeout `failure`;
/// the last member is left to the test to play.
fn coming_up(connect: &[Duration], failure: Duration) -> (Vec<ComingUp>, Played, Vec<SocketAddr>) {
    let n = connect.len() + 1;
    let (mut listeners, addrs) = loopback(n);
    // Nobody dials the highest rank: its address is only listed.
    drop(listeners.pop());
    let ups = listeners
        .into_iter()
        .zip(connect)
        .zip(0..)
        .map(|((l, &timeout), id)| {
            let mut cluster = member(&addrs, id, l, timeout);
            cluster.failure_timeout = failure;
            tokio::spawn(bring_up(cluster, MeshPurpose::Tcp))
        })
        .collect();
    let played = Played::last(&addrs);
    (ups, played, addrs)
}

/// The failures of every member coming up: each must fail.
async fn failures(ups: Vec<ComingUp>) -> Vec<MeshError> {
    let mut errors = Vec::new();
    for (id, up) in ups.into_iter().enumerate() {
        match up.await.unwrap() {
            Ok(_) => panic!("node {id} formed a mesh with a member missing"),
            Err(e) => errors.push(e),
        }
    }
    errors
}

/// Every error blames exactly `culprit`, and says so in its line.
fn all_blame(errors: &[MeshError], culprit: u32) {
    for (id, e) in errors.iter().enumerate() {
        assert_eq!(e.blame(), vec![NodeId(culprit)], "node {id}: {e}");
        assert!(
            e.to_string().contains(&format!("{culprit}")),
            "node {id}: {e}"
        );
    }
}

/// `error` is a `Fail` adopted from node `from`.
fn reported_by(error: &MeshError, from: u32) {
    assert!(
        matches!(error, MeshError::GaveUp { from: f, .. } if *f == NodeId(from)),
        "{error}"
    );
}

#[tokio::test]
async fn a_node_is_up_only_once_every_member_is_connected_to_every_member() {
    let long = Duration::from_secs(20);
    let (ups, mut two, addrs) = coming_up(&[long, long], Duration::from_secs(3));
    // Node 2 connects to node 0 at once, to node 1 only later.
    two.connect(&addrs, 0, long).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Node 0 is connected to everyone, node 1 is not: node 0 is not up (its
    // links would time node 1's silence while node 1 waits).
    assert!(
        !ups[0].is_finished(),
        "node 0 up while node 1 waits for node 2"
    );
    two.connect(&addrs, 1, long).await;
    two.send(&[0, 1], Message::Ready).await;
    for from in [0, 1] {
        assert!(matches!(two.next(from).await, Message::Info { .. }));
        assert_eq!(two.next(from).await, Message::Ready);
    }
    // Every member's Ready is in: each says Go, and is up only with every
    // member's Go.
    for from in [0, 1] {
        assert_eq!(two.next(from).await, Message::Go);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!ups[0].is_finished() && !ups[1].is_finished());
    two.send(&[0, 1], Message::Go).await;
    for up in ups {
        assert_eq!(up.await.unwrap().unwrap().peers.len(), 2);
    }
}

/// Nodes 0-2 of four coming up (connect timeout 800 ms, failure timeout
/// 400 ms), and node 3, played by the test, connected to each of them.
async fn three_and_node_three_connected() -> (Vec<ComingUp>, Played) {
    let timeout = Duration::from_millis(800);
    let (ups, mut three, addrs) = coming_up(&[timeout; 3], Duration::from_millis(400));
    for to in 0..3 {
        three.connect(&addrs, to, timeout).await;
    }
    (ups, three)
}

#[tokio::test]
async fn a_member_silent_after_connecting_is_named_by_everyone() {
    let (ups, three) = three_and_node_three_connected().await;
    // Node 3 says nothing more (stopped during the last step).
    let errors = failures(ups).await;
    all_blame(&errors, 3);
    assert_eq!(
        errors[0].to_string(),
        "connected to every member, but not every member was: node 3: not connected to every \
         other member within 800ms"
    );
    drop(three);
}

/// Nodes 0 and 1 of three coming up (connect timeout 20 s, failure timeout
/// 400 ms), and node 2, played by the test, connected to both.
async fn two_and_node_two_connected() -> (Vec<ComingUp>, Played) {
    let long = Duration::from_secs(20);
    let (ups, mut two, addrs) = coming_up(&[long, long], Duration::from_millis(400));
    two.connect(&addrs, 0, long).await;
    two.connect(&addrs, 1, long).await;
    (ups, two)
}

#[tokio::test]
async fn a_member_whose_connection_breaks_is_named_by_everyone() {
    let (ups, mut two) = two_and_node_two_connected().await;
    // Its connection to node 1 breaks: node 1 names it at once and tells
    // node 0 why it gives up.
    two.conns.remove(&NodeId(1));
    let errors = failures(ups).await;
    all_blame(&errors, 2);
    let one = errors[1].to_string();
    assert!(
        one.starts_with("lost node 2 while the cluster formed: "),
        "{one}"
    );
    reported_by(&errors[0], 1);
}

#[tokio::test]
async fn a_member_whose_ready_reached_some_members_only_is_named_by_everyone() {
    // Node 3's Ready and Go reach nodes 0 and 1, which then have every
    // member's Ready and say Go; node 2 never gets node 3's Ready (node 3
    // was stopped, or cut off from node 2). Nodes 0 and 1 must not be up —
    // node 2 gives up — and nobody may name node 2, which only gave up
    // because of node 3.
    let (ups, mut three) = three_and_node_three_connected().await;
    three.send(&[0, 1], Message::Ready).await;
    three.send(&[0, 1], Message::Go).await;
    let errors = failures(ups).await;
    all_blame(&errors, 3);
    for formed in [0, 1] {
        reported_by(&errors[formed], 2);
    }
}

#[tokio::test]
async fn the_first_member_to_give_up_does_not_blame_one_still_connecting() {
    // Node 1 starts first, so its deadline comes first. Node 3 connects to
    // nodes 1 and 2 and stops before it connects to node 0. Node 1 is
    // connected to everyone but lacks node 0's Ready (node 0 waits for node
    // 3): it must wait for node 0's verdict and name node 3, not node 0.
    let timeout = Duration::from_millis(1000);
    let failure = Duration::from_millis(400);
    let (mut listeners, addrs) = loopback(4);
    drop(listeners.pop());
    let start = |id: u32, l| {
        let mut cluster = member(&addrs, id, l, timeout);
        cluster.failure_timeout = failure;
        tokio::spawn(bring_up(cluster, MeshPurpose::Tcp))
    };
    let two_listener = listeners.pop().unwrap();
    let one = start(1, listeners.pop().unwrap());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let zero = start(0, listeners.pop().unwrap());
    let two = start(2, two_listener);
    let mut three = Played::last(&addrs);
    for to in [1, 2] {
        three.connect(&addrs, to, timeout).await;
    }
    let errors = failures(vec![zero, one, two]).await;
    all_blame(&errors, 3);
    assert!(
        matches!(errors[0], MeshError::TimedOut { .. }),
        "node 0: {}",
        errors[0]
    );
    reported_by(&errors[1], 0);
}

#[tokio::test]
async fn a_fail_that_blames_the_receiver_blames_its_sender() {
    let (ups, mut two) = two_and_node_two_connected().await;
    two.send(
        &[0],
        Message::Fail {
            blame: vec![NodeId(0)],
        },
    )
    .await;
    let errors = failures(ups).await;
    all_blame(&errors, 2);
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_refusals_is_one_warning_a_second_and_a_few_distinct_reasons() {
    let refusals = Mutex::new(Refusals::default());
    let addr: SocketAddr = "127.0.0.1:5000".parse().unwrap();
    for i in 0..1000 {
        Refusals::refused(&refusals, addr, format!("reason {}", i % 5));
    }
    {
        let r = refusals.lock().unwrap();
        // One warning, the other 999 quiet.
        assert_eq!(r.warned.map(|(_, quiet)| quiet), Some(999));
        // The last few distinct reasons, each once.
        assert_eq!(
            r.incoming,
            [2, 3, 4].map(|i| format!("refused a connection from {addr}: reason {i}"))
        );
    }
    tokio::time::advance(REFUSAL_WARNING_INTERVAL).await;
    Refusals::refused(&refusals, addr, "reason 0".into());
    assert_eq!(refusals.lock().unwrap().warned.map(|(_, q)| q), Some(0));
}

#[test]
fn a_handshake_refusal_is_not_hidden_by_a_later_refused_connection() {
    // The peer refused our handshake (another key), then gave up and closed
    // its listener: the operator needs the first reason, not the second.
    let refusals = Mutex::new(Refusals::default());
    let peer = NodeId(0);
    let members = ["127.0.0.1:1".parse().unwrap()];
    Refusals::dial_failed(&refusals, peer, "connecting: refused".into(), false);
    Refusals::dial_failed(&refusals, peer, "another cluster key".into(), true);
    Refusals::dial_failed(&refusals, peer, "connecting: refused".into(), false);
    let why = refusals
        .lock()
        .unwrap()
        .explain(&[peer], |p| members.get(p.index()).copied());
    assert!(why.contains("another cluster key"), "{why}");
    assert!(!why.contains("refused"), "{why}");
    // A newer handshake reason replaces an older one.
    Refusals::dial_failed(&refusals, peer, "another member list".into(), true);
    let why = refusals
        .lock()
        .unwrap()
        .explain(&[peer], |p| members.get(p.index()).copied());
    assert!(why.contains("another member list"), "{why}");
}
