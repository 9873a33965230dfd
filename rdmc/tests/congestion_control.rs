//! `TcpConfig::with_congestion_control`: a name the kernel refuses stops
//! the node before it connects, with the error saying so; members that all
//! name one the kernel has (`reno` is always built in) carry messages
//! intact.

mod common;

use std::time::Duration;

use rdmc::{Algorithm, Error, GroupConfig, GroupId, Node, NodeId, TcpConfig};

use common::{
    LONG, Layout, bounded, create_all, ids, key, node_config, payload, run_group, shutdown,
};

#[tokio::test]
async fn a_congestion_control_the_kernel_lacks_is_refused_before_connecting() {
    // Member 1 never starts: a node that tried to connect first would wait
    // its whole connect timeout (an hour) instead of failing at once.
    let mut layout = Layout::new(2);
    let config = TcpConfig::new(layout.addrs.clone(), NodeId(0), key())
        .with_listener(layout.take_listener(0))
        .with_connect_timeout(Duration::from_secs(3600))
        .with_congestion_control("no_such_cc");
    let started = bounded(
        Duration::from_secs(20),
        "starting with an unknown congestion control",
        Node::tcp(config, node_config()),
    )
    .await;
    match started {
        Err(
            ref e @ Error::CongestionControl {
                ref name,
                ref reason,
            },
        ) => {
            assert_eq!(name, "no_such_cc");
            assert!(reason.contains("this kernel has"), "{e}");
            assert!(e.to_string().contains("no_such_cc"), "{e}");
        }
        Err(e) => panic!("failed otherwise: {e}"),
        Ok(node) => {
            node.shutdown().await;
            panic!("started with a congestion control the kernel lacks");
        }
    }
    // Not a name at all (the kernel's names are under 16 bytes).
    let mut layout = Layout::new(2);
    let config = TcpConfig::new(layout.addrs.clone(), NodeId(0), key())
        .with_listener(layout.take_listener(0))
        .with_congestion_control("a_name_far_too_long_for_the_kernel");
    let started = bounded(LONG, "starting", Node::tcp(config, node_config())).await;
    assert!(
        matches!(started, Err(Error::CongestionControl { .. })),
        "a 34-byte name was not refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_on_reno_deliver_every_message_intact() {
    let mut layout = Layout::new(4);
    let starts: Vec<_> = (0..4)
        .map(|id| {
            let config = TcpConfig::new(layout.addrs.clone(), NodeId(id), key())
                .with_listener(layout.take_listener(id as usize))
                .with_congestion_control("reno");
            Node::tcp(config, node_config())
        })
        .collect();
    let nodes: Vec<Node> = bounded(LONG, "starting", futures::future::join_all(starts))
        .await
        .into_iter()
        .map(|started| started.unwrap_or_else(|e| panic!("starting on reno: {e}")))
        .collect();
    let config = GroupConfig::default()
        .with_algorithm(Algorithm::BinomialPipeline)
        .with_block_size(64 * 1024);
    let groups = create_all(&nodes, GroupId(1), &ids(&[0, 1, 2, 3]), config).await;
    let messages = [payload(1, 1 << 20), payload(2, 1), payload(3, 300_000)];
    run_group(groups, &messages).await;
    shutdown(nodes).await;
}
