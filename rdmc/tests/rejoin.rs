//! Members of a `tcp` cluster coming back, in one process: a member that
//! shuts down (and is reported as having left, not failed) and starts again in a newer incarnation is reported up by every
//! other member and can join new groups; a start claiming an older
//! incarnation than one the others have seen is refused by all of them.

mod common;

use std::time::Duration;

use rdmc::{Error, GroupConfig, GroupId, Node, NodeId, PeerEvent, TcpConfig};

use common::{
    LONG, assert_up_everywhere, bounded, create_all, ids, key, next_gone, node_config, payload,
    run_group, shutdown, start_at_loopback, watch_up,
};

fn config(members: &[std::net::SocketAddr], id: u32, incarnation: u64) -> TcpConfig {
    TcpConfig::new(members.to_vec(), NodeId(id), key())
        .with_incarnation(incarnation)
        .with_connect_timeout(Duration::from_secs(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_back_in_a_newer_incarnation_is_up_everywhere_and_an_older_one_is_refused() {
    let (members, mut nodes) = start_at_loopback(3, |members, id, listener| {
        Node::tcp(
            config(members, id, 10).with_listener(listener),
            node_config(),
        )
    })
    .await;
    let mut watch = watch_up(&nodes[..2], 2, 10).await;

    // Node 2 shuts down (every other node sees run 10 leave, as it said:
    // no failure), and comes back in incarnation 11.
    nodes.pop().unwrap().shutdown().await;
    for w in &mut watch {
        let gone = next_gone(w, 2).await;
        assert_eq!(
            gone,
            PeerEvent::Left {
                node: NodeId(2),
                incarnation: 10
            }
        );
    }
    let restart = Node::tcp(config(&members, 2, 11), node_config());
    let back = bounded(LONG, "restart", restart).await.unwrap();
    assert_up_everywhere(&mut watch, &nodes, 2, 11).await;
    nodes.push(back);
    let groups = create_all(&nodes, GroupId(1), &ids(&[0, 1, 2]), GroupConfig::new()).await;
    run_group(groups, &[payload(1, 1 << 20)]).await;

    // Node 2 leaves again; a start claiming incarnation 10 (older than 11,
    // which both others saw) is let in by nobody.
    nodes.pop().unwrap().shutdown().await;
    match Node::tcp(config(&members, 2, 10), node_config()).await {
        Err(Error::Transport(reason)) => {
            assert!(reason.contains("no connection to node(s) 0, 1"), "{reason}");
        }
        other => panic!("a stale incarnation started: {:?}", other.map(|n| n.id())),
    }
    for node in &nodes {
        let peers = node.peers().await.unwrap();
        let two = peers.iter().find(|p| p.node == NodeId(2)).unwrap();
        assert!(!two.up && two.incarnation == 11, "{peers:?}");
    }
    shutdown(nodes).await;
}
