//! Connected on demand, a connection no group needs any more is closed
//! once the idle timeout has passed, by the node that dialled it, without
//! either end reporting its peer down; the next group that needs it makes
//! it again and runs as the first did. (One test alone in this binary: it
//! counts the process's sockets.)

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use rdmc::{GroupConfig, GroupId, NodeId, PeerEvent};

use common::{TcpOnDemandFixture, Tuning, create_all, payload, run_group, shutdown};

/// The sockets this process holds.
fn sockets() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

/// Wait (boundedly) until this process holds `want` sockets; how many it
/// holds then.
async fn settle_at(want: usize, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let now = sockets();
        if now == want || Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_close_and_are_made_again_when_a_group_needs_them() {
    let n = 8;
    let tuning = Tuning {
        idle_timeout: Some(Duration::from_millis(300)),
        ..Tuning::default()
    };
    let (nodes, _layout) = common::cluster::<TcpOnDemandFixture>(n, tuning).await;
    let mut events = nodes[0].peer_events();
    let listening = sockets();

    let all: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
    let messages: Vec<Bytes> = (0..2).map(|i| payload(i, 300_000)).collect();
    for round in 0..2u64 {
        let groups = create_all(&nodes, GroupId(round), &all, GroupConfig::new()).await;
        assert!(
            sockets() > listening,
            "round {round}: the group connected its members"
        );
        run_group(groups, &messages).await;
        // Every connection was the group's alone: all close, at both ends.
        let left = settle_at(listening, Duration::from_secs(10)).await;
        assert_eq!(
            left, listening,
            "round {round}: idle connections still open"
        );
    }
    // Nobody was reported down or gone for it: node 0 saw its peers up only.
    shutdown(nodes).await;
    while let Some(event) = futures::StreamExt::next(&mut events).await {
        match event {
            PeerEvent::Up { .. } => {}
            // The shutdown's goodbyes, as the nodes leave for good.
            PeerEvent::Left { .. } => {}
            other => panic!("an idle close was reported: {other:?}"),
        }
    }
}
