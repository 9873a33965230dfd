//! Batches of small messages, driven through the scripted transport of
//! [`failure_tests`](super::failure_tests): what the root puts on the wire
//! for a burst (the first message alone, the ones queued behind it as one
//! batch, a large one never in a batch, order kept), how a receiver splits
//! a batch and counts it taken and persisted, and how it refuses a batch
//! that lies.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use super::failure_tests::{GROUP, Member, config, node_with};
use crate::config::{BATCH_HEADER_BYTES, DEFAULT_MAX_BATCH_BYTES, GroupConfig};
use crate::error::Error;
use crate::group::Receipt;
use crate::ids::NodeId;
use crate::proto::FailureKind;
use crate::proto::{BATCH_FLAG, Control, READY_WINDOW};
use crate::transport::{Completion, Signal};

/// Let the actor handle what was injected (the clock is paused: the sleep
/// ends once every task waits).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

fn signal(m: &Member, from: u32, control: Control) {
    m.inject
        .send(Completion::Signal {
            group: GROUP,
            from: NodeId(from),
            signal: Signal::Group(control),
        })
        .unwrap();
}

/// The root (node 0, sequential: every block to node 1, then node 2):
/// complete every block it sends until it has sent `count`, each peer
/// ready for more (at most the window); the blocks sent, as (to,
/// immediate, bytes).
async fn pump(m: &Member, count: usize) -> Vec<(NodeId, u64, Vec<u8>)> {
    let mut done = 0;
    for _ in 0..10 * count {
        settle().await;
        let blocks = m.blocks.lock().unwrap().clone();
        for (to, _, _) in &blocks[done..] {
            m.inject
                .send(Completion::Sent {
                    group: GROUP,
                    to: *to,
                })
                .unwrap();
            signal(m, to.0, Control::ReadyForBlock);
        }
        done = blocks.len();
        if done >= count {
            settle().await;
            return m.blocks.lock().unwrap().clone();
        }
    }
    panic!("the root sent {done} blocks, not {count}");
}

/// The root queues three one-byte messages; their receipts.
async fn queue(m: &Member, messages: [&'static [u8; 1]; 3]) -> [Receipt; 3] {
    let mut receipts = Vec::new();
    for data in messages {
        receipts.push(m.root().send(&data[..]).await.unwrap());
    }
    <[Receipt; 3]>::try_from(receipts).unwrap()
}

/// A batch's frame: each message's 4-byte length and bytes.
fn frame(messages: &[&[u8]]) -> Vec<u8> {
    let mut frame = Vec::new();
    for m in messages {
        frame.extend_from_slice(&(m.len() as u32).to_le_bytes());
        frame.extend_from_slice(m);
    }
    frame
}

/// The transfers node 1 got: (immediate, bytes), one block each.
fn to_node_1(blocks: &[(NodeId, u64, Vec<u8>)]) -> Vec<(u64, Vec<u8>)> {
    blocks
        .iter()
        .filter(|(to, _, _)| *to == NodeId(1))
        .map(|(_, immediate, bytes)| (*immediate, bytes.clone()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_root_batches_what_queues_behind_a_transfer_and_nothing_else() {
    let m = node_with(0, usize::MAX, config()).await;
    let big = vec![7u8; DEFAULT_MAX_BATCH_BYTES - BATCH_HEADER_BYTES + 1];
    let root = m.root();
    let sends = [
        root.send(&b"a"[..]).await.unwrap(),
        // Queued behind "a": one batch of two.
        root.send(&b"bb"[..]).await.unwrap(),
        root.send(Bytes::new()).await.unwrap(),
        // Too large for a batch: alone, after them.
        root.send(big.clone()).await.unwrap(),
        // Behind the large one: alone again, after it.
        root.send(&b"c"[..]).await.unwrap(),
    ];
    settle().await;
    for peer in [1, 2] {
        for _ in 0..READY_WINDOW {
            signal(&m, peer, Control::ReadyForBlock);
        }
    }
    // "a", the batch, the large one's 1 KiB blocks and "c", to each of the
    // two receivers.
    let k = big.len().div_ceil(1024);
    let blocks = pump(&m, 2 * (3 + k)).await;
    let got = to_node_1(&blocks);
    let batch = frame(&[b"bb", b""]);
    assert_eq!(got[0], (1, b"a".to_vec()));
    assert_eq!(got[1], (batch.len() as u64 | BATCH_FLAG, batch));
    let big_blocks: Vec<u8> = got[2..2 + k].iter().flat_map(|(_, b)| b.clone()).collect();
    assert!(got[2..2 + k].iter().all(|(i, _)| *i == big.len() as u64));
    assert_eq!(big_blocks, big);
    assert_eq!(got[2 + k], (1, b"c".to_vec()));
    assert_eq!(got.len(), 3 + k);
    // Every send completed, batched or not.
    for (i, send) in sends.into_iter().enumerate() {
        send.sent()
            .await
            .unwrap_or_else(|e| panic!("send {i}: {e}"));
    }
}

#[tokio::test(start_paused = true)]
async fn a_batchs_messages_are_delivered_when_every_member_took_the_batch() {
    let m = node_with(0, usize::MAX, config()).await;
    let [a, b, c] = queue(&m, [b"a", b"b", b"c"]).await.map(Receipt::delivered);
    settle().await;
    for peer in [1, 2] {
        for _ in 0..READY_WINDOW {
            signal(&m, peer, Control::ReadyForBlock);
        }
    }
    // "a" alone, then "b" and "c" in a batch, to both receivers.
    let blocks = pump(&m, 4).await;
    assert_eq!(to_node_1(&blocks).len(), 2);
    // The receivers count transfers: one taken each, then two.
    signal(&m, 1, Control::Taken { messages: 1 });
    signal(&m, 2, Control::Taken { messages: 1 });
    a.await.unwrap();
    signal(&m, 1, Control::Taken { messages: 2 });
    settle().await;
    let (b, c) = (tokio::spawn(b), tokio::spawn(c));
    settle().await;
    assert!(!b.is_finished() && !c.is_finished(), "one receiver took it");
    signal(&m, 2, Control::Taken { messages: 2 });
    b.await.unwrap().unwrap();
    c.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_batchs_messages_are_persisted_when_every_member_persisted_the_batch() {
    let m = node_with(0, usize::MAX, config()).await;
    let [a, b, c] = queue(&m, [b"a", b"b", b"c"]).await.map(Receipt::persisted);
    settle().await;
    for peer in [1, 2] {
        for _ in 0..READY_WINDOW {
            signal(&m, peer, Control::ReadyForBlock);
        }
    }
    pump(&m, 4).await;
    for peer in [1, 2] {
        signal(&m, peer, Control::Taken { messages: 2 });
        signal(&m, peer, Control::Persisted { messages: 1 });
    }
    a.await.unwrap();
    signal(&m, 1, Control::Persisted { messages: 2 });
    settle().await;
    let (b, c) = (tokio::spawn(b), tokio::spawn(c));
    settle().await;
    assert!(
        !b.is_finished() && !c.is_finished(),
        "one receiver persisted it"
    );
    signal(&m, 2, Control::Persisted { messages: 2 });
    b.await.unwrap().unwrap();
    c.await.unwrap().unwrap();
}

/// Node 1 receives `wire` from the root as one one-block transfer with
/// `immediate`.
fn receive(m: &Member, wire: &[u8], immediate: u64) {
    let region = m.posted.lock().unwrap().remove(0);
    region.write(wire);
    m.inject
        .send(Completion::Received {
            group: GROUP,
            from: NodeId(0),
            immediate,
            len: wire.len(),
        })
        .unwrap();
}

/// The `Taken` counts node 1 sent, in order.
fn taken(m: &Member) -> Vec<u64> {
    m.sent
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(_, s)| match s {
            Signal::Group(Control::Taken { messages }) => Some(*messages),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_receiver_splits_a_batch_into_its_messages_in_order() {
    let mut m = node_with(1, usize::MAX, config()).await;
    let batch = frame(&[b"first", b"", b"third"]);
    receive(&m, &batch, batch.len() as u64 | BATCH_FLAG);
    let got = [
        m.receiver().next().await.expect("a message").unwrap(),
        m.receiver().next().await.expect("a message").unwrap(),
    ];
    assert_eq!((got[0].seq, &got[0].data[..]), (0, &b"first"[..]));
    assert_eq!((got[1].seq, &got[1].data[..]), (1, &b""[..]));
    settle().await;
    assert_eq!(taken(&m), Vec::<u64>::new(), "the batch is not all taken");
    let third = m.receiver().next().await.unwrap().unwrap();
    assert_eq!((third.seq, &third.data[..]), (2, &b"third"[..]));
    settle().await;
    assert_eq!(taken(&m), vec![1], "the batch counts as one transfer");
    // A plain message after it is the application's fourth.
    receive(&m, b"plain", 5);
    let fourth = m.receiver().next().await.unwrap().unwrap();
    assert_eq!((fourth.seq, &fourth.data[..]), (3, &b"plain"[..]));
    settle().await;
    assert_eq!(taken(&m), vec![1, 2]);
}

/// The `Persisted` counts node 1 sent, in order.
fn persisted(m: &Member) -> Vec<u64> {
    m.sent
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(_, s)| match s {
            Signal::Group(Control::Persisted { messages }) => Some(*messages),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_receiver_acknowledges_a_batch_once_its_every_message_is_persisted() {
    let mut m = node_with(1, usize::MAX, config()).await;
    let batch = frame(&[b"first", b"second", b"third"]);
    receive(&m, &batch, batch.len() as u64 | BATCH_FLAG);
    for seq in 0..2 {
        let message = m.receiver().next().await.unwrap().unwrap();
        assert_eq!(message.seq, seq);
    }
    match m.receiver().persisted(2) {
        Err(Error::NotTaken { seq: 2, .. }) => {}
        other => panic!("persisting a message not taken: {other:?}"),
    }
    m.receiver().persisted(1).unwrap();
    m.receiver().next().await.unwrap().unwrap();
    settle().await;
    assert_eq!(persisted(&m), Vec::<u64>::new(), "two of the batch's three");
    m.receiver().persisted(2).unwrap();
    settle().await;
    assert_eq!(persisted(&m), vec![1], "the batch counts as one transfer");
    // Again, or an earlier one: nothing new.
    m.receiver().persisted(0).unwrap();
    m.receiver().persisted(2).unwrap();
    receive(&m, b"plain", 5);
    m.receiver().next().await.unwrap().unwrap();
    m.receiver().persisted(3).unwrap();
    settle().await;
    assert_eq!(persisted(&m), vec![1, 2]);
}

fn violation(e: &Error) -> bool {
    matches!(
        e,
        Error::GroupFailed {
            suspect: Some(NodeId(0)),
            kind: FailureKind::ProtocolViolation,
            ..
        }
    )
}

#[tokio::test(start_paused = true)]
async fn a_batch_that_lies_fails_the_group_and_delivers_none_of_it() {
    let mut past_end = frame(&[b"ok", b"abc"]);
    past_end[6] = 4; // the second message says 4 bytes; 3 follow
    let mut huge = frame(&[b"ok", b"abc"]);
    huge[6..10].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut trailing = frame(&[b"ok", b"abc"]);
    trailing.extend_from_slice(&[0, 0]); // half a length
    let cases: [(&str, Vec<u8>); 5] = [
        ("runs past the end", past_end),
        ("a length of 4 GiB", huge),
        ("trailing bytes", trailing),
        ("one message", frame(&[b"alone"])),
        ("empty", Vec::new()),
    ];
    for (what, wire) in cases {
        let mut m = node_with(1, usize::MAX, config()).await;
        receive(&m, &wire, wire.len() as u64 | BATCH_FLAG);
        let first = m.receiver().next().await.expect("an item");
        match first {
            Err(e) if violation(&e) => {}
            other => panic!("{what}: expected a protocol violation first, got {other:?}"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_batch_the_group_does_not_allow_is_a_violation() {
    let batch = frame(&[b"one", b"two"]);
    let groups = [
        ("no batches", config().with_small_message_batching(None)),
        (
            "a smaller limit",
            config().with_small_message_batching(Some(batch.len() - 1)),
        ),
    ];
    for (what, config) in groups {
        let mut m = node_with(1, usize::MAX, config).await;
        receive(&m, &batch, batch.len() as u64 | BATCH_FLAG);
        let e = m.failure().await;
        assert!(violation(&e), "{what}: {e}");
    }
    // The same batch within the limit is fine.
    let config = config().with_small_message_batching(Some(batch.len()));
    let mut m = node_with(1, usize::MAX, config).await;
    receive(&m, &batch, batch.len() as u64 | BATCH_FLAG);
    assert_eq!(
        &m.receiver().next().await.unwrap().unwrap().data[..],
        b"one"
    );
}

#[test]
fn batching_is_on_by_default_and_can_be_turned_off() {
    assert_eq!(
        GroupConfig::new().small_message_batching(),
        Some(DEFAULT_MAX_BATCH_BYTES)
    );
    let off = GroupConfig::new().with_small_message_batching(None);
    assert_eq!(off.small_message_batching(), None);
    // Too small to hold a message.
    let tiny = GroupConfig::new().with_small_message_batching(Some(BATCH_HEADER_BYTES));
    assert_eq!(tiny.small_message_batching(), None);
}

#[tokio::test(start_paused = true)]
async fn a_batch_cut_short_by_a_failure_fails_all_its_messages_together() {
    let m = node_with(0, usize::MAX, config()).await;
    let [a, b, c] = queue(&m, [b"a", b"b", b"c"]).await.map(Receipt::sent);
    settle().await;
    for peer in [1, 2] {
        for _ in 0..READY_WINDOW {
            signal(&m, peer, Control::ReadyForBlock);
        }
    }
    // "a" to both, the batch to node 1 only: then node 2 is lost.
    let blocks = pump(&m, 3).await;
    assert_eq!(blocks[2].1, 10 | BATCH_FLAG, "{blocks:?}");
    m.inject
        .send(Completion::peer_down(NodeId(2), 0, "lost in a test"))
        .unwrap();
    a.await.expect("sent before the failure");
    let expected = super::failure_tests::lost(2);
    assert_eq!(b.await.unwrap_err(), expected);
    assert_eq!(c.await.unwrap_err(), expected);
}

#[tokio::test(start_paused = true)]
async fn a_receiver_delivers_nothing_of_a_batch_that_did_not_arrive_whole() {
    let mut m = node_with(1, usize::MAX, config()).await;
    // Two blocks of 1 KiB: the first arrives, then the root is lost.
    let big = vec![3u8; 1500];
    let batch = frame(&[b"small", &big]);
    receive(&m, &batch[..1024], batch.len() as u64 | BATCH_FLAG);
    settle().await;
    m.inject
        .send(Completion::peer_down(NodeId(0), 0, "lost in a test"))
        .unwrap();
    let first = m.receiver().next().await.expect("an item");
    assert!(
        matches!(
            first,
            Err(Error::GroupFailed {
                kind: FailureKind::Unreachable,
                ..
            })
        ),
        "{first:?}"
    );
}
