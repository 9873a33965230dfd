//! Whole nodes over the `ofi` transport on libfabric's `tcp` provider, on
//! loopback — here with the provider's own (lenient) modes and with every
//! verbs-like mode forced, so the strict branches run too. The cluster
//! tests proper are the `ofi` instance of the whole-group suite,
//! `tests/whole_group.rs`.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::config::OfiConfig;
use crate::{
    Algorithm, ClusterKey, CompletionMode, Group, GroupConfig, GroupId, Node, NodeConfig, NodeId,
};

const KEY: &[u8] = b"ofi unit test key, 32 bytes long";

async fn cluster(n: usize, strict: bool, mode: CompletionMode) -> Vec<Node> {
    let listeners: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let starts = listeners.into_iter().enumerate().map(|(i, l)| {
        let mut config = OfiConfig::new(
            addrs.clone(),
            NodeId(i as u32),
            ClusterKey::from_bytes(KEY.to_vec()).unwrap(),
        )
        .with_listener(l)
        .with_connect_timeout(Duration::from_secs(20));
        config.fabric.strict_modes = strict;
        Node::ofi(config, NodeConfig::new().with_completion_mode(mode))
    });
    tokio::time::timeout(
        Duration::from_secs(30),
        futures::future::try_join_all(starts),
    )
    .await
    .expect("connecting in time")
    .expect("connecting")
}

fn payload(seed: u8, len: usize) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

/// Multicast `sizes` in one group of all `nodes`; check every copy.
async fn multicast(nodes: &[Node], id: u64, algorithm: Algorithm, block: usize, sizes: &[usize]) {
    let members: Vec<NodeId> = nodes.iter().map(Node::id).collect();
    let config = GroupConfig::new()
        .with_algorithm(algorithm)
        .with_block_size(block);
    let groups = futures::future::try_join_all(
        nodes
            .iter()
            .map(|n| n.create_group(GroupId(id), &members, config.clone())),
    )
    .await
    .expect("creating the group");
    let messages: Vec<Bytes> = sizes
        .iter()
        .enumerate()
        .map(|(i, &s)| payload(i as u8, s))
        .collect();
    let runs = groups.into_iter().map(|mut g| {
        let messages = messages.clone();
        async move {
            match &mut g {
                Group::Root(root) => {
                    for m in &messages {
                        let receipt = root.send(m.clone()).await.expect("send");
                        receipt.sent().await.expect("sent");
                    }
                }
                Group::Receiver(receiver) => {
                    for m in &messages {
                        let got = receiver.next().await.expect("a message");
                        assert_eq!(got.expect("no failure").data, *m);
                    }
                }
            }
            g.close().await.expect("close");
        }
    });
    tokio::time::timeout(Duration::from_secs(30), futures::future::join_all(runs))
        .await
        .expect("multicast in time");
}

async fn shutdown(nodes: Vec<Node>) {
    futures::future::join_all(nodes.into_iter().map(Node::shutdown)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pair_multicasts_over_the_tcp_provider() {
    let nodes = cluster(2, false, CompletionMode::Interrupt).await;
    multicast(
        &nodes,
        1,
        Algorithm::BinomialPipeline,
        1000,
        &[1, 0, 4500, 1000],
    )
    .await;
    shutdown(nodes).await;
}

/// The verbs-like modes forced on the `tcp` provider: descriptors for every
/// local buffer, virtual addresses (the domain is opened with
/// `FI_MR_VIRT_ADDR`, so the provider really checks them), provider keys,
/// zero-length data receives posted for `FI_RX_CQ_DATA`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_verbs_modes_work_on_the_tcp_provider() {
    let nodes = cluster(3, true, CompletionMode::Interrupt).await;
    multicast(
        &nodes,
        1,
        Algorithm::BinomialPipeline,
        4096,
        &[1, 10_000, 0, 4096 * 3 + 7],
    )
    .await;
    multicast(&nodes, 2, Algorithm::Chain, 777, &[5000, 1]).await;
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_and_hybrid_modes_deliver() {
    for mode in [
        CompletionMode::Polling,
        CompletionMode::Hybrid {
            window: Duration::from_millis(5),
        },
        CompletionMode::default(), // adaptive
    ] {
        let nodes = cluster(3, false, mode).await;
        multicast(&nodes, 1, Algorithm::BinomialPipeline, 1024, &[3000, 1, 0]).await;
        shutdown(nodes).await;
    }
}

/// Fabric addresses are opaque to the transport: IPv6 works as IPv4 does
/// (skipped where the machine has no IPv6 loopback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_loopback_works_too() {
    let Ok(probe) = std::net::TcpListener::bind("[::1]:0") else {
        return;
    };
    drop(probe);
    let listeners: Vec<_> = (0..3)
        .map(|_| std::net::TcpListener::bind("[::1]:0").unwrap())
        .collect();
    let addrs: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let starts = listeners.into_iter().enumerate().map(|(i, l)| {
        let config = OfiConfig::new(
            addrs.clone(),
            NodeId(i as u32),
            ClusterKey::from_bytes(KEY.to_vec()).unwrap(),
        )
        .with_listener(l);
        Node::ofi(config, NodeConfig::new())
    });
    let nodes = tokio::time::timeout(
        Duration::from_secs(30),
        futures::future::try_join_all(starts),
    )
    .await
    .expect("connecting in time");
    let nodes = match nodes {
        Ok(nodes) => nodes,
        // No IPv6 endpoints from the provider here: nothing to test.
        Err(e) if e.to_string().contains("offers no") => return,
        Err(e) => panic!("connecting over IPv6: {e}"),
    };
    multicast(&nodes, 1, Algorithm::Chain, 3000, &[10_007]).await;
    shutdown(nodes).await;
}
