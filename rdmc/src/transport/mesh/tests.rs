//! Tests of the mesh's bring-up on loopback: who is refused before anything
//! listens, and meshes of different purposes at the same addresses.

use std::time::Duration;

use tokio::net::TcpStream;

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
    use crate::config::{ClusterConfigError as E, MAX_TIMEOUT};
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
    let flood = tokio::spawn({
        let stop = stop.clone();
        let target = addrs[0];
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
                }
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            opened
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let one = member(&addrs, 1, one_listener, Duration::from_secs(5));
    let one = bring_up(one, MeshPurpose::Tcp).await;
    stop.cancel();
    let one = one.unwrap();
    let zero = zero.await.unwrap().unwrap();
    let opened = flood.await.unwrap();
    assert!(opened > MAX_PENDING_HANDSHAKES, "the flood opened {opened}");
    assert_eq!((zero.peers.len(), one.peers.len()), (1, 1));
}

/// Nodes 0 and 1 of three coming up in the background (with
/// `connect_timeout`), node 2's handshake for the test to play it, and the
/// addresses.
fn zero_and_one_coming_up(
    connect_timeout: Duration,
) -> (ComingUp, ComingUp, Handshake, Vec<SocketAddr>) {
    let (mut listeners, addrs) = loopback(3);
    // Nobody dials node 2 (the highest rank): its address is only listed.
    drop(listeners.pop());
    let one = member(&addrs, 1, listeners.pop().unwrap(), connect_timeout);
    let zero = member(&addrs, 0, listeners.pop().unwrap(), connect_timeout);
    (
        tokio::spawn(bring_up(zero, MeshPurpose::Tcp)),
        tokio::spawn(bring_up(one, MeshPurpose::Tcp)),
        node_two(&addrs),
        addrs,
    )
}

/// Node 2 of the cluster at `addrs`, played by the test: its handshake.
fn node_two(addrs: &[SocketAddr]) -> Handshake {
    let entries: Vec<String> = addrs
        .iter()
        .map(|a| MeshPurpose::Tcp.digest_entry(a))
        .collect();
    Handshake::new(
        ClusterKey::from_bytes(KEY).unwrap(),
        ClusterDigest::of_members(&entries),
        NodeId(2),
        3,
    )
}

#[tokio::test]
async fn a_node_is_up_only_once_every_member_is_connected_to_every_member() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (zero, one, two, addrs) = zero_and_one_coming_up(Duration::from_secs(20));
    // Node 2 connects to node 0 at once, to node 1 only later.
    let mut to_zero = TcpStream::connect(addrs[0]).await.unwrap();
    two.initiate(&mut to_zero, NodeId(0)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Node 0 is connected to everyone, node 1 is not: node 0 is not up (its
    // links would time node 1's silence while node 1 waits).
    assert!(
        !zero.is_finished(),
        "node 0 up while node 1 waits for node 2"
    );
    let mut to_one = TcpStream::connect(addrs[1]).await.unwrap();
    two.initiate(&mut to_one, NodeId(1)).await.unwrap();
    for stream in [&mut to_zero, &mut to_one] {
        stream.write_all(&[READY]).await.unwrap();
    }
    let zero = zero.await.unwrap().unwrap();
    let one = one.await.unwrap().unwrap();
    assert_eq!((zero.peers.len(), one.peers.len()), (2, 2));
    for stream in [&mut to_zero, &mut to_one] {
        assert_eq!(stream.read_u8().await.unwrap(), READY);
    }
}

#[tokio::test]
async fn a_member_that_never_gets_ready_is_named() {
    let (zero, one, two, addrs) = zero_and_one_coming_up(Duration::from_secs(1));
    // Node 2 connects to both, but says nothing more; its connection to
    // node 1 breaks.
    let mut to_zero = TcpStream::connect(addrs[0]).await.unwrap();
    two.initiate(&mut to_zero, NodeId(0)).await.unwrap();
    let mut to_one = TcpStream::connect(addrs[1]).await.unwrap();
    two.initiate(&mut to_one, NodeId(1)).await.unwrap();
    drop(to_one);
    let zero = zero.await.unwrap().err().unwrap().to_string();
    assert_eq!(
        zero,
        "connected to every member, but not every member was: node 2: not connected to every \
         other member within 1s"
    );
    let one = one.await.unwrap().err().unwrap().to_string();
    assert!(
        one.starts_with(
            "connected to every member, but not every member was: node 2: connection lost \
             before it was ready: "
        ),
        "{one}"
    );
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
