//! The `rdma` transport's own tests. Those that need a device skip, saying
//! why, where there is none (and run in the Soft-RoCE VM tier); the
//! whole-group suite runs over this transport in `tests/whole_group.rs`.

use std::time::Duration;

use futures::StreamExt;

use super::driver::{Cmd, Extra, WrKind, parse_wr_id, wr_id};
use super::verbs::QpAddress;
use super::{RdmaEndpoint, device_names};
use crate::config::{GroupConfig, NodeConfig, RdmaConfig};
use crate::error::Error;
use crate::ids::{GroupId, NodeId};
use crate::transport::Completions;
use crate::transport::mesh::ClusterKey;
use crate::wait::CompletionMode;
use crate::{Algorithm, Node};

/// Whether a device is here; prints why a test skips if not.
fn device_or_skip(test: &str) -> bool {
    match device_names() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("{test}: skipped: {e}");
            false
        }
    }
}

fn key() -> ClusterKey {
    ClusterKey::from_bytes(*b"rdma unit test cluster key, 32 b").unwrap()
}

/// `n` RDMA transports of one cluster on loopback rendezvous addresses.
async fn transports(n: usize, failure_timeout: Duration) -> Vec<(RdmaEndpoint, Completions)> {
    let listeners: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let members: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let starts = listeners.into_iter().enumerate().map(|(i, l)| {
        let config = RdmaConfig::new(members.clone(), NodeId(i as u32), key())
            .with_listener(l)
            .with_failure_timeout(failure_timeout);
        let mode = CompletionMode::Interrupt;
        super::establish(config.cluster, config.driver, config.device, mode)
    });
    let all = tokio::time::timeout(
        Duration::from_secs(60),
        futures::future::try_join_all(starts),
    );
    all.await.expect("connecting in time").expect("connecting")
}

#[test]
fn work_request_ids_round_trip() {
    for (kind, peer, index) in [
        (WrKind::Recv, NodeId(0), 0),
        (WrKind::Send, NodeId(0xFF_FFFF), u32::MAX),
        (WrKind::Write, NodeId(7), 12345),
    ] {
        assert_eq!(
            parse_wr_id(wr_id(kind, peer, index)),
            Some((kind, peer, index))
        );
    }
    assert_eq!(parse_wr_id(0), None);
    assert_eq!(parse_wr_id(u64::MAX), None);
}

#[test]
fn qp_addresses_round_trip() {
    let a = QpAddress {
        qpn: 0x00AB_CDEF,
        psn: 0x12_3456,
        lid: 0xBEEF,
        gid: *b"0123456789abcdef",
    };
    assert_eq!(QpAddress::decode(&a.encode()), a);
}

/// Without a device, `Node::rdma` fails with a typed error, before it
/// contacts anyone (nobody listens at the members' addresses here).
#[tokio::test]
async fn without_a_device_the_node_reports_a_typed_error() {
    if device_names().is_ok() {
        eprintln!("without_a_device_the_node_reports_a_typed_error: skipped: a device is here");
        return;
    }
    let members = vec![
        "127.0.0.1:9".parse().unwrap(),
        "127.0.0.1:10".parse().unwrap(),
    ];
    let config = RdmaConfig::new(members, NodeId(0), key());
    match Node::rdma(config, NodeConfig::new()).await {
        Err(Error::Rdma(super::RdmaError::NoDevice(why))) => assert!(!why.is_empty()),
        other => panic!(
            "expected Error::Rdma(NoDevice), got {:?}",
            other.map(|_| ())
        ),
    }
}

/// A device that is not there is named in the error, with those that are.
#[tokio::test]
async fn a_missing_device_is_named() {
    if !device_or_skip("a_missing_device_is_named") {
        return;
    }
    let members = vec![
        "127.0.0.1:9".parse().unwrap(),
        "127.0.0.1:10".parse().unwrap(),
    ];
    let config = RdmaConfig::new(members, NodeId(0), key()).with_device("no-such-device");
    match Node::rdma(config, NodeConfig::new()).await {
        Err(Error::Rdma(super::RdmaError::DeviceNotFound { wanted, found })) => {
            assert_eq!(wanted, "no-such-device");
            assert!(!found.is_empty());
        }
        other => panic!("expected DeviceNotFound, got {:?}", other.map(|_| ())),
    }
}

/// A QP moved to the error state (as a device fault or a broken path
/// would) fails every group over it once on every member — and the members
/// see one failure each, not a hang and not a second one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_qp_in_the_error_state_fails_the_group_once_per_member() {
    if !device_or_skip("a_qp_in_the_error_state_fails_the_group_once_per_member") {
        return;
    }
    let transports = transports(3, Duration::from_secs(2)).await;
    let mut breakers = Vec::new();
    let nodes: Vec<Node> = transports
        .into_iter()
        .enumerate()
        .map(|(i, (t, c))| {
            breakers.push(t.commands.clone());
            Node::start(NodeId(i as u32), 3, t, c, NodeConfig::new())
        })
        .collect();
    let members = [NodeId(0), NodeId(1), NodeId(2)];
    let config = GroupConfig::new()
        .with_algorithm(Algorithm::BinomialPipeline)
        .with_block_size(64 * 1024);
    let groups = futures::future::try_join_all(
        nodes
            .iter()
            .map(|n| n.create_group(GroupId(1), &members, config.clone())),
    )
    .await
    .unwrap();
    let first = bytes::Bytes::from(vec![7u8; 300 * 1024]);
    let mut groups = groups.into_iter();
    let mut root = groups.next().unwrap().into_sender().unwrap();
    let mut receivers: Vec<_> = groups.map(|g| g.into_receiver().unwrap()).collect();
    root.send(first.clone())
        .await
        .unwrap()
        .sent()
        .await
        .unwrap();
    for g in &mut receivers {
        let m = g.next().await.unwrap().unwrap();
        assert!(m.data == first);
    }
    // Node 1's QP to node 2 breaks.
    breakers[1]
        .send(Cmd::Extra(Extra::BreakQp { peer: NodeId(2) }))
        .unwrap();
    let second = root.send(bytes::Bytes::from(vec![9u8; 300 * 1024])).await;
    let outcome = tokio::time::timeout(Duration::from_secs(30), async {
        // The root's message is sent once its own part is done, which may
        // be before the failure is known (a lost peer is named after a
        // short grace for a relayed report); its close cannot succeed.
        let sent = match second {
            Ok(receipt) => receipt.sent().await,
            Err(e) => Err(e),
        };
        let root_error = match sent {
            Err(e) => e,
            Ok(_) => root
                .close()
                .await
                .expect_err("the group cannot close whole after a broken QP"),
        };
        let mut errors = vec![root_error];
        for g in &mut receivers {
            loop {
                match g.next().await {
                    Some(Ok(_)) => {} // whole, or it would not be delivered
                    Some(Err(e)) => {
                        errors.push(e);
                        break;
                    }
                    None => panic!("rank {}: the stream ended without a failure", g.rank()),
                }
            }
            assert!(
                g.next().await.is_none(),
                "rank {}: more after the failure",
                g.rank()
            );
        }
        errors
    })
    .await
    .expect("every member learns of the failure in time");
    for e in &outcome {
        assert!(
            matches!(e, Error::GroupFailed { group, .. } if *group == GroupId(1)),
            "{e:?}"
        );
    }
    // Nodes 1 and 2 each name an end of the broken QP (node 0 names
    // whoever was reported to it). Which end is a race each of them
    // decides for itself: a member that finds its own QP
    // broken names the peer at its other end, and a member that hears
    // the group's failure reported first names whom the report names,
    // itself included (node 1 sees its QP fail at once but waits a short
    // grace for a report; node 2 finds out when its retries to node 1 run
    // out, or from the root's relay of node 1's report, whichever is
    // first).
    for (rank, e) in outcome.iter().enumerate().skip(1) {
        match e {
            Error::GroupFailed { suspect, .. } => assert!(
                matches!(suspect, Some(NodeId(1 | 2))),
                "rank {rank} names {suspect:?}, not an end of the broken QP"
            ),
            e => panic!("rank {rank}: {e:?}"),
        }
    }
    for n in nodes {
        n.shutdown().await;
    }
}
