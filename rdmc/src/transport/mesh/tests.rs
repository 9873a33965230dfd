//! Tests of the mesh's bring-up on loopback: who is refused before anything
//! listens, and meshes of different purposes at the same addresses.

use std::time::Duration;

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
