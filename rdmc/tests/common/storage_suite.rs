//! The storage scenarios, each written once for any [`Fixture`], and
//! [`storage_suite!`], which expands them as tests for one transport:
//! receive targets (files, the application's buffers, memory, mixed in one
//! group, relays included), per-message delivery to every member, the
//! bound on messages in flight (sends that wait for room, the root's
//! permits and its `Sink`), the root's `closed`, the slow-reader timeout,
//! and a failing receive-target hook.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use rdmc::{
    Algorithm, Error, FailureKind, Group, GroupConfig, GroupId, NodeId, ReceiveTarget,
    ReceiveTargets, Receiver,
};

use super::scratch::ScratchDir;
use super::{
    Fixture, LONG, Tuning, bounded, cluster, create_all, ids, pair, payload, receive_all, roles,
    shutdown,
};

/// Every storage scenario as `#[tokio::test]`s in a module `$name` for the
/// fixture `$fixture`.
macro_rules! storage_suite {
    ($name:ident, $fixture:ty) => {
        mod $name {
            use super::*;
            use $crate::common::{Fixture, storage_suite};
            storage_suite!(@tests $fixture:
                receive_targets_files_buffers_and_memory_in_one_group_byte_exact,
                delivered_resolves_once_every_member_took_the_message,
                the_bound_on_messages_in_flight_holds_sends_and_paces_the_sink,
                concurrent_sends_beyond_the_bound_wait_for_room_and_all_arrive,
                a_permit_holds_the_room_until_its_message_is_delivered,
                closed_reports_how_the_group_ended,
                a_slow_reader_fails_the_group_naming_it,
                the_slow_reader_timeout_fires_within_its_bound,
                closing_the_sink_twice_returns_ok_twice,
                a_message_over_the_limit_is_refused_at_once_by_every_way_of_sending,
                a_failing_receive_target_fails_the_group_naming_its_member,
                files_sent_by_the_root_arrive_byte_exact,
            );
        }
    };
    (@tests $fixture:ty: $($scenario:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                if let Err(why) = <$fixture as Fixture>::available() {
                    eprintln!("{} {}: skipped: {why}", <$fixture as Fixture>::NAME, stringify!($scenario));
                    return;
                }
                storage_suite::$scenario::<$fixture>().await;
            }
        )*
    };
}

pub(crate) use storage_suite;

/// A hook receiving message `seq` of group `g` into `dir/g-seq`.
pub fn files_in(dir: &Path) -> ReceiveTargets {
    let dir = dir.to_path_buf();
    ReceiveTargets::new(move |incoming| {
        ReceiveTarget::create_file(dir.join(format!("{}-{}", incoming.group.0, incoming.seq)))
    })
}

/// Node 1 receives into files, node 2 into its own vectors, node 3 into
/// memory, node 4 into files again; every algorithm (so files are relayed
/// from, after their blocks left memory), blocks of a page and of an odd
/// size, byte-exact.
pub async fn receive_targets_files_buffers_and_memory_in_one_group_byte_exact<F: Fixture>() {
    let (nodes, _) = cluster::<F>(5, Tuning::default()).await;
    let scratch = ScratchDir::new("targets");
    let buffers = ReceiveTargets::new(|incoming| async move {
        Ok(ReceiveTarget::Buffer(Vec::with_capacity(
            incoming.size as usize,
        )))
    });
    let memory = ReceiveTargets::new(|_| async { Ok(ReceiveTarget::Memory) });
    let members = ids(&[0, 1, 2, 3, 4]);
    // Each member its own directory: one file must not be two targets.
    let dirs = [scratch.join("node-1"), scratch.join("node-4")];
    for dir in &dirs {
        std::fs::create_dir_all(dir).unwrap();
    }
    let mut id = 0;
    for &algorithm in &Algorithm::ALL {
        for block in [4096usize, 10_007] {
            id += 1;
            let sizes = [0, 1, block * 37 + 5, (1 << 20) + 3];
            let messages: Vec<Bytes> = sizes
                .iter()
                .enumerate()
                .map(|(i, &len)| payload(id * 10 + i as u64, len))
                .collect();
            let config = GroupConfig::new()
                .with_algorithm(algorithm)
                .with_block_size(block);
            let configs = [
                config.clone(),
                config.clone().with_receive_targets(files_in(&dirs[0])),
                config.clone().with_receive_targets(buffers.clone()),
                config.clone().with_receive_targets(memory.clone()),
                config.clone().with_receive_targets(files_in(&dirs[1])),
            ];
            let groups =
                bounded(
                    LONG,
                    "creating a group",
                    futures::future::try_join_all(members.iter().zip(&configs).map(|(m, c)| {
                        nodes[m.index()].create_group(GroupId(id), &members, c.clone())
                    })),
                )
                .await
                .unwrap();
            let runs = groups.into_iter().map(|g| {
                let messages = messages.clone();
                async move {
                    let mut g = match g {
                        Group::Root(mut root) => {
                            for m in &messages {
                                let receipt = root.send(m.clone()).await.unwrap();
                                receipt.delivered().await.unwrap();
                            }
                            return root.close().await.unwrap();
                        }
                        Group::Receiver(receiver) => receiver,
                    };
                    for (seq, want) in messages.iter().enumerate() {
                        let m = g.next().await.unwrap().unwrap();
                        assert_eq!(m.seq, seq as u64);
                        match g.rank() {
                            1 | 4 => {
                                let file = m.file.as_ref().expect("a file target");
                                assert_eq!(file.len(), want.len() as u64);
                                assert!(m.data.is_empty());
                            }
                            _ => {
                                assert!(m.file.is_none());
                                assert!(m.data == *want, "{algorithm} block {block} #{seq}");
                            }
                        }
                    }
                    assert!(g.next().await.is_none());
                    g.close().await.unwrap();
                }
            });
            bounded(LONG, "the transfers", futures::future::join_all(runs)).await;
            for (seq, want) in messages.iter().enumerate() {
                for dir in &dirs {
                    let got = std::fs::read(dir.join(format!("{id}-{seq}"))).unwrap();
                    assert!(
                        got == want[..],
                        "{algorithm} block {block} #{seq}: the file differs"
                    );
                }
            }
        }
    }
    shutdown(nodes).await;
}

/// A message's `delivered` waits for every receiver's application to take
/// it, one after the other.
pub async fn delivered_resolves_once_every_member_took_the_message<F: Fixture>() {
    let (nodes, _) = cluster::<F>(3, Tuning::default()).await;
    let groups = create_all(&nodes, GroupId(1), &ids(&[0, 1, 2]), GroupConfig::new()).await;
    let (mut root, receivers) = roles(groups);
    let [mut r1, mut r2] = <[Receiver; 2]>::try_from(receivers).unwrap();
    let receipt = root.send(payload(1, 300_000)).await.unwrap();
    let mut delivered = receipt.delivered();
    assert!(still_pending(&mut delivered).await, "nobody took it yet");
    r1.next().await.unwrap().unwrap();
    assert!(
        still_pending(&mut delivered).await,
        "node 2 did not take it yet"
    );
    r2.next().await.unwrap().unwrap();
    bounded(LONG, "delivered", &mut delivered).await.unwrap();
    bounded(LONG, "the closes", async {
        tokio::try_join!(root.close(), r1.close(), r2.close())
    })
    .await
    .unwrap();
    shutdown(nodes).await;
}

/// Whether `d` is still pending after 300 ms.
async fn still_pending(d: &mut rdmc::Delivered) -> bool {
    tokio::time::timeout(Duration::from_millis(300), d)
        .await
        .is_err()
}

/// With at most 2 messages in flight and nobody reading, a third
/// `try_send` is refused and a third `send` waits (queueing nothing); the
/// `Sink` then carries 20 messages, waiting for room.
pub async fn the_bound_on_messages_in_flight_holds_sends_and_paces_the_sink<F: Fixture>() {
    let (nodes, _) = cluster::<F>(3, Tuning::default()).await;
    let config = GroupConfig::new().with_max_in_flight(Some(2));
    let groups = create_all(&nodes, GroupId(1), &ids(&[0, 1, 2]), config).await;
    let (mut root, receivers) = roles(groups);
    let [r1, r2] = <[Receiver; 2]>::try_from(receivers).unwrap();
    assert_eq!(root.max_in_flight(), Some(2));
    let messages: Vec<Bytes> = (0..22).map(|i| payload(100 + i, 50_000)).collect();
    let mut first = Vec::new();
    for m in &messages[..2] {
        first.push(root.send(m.clone()).await.unwrap());
    }
    assert_eq!(root.in_flight(), 2);
    match root.try_send(messages[2].clone()) {
        Err(Error::TooManyInFlight {
            group: GroupId(1),
            max: 2,
        }) => {}
        other => panic!("a third message in flight: {other:?}"),
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(300), root.send(messages[2].clone()))
            .await
            .is_err(),
        "a third send did not wait for room"
    );
    assert_eq!(root.in_flight(), 2, "a cancelled send holds no room");
    for s in first {
        bounded(LONG, "the first sends", s.sent()).await.unwrap();
    }
    let read = |mut g: Receiver, messages: Vec<Bytes>| async move {
        for want in messages {
            let m = g.next().await.unwrap().unwrap();
            assert!(m.data == want);
            // A slow reader: the root must wait for it.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(g.next().await.is_none());
        g.close().await.unwrap();
    };
    let mut expected = messages[..2].to_vec();
    expected.extend_from_slice(&messages[2..]);
    let readers = tokio::spawn(async move {
        tokio::join!(read(r1, expected.clone()), read(r2, expected));
    });
    let mut rest = futures::stream::iter(messages[2..].iter().cloned().map(Ok));
    bounded(LONG, "the sink", async {
        root.send_all(&mut rest).await.unwrap();
        SinkExt::<Bytes>::close(&mut root).await.unwrap();
    })
    .await;
    bounded(LONG, "the readers", readers).await.unwrap();
    shutdown(nodes).await;
}

/// 200 sends run 64 at a time (`buffer_unordered(64)`) under a bound of 8
/// messages in flight, the receivers reading as messages come: every send
/// waits for room and completes `Ok` (none refused), the root never has
/// more than 8 in flight, and every receiver gets all 200 byte-exact, in
/// the stream's order: room goes to the sends first come, first served, and
/// `buffer_unordered` starts them in order.
pub async fn concurrent_sends_beyond_the_bound_wait_for_room_and_all_arrive<F: Fixture>() {
    const MESSAGES: usize = 200;
    const BOUND: u64 = 8;
    let (nodes, _) = cluster::<F>(3, Tuning::default()).await;
    let config = GroupConfig::new().with_max_in_flight(Some(BOUND));
    let groups = create_all(&nodes, GroupId(1), &ids(&[0, 1, 2]), config).await;
    let (mut root, receivers) = roles(groups);
    let messages: Vec<Bytes> = (0..MESSAGES)
        .map(|i| payload(300 + i as u64, 1000 + 37 * i))
        .collect();
    let readers: Vec<_> = receivers
        .into_iter()
        .map(|mut r| {
            tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(m) = r.next().await {
                    let m = m.unwrap();
                    assert_eq!(m.seq, got.len() as u64);
                    got.push(m.data);
                }
                r.close().await.unwrap();
                got
            })
        })
        .collect();
    // The order the sends queued their messages in (a send queues its
    // message as it resolves), and the most messages in flight seen: after
    // each send, and by a sampler polled between the sends.
    let order = std::cell::RefCell::new(Vec::new());
    let peak = std::cell::Cell::new(0);
    let sample = || peak.set(peak.get().max(root.in_flight()));
    let sending = std::cell::Cell::new(true);
    let sends = futures::stream::iter(messages.iter().cloned().enumerate())
        .map(|(i, m)| {
            let (root, order, sample) = (&root, &order, &sample);
            async move {
                let sent = root.send(m).await;
                order.borrow_mut().push(i);
                sample();
                sent
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>();
    let sampler = async {
        while sending.get() {
            sample();
            tokio::task::yield_now().await;
        }
    };
    let (outcomes, ()) = bounded(LONG, "200 sends", async {
        futures::join!(
            async {
                let outcomes = sends.await;
                sending.set(false);
                outcomes
            },
            sampler
        )
    })
    .await;
    assert_eq!(outcomes.len(), MESSAGES);
    let mut receipts = Vec::new();
    for (i, outcome) in outcomes.into_iter().enumerate() {
        receipts.push(outcome.unwrap_or_else(|e| panic!("send {i} refused: {e}")));
    }
    assert!(
        peak.get() <= BOUND,
        "{} messages in flight under a bound of {BOUND}",
        peak.get()
    );
    // 64 sends waited for room at once: the count reached the bound.
    assert_eq!(peak.get(), BOUND, "the bound was never reached");
    bounded(LONG, "the deliveries", async {
        for receipt in receipts {
            receipt.delivered().await.unwrap();
        }
        root.flush().await.unwrap();
    })
    .await;
    assert_eq!(root.in_flight(), 0);
    bounded(LONG, "the close", root.close()).await.unwrap();
    let order = order.into_inner();
    assert!(
        order.iter().copied().eq(0..MESSAGES),
        "queued out of the stream's order: {order:?}"
    );
    for reader in readers {
        let got = bounded(LONG, "the readers", reader).await.unwrap();
        assert_eq!(got.len(), MESSAGES);
        for (i, data) in got.iter().enumerate() {
            assert!(*data == messages[i], "message {i} differs");
        }
    }
    shutdown(nodes).await;
}

/// With a bound of one message in flight, `reserve` holds the room: while
/// a permit is held nothing else gets room, and dropping it unused gives
/// the room back. A message holds its room until every receiver's
/// application took it, not just until it is sent: the next `reserve`
/// waits for that.
pub async fn a_permit_holds_the_room_until_its_message_is_delivered<F: Fixture>() {
    let (nodes, _) = cluster::<F>(2, Tuning::default()).await;
    let config = GroupConfig::new().with_max_in_flight(Some(1));
    let (mut root, mut receiver) =
        pair(create_all(&nodes, GroupId(1), &ids(&[0, 1]), config).await);
    let pending = Duration::from_millis(300);
    let messages = [payload(40, 70_000), payload(41, 3)];

    // A permit dropped unused gives its room back.
    let permit = bounded(LONG, "the first permit", root.reserve())
        .await
        .unwrap();
    assert_eq!(root.in_flight(), 1, "a permit holds room");
    assert!(matches!(
        root.try_send(messages[0].clone()),
        Err(Error::TooManyInFlight { max: 1, .. })
    ));
    assert!(
        tokio::time::timeout(pending, root.reserve()).await.is_err(),
        "a second permit while the first is held"
    );
    drop(permit);
    assert_eq!(root.in_flight(), 0, "a dropped permit gives the room back");

    // A permit used: its message holds the room until it is delivered.
    let permit = bounded(LONG, "a permit", root.reserve()).await.unwrap();
    let (sent, delivered) = permit.send(messages[0].clone()).split();
    assert_eq!(root.in_flight(), 1);
    bounded(LONG, "the first message sent", sent).await.unwrap();
    assert!(
        tokio::time::timeout(pending, root.reserve()).await.is_err(),
        "room while the first message is sent but not taken"
    );
    assert_eq!(root.in_flight(), 1, "a cancelled reserve holds no room");
    let first = bounded(LONG, "the first message", receiver.next())
        .await
        .unwrap()
        .unwrap();
    assert!(first.data == messages[0]);
    bounded(LONG, "the first delivered", delivered)
        .await
        .unwrap();
    let permit = bounded(LONG, "room once it is delivered", root.reserve())
        .await
        .unwrap();
    let last = permit.send(messages[1].clone());
    let second = bounded(LONG, "the second message", receiver.next())
        .await
        .unwrap()
        .unwrap();
    assert!(second.data == messages[1]);
    bounded(LONG, "the second delivered", last.delivered())
        .await
        .unwrap();
    assert_eq!(root.in_flight(), 0);
    bounded(LONG, "the closes", async {
        tokio::try_join!(root.close(), receiver.close())
    })
    .await
    .unwrap();
    shutdown(nodes).await;
}

/// `closed` waits for the group's end: `Ok` once it closed (and then sends
/// are refused as closed), or its failure — naming the member — as soon as
/// a receiver's node shuts down mid-group, with nothing sent or closed by
/// the root to learn of it.
pub async fn closed_reports_how_the_group_ended<F: Fixture>() {
    let (mut nodes, _) = cluster::<F>(3, Tuning::default()).await;
    let pending = Duration::from_millis(300);

    // A group that closes.
    let groups = create_all(&nodes, GroupId(1), &ids(&[0, 1, 2]), GroupConfig::new()).await;
    let (mut root, receivers) = roles(groups);
    root.send(payload(50, 10_000)).await.unwrap();
    assert!(
        tokio::time::timeout(pending, root.closed()).await.is_err(),
        "closed resolved while the group is open"
    );
    let readers: Vec<_> = receivers
        .into_iter()
        .map(|mut r| {
            tokio::spawn(async move {
                assert!(r.next().await.unwrap().unwrap().data == payload(50, 10_000));
                assert!(r.next().await.is_none());
                r.close().await
            })
        })
        .collect();
    bounded(LONG, "the root's close", root.close())
        .await
        .unwrap();
    assert_eq!(root.closed().await, Ok(()));
    for reader in readers {
        bounded(LONG, "a receiver's close", reader)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(
        root.send(Bytes::new()).await.unwrap_err(),
        Error::Closed(GroupId(1))
    );

    // A group whose receiver's node shuts down while a message is on its way.
    let groups = create_all(&nodes, GroupId(2), &ids(&[0, 1, 2]), GroupConfig::new()).await;
    let (root, receivers) = roles(groups);
    let [mut r1, r2] = <[Receiver; 2]>::try_from(receivers).unwrap();
    let delivered = root.send(payload(51, 200_000)).await.unwrap().delivered();
    bounded(LONG, "node 1's message", r1.next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        tokio::time::timeout(pending, root.closed()).await.is_err(),
        "closed resolved while the group is open"
    );
    let victim = nodes.pop().unwrap();
    let shut_down = std::time::Instant::now();
    // Node 2's application keeps its handle: its node goes away under it.
    bounded(LONG, "node 2's shutdown", victim.shutdown()).await;
    let error = bounded(LONG, "the root's closed", root.closed())
        .await
        .unwrap_err();
    let took = shut_down.elapsed();
    assert!(
        matches!(
            &error,
            Error::GroupFailed {
                group: GroupId(2),
                suspect: Some(NodeId(2)),
                ..
            }
        ),
        "{error:?}"
    );
    assert!(took < super::scaled(Duration::from_secs(5)), "{took:?}");
    assert_eq!(root.closed().await.unwrap_err(), error, "closed again");
    assert_eq!(
        delivered.await.unwrap_err(),
        error,
        "the message's delivery"
    );
    assert_eq!(root.send(Bytes::new()).await.unwrap_err(), error, "a send");
    match bounded(LONG, "node 1's stream", r1.next()).await {
        Some(Err(e)) => assert!(
            matches!(
                e,
                Error::GroupFailed {
                    suspect: Some(NodeId(2)),
                    ..
                }
            ),
            "node 1: {e:?}"
        ),
        other => panic!("node 1: {other:?}"),
    }
    drop((root, r1, r2));
    shutdown(nodes).await;
}

/// Node 2 takes nothing within its slow-reader timeout: the group fails
/// on every member naming it.
pub async fn a_slow_reader_fails_the_group_naming_it<F: Fixture>() {
    let (nodes, _) = cluster::<F>(3, Tuning::default()).await;
    let members = ids(&[0, 1, 2]);
    let slow = GroupConfig::new().with_slow_reader_timeout(Some(Duration::from_millis(300)));
    let groups = bounded(
        LONG,
        "creating",
        futures::future::try_join_all(members.iter().map(|m| {
            let config = if m.0 == 2 {
                slow.clone()
            } else {
                GroupConfig::new()
            };
            nodes[m.index()].create_group(GroupId(1), &members, config)
        })),
    )
    .await
    .unwrap();
    let (root, receivers) = roles(groups);
    let [mut r1, mut r2] = <[Receiver; 2]>::try_from(receivers).unwrap();
    let delivered = root.send(payload(3, 100_000)).await.unwrap().delivered();
    r1.next().await.unwrap().unwrap();
    let named = |e: &Error, who: &str| match e {
        Error::GroupFailed {
            suspect: Some(NodeId(2)),
            kind: FailureKind::SlowReader { .. },
            ..
        } => {}
        other => panic!("{who}: expected a failure naming node 2 as a slow reader, got {other:?}"),
    };
    let e = bounded(LONG, "the root's delivery", delivered)
        .await
        .unwrap_err();
    named(&e, "root");
    let e = bounded(LONG, "node 1's stream", r1.next())
        .await
        .unwrap()
        .unwrap_err();
    named(&e, "node 1");
    // Node 2's own stream: the message it left, then the failure, its own.
    let mut last = None;
    while let Some(item) = bounded(LONG, "node 2's stream", r2.next()).await {
        last = Some(item);
    }
    match last {
        Some(Err(Error::GroupFailed {
            suspect: Some(NodeId(2)),
            kind: FailureKind::SlowReader { millis },
            ..
        })) => assert!(millis >= 300, "{millis}"),
        other => panic!("node 2: {other:?}"),
    }
    drop((root, r1, r2));
    shutdown(nodes).await;
}

/// A 2 s slow-reader timeout fails the group between 2.0 and 2.6 s after
/// the message was sent, with 2 and with 3 members: the timeout arms its
/// own timer (it once waited for the progress timer to wake the node).
pub async fn the_slow_reader_timeout_fires_within_its_bound<F: Fixture>() {
    for n in [2usize, 3] {
        let (nodes, _) = cluster::<F>(n, Tuning::default()).await;
        let members: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
        let slow = NodeId(n as u32 - 1);
        let timeout = Duration::from_secs(2);
        let config = GroupConfig::new().with_slow_reader_timeout(Some(timeout));
        let (root, mut readers) = roles(create_all(&nodes, GroupId(1), &members, config).await);
        let sent = std::time::Instant::now();
        let delivered = root.send(payload(1, 1000)).await.unwrap().delivered();
        // Every receiver but the slow one takes the message at once.
        for reader in &mut readers[..n - 2] {
            reader.next().await.unwrap().unwrap();
        }
        let e = bounded(LONG, "the root's delivery", delivered)
            .await
            .unwrap_err();
        let waited = sent.elapsed();
        assert!(
            matches!(e, Error::GroupFailed { suspect: Some(who), .. } if who == slow),
            "{n} members: expected a failure naming {slow}, got {e:?}"
        );
        assert!(
            waited >= timeout && waited <= timeout + Duration::from_millis(600),
            "{n} members: the 2 s slow-reader timeout failed the group after {waited:?}"
        );
        drop((root, readers));
        shutdown(nodes).await;
    }
}

/// The root's `Sink` closed twice: `Ok` both times (the second close once
/// polled the completed close's reply again and panicked).
pub async fn closing_the_sink_twice_returns_ok_twice<F: Fixture>() {
    let (nodes, _) = cluster::<F>(2, Tuning::default()).await;
    let members = ids(&[0, 1]);
    let (mut root, mut receiver) =
        pair(create_all(&nodes, GroupId(1), &members, GroupConfig::new()).await);
    let reading = async {
        let message = receiver.next().await.unwrap().unwrap();
        receiver.close().await.unwrap();
        message
    };
    let closing = async {
        SinkExt::send(&mut root, payload(2, 5000)).await.unwrap();
        SinkExt::close(&mut root).await
    };
    let (message, first) = bounded(LONG, "send, take and close", async {
        tokio::join!(reading, closing)
    })
    .await;
    assert_eq!(message.data, payload(2, 5000));
    assert_eq!(first, Ok(()));
    assert_eq!(
        bounded(LONG, "the second close", SinkExt::close(&mut root)).await,
        Ok(())
    );
    drop((root, receiver));
    shutdown(nodes).await;
}

/// A message over the group's limit is refused where it is sent — by
/// `send`, `try_send`, a permit and the `Sink` alike — and nothing else is
/// lost: the messages within the limit arrive, and the close is `Ok`
/// (it once was `Ok` with the large message silently missing).
pub async fn a_message_over_the_limit_is_refused_at_once_by_every_way_of_sending<F: Fixture>() {
    let (nodes, _) = cluster::<F>(2, Tuning::default()).await;
    let members = ids(&[0, 1]);
    let config = GroupConfig::new().with_max_message_size(1000);
    let (mut root, mut receiver) = pair(create_all(&nodes, GroupId(1), &members, config).await);
    let too_large = |e: Error| {
        matches!(
            e,
            Error::MessageTooLarge {
                size: 5000,
                max: 1000
            }
        )
    };
    let reading = async {
        let mut got = Vec::new();
        while let Some(m) = receiver.next().await {
            got.push(m.unwrap().data);
        }
        receiver.close().await.unwrap();
        got
    };
    let sending = async {
        let big = || payload(9, 5000);
        root.send(payload(1, 10)).await.unwrap();
        assert!(too_large(root.send(big()).await.unwrap_err()));
        assert!(too_large(root.try_send(big()).unwrap_err()));
        let permit = root.reserve().await.unwrap();
        assert!(too_large(permit.send(big()).sent().await.unwrap_err()));
        assert!(root.in_flight() <= 1, "the refusals hold no room");
        assert!(too_large(
            SinkExt::send(&mut root, big()).await.unwrap_err()
        ));
        SinkExt::send(&mut root, payload(2, 1000)).await.unwrap();
        root.close().await
    };
    let (got, closed) = bounded(LONG, "send and read", async {
        tokio::join!(reading, sending)
    })
    .await;
    assert_eq!(closed, Ok(()));
    assert_eq!(got, [payload(1, 10), payload(2, 1000)]);
    drop((root, receiver));
    shutdown(nodes).await;
}

/// A hook that fails fails the group, naming the member whose hook it was.
pub async fn a_failing_receive_target_fails_the_group_naming_its_member<F: Fixture>() {
    let (nodes, _) = cluster::<F>(3, Tuning::default()).await;
    let members = ids(&[0, 1, 2]);
    let broken = ReceiveTargets::new(|_| async {
        Err(std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            "no room for it",
        ))
    });
    let groups = bounded(
        LONG,
        "creating",
        futures::future::try_join_all(members.iter().map(|m| {
            let config = if m.0 == 1 {
                GroupConfig::new().with_receive_targets(broken.clone())
            } else {
                GroupConfig::new()
            };
            nodes[m.index()].create_group(GroupId(1), &members, config)
        })),
    )
    .await
    .unwrap();
    let (root, mut receivers) = roles(groups);
    let mut r1 = receivers.remove(0);
    let delivered = root.send(payload(4, 10_000)).await.unwrap().delivered();
    let e = bounded(LONG, "the send", delivered).await.unwrap_err();
    assert!(
        matches!(
            &e,
            Error::GroupFailed {
                suspect: Some(NodeId(1)),
                kind: FailureKind::ReceiveTarget,
                reported_by: Some(NodeId(1)),
                detail: None,
                ..
            }
        ),
        "the root hears node 1's cause from node 1: {e:?}"
    );
    match bounded(LONG, "node 1's stream", r1.next()).await {
        Some(Err(Error::GroupFailed {
            suspect: Some(NodeId(1)),
            kind: FailureKind::ReceiveTarget,
            detail: Some(detail),
            ..
        })) => assert!(detail.contains("no room for it"), "{detail}"),
        other => panic!("node 1: {other:?}"),
    }
    drop((root, r1));
    shutdown(nodes).await;
}

/// The root sends files (`send_file`) to a group of 4 in which one member
/// receives into files and two into memory, with blocks of a page and of
/// an odd size: byte-exact everywhere.
pub async fn files_sent_by_the_root_arrive_byte_exact<F: Fixture>() {
    let (nodes, _) = cluster::<F>(4, Tuning::default()).await;
    let scratch = ScratchDir::new("send-file");
    let received = scratch.join("received");
    std::fs::create_dir_all(&received).unwrap();
    let members = ids(&[0, 1, 2, 3]);
    for (id, block) in [(1u64, 4096usize), (2, 10_007)] {
        let messages: Vec<Bytes> = [0, 5, block * 21 + 3, (3 << 20) + 1]
            .iter()
            .enumerate()
            .map(|(i, &len)| payload(id * 50 + i as u64, len))
            .collect();
        let sources: Vec<PathBuf> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let path = scratch.join(format!("source-{id}-{i}"));
                std::fs::write(&path, m).unwrap();
                path
            })
            .collect();
        let config = GroupConfig::new().with_block_size(block);
        let groups = bounded(
            LONG,
            "creating",
            futures::future::try_join_all(members.iter().map(|m| {
                let config = if m.0 == 2 {
                    config.clone().with_receive_targets(files_in(&received))
                } else {
                    config.clone()
                };
                nodes[m.index()].create_group(GroupId(id), &members, config)
            })),
        )
        .await
        .unwrap();
        let runs = groups.into_iter().map(|g| {
            let (messages, sources) = (messages.clone(), sources.clone());
            async move {
                let mut g = match g {
                    Group::Root(mut root) => {
                        for path in &sources {
                            let file = std::fs::File::open(path).unwrap();
                            root.send_file(file)
                                .await
                                .unwrap()
                                .delivered()
                                .await
                                .unwrap();
                        }
                        return root.close().await.unwrap();
                    }
                    Group::Receiver(receiver) => receiver,
                };
                for want in &messages {
                    let m = g.next().await.unwrap().unwrap();
                    match &m.file {
                        Some(file) => assert_eq!(file.len(), want.len() as u64),
                        None => assert!(m.data == *want, "block {block} #{}", m.seq),
                    }
                }
                assert!(g.next().await.is_none());
                g.close().await.unwrap();
            }
        });
        bounded(LONG, "the transfers", futures::future::join_all(runs)).await;
        for (seq, want) in messages.iter().enumerate() {
            let got = std::fs::read(received.join(format!("{id}-{seq}"))).unwrap();
            assert!(got == want[..], "block {block} #{seq}: the file differs");
        }
    }
    shutdown(nodes).await;
}
