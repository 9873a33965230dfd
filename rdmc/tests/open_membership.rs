//! Open membership on `tcp`: a node that is not in the first member list
//! joins a running cluster and takes part in its groups, a member comes
//! back at another address and is dialled there, and a node without open
//! membership refuses them (one process, loopback).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use rdmc::{Connections, Error, GroupConfig, GroupId, Node, NodeId, PeerEvents, TcpConfig};

use common::{
    LONG, bounded, create_all, ids, key, next_up, node_config, payload, run_group, shutdown,
};

fn config(members: &[SocketAddr], id: u32, incarnation: u64) -> TcpConfig {
    TcpConfig::new(members.to_vec(), NodeId(id), key())
        .with_incarnation(incarnation)
        .with_open_membership(true)
        .with_connect_timeout(Duration::from_secs(5))
}

/// `n` free loopback addresses.
fn addresses(n: usize) -> Vec<SocketAddr> {
    let listeners: Vec<_> = (0..n).map(|_| common::loopback()).collect();
    listeners.iter().map(|l| l.local_addr().unwrap()).collect()
}

async fn start(configs: Vec<TcpConfig>) -> Vec<Node> {
    let starts = configs.into_iter().map(|c| Node::tcp(c, node_config()));
    bounded(LONG, "start", futures::future::try_join_all(starts))
        .await
        .unwrap()
}

async fn joins_and_moves(connections: Connections) {
    let mut members = addresses(4);
    let first: Vec<SocketAddr> = members[..3].to_vec();
    let mut nodes = start(
        (0..3)
            .map(|id| config(&first, id, 10).with_connections(connections))
            .collect(),
    )
    .await;
    let mut watch: Vec<PeerEvents> = nodes.iter().map(Node::peer_events).collect();

    // Node 3 is in no list of the running nodes: its own list is theirs
    // with its address appended.
    let joined = bounded(
        LONG,
        "join",
        Node::tcp(
            config(&members, 3, 10).with_connections(connections),
            node_config(),
        ),
    )
    .await
    .unwrap();
    nodes.push(joined);
    if connections == Connections::All {
        for w in &mut watch {
            assert_eq!(next_up(w, 3).await, 10);
        }
        for node in &nodes[..3] {
            let peers = node.peers().await.unwrap();
            let three = peers.iter().find(|p| p.node == NodeId(3));
            assert!(
                three.is_some_and(|p| p.up && p.incarnation == 10),
                "{peers:?}"
            );
        }
    }
    // A group of all four, the joined node its root, and one where it
    // receives in the middle of the ranks.
    let groups = create_all(&nodes, GroupId(1), &ids(&[3, 0, 1, 2]), GroupConfig::new()).await;
    run_group(groups, &[payload(1, 1 << 20)]).await;
    let groups = create_all(&nodes, GroupId(2), &ids(&[1, 3, 2, 0]), GroupConfig::new()).await;
    run_group(groups, &[payload(2, 3 << 20)]).await;

    // Node 0 (below every other: they dial it) comes back at another
    // address, with a list of its own that says so; the others learn it
    // from its introduction and dial it there.
    nodes.remove(0).shutdown().await;
    members[0] = addresses(1)[0];
    let back = bounded(
        LONG,
        "restart at a new address",
        Node::tcp(
            config(&members, 0, 11).with_connections(connections),
            node_config(),
        ),
    )
    .await
    .unwrap();
    nodes.insert(0, back);
    let groups = create_all(&nodes, GroupId(3), &ids(&[2, 3, 0, 1]), GroupConfig::new()).await;
    run_group(groups, &[payload(3, 2 << 20)]).await;
    if connections == Connections::All {
        for w in &mut watch[1..] {
            assert_eq!(next_up(w, 0).await, 11);
        }
    }
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_beyond_the_list_joins_and_a_member_moves_connected_all() {
    joins_and_moves(Connections::All).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_beyond_the_list_joins_and_a_member_moves_on_demand() {
    joins_and_moves(Connections::OnDemand).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_open_membership_a_node_beyond_the_list_is_refused() {
    let members = addresses(3);
    let fixed = |id: u32, members: &[SocketAddr]| {
        TcpConfig::new(members.to_vec(), NodeId(id), key())
            .with_connect_timeout(Duration::from_secs(2))
    };
    let nodes = start(vec![fixed(0, &members[..2]), fixed(1, &members[..2])]).await;
    // A node with a longer list, and one with open membership and the
    // same list: neither is let in, and each says why.
    for config in [fixed(2, &members), config(&members, 2, 20)] {
        match bounded(LONG, "refused start", Node::tcp(config, node_config())).await {
            Err(Error::Transport(reason)) => {
                assert!(reason.contains("member list"), "{reason}");
                // A start that failed has freed its address already: a
                // retry binds it at once.
                drop(std::net::TcpListener::bind(members[2]).expect("address freed"));
            }
            other => panic!("let in: {:?}", other.map(|n| n.id())),
        }
    }
    for node in &nodes {
        let peers = node.peers().await.unwrap();
        assert!(peers.iter().all(|p| p.node.0 < 2), "{peers:?}");
    }
    shutdown(nodes).await;
}
