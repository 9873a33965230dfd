//! The whole-group scenarios of what "delivered" means, expanded by
//! `whole_group_suite!`: the application has it. The close waits for every
//! receiver's application, and fails if one goes away, closes early or
//! stalls.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rdmc::{Error, FailureKind, GroupConfig, GroupId, Node, NodeId, Receiver, Sender};

use super::{
    Fixture, LONG, Tuning, assert_failed, bounded, cluster, create_all, ids, payload, queue_all,
    read_until_failure, roles, shutdown,
};

/// Group 1 of three nodes (root 0), `config`, with `messages` sent; every
/// receiver has read them all when this returns.
async fn three_read_everything(
    nodes: &[Node],
    config: GroupConfig,
    messages: &[Bytes],
) -> (Sender, Receiver, Receiver) {
    let groups = create_all(nodes, GroupId(1), &ids(&[0, 1, 2]), config).await;
    let (root, receivers) = roles(groups);
    let [mut r1, mut r2] = <[Receiver; 2]>::try_from(receivers).unwrap();
    drop(queue_all(&root, messages).await);
    for r in [&mut r1, &mut r2] {
        for (i, m) in messages.iter().enumerate() {
            let got = bounded(LONG, "reading", r.next()).await.unwrap().unwrap();
            assert_eq!(got.seq, i as u64);
            assert!(got.data == m, "message {i}");
        }
    }
    (root, r1, r2)
}

pub async fn a_receiver_that_never_closes_holds_the_close_and_fails_it_when_it_leaves<
    F: Fixture,
>() {
    let (nodes, _) = cluster::<F>(3, Tuning::default()).await;
    let messages: Vec<Bytes> = (0..3).map(|i| payload(i, 70_000 + i as usize)).collect();
    let config = GroupConfig::new().with_block_size(16 * 1024);
    let (mut root, mut r1, mut r2) = three_read_everything(&nodes, config, &messages).await;
    // Node 2's application read everything (its stream ends once the root
    // closed) but never closes: nobody's close resolves, however long.
    let r1_close = tokio::spawn(async move {
        let outcome = r1.close().await;
        (r1, outcome)
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(300), root.close())
            .await
            .is_err(),
        "the root's close resolved while a receiver's application had not closed"
    );
    assert!(
        bounded(LONG, "node 2's stream end", r2.next())
            .await
            .is_none(),
        "node 2's stream ends after the last message once the root closed"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), root.close())
            .await
            .is_err(),
        "the root's close resolved while a receiver's application had not closed"
    );
    assert!(!r1_close.is_finished(), "node 1's close resolved");
    // Node 2's application goes away without closing: everyone fails, naming it.
    drop(r2);
    let error = bounded(LONG, "the root's close", root.close())
        .await
        .unwrap_err();
    assert_failed(&error, GroupId(1), 2, FailureKind::LocalShutdown, "root");
    let (r1, outcome) = bounded(LONG, "node 1's close", r1_close).await.unwrap();
    let left = FailureKind::LocalShutdown;
    assert_failed(&outcome.unwrap_err(), GroupId(1), 2, left, "node 1");
    drop((root, r1));
    shutdown(nodes).await;
}

pub async fn a_receiver_that_leaves_after_its_blocks_arrived_fails_the_group<F: Fixture>() {
    let (nodes, _) = cluster::<F>(3, Tuning::default()).await;
    let messages: Vec<Bytes> = (0..4).map(|i| payload(10 + i, 50_000)).collect();
    let config = GroupConfig::new().with_block_size(8 * 1024);
    let (mut root, mut r1, r2) = three_read_everything(&nodes, config, &messages).await;
    // Node 2 has every block (it read every message), but its application
    // goes away before it closes — as a process that dies before it wrote
    // what it received.
    drop(r2);
    let (root_outcome, r1_outcome) = bounded(LONG, "the closes", async {
        tokio::join!(root.close(), r1.close())
    })
    .await;
    let left = FailureKind::LocalShutdown;
    assert_failed(&root_outcome.unwrap_err(), GroupId(1), 2, left, "root");
    assert_failed(&r1_outcome.unwrap_err(), GroupId(1), 2, left, "node 1");
    drop((root, r1));
    shutdown(nodes).await;
}

pub async fn a_receiver_that_closes_with_messages_unread_fails_the_group<F: Fixture>() {
    let (nodes, _) = cluster::<F>(3, Tuning::default()).await;
    let groups = create_all(&nodes, GroupId(1), &ids(&[0, 1, 2]), GroupConfig::new()).await;
    let (mut root, receivers) = roles(groups);
    let [r1, mut r2] = <[Receiver; 2]>::try_from(receivers).unwrap();
    let messages: Vec<Bytes> = (0..3).map(|i| payload(20 + i, 30_000)).collect();
    drop(queue_all(&root, &messages).await);
    // Node 2 takes one message and closes: it will never take the others.
    bounded(LONG, "node 2's first message", r2.next())
        .await
        .unwrap()
        .unwrap();
    let r2_outcome = bounded(LONG, "node 2's close", r2.close()).await;
    let unread = FailureKind::ClosedUnread;
    assert_failed(&r2_outcome.unwrap_err(), GroupId(1), 2, unread, "node 2");
    // Node 1 reads everything, closes: the failure reaches it in its stream
    // or, if its stream ended first (every message read), from its close.
    let node_1 = async {
        let mut r1 = r1;
        while let Some(m) = r1.next().await {
            if let Err(e) = m {
                assert_eq!(r1.close().await.unwrap_err(), e);
                return e;
            }
        }
        r1.close().await.unwrap_err()
    };
    let (root_outcome, r1_error) = bounded(LONG, "the closes", async {
        tokio::join!(root.close(), node_1)
    })
    .await;
    // Node 2's cause, heard from node 2.
    assert_failed(&root_outcome.unwrap_err(), GroupId(1), 2, unread, "root");
    assert_failed(&r1_error, GroupId(1), 2, unread, "node 1");
    drop((root, r2));
    shutdown(nodes).await;
}

pub async fn a_receiver_making_no_progress_fails_the_group_after_the_progress_timeout<
    F: Fixture,
>() {
    let (nodes, _) = cluster::<F>(3, Tuning::default()).await;
    const PROGRESS: Duration = Duration::from_secs(1);
    let config = GroupConfig::new()
        .with_block_size(16 * 1024)
        .with_progress_timeout(Some(PROGRESS));
    let members = ids(&[0, 1, 2]);
    let groups = bounded(
        LONG,
        "creating group 1",
        futures::future::try_join_all(members.iter().map(|m| {
            // Node 2's application reads nothing with a window of one: its
            // node stays connected and answers heartbeats, but it takes no
            // more messages, which holds the group.
            let config = if *m == NodeId(2) {
                config.clone().with_receive_window(Some(1))
            } else {
                config.clone()
            };
            nodes[m.index()].create_group(GroupId(1), &members, config)
        })),
    )
    .await
    .unwrap();
    let (mut root, receivers) = roles(groups);
    let [r1, mut r2] = <[Receiver; 2]>::try_from(receivers).unwrap();
    let messages: Vec<Bytes> = (0..6).map(|i| payload(30 + i, 40_000)).collect();
    let sends = queue_all(&root, &messages).await;
    let reader = tokio::spawn(read_until_failure(r1, messages.clone(), 0));
    // Found by the members waiting on node 2, heard of by node 2 itself.
    let no_progress = FailureKind::NoProgress;
    let root_error = bounded(PROGRESS * 10, "the root's failure", async {
        for s in sends {
            if let Err(e) = s.sent().await {
                assert_eq!(root.closed().await.unwrap_err(), e, "root: closed");
                return e;
            }
        }
        root.close().await.unwrap_err()
    })
    .await;
    assert_failed(&root_error, GroupId(1), 2, no_progress, "root");
    let r1 = bounded(PROGRESS * 10, "node 1's failure", reader)
        .await
        .unwrap();
    assert_failed(&r1.error, GroupId(1), 2, no_progress, "node 1");
    // Node 2 hears of it too: after what it holds, its stream yields the failure.
    let error = bounded(LONG, "node 2's stream", async {
        loop {
            match r2.next().await {
                Some(Ok(_)) => {}
                Some(Err(e)) => break e,
                None => panic!("node 2's stream ended without the failure"),
            }
        }
    })
    .await;
    assert_failed(&error, GroupId(1), 2, no_progress, "node 2");
    drop((root, r2));
    shutdown(nodes).await;
}
