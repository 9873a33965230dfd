//! A member of an `ofi` cluster coming back, in one process, on
//! libfabric's `tcp` provider on loopback: a member that goes away and
//! starts again at the same rendezvous address in a newer incarnation is
//! let back in by the running members — new fabric endpoints, reported up
//! in its new incarnation — without any of them restarting, and a new
//! group of all three moves 16 MiB byte-identical; whether it is the
//! member of highest id (it dials the others) or of lowest (they dial it).

#![cfg(feature = "ofi")]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use rdmc::{Error, GroupConfig, GroupId, Node, NodeId, OfiConfig, PeerEvent};

use common::{
    LONG, assert_up_everywhere, bounded, create_all, ids, key, next_gone, node_config, payload,
    run_group, start_at_loopback, watch_up,
};

fn config(members: &[SocketAddr], id: u32, incarnation: u64) -> OfiConfig {
    let mut config = OfiConfig::new(members.to_vec(), NodeId(id), key())
        .with_incarnation(incarnation)
        .with_connect_timeout(Duration::from_secs(20));
    if let Ok(provider) = std::env::var("RDMC_OFI_PROVIDER")
        && !provider.is_empty()
    {
        config = config.with_provider(provider);
    }
    config
}

/// Three nodes start in incarnation 10; `victim` goes and comes back in
/// incarnation 11; the two others see it gone and back, and a group of
/// all three moves 16 MiB. Then it goes again, and a start of it in
/// incarnation 10 fails.
async fn restart_member(victim: u32) {
    let (members, mut nodes) = start_at_loopback(3, |members, id, listener| {
        Node::ofi(
            config(members, id, 10).with_listener(listener),
            node_config(),
        )
    })
    .await;
    let gone = nodes.remove(victim as usize);
    let mut watch = watch_up(&nodes, victim, 10).await;

    // The victim goes (its endpoints shut down: every other node sees run
    // 10 gone) and comes back in incarnation 11 at the same address.
    gone.shutdown().await;
    for w in &mut watch {
        match next_gone(w, victim).await {
            PeerEvent::Down { incarnation, .. } | PeerEvent::Left { incarnation, .. } => {
                assert_eq!(incarnation, 10);
            }
            other => panic!("not a peer gone: {other:?}"),
        }
    }
    let restart = Node::ofi(config(&members, victim, 11), node_config());
    let back = bounded(LONG, "restart", restart).await.unwrap();
    assert_up_everywhere(&mut watch, &nodes, victim, 11).await;
    nodes.insert(victim as usize, back);
    let group = GroupConfig::new().with_block_size(1 << 20);
    let groups = create_all(&nodes, GroupId(1), &ids(&[0, 1, 2]), group).await;
    run_group(groups, &[payload(1, 16 << 20)]).await;

    // It goes again; a start claiming incarnation 10 (older than 11, which
    // both others saw) is let in by nobody.
    nodes.remove(victim as usize).shutdown().await;
    let stale = config(&members, victim, 10).with_connect_timeout(Duration::from_secs(2));
    match Node::ofi(stale, node_config()).await {
        Err(Error::Transport(reason)) => assert!(reason.contains("rendezvous"), "{reason}"),
        other => panic!("a stale incarnation started: {:?}", other.map(|n| n.id())),
    }
    for node in &nodes {
        let peers = node.peers().await.unwrap();
        let it = peers.iter().find(|p| p.node == NodeId(victim)).unwrap();
        assert!(!it.up && it.incarnation == 11, "{peers:?}");
    }
    common::shutdown(nodes).await;
}

/// The member of highest id restarts: it dials the others, as at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_back_in_a_newer_incarnation_is_let_in_without_restarting_the_others() {
    restart_member(2).await;
}

/// The member of lowest id restarts: the others dial it, as at start,
/// once they have seen its last run go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_below_the_others_is_dialled_again_when_it_comes_back() {
    restart_member(0).await;
}

/// A member that vanishes in the middle of a transfer (its node dropped,
/// not shut down: it says nothing) fails the group at the root, comes back
/// in a newer incarnation while the others' writes to its old endpoints
/// are still being flushed, and a new group of all three moves 16 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_dropped_mid_transfer_comes_back_and_joins_a_new_group() {
    let (members, mut nodes) = start_at_loopback(3, |members, id, listener| {
        Node::ofi(
            config(members, id, 10).with_listener(listener),
            node_config(),
        )
    })
    .await;
    let mut watch = watch_up(&nodes[..2], 2, 10).await;
    let held = GroupConfig::new()
        .with_block_size(256 << 10)
        .with_receive_window(Some(2));
    let groups = create_all(&nodes, GroupId(1), &ids(&[0, 1, 2]), held).await;
    let (root, mut receivers) = common::roles(groups);
    // Nobody reads: the transfer stalls once the receive windows are full.
    let sending = tokio::spawn(async move {
        for i in 0..16 {
            root.send(payload(i, 1 << 20)).await?.sent().await?;
        }
        Ok::<_, Error>(())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(receivers.pop());
    drop(nodes.pop());
    let sent = bounded(LONG, "the root's failure", sending).await.unwrap();
    assert!(sent.is_err(), "the transfer outlived a member");
    for w in &mut watch {
        match next_gone(w, 2).await {
            PeerEvent::Down { incarnation, .. } => assert_eq!(incarnation, 10),
            other => panic!("not a peer down: {other:?}"),
        }
    }
    // Its rendezvous listener closes as its dropped node's tasks end.
    let back = bounded(LONG, "restart", async {
        loop {
            match Node::ofi(config(&members, 2, 11), node_config()).await {
                Err(Error::Transport(e)) if e.contains("in use") => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                started => return started.unwrap(),
            }
        }
    })
    .await;
    assert_up_everywhere(&mut watch, &nodes, 2, 11).await;
    drop(receivers);
    nodes.push(back);
    let group = GroupConfig::new().with_block_size(1 << 20);
    let groups = create_all(&nodes, GroupId(2), &ids(&[0, 1, 2]), group).await;
    run_group(groups, &[payload(3, 16 << 20)]).await;
    common::shutdown(nodes).await;
}
