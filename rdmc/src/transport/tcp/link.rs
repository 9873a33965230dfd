//! One authenticated connection to a peer: a writer task that interleaves
//! the groups' blocks chunk by chunk (fairly, round robin, control signals
//! first) and a reader task that reads each chunk straight into the receive
//! posted for its block.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::ids::{GroupId, NodeId};
use crate::transport::frame::{HEADER_LEN, Header};
use crate::transport::liveness::{Liveness, PeerClock};
use crate::transport::{BlockRef, Completion, CompletionSender, RecvRegion, Signal};

/// Tuning of a link.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinkConfig {
    /// Largest data chunk on the wire; blocks are cut into chunks this big.
    pub(crate) chunk_size: u32,
    /// A peer silent this long is considered failed.
    pub(crate) failure_timeout: Duration,
}

impl LinkConfig {
    /// The link's failure detector: heartbeats keep an idle connection's
    /// quiet, silence past the failure timeout breaks the link.
    fn liveness(&self) -> Liveness {
        Liveness::new(self.failure_timeout)
    }
}

/// What the writer sends.
#[derive(Debug)]
pub(crate) enum Outgoing {
    Signal(GroupId, Signal),
    Data(GroupId, BlockRef, u64),
}

/// Receives posted for blocks from one peer, per group, in posting order.
type Posted = Mutex<HashMap<GroupId, VecDeque<RecvRegion>>>;

/// The node's side of a link to one peer.
#[derive(Debug)]
pub(crate) struct Link {
    outgoing: mpsc::UnboundedSender<Outgoing>,
    posted: Arc<Posted>,
    down: Arc<AtomicBool>,
    writer: tokio::task::JoinHandle<()>,
}

impl Link {
    /// Run a link over `stream` (already authenticated) to `peer`; `lowat`
    /// tunes the stream's socket, if it is one.
    pub(crate) fn spawn<S>(
        peer: NodeId,
        stream: S,
        lowat: RecvLowat,
        completions: CompletionSender,
        config: LinkConfig,
    ) -> Self
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (reader, writer) = tokio::io::split(stream);
        let (outgoing, queue) = mpsc::unbounded_channel();
        let posted = Arc::new(Posted::default());
        let down = Arc::new(AtomicBool::new(false));
        let span = tracing::debug_span!("rdmc_link", peer = peer.0);
        let _enter = span.enter();
        let writer = tokio::spawn(tracing::Instrument::in_current_span(write_loop(
            peer,
            writer,
            queue,
            completions.clone(),
            config,
            Arc::clone(&down),
        )));
        tokio::spawn(tracing::Instrument::in_current_span(read_loop(
            peer,
            reader,
            lowat,
            Arc::clone(&posted),
            completions,
            config,
            Arc::clone(&down),
        )));
        Link {
            outgoing,
            posted,
            down,
            writer,
        }
    }

    /// Close the sending side: the writer puts everything queued on the
    /// wire, shuts the connection's write half and ends (the returned task).
    pub(crate) fn close(self) -> tokio::task::JoinHandle<()> {
        self.writer
    }

    /// Whether the connection is gone.
    pub(crate) fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    /// Post a receive for the next block of `group` from this peer.
    pub(crate) fn post_recv(&self, group: GroupId, region: RecvRegion) {
        lock(&self.posted)
            .entry(group)
            .or_default()
            .push_back(region);
    }

    /// Queue a frame; `false` if the connection is gone.
    pub(crate) fn send(&self, item: Outgoing) -> bool {
        !self.is_down() && self.outgoing.send(item).is_ok()
    }

    /// Drop the receives posted for `group`.
    pub(crate) fn release_group(&self, group: GroupId) {
        lock(&self.posted).remove(&group);
    }
}

fn lock(posted: &Posted) -> MutexGuard<'_, HashMap<GroupId, VecDeque<RecvRegion>>> {
    posted.lock().unwrap_or_else(|e| e.into_inner())
}

/// Largest receive low-water mark set: well below the smallest receive
/// buffer Linux grows a socket to for it.
const MAX_LOWAT: usize = 128 * 1024;

/// A socket's receive low-water mark (`SO_RCVLOWAT`), raised to the bytes
/// the reader still needs so that it is woken once per chunk rather than
/// once per arriving packet — which on a slow link, packet by packet, costs
/// more CPU than the copy itself. Never above what the reader needs, so it
/// can never wait for bytes that are not coming; Linux also wakes the reader
/// regardless when the receive window or buffer runs short.
#[derive(Debug)]
pub(crate) struct RecvLowat {
    fd: Option<RawFd>,
    current: usize,
}

impl RecvLowat {
    /// For a stream that is not a socket: does nothing.
    #[cfg(test)]
    pub(crate) fn none() -> Self {
        RecvLowat {
            fd: None,
            current: 1,
        }
    }

    /// For `socket`, which must outlive the reader using this.
    pub(crate) fn of(socket: &impl AsRawFd) -> Self {
        RecvLowat {
            fd: Some(socket.as_raw_fd()),
            current: 1,
        }
    }

    /// Wake the reader once `bytes` (capped) are there.
    #[allow(unsafe_code)]
    fn set(&mut self, bytes: usize) {
        let bytes = bytes.clamp(1, MAX_LOWAT);
        let Some(fd) = self.fd else { return };
        if bytes == self.current {
            return;
        }
        let value = bytes as libc::c_int;
        // SAFETY: `fd` is the socket of the stream whose read half the
        // caller owns, so it is open; `value` is a live c_int whose size is
        // passed along. A failure only leaves the old mark in place.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&raw const value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            self.current = bytes;
        } else {
            // Not a socket after all, or not supported: stop trying.
            self.fd = None;
        }
    }
}

/// Fill `buf` from `reader`, raising the low-water mark to what is missing.
async fn read_full<R: AsyncRead>(
    reader: &mut Pin<&mut R>,
    buf: &mut [u8],
    lowat: &mut RecvLowat,
) -> std::io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        lowat.set(buf.len() - got);
        let n = reader.read(&mut buf[got..]).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        got += n;
    }
    Ok(())
}

/// A block being written, chunk by chunk.
#[derive(Debug)]
struct PendingBlock {
    block: BlockRef,
    immediate: u64,
    sent: usize,
}

async fn write_loop<W: AsyncWrite>(
    peer: NodeId,
    writer: W,
    mut queue: mpsc::UnboundedReceiver<Outgoing>,
    completions: CompletionSender,
    config: LinkConfig,
    down: Arc<AtomicBool>,
) {
    tokio::pin!(writer);
    // A write that makes no progress for this long means the peer is gone
    // (or stopped reading): the writer must not block forever on it.
    let liveness = config.liveness();
    let limit = liveness.failure_timeout();
    let mut clock = PeerClock::new(Instant::now());
    let mut signals: Vec<u8> = Vec::new();
    // Groups with blocks to send, served round robin one chunk at a time.
    let mut ring: VecDeque<(GroupId, VecDeque<PendingBlock>)> = VecDeque::new();
    let enqueue =
        |item: Outgoing,
         signals: &mut Vec<u8>,
         ring: &mut VecDeque<(GroupId, VecDeque<PendingBlock>)>| match item {
            Outgoing::Signal(group, signal) => {
                signals.extend_from_slice(&Header::Signal { group, signal }.encode());
            }
            Outgoing::Data(group, block, immediate) => {
                let pending = PendingBlock {
                    block,
                    immediate,
                    sent: 0,
                };
                match ring.iter_mut().find(|(g, _)| *g == group) {
                    Some((_, blocks)) => blocks.push_back(pending),
                    None => ring.push_back((group, VecDeque::from([pending]))),
                }
            }
        };
    let result: std::io::Result<()> = async {
        loop {
            if signals.is_empty() && ring.is_empty() {
                let due = liveness.heartbeat_due_at(&clock);
                match tokio::time::timeout_at(due, queue.recv()).await {
                    Ok(Some(item)) => enqueue(item, &mut signals, &mut ring),
                    Ok(None) => return bounded(limit, writer.shutdown()).await,
                    Err(_) => {
                        bounded(limit, writer.write_all(&Header::Heartbeat.encode())).await?;
                        clock.sent(Instant::now());
                        continue;
                    }
                }
            }
            while let Ok(item) = queue.try_recv() {
                enqueue(item, &mut signals, &mut ring);
            }
            if !signals.is_empty() {
                bounded(limit, writer.write_all(&signals)).await?;
                signals.clear();
                clock.sent(Instant::now());
            }
            let Some((group, mut blocks)) = ring.pop_front() else {
                continue;
            };
            let block = blocks.front_mut().expect("groups in the ring have blocks");
            let total = block.block.len();
            let len = (total - block.sent).min(config.chunk_size as usize);
            let header = Header::Data {
                group,
                immediate: block.immediate,
                block_len: total as u64,
                chunk_len: len as u32,
            };
            bounded(limit, writer.write_all(&header.encode())).await?;
            let chunk = &block.block.as_slice()[block.sent..block.sent + len];
            bounded(limit, writer.write_all(chunk)).await?;
            block.sent += len;
            if block.sent == total {
                blocks.pop_front();
                tracing::trace!(group = group.0, len = total, "block sent");
                let _ = completions.send(Completion::Sent { group, to: peer });
            }
            if !blocks.is_empty() {
                ring.push_back((group, blocks));
            }
            bounded(limit, writer.flush()).await?;
            clock.sent(Instant::now());
        }
    }
    .await;
    down.store(true, Ordering::Release);
    if let Err(e) = result {
        tracing::warn!(peer = peer.0, error = %e, "connection lost while writing");
        let _ = completions.send(Completion::PeerDown { node: peer });
    }
}

/// Run a write, failing it with `TimedOut` if it takes longer than `limit`.
async fn bounded<F>(limit: Duration, write: F) -> std::io::Result<()>
where
    F: std::future::Future<Output = std::io::Result<()>>,
{
    tokio::time::timeout(limit, write)
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no progress writing for {limit:?}"),
            ))
        })
}

/// A block being read, chunk by chunk.
struct PartialBlock {
    /// Where it lands; `None` while discarding a block nobody asked for.
    region: Option<RecvRegion>,
    immediate: u64,
    block_len: u64,
    received: u64,
}

async fn read_loop<R: AsyncRead>(
    peer: NodeId,
    reader: R,
    mut lowat: RecvLowat,
    posted: Arc<Posted>,
    completions: CompletionSender,
    config: LinkConfig,
    down: Arc<AtomicBool>,
) {
    tokio::pin!(reader);
    let mut partial: HashMap<GroupId, PartialBlock> = HashMap::new();
    let mut scratch: Vec<u8> = Vec::new();
    let failed = |group: GroupId, error: &'static str| {
        tracing::warn!(peer = peer.0, group = group.0, error, "refusing a block");
        let _ = completions.send(Completion::TransferFailed { group, peer, error });
    };
    let liveness = config.liveness();
    let mut clock = PeerClock::new(Instant::now());
    let reason: String = loop {
        let mut bytes = [0u8; HEADER_LEN];
        let read = read_full(&mut reader, &mut bytes, &mut lowat);
        match tokio::time::timeout_at(liveness.silence_deadline(&clock), read).await {
            Err(_) => break liveness.silence_reason(),
            Ok(Err(e)) => break format!("connection lost: {e}"),
            Ok(Ok(_)) => clock.heard(Instant::now()),
        }
        let header = match Header::decode(&bytes, config.chunk_size) {
            Ok(h) => h,
            Err(e) => break format!("malformed frame: {e}"),
        };
        let (group, immediate, block_len, chunk_len) = match header {
            Header::Heartbeat => continue,
            Header::Signal { group, signal } => {
                let _ = completions.send(Completion::Signal {
                    group,
                    from: peer,
                    signal,
                });
                continue;
            }
            Header::Data {
                group,
                immediate,
                block_len,
                chunk_len,
            } => (group, immediate, block_len, u64::from(chunk_len)),
        };
        let block = match partial.entry(group) {
            Entry::Occupied(e) => {
                let p = e.into_mut();
                if p.immediate != immediate
                    || p.block_len != block_len
                    || p.received + chunk_len > block_len
                {
                    break "a chunk does not continue its block".to_owned();
                }
                p
            }
            Entry::Vacant(e) => {
                let region = lock(&posted).get_mut(&group).and_then(VecDeque::pop_front);
                let region = match region {
                    Some(r) if r.len() as u64 >= block_len => Some(r),
                    Some(_) => {
                        failed(group, "block longer than the posted receive");
                        None
                    }
                    None => {
                        failed(group, "block without a posted receive");
                        None
                    }
                };
                e.insert(PartialBlock {
                    region,
                    immediate,
                    block_len,
                    received: 0,
                })
            }
        };
        let start = block.received as usize;
        let end = start + chunk_len as usize;
        let target: &mut [u8] = match block.region.as_mut() {
            Some(region) => &mut region.as_mut_slice()[start..end],
            None => {
                scratch.resize(chunk_len as usize, 0);
                &mut scratch[..]
            }
        };
        let read = read_full(&mut reader, target, &mut lowat);
        match tokio::time::timeout_at(liveness.silence_deadline(&clock), read).await {
            Err(_) => break format!("{} mid-block", liveness.silence_reason()),
            Ok(Err(e)) => break format!("connection lost: {e}"),
            Ok(Ok(_)) => clock.heard(Instant::now()),
        }
        block.received += chunk_len;
        if block.received == block.block_len {
            let done = partial.remove(&group).expect("present");
            if done.region.is_some() {
                let _ = completions.send(Completion::Received {
                    group,
                    from: peer,
                    immediate,
                    len: block_len as usize,
                });
            }
        }
    };
    down.store(true, Ordering::Release);
    tracing::warn!(peer = peer.0, %reason, "peer down");
    let _ = completions.send(Completion::PeerDown { node: peer });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Control;
    use crate::transport::MessageBuffer;

    const CONFIG: LinkConfig = LinkConfig {
        chunk_size: 1000,
        failure_timeout: Duration::from_secs(5),
    };

    fn pair() -> (
        Link,
        mpsc::UnboundedReceiver<Completion>,
        Link,
        mpsc::UnboundedReceiver<Completion>,
    ) {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (ca, ra) = mpsc::unbounded_channel();
        let (cb, rb) = mpsc::unbounded_channel();
        (
            Link::spawn(NodeId(1), a, RecvLowat::none(), ca, CONFIG),
            ra,
            Link::spawn(NodeId(0), b, RecvLowat::none(), cb, CONFIG),
            rb,
        )
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
        let link = Link::spawn(NodeId(4), a, RecvLowat::none(), ca, CONFIG);
        b.write_all(&[0xAB; HEADER_LEN]).await.unwrap();
        assert!(matches!(
            ra.recv().await.unwrap(),
            Completion::PeerDown { node: NodeId(4) }
        ));
        tokio::task::yield_now().await;
        assert!(link.is_down());
        assert!(!link.send(Outgoing::Signal(GroupId(1), Signal::Group(Control::Closed))));
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_peer_is_declared_down_after_the_failure_timeout() {
        let (a, _b) = tokio::io::duplex(1024);
        let (ca, mut ra) = mpsc::unbounded_channel();
        let _link = Link::spawn(NodeId(2), a, RecvLowat::none(), ca, CONFIG);
        let start = tokio::time::Instant::now();
        assert!(matches!(
            ra.recv().await.unwrap(),
            Completion::PeerDown { node: NodeId(2) }
        ));
        assert!(start.elapsed() >= CONFIG.failure_timeout);
    }

    #[tokio::test(start_paused = true)]
    async fn heartbeats_keep_an_idle_link_up() {
        let (a, b) = tokio::io::duplex(1024);
        let (ca, mut ra) = mpsc::unbounded_channel();
        let (cb, mut rb) = mpsc::unbounded_channel();
        let _x = Link::spawn(NodeId(1), a, RecvLowat::none(), ca, CONFIG);
        let _y = Link::spawn(NodeId(0), b, RecvLowat::none(), cb, CONFIG);
        tokio::time::sleep(CONFIG.failure_timeout * 4).await;
        assert!(ra.try_recv().is_err());
        assert!(rb.try_recv().is_err());
    }
}
