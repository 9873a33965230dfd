//! Tests of one link: framing, protection, liveness and the read/write loops.

use super::agree::{AGREE_LEN, AGREE_MAGIC};
use super::*;
use crate::proto::Control;
use crate::transport::MessageBuffer;
use crate::transport::frame::relay::Route;
use crate::transport::frame::{Context, HEADER_LEN, Header, SHORT_HEADER_LEN};
use crate::transport::socket::congestion_control;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CONFIG: LinkConfig = LinkConfig {
    chunk_size: 1000,
    failure_timeout: Duration::from_secs(5),
    early_announce: None,
    unsent_limit: None,
};

/// Node `me`'s link security in `mode`.
fn security_in(me: u32, mode: WireSecurity) -> LinkSecurity {
    LinkSecurity {
        mode,
        key: ClusterKey::from_bytes(b"link unit test key, 32 bytes!!!!".to_vec()).unwrap(),
        me: NodeId(me),
        timeout: Duration::from_secs(5),
    }
}

fn security(me: u32) -> LinkSecurity {
    security_in(me, WireSecurity::Authenticated)
}

/// One end of a link to node 4, over `end`, reporting to `completions`.
fn towards_4<S>(end: S, completions: CompletionSender) -> Link
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    Link::spawn(
        (NodeId(4), 0),
        end,
        RecvLowat::none(),
        completions,
        CONFIG,
        security(0),
    )
}

/// Two linked ends, each with its completions.
type Pair = (
    Link,
    mpsc::UnboundedReceiver<Completion>,
    Link,
    mpsc::UnboundedReceiver<Completion>,
);

fn pair() -> Pair {
    pair_with(CONFIG)
}

/// A link pair over an in-memory pipe, both ends tuned as `config` says.
fn pair_with(config: LinkConfig) -> Pair {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (ca, ra) = mpsc::unbounded_channel();
    let (cb, rb) = mpsc::unbounded_channel();
    let spawn = |peer, end, completions, me| {
        Link::spawn(
            (NodeId(peer), 0),
            end,
            RecvLowat::none(),
            completions,
            config,
            security(me),
        )
    };
    (spawn(1, a, ca, 0), ra, spawn(0, b, cb, 1), rb)
}

#[tokio::test]
async fn blocks_of_two_groups_interleave_and_land_at_their_offsets() {
    let (a, mut a_events, b, mut b_events) = pair();
    let data_1: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    let data_2: Vec<u8> = (0..3001u32).map(|i| (i * 7) as u8).collect();
    let buf_1 = MessageBuffer::new(6000);
    let buf_2 = MessageBuffer::new(3001);
    b.post_recv(GroupId(1), buf_1.region(1000, 5000));
    b.post_recv(GroupId(2), buf_2.region(0, 3001));
    assert!(a.send(Outgoing::Data(
        GroupId(1),
        BlockRef::from_bytes(data_1.clone().into()),
        6000
    )));
    assert!(a.send(Outgoing::Data(
        GroupId(2),
        BlockRef::from_bytes(data_2.clone().into()),
        3001
    )));
    assert!(a.send(Outgoing::Signal(
        GroupId(2),
        Signal::Group(Control::CloseAck)
    )));
    let mut received = Vec::new();
    while received.len() < 3 {
        match b_events.recv().await.unwrap() {
            Completion::Received {
                group,
                from,
                immediate,
                len,
            } => {
                assert_eq!(from, NodeId(0));
                received.push((group, immediate, len));
            }
            Completion::Signal { group, signal, .. } => {
                assert_eq!(
                    (group, signal),
                    (GroupId(2), Signal::Group(Control::CloseAck))
                );
                received.push((group, 0, 0));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    // The signal overtakes the data; group 2's shorter block finishes first.
    assert_eq!(
        received,
        [
            (GroupId(2), 0, 0),
            (GroupId(2), 3001, 3001),
            (GroupId(1), 6000, 5000)
        ]
    );
    for _ in 0..2 {
        assert!(matches!(
            a_events.recv().await.unwrap(),
            Completion::Sent { to: NodeId(1), .. }
        ));
    }
    let bytes = buf_1.into_bytes();
    assert_eq!(&bytes[1000..], &data_1[..]);
    assert!(bytes[..1000].iter().all(|&x| x == 0));
    assert_eq!(&buf_2.into_bytes()[..], &data_2[..]);
}

#[tokio::test]
async fn an_unasked_block_fails_its_group_and_the_link_carries_on() {
    let (a, _a_events, b, mut b_events) = pair();
    assert!(a.send(Outgoing::Data(
        GroupId(9),
        BlockRef::from_bytes(vec![1u8; 2500].into()),
        2500
    )));
    assert!(a.send(Outgoing::Signal(GroupId(3), Signal::Group(Control::Closed))));
    // Signals may overtake data, so take both events in either order.
    let (mut refused, mut signalled) = (false, false);
    for _ in 0..2 {
        match b_events.recv().await.unwrap() {
            Completion::TransferFailed {
                group: GroupId(9),
                peer: NodeId(0),
                ..
            } => refused = true,
            Completion::Signal {
                group: GroupId(3), ..
            } => signalled = true,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(refused && signalled);
    assert!(!b.is_down());
}

#[tokio::test]
async fn empty_blocks_complete() {
    let (a, _a_events, b, mut b_events) = pair();
    let buf = MessageBuffer::new(0);
    b.post_recv(GroupId(1), buf.region(0, 0));
    assert!(a.send(Outgoing::Data(
        GroupId(1),
        BlockRef::from_bytes(bytes::Bytes::new()),
        0
    )));
    assert!(matches!(
        b_events.recv().await.unwrap(),
        Completion::Received {
            group: GroupId(1),
            immediate: 0,
            len: 0,
            ..
        }
    ));
}

#[tokio::test]
async fn garbage_or_a_closed_connection_is_a_peer_failure() {
    let (a, mut b) = tokio::io::duplex(1024);
    let (ca, mut ra) = mpsc::unbounded_channel();
    let link = towards_4(a, ca);
    b.write_all(&[0xAB; AGREE_LEN + HEADER_LEN]).await.unwrap();
    assert!(matches!(
        ra.recv().await.unwrap(),
        Completion::PeerDown {
            node: NodeId(4),
            ..
        }
    ));
    tokio::task::yield_now().await;
    assert!(link.is_down());
    assert!(!link.send(Outgoing::Signal(GroupId(1), Signal::Group(Control::Closed))));
}

#[tokio::test]
async fn garbage_after_a_genuine_key_agreement_is_a_peer_failure() {
    let (a, mut b) = tokio::io::duplex(1024);
    let (ca, mut ra) = mpsc::unbounded_channel();
    let _link = towards_4(a, ca);
    let mut hello = [0u8; AGREE_LEN];
    hello[..8].copy_from_slice(&AGREE_MAGIC);
    hello[8] = WireSecurity::Authenticated.code();
    b.write_all(&hello).await.unwrap();
    // A well-formed heartbeat without a valid tag.
    let heartbeat = Context::default().encode(&Header::Heartbeat);
    b.write_all(heartbeat.as_slice()).await.unwrap();
    b.write_all(&[0u8; 32]).await.unwrap();
    assert!(matches!(
        ra.recv().await.unwrap(),
        Completion::PeerDown {
            node: NodeId(4),
            ..
        }
    ));
}

/// What `events` reports until the link's end: whether a block arrived
/// first, and how the end is reported.
async fn until_the_end(events: &mut mpsc::UnboundedReceiver<Completion>) -> (bool, Completion) {
    let mut block = false;
    loop {
        match events.recv().await.expect("the link reports its end") {
            Completion::Received { .. } => block = true,
            end @ (Completion::PeerLeft { .. } | Completion::PeerDown { .. }) => {
                return (block, end);
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn a_link_closed_for_good_says_goodbye_after_its_queue_and_a_dropped_one_does_not() {
    // Closed (the node shuts down): what was queued, then the goodbye.
    let (a, _ra, b, mut rb) = pair();
    let buf = signal_and_block(&a, &b, &[7; 3000], 9);
    a.close().await.unwrap();
    let (block, end) = until_the_end(&mut rb).await;
    assert!(block, "the block queued before the close arrived");
    assert_eq!(&buf.into_bytes()[..], &[7; 3000][..]);
    assert!(
        matches!(
            end,
            Completion::PeerLeft {
                node: NodeId(0),
                incarnation: 0
            }
        ),
        "{end:?}"
    );
    assert!(b.peer_left());
    // Dropped (the node is gone without a word): a failure.
    let (a, _ra, b, mut rb) = pair();
    drop(a);
    let (_, end) = until_the_end(&mut rb).await;
    assert!(
        matches!(
            end,
            Completion::PeerDown {
                node: NodeId(0),
                ..
            }
        ),
        "{end:?}"
    );
    assert!(!b.peer_left());
}

/// `b` posts a receive for `data` in group 1; `a` sends a signal, then
/// `data` as a block with `immediate`. The receive's buffer.
fn signal_and_block(a: &Link, b: &Link, data: &[u8], immediate: u64) -> Arc<MessageBuffer> {
    let buf = MessageBuffer::new(data.len());
    b.post_recv(GroupId(1), buf.region(0, data.len()));
    assert!(a.send(Outgoing::Signal(
        GroupId(1),
        Signal::Group(Control::CloseAck)
    )));
    assert!(a.send(Outgoing::Data(
        GroupId(1),
        BlockRef::from_bytes(data.to_vec().into()),
        immediate
    )));
    buf
}

#[tokio::test]
async fn every_mode_carries_blocks_and_signals() {
    for mode in [
        WireSecurity::None,
        WireSecurity::Authenticated,
        WireSecurity::Encrypted,
    ] {
        let (x, y) = tokio::io::duplex(64 * 1024);
        let (ca, _ra) = mpsc::unbounded_channel();
        let (cb, mut rb) = mpsc::unbounded_channel();
        let a = Link::spawn(
            (NodeId(1), 0),
            x,
            RecvLowat::none(),
            ca,
            CONFIG,
            security_in(0, mode),
        );
        let b = Link::spawn(
            (NodeId(0), 0),
            y,
            RecvLowat::none(),
            cb,
            CONFIG,
            security_in(1, mode),
        );
        let data: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
        let buf = signal_and_block(&a, &b, &data, 7);
        assert!(matches!(
            rb.recv().await.unwrap(),
            Completion::Signal {
                group: GroupId(1),
                ..
            }
        ));
        assert!(matches!(
            rb.recv().await.unwrap(),
            Completion::Received {
                group: GroupId(1),
                immediate: 7,
                ..
            }
        ));
        assert_eq!(&buf.into_bytes()[..], &data[..], "{mode:?}");
    }
}

#[tokio::test]
async fn ends_with_different_wire_security_fail_the_link() {
    let (x, y) = tokio::io::duplex(1024);
    let (ca, mut ra) = mpsc::unbounded_channel();
    let (cb, mut rb) = mpsc::unbounded_channel();
    let mut a = Link::spawn(
        (NodeId(1), 0),
        x,
        RecvLowat::none(),
        ca,
        CONFIG,
        security_in(0, WireSecurity::None),
    );
    let mut b = Link::spawn(
        (NodeId(0), 0),
        y,
        RecvLowat::none(),
        cb,
        CONFIG,
        security(1),
    );
    assert!(matches!(
        ra.recv().await.unwrap(),
        Completion::PeerDown {
            node: NodeId(1),
            ..
        }
    ));
    assert!(matches!(
        rb.recv().await.unwrap(),
        Completion::PeerDown {
            node: NodeId(0),
            ..
        }
    ));
    // Each end knows why: both modes, its own first.
    assert_eq!(
        a.agreement().await,
        Err(AgreeError::Mismatch {
            local: WireSecurity::None,
            remote: Some(WireSecurity::Authenticated)
        })
    );
    assert_eq!(
        b.agreement().await,
        Err(AgreeError::Mismatch {
            local: WireSecurity::Authenticated,
            remote: Some(WireSecurity::None)
        })
    );
}

#[tokio::test]
async fn a_mode_this_build_does_not_know_is_a_mismatch_and_other_failures_are_not() {
    let (a, mut b) = tokio::io::duplex(1024);
    let (ca, _ra) = mpsc::unbounded_channel();
    let mut link = towards_4(a, ca);
    let mut hello = [0u8; AGREE_LEN];
    hello[..8].copy_from_slice(&AGREE_MAGIC);
    hello[8] = 0xEE;
    b.write_all(&hello).await.unwrap();
    assert_eq!(
        link.agreement().await,
        Err(AgreeError::Mismatch {
            local: WireSecurity::Authenticated,
            remote: None
        })
    );
    // Another protocol altogether is a failure, not a mismatch.
    let (a, mut b) = tokio::io::duplex(1024);
    let (ca, _ra) = mpsc::unbounded_channel();
    let mut link = towards_4(a, ca);
    b.write_all(&[0xAB; AGREE_LEN]).await.unwrap();
    assert!(matches!(link.agreement().await, Err(AgreeError::Failed(_))));
    // A genuine agreement is Ok.
    let (mut a, _a_events, mut b, _b_events) = pair();
    assert_eq!(a.agreement().await, Ok(()));
    assert_eq!(b.agreement().await, Ok(()));
}

/// Links `a` (node 0) and `b` (node 1) through a relay that flips one
/// bit of the byte at `offset` of the stream from `a` to `b`.
fn tampered_pair(
    mode: WireSecurity,
    offset: usize,
) -> (Link, Link, mpsc::UnboundedReceiver<Completion>) {
    let (x, mut x_relay) = tokio::io::duplex(64 * 1024);
    let (mut y_relay, y) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let (mut xr, mut xw) = tokio::io::split(&mut x_relay);
        let (mut yr, mut yw) = tokio::io::split(&mut y_relay);
        let forward = async {
            let mut seen = 0usize;
            let mut buf = vec![0u8; 8192];
            loop {
                let n = xr.read(&mut buf).await?;
                if n == 0 {
                    return Ok::<_, std::io::Error>(());
                }
                if (seen..seen + n).contains(&offset) {
                    buf[offset - seen] ^= 0x10;
                }
                seen += n;
                yw.write_all(&buf[..n]).await?;
            }
        };
        let _ = tokio::join!(forward, tokio::io::copy(&mut yr, &mut xw));
    });
    let (ca, _ra) = mpsc::unbounded_channel();
    let (cb, rb) = mpsc::unbounded_channel();
    (
        Link::spawn(
            (NodeId(1), 0),
            x,
            RecvLowat::none(),
            ca,
            CONFIG,
            security_in(0, mode),
        ),
        Link::spawn(
            (NodeId(0), 0),
            y,
            RecvLowat::none(),
            cb,
            CONFIG,
            security_in(1, mode),
        ),
        rb,
    )
}

#[tokio::test]
async fn a_byte_flipped_anywhere_after_the_agreement_fails_the_link() {
    for mode in [WireSecurity::Authenticated, WireSecurity::Encrypted] {
        let data: Vec<u8> = (0..2500u32).map(|i| (i % 253) as u8).collect();
        // The stream: agreement, a signal frame, one data frame (alone
        // on the link, the block goes whole).
        let tag = mode.tag_len();
        let stream_len = AGREE_LEN + (HEADER_LEN + tag) * 2 + data.len();
        for offset in AGREE_LEN..stream_len {
            let (a, b, mut events) = tampered_pair(mode, offset);
            let _buf = signal_and_block(&a, &b, &data, 9);
            loop {
                match events.recv().await.unwrap() {
                    Completion::PeerDown {
                        node: NodeId(0), ..
                    } => break,
                    Completion::Received { .. } => {
                        panic!("{mode:?}: a block with byte {offset} flipped was delivered")
                    }
                    // Frames before the flipped one arrive.
                    Completion::Signal { .. } | Completion::TransferFailed { .. } => {}
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
    }
}

/// A goodbye is as protected as any frame: with a byte of it flipped the
/// peer is down (a failure), not gone for good; untouched (the flip past
/// the stream's end), it left.
#[tokio::test]
async fn a_forged_goodbye_is_a_peer_failure() {
    for mode in [WireSecurity::Authenticated, WireSecurity::Encrypted] {
        // The stream: agreement, the goodbye.
        let stream_len = AGREE_LEN + SHORT_HEADER_LEN + mode.tag_len();
        for offset in AGREE_LEN..=stream_len {
            let (a, _b, mut events) = tampered_pair(mode, offset);
            let _writer = a.close();
            let (_, end) = until_the_end(&mut events).await;
            if offset < stream_len {
                assert!(
                    matches!(
                        end,
                        Completion::PeerDown {
                            node: NodeId(0),
                            ..
                        }
                    ),
                    "{mode:?}, byte {offset} flipped: {end:?}"
                );
            } else {
                assert!(
                    matches!(
                        end,
                        Completion::PeerLeft {
                            node: NodeId(0),
                            ..
                        }
                    ),
                    "{mode:?}, untouched: {end:?}"
                );
            }
        }
    }
}

/// Two signals and two blocks of one group: the second of each goes with
/// a short header, and a flipped byte anywhere fails the link before the
/// frame it is in is acted on; with the flip just past the stream's end
/// (so the stream is exactly as long as short headers make it), both
/// blocks arrive.
#[tokio::test]
async fn short_frames_are_as_protected_as_long_ones() {
    for mode in [WireSecurity::Authenticated, WireSecurity::Encrypted] {
        let data: Vec<u8> = (0..2500u32).map(|i| (i % 251) as u8).collect();
        let tag = mode.tag_len();
        // Signals are sealed as they are queued, so both go first: a long
        // and a short signal frame, then a long and a short data frame.
        let first_signal_end = AGREE_LEN + HEADER_LEN + tag;
        let signals_end = first_signal_end + SHORT_HEADER_LEN + tag;
        let first_block_end = signals_end + HEADER_LEN + data.len() + tag;
        let stream_len = first_block_end + SHORT_HEADER_LEN + data.len() + tag;
        for offset in (AGREE_LEN..stream_len).step_by(7).chain([stream_len]) {
            let (a, b, mut events) = tampered_pair(mode, offset);
            let buf = MessageBuffer::new(2 * data.len());
            b.post_recv(GroupId(1), buf.region(0, data.len()));
            b.post_recv(GroupId(1), buf.region(data.len(), data.len()));
            for _ in 0..2 {
                let ready = Signal::ReadyForBlocks { count: 2 };
                assert!(a.send(Outgoing::Signal(GroupId(1), ready)));
            }
            for _ in 0..2 {
                let block = BlockRef::from_bytes(data.clone().into());
                assert!(a.send(Outgoing::Data(GroupId(1), block, 9)));
            }
            let (mut signals, mut blocks) = (0, 0);
            while blocks < 2 {
                match events.recv().await.unwrap() {
                    Completion::PeerDown {
                        node: NodeId(0), ..
                    } => break,
                    Completion::Received {
                        group: GroupId(1),
                        from: NodeId(0),
                        immediate: 9,
                        len: 2500,
                    } => blocks += 1,
                    Completion::Signal {
                        group: GroupId(1),
                        from: NodeId(0),
                        signal: Signal::ReadyForBlocks { count: 2 },
                    } => signals += 1,
                    other => panic!("{mode:?}, byte {offset} flipped: unexpected {other:?}"),
                }
            }
            if offset == stream_len {
                assert_eq!((signals, blocks), (2, 2), "{mode:?}: nothing flipped");
                let bytes = buf.into_bytes();
                assert_eq!(&bytes[..2500], &data[..]);
                assert_eq!(&bytes[2500..], &data[..]);
                continue;
            }
            let intact_blocks = usize::from(offset >= first_block_end);
            assert!(
                blocks <= intact_blocks,
                "{mode:?}: byte {offset} flipped, {blocks} blocks delivered"
            );
            let intact_signals =
                usize::from(offset >= first_signal_end) + usize::from(offset >= signals_end);
            assert!(signals <= intact_signals, "{mode:?}: byte {offset} flipped");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_silent_peer_is_declared_down_after_the_failure_timeout() {
    let (a, _b) = tokio::io::duplex(1024);
    let (ca, mut ra) = mpsc::unbounded_channel();
    let _link = Link::spawn(
        (NodeId(2), 0),
        a,
        RecvLowat::none(),
        ca,
        CONFIG,
        security(0),
    );
    let start = tokio::time::Instant::now();
    assert!(matches!(
        ra.recv().await.unwrap(),
        Completion::PeerDown {
            node: NodeId(2),
            ..
        }
    ));
    assert!(start.elapsed() >= CONFIG.failure_timeout);
}

#[tokio::test(start_paused = true)]
async fn heartbeats_keep_an_idle_link_up() {
    let (a, b) = tokio::io::duplex(1024);
    let (ca, mut ra) = mpsc::unbounded_channel();
    let (cb, mut rb) = mpsc::unbounded_channel();
    let _x = Link::spawn(
        (NodeId(1), 0),
        a,
        RecvLowat::none(),
        ca,
        CONFIG,
        security(0),
    );
    let _y = Link::spawn(
        (NodeId(0), 0),
        b,
        RecvLowat::none(),
        cb,
        CONFIG,
        security(1),
    );
    tokio::time::sleep(CONFIG.failure_timeout * 4).await;
    assert!(ra.try_recv().is_err());
    assert!(rb.try_recv().is_err());
}

/// A link pair whose reader reports a block's progress at `threshold`
/// bytes left (early announcement).
fn early_pair(threshold: u32) -> Pair {
    pair_with(LinkConfig {
        early_announce: Some(threshold),
        ..CONFIG
    })
}

#[tokio::test]
async fn progress_is_reported_once_per_block_at_the_threshold_before_its_arrival() {
    // Thresholds inside a chunk, at a chunk boundary, and above the block.
    for threshold in [0u32, 1, 250, 1000, 2999, 3000, 10_000] {
        let (a, _a_events, b, mut b_events) = early_pair(threshold);
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 13) as u8).collect();
        let buf = MessageBuffer::new(6000);
        b.post_recv(GroupId(1), buf.region(0, 3000));
        b.post_recv(GroupId(1), buf.region(3000, 3000));
        for _ in 0..2 {
            assert!(a.send(Outgoing::Data(
                GroupId(1),
                BlockRef::from_bytes(data.clone().into()),
                6000
            )));
        }
        let mut events: Vec<Option<u64>> = Vec::new();
        while events.iter().filter(|e| e.is_none()).count() < 2 {
            match b_events.recv().await.unwrap() {
                Completion::Progress {
                    group: GroupId(1),
                    from: NodeId(0),
                    remaining,
                } => events.push(Some(remaining)),
                Completion::Received {
                    group: GroupId(1),
                    len: 3000,
                    ..
                } => events.push(None),
                other => panic!("unexpected {other:?}"),
            }
        }
        // Each block: one report of at most the threshold (exactly it when
        // the block is longer), then its arrival.
        let report = Some(u64::from(threshold).min(3000));
        assert_eq!(
            events,
            [report, None, report, None],
            "threshold {threshold}"
        );
        let bytes = buf.into_bytes();
        assert_eq!(&bytes[..3000], &data[..]);
        assert_eq!(&bytes[3000..], &data[..]);
    }
}

#[tokio::test]
async fn a_socket_takes_the_congestion_control_it_is_given_or_says_why_not() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (dialled, accepted) = tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
    let (dialled, (accepted, _)) = (dialled.unwrap(), accepted.unwrap());
    for socket in [&dialled, &accepted] {
        set_congestion_control(socket, "reno").unwrap();
        assert_eq!(congestion_control(socket).unwrap(), "reno");
        let before = congestion_control(socket).unwrap();
        let refused = set_congestion_control(socket, "no_such_cc").unwrap_err();
        assert!(refused.contains("this kernel has"), "{refused}");
        assert_eq!(
            congestion_control(socket).unwrap(),
            before,
            "a refusal changed it"
        );
        for bad in ["", "sixteen_bytes_xx", "nul\0inside"] {
            assert!(
                set_congestion_control(socket, bad).is_err(),
                "{bad:?} accepted"
            );
        }
    }
}

/// A route from node 0 (the sending end) through node 1 to node 2.
fn route_via_1() -> Route {
    Route::new(vec![NodeId(0), NodeId(1), NodeId(2)]).unwrap()
}

#[tokio::test]
async fn a_relayed_signal_arrives_with_its_route_in_every_mode() {
    for mode in [
        WireSecurity::None,
        WireSecurity::Authenticated,
        WireSecurity::Encrypted,
    ] {
        // Offset past the stream's end: nothing flipped.
        let (a, _b, mut events) = tampered_pair(mode, usize::MAX);
        let signal = Signal::Join { digest: 7 << 70 };
        assert!(a.send(Outgoing::Relay(GroupId(9), signal, route_via_1())));
        match events.recv().await.unwrap() {
            Completion::Relayed {
                group,
                from,
                signal: got,
                route,
            } => {
                assert_eq!((group, from, got), (GroupId(9), NodeId(0), signal));
                assert_eq!(route, route_via_1(), "{mode:?}");
            }
            other => panic!("{mode:?}: unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_relayed_signal_from_a_hop_its_route_does_not_name_fails_the_link() {
    let (a, _b, mut events) = tampered_pair(WireSecurity::Authenticated, usize::MAX);
    // The route says node 3 sends this hop; node 0 does.
    let route = Route::new(vec![NodeId(3), NodeId(1), NodeId(2)]).unwrap();
    assert!(a.send(Outgoing::Relay(GroupId(9), Signal::IdInUse, route)));
    assert!(matches!(
        events.recv().await.unwrap(),
        Completion::PeerDown {
            node: NodeId(0),
            ..
        }
    ));
}

#[tokio::test]
async fn a_byte_flipped_in_a_relayed_signal_fails_the_link() {
    for mode in [WireSecurity::Authenticated, WireSecurity::Encrypted] {
        let frame_len = HEADER_LEN + route_via_1().encoded_len() + mode.tag_len();
        for offset in AGREE_LEN..AGREE_LEN + frame_len {
            let (a, _b, mut events) = tampered_pair(mode, offset);
            assert!(a.send(Outgoing::Relay(GroupId(9), Signal::IdInUse, route_via_1())));
            match events.recv().await.unwrap() {
                Completion::PeerDown {
                    node: NodeId(0), ..
                } => {}
                other => panic!("{mode:?}: byte {offset} flipped: {other:?}"),
            }
        }
    }
}
