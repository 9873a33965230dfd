//! A member of an `ofi` cluster coming back, in one process, on
//! libfabric's `tcp` provider on loopback: a member that goes away and
//! starts again at the same rendezvous address in a newer incarnation is
//! let back in by the running members — new fabric endpoints, reported up
//! in its new incarnation — without any of them restarting, and a new
//! group of all three moves 16 MiB byte-identical.

#![cfg(feature = "ofi")]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use rdmc::{GroupConfig, GroupId, Node, NodeId, OfiConfig, PeerEvent};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_back_in_a_newer_incarnation_is_let_in_without_restarting_the_others() {
    let (members, mut nodes) = start_at_loopback(3, |members, id| {
        Node::ofi(config(members, id, 10), node_config())
    })
    .await;
    let mut watch = watch_up(&nodes[..2], 2, 10).await;

    // Node 2 goes (its endpoints shut down: every other node sees run 10
    // gone) and comes back in incarnation 11 at the same address.
    nodes.pop().unwrap().shutdown().await;
    for w in &mut watch {
        match next_gone(w, 2).await {
            PeerEvent::Down { incarnation, .. } | PeerEvent::Left { incarnation, .. } => {
                assert_eq!(incarnation, 10);
            }
            other => panic!("not a peer gone: {other:?}"),
        }
    }
    let restart = Node::ofi(config(&members, 2, 11), node_config());
    let back = bounded(LONG, "restart", restart).await.unwrap();
    assert_up_everywhere(&mut watch, &nodes, 2, 11).await;
    nodes.push(back);
    let config = GroupConfig::new().with_block_size(1 << 20);
    let groups = create_all(&nodes, GroupId(1), &ids(&[0, 1, 2]), config).await;
    run_group(groups, &[payload(1, 16 << 20)]).await;
    common::shutdown(nodes).await;
}
