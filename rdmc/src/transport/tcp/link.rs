//! One authenticated connection to a peer: a writer task that interleaves
//! the groups' blocks chunk by chunk (fairly, round robin, control signals
//! first) and a reader task that reads each chunk straight into the receive
//! posted for its block. Before either runs, the two ends agree on the keys
//! that protect every frame ([`agree`]).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::io::IoSlice;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::Rng;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::ids::{GroupId, NodeId};
use crate::transport::frame::protect::{MAX_TAG_LEN, Opener, Sealer, WireKeys, WireSecurity};
use crate::transport::frame::{Context, HEADER_LEN, Header, SHORT_HEADER_LEN};
use crate::transport::liveness::{Liveness, PeerClock};
use crate::transport::mesh::ClusterKey;
use crate::transport::{BlockRef, Completion, CompletionSender, RecvRegion, Signal};

/// Largest frame payload while a link carries one group's blocks and no
/// signal waits: fewer, larger writes and reads. As soon as a second group
/// or a signal is queued, frames are `chunk_size` again.
pub(crate) const SOLO_FRAME: u32 = 1 << 20;

/// Tuning of a link.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinkConfig {
    /// Largest data chunk on the wire while several groups share the link;
    /// blocks are cut into chunks this big.
    pub(crate) chunk_size: u32,
    /// A peer silent this long is considered failed.
    pub(crate) failure_timeout: Duration,
    /// Report a block's [`Completion::Progress`] once at most this many of
    /// its bytes are still to arrive (early announcement); `None`: never.
    pub(crate) early_announce: Option<u32>,
    /// The socket holds at most about this many bytes unsent
    /// (`TCP_NOTSENT_LOWAT`); data frames are then at most this long, so
    /// a signal waits for no more than one such frame to be written.
    pub(crate) unsent_limit: Option<u32>,
}

impl LinkConfig {
    /// The link's failure detector: heartbeats keep an idle connection's
    /// quiet, silence past the failure timeout breaks the link.
    fn liveness(&self) -> Liveness {
        Liveness::new(self.failure_timeout)
    }

    /// Largest frame payload written (while alone) or accepted.
    fn max_frame(&self) -> u32 {
        self.chunk_size.max(SOLO_FRAME)
    }
}

/// How a link protects its frames, and what it needs to agree on keys.
#[derive(Clone, Debug)]
pub(crate) struct LinkSecurity {
    /// The protection both ends must use.
    pub(crate) mode: WireSecurity,
    /// The cluster key, input of the frame keys.
    pub(crate) key: ClusterKey,
    /// This node.
    pub(crate) me: NodeId,
    /// How long the key agreement may take.
    pub(crate) timeout: Duration,
}

/// What the writer sends.
#[derive(Debug)]
pub(crate) enum Outgoing {
    Signal(GroupId, Signal),
    Data(GroupId, BlockRef, u64),
}

/// Why the key agreement with a peer failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AgreeError {
    /// The two ends protect their frames differently: a configuration
    /// error, not a failure of the peer.
    #[error(
        "wire security mismatch: this node uses {}, the peer {}",
        local.name(),
        remote.map_or("an unknown mode", WireSecurity::name)
    )]
    Mismatch {
        /// This node's mode.
        local: WireSecurity,
        /// The peer's, if this build knows it.
        remote: Option<WireSecurity>,
    },
    /// Anything else: the connection failed or went silent, or the peer
    /// speaks another frame protocol.
    #[error("{0}")]
    Failed(String),
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
    /// The key agreement's outcome, until [`Link::agreement`] takes it.
    agreed: Option<oneshot::Receiver<Result<(), AgreeError>>>,
}

impl Link {
    /// Run a link over `stream` (already authenticated by the mesh
    /// handshake) to `peer`; `lowat` tunes the stream's socket, if it is
    /// one. The frame keys are agreed first; a failed agreement is a peer
    /// failure, and its reason is told to [`Link::agreement`].
    pub(crate) fn spawn<S>(
        peer: NodeId,
        stream: S,
        lowat: RecvLowat,
        completions: CompletionSender,
        config: LinkConfig,
        security: LinkSecurity,
    ) -> Self
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (outgoing, queue) = mpsc::unbounded_channel();
        let posted = Arc::new(Posted::default());
        let down = Arc::new(AtomicBool::new(false));
        let span = tracing::debug_span!("rdmc_link", peer = peer.0);
        let _enter = span.enter();
        let reader_posted = Arc::clone(&posted);
        let link_down = Arc::clone(&down);
        let (agreed_tx, agreed) = oneshot::channel();
        let writer = tokio::spawn(tracing::Instrument::in_current_span(async move {
            let (mut reader, mut writer) = tokio::io::split(stream);
            let agreed = tokio::time::timeout(
                security.timeout,
                agree(&mut reader, &mut writer, &security, peer),
            )
            .await
            .unwrap_or_else(|_| {
                Err(AgreeError::Failed(format!(
                    "no key agreement within {:?}",
                    security.timeout
                )))
            });
            let (sealer, opener) = match agreed {
                Ok(halves) => {
                    let _ = agreed_tx.send(Ok(()));
                    halves
                }
                Err(reason) => {
                    link_down.store(true, Ordering::Release);
                    tracing::warn!(peer = peer.0, %reason, "peer down");
                    let _ = agreed_tx.send(Err(reason));
                    let _ = completions.send(Completion::PeerDown { node: peer });
                    return;
                }
            };
            // A failed reader ends the writer too, so the whole connection
            // closes and the peer learns of the failure at once.
            let reader_done = CancellationToken::new();
            tokio::spawn(tracing::Instrument::in_current_span(read_loop(
                peer,
                FrameReader::new(reader, lowat),
                opener,
                reader_posted,
                completions.clone(),
                config,
                Arc::clone(&link_down),
                reader_done.clone().drop_guard(),
            )));
            let writing = write_loop(peer, writer, sealer, queue, completions, config, link_down);
            tokio::select! {
                () = writing => {}
                () = reader_done.cancelled() => {}
            }
        }));
        Link {
            outgoing,
            posted,
            down,
            writer,
            agreed: Some(agreed),
        }
    }

    /// How the key agreement ended (within the agreement timeout): `Ok`
    /// once the frame keys are agreed, or why not. Asked again, `Ok`.
    pub(crate) async fn agreement(&mut self) -> Result<(), AgreeError> {
        match self.agreed.take() {
            Some(outcome) => outcome.await.unwrap_or_else(|_| {
                Err(AgreeError::Failed(
                    "the link ended before agreeing".to_owned(),
                ))
            }),
            None => Ok(()),
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

/// Opens the key agreement message.
const AGREE_MAGIC: [u8; 8] = *b"RDMC-WK1";
/// Size of the key agreement message: magic, mode, nonce.
const AGREE_LEN: usize = 8 + 1 + 32;

/// Agree on the frame keys with `peer`: each end sends its mode and a fresh
/// nonce, and both derive the per-direction keys from the cluster key and
/// the two nonces ([`WireKeys::derive`]). Nothing here needs protecting: a
/// changed nonce only makes the keys differ (and the first frame fail), a
/// changed mode is a mismatch, and without the cluster key nobody can
/// derive the keys.
async fn agree<R, W>(
    reader: &mut R,
    writer: &mut W,
    security: &LinkSecurity,
    peer: NodeId,
) -> Result<(Sealer, Opener), AgreeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut ours = [0u8; AGREE_LEN];
    ours[..8].copy_from_slice(&AGREE_MAGIC);
    ours[8] = security.mode.code();
    rand::rng().fill_bytes(&mut ours[9..]);
    let mut theirs = [0u8; AGREE_LEN];
    let send = async {
        writer.write_all(&ours).await?;
        writer.flush().await
    };
    let (sent, received) = tokio::join!(send, reader.read_exact(&mut theirs));
    sent.and(received.map(drop))
        .map_err(|e| AgreeError::Failed(format!("key agreement: {e}")))?;
    if theirs[..8] != AGREE_MAGIC {
        return Err(AgreeError::Failed(
            "key agreement: the peer speaks another frame protocol".to_owned(),
        ));
    }
    let mode = security.mode;
    match WireSecurity::from_code(theirs[8]) {
        Some(m) if m == mode => {}
        remote => {
            return Err(AgreeError::Mismatch {
                local: mode,
                remote,
            });
        }
    }
    let nonce = |m: &[u8; AGREE_LEN]| -> [u8; 32] { m[9..].try_into().expect("32 bytes") };
    let keys = WireKeys::derive(
        security.key.secret(),
        mode,
        security.me.0,
        peer.0,
        &nonce(&ours),
        &nonce(&theirs),
    );
    Ok((Sealer::new(mode, &keys.send), Opener::new(mode, &keys.recv)))
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

/// Let `socket` hold at most about `bytes` unsent (`TCP_NOTSENT_LOWAT`):
/// writes wait until the unsent bytes fall below it, so a send completes
/// once all but about that much of it has left. Not a socket, or not
/// supported: nothing changes (sends complete once buffered, as before).
#[allow(unsafe_code)]
pub(crate) fn limit_unsent(socket: &impl AsRawFd, bytes: u32) {
    let value = bytes.min(i32::MAX as u32) as libc::c_int;
    // SAFETY: the caller holds `socket`, so its fd is open; `value` is a
    // live c_int whose size is passed along.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "TCP_NOTSENT_LOWAT not set"
        );
    }
}

/// Make `socket` use TCP congestion control `name` (`TCP_CONGESTION`).
/// The error says why the kernel refused it, with the controls it has.
#[allow(unsafe_code)]
pub(crate) fn set_congestion_control(socket: &impl AsRawFd, name: &str) -> Result<(), String> {
    // The kernel's names are at most TCP_CA_NAME_MAX (16) bytes with the NUL.
    if name.is_empty() || name.len() >= 16 || name.contains('\0') {
        return Err("not a congestion control name (1 to 15 bytes)".into());
    }
    // SAFETY: the caller holds `socket`, so its fd is open; `name` is a
    // live buffer of the length passed along (the kernel copies it and
    // needs no NUL).
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let error = std::io::Error::last_os_error();
    let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .map(|list| list.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into());
    Err(format!("{error} (this kernel has: {available})"))
}

/// The TCP congestion control `socket` uses (`TCP_CONGESTION`).
#[cfg(test)]
#[allow(unsafe_code)]
pub(crate) fn congestion_control(socket: &impl AsRawFd) -> std::io::Result<String> {
    let mut name = [0u8; 16];
    let mut len = name.len() as libc::socklen_t;
    // SAFETY: the caller holds `socket`, so its fd is open; `name` and
    // `len` are live and `len` is `name`'s size.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_mut_ptr().cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let name = &name[..(len as usize).min(name.len())];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// Bytes read ahead of what the reader asked for: a frame's tag and the
/// next frame's header usually come in one read, with some of the next
/// payload (copied out of here, a small share of a chunk).
const READ_AHEAD: usize = 4096;

/// The reading side of a connection: small reads (headers, tags, small
/// payloads) through a read-ahead buffer, large payloads straight into
/// their destination.
struct FrameReader<R> {
    inner: Pin<Box<R>>,
    lowat: RecvLowat,
    buf: Box<[u8; READ_AHEAD]>,
    start: usize,
    end: usize,
}

impl<R: AsyncRead> FrameReader<R> {
    fn new(inner: R, lowat: RecvLowat) -> Self {
        FrameReader {
            inner: Box::pin(inner),
            lowat,
            buf: Box::new([0; READ_AHEAD]),
            start: 0,
            end: 0,
        }
    }

    /// Read until `need` (at most [`READ_AHEAD`]) bytes are buffered.
    async fn fill(&mut self, need: usize) -> std::io::Result<()> {
        debug_assert!(need <= READ_AHEAD);
        if self.end - self.start >= need {
            return Ok(());
        }
        if READ_AHEAD - self.end < READ_AHEAD / 2 || READ_AHEAD - self.start < need {
            // Room for a whole small frame (header, payload, tag) in one
            // read, rather than its first part and then the rest.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        // What fits here comes in one or two packets: a low-water mark
        // would save no wake-up, and changing it costs a system call.
        self.lowat.set(1);
        while self.end - self.start < need {
            let n = self.inner.as_mut().read(&mut self.buf[self.end..]).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.end += n;
        }
        Ok(())
    }

    /// Whether no byte is buffered.
    fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Take up to `dst.len()` buffered bytes into `dst`; how many.
    fn take(&mut self, dst: &mut [u8]) -> usize {
        let n = dst.len().min(self.end - self.start);
        dst[..n].copy_from_slice(&self.buf[self.start..self.start + n]);
        self.start += n;
        n
    }

    /// Fill `dst` completely.
    async fn read_exact(&mut self, dst: &mut [u8]) -> std::io::Result<()> {
        let mut got = self.take(dst);
        let rest = dst.len() - got;
        if rest == 0 {
            return Ok(());
        }
        if rest <= READ_AHEAD / 2 {
            self.fill(rest).await?;
            self.take(&mut dst[got..]);
            return Ok(());
        }
        while got < dst.len() {
            self.lowat.set(dst.len() - got);
            let n = self.inner.as_mut().read(&mut dst[got..]).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            got += n;
        }
        Ok(())
    }
}

/// A block being written, chunk by chunk.
#[derive(Debug)]
struct PendingBlock {
    block: BlockRef,
    immediate: u64,
    sent: usize,
}

/// Groups with blocks to send, served round robin one chunk at a time.
type Ring = VecDeque<(GroupId, VecDeque<PendingBlock>)>;

/// Take `item` into the writer's state: a signal is sealed into the
/// pending signal frames at once (frames are sealed in the order they go
/// on the wire), a block joins its group in the ring.
fn enqueue(
    item: Outgoing,
    sealer: &mut Sealer,
    context: &mut Context,
    signals: &mut Vec<u8>,
    ring: &mut Ring,
) -> std::io::Result<()> {
    match item {
        Outgoing::Signal(group, signal) => {
            let header = context.encode(&Header::Signal { group, signal });
            let tag = sealer
                .seal_into(header.as_slice(), &[], &mut Vec::new())
                .map_err(other)?
                .0;
            signals.extend_from_slice(header.as_slice());
            signals.extend_from_slice(tag.as_slice());
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
    }
    Ok(())
}

fn other(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// Write every byte of `slices`, in as few system calls as the kernel takes.
async fn write_all_vectored<W: AsyncWrite>(
    writer: &mut Pin<&mut W>,
    slices: &mut [IoSlice<'_>],
) -> std::io::Result<()> {
    let mut slices = slices;
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        let n = writer.write_vectored(slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn write_loop<W: AsyncWrite>(
    peer: NodeId,
    writer: W,
    mut sealer: Sealer,
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
    let mut ring: Ring = VecDeque::new();
    // What the frames written so far let the next leave out.
    let mut context = Context::default();
    // Encrypted payloads, on their way to the wire.
    let mut scratch: Vec<u8> = Vec::new();
    let result: std::io::Result<()> = async {
        loop {
            if signals.is_empty() && ring.is_empty() {
                let due = liveness.heartbeat_due_at(&clock);
                match tokio::time::timeout_at(due, queue.recv()).await {
                    Ok(Some(item)) => {
                        enqueue(item, &mut sealer, &mut context, &mut signals, &mut ring)?
                    }
                    Ok(None) => return bounded(limit, writer.shutdown()).await,
                    Err(_) => {
                        let header = context.encode(&Header::Heartbeat);
                        let tag = sealer
                            .seal_into(header.as_slice(), &[], &mut scratch)
                            .map_err(other)?
                            .0;
                        let mut frame = [
                            IoSlice::new(header.as_slice()),
                            IoSlice::new(tag.as_slice()),
                        ];
                        bounded(limit, write_all_vectored(&mut writer, &mut frame)).await?;
                        clock.sent(Instant::now());
                        continue;
                    }
                }
            }
            let mut yielded = false;
            loop {
                while let Ok(item) = queue.try_recv() {
                    enqueue(item, &mut sealer, &mut context, &mut signals, &mut ring)?;
                }
                if yielded || signals.is_empty() || !ring.is_empty() {
                    break;
                }
                // Only signals to write: let the tasks already woken run
                // first, once. A receiver's ready-for-block (queued as a
                // message completes) and its taken count (queued once its
                // application takes the message, a moment later) then go
                // in one write, and wake the peer once.
                yielded = true;
                tokio::task::yield_now().await;
                // Then let the other processes and threads waiting for this
                // core run first. Signals (acknowledgements, and credits
                // topped up while the sender still holds some) are off a
                // message's critical path, while a member sharing the core
                // may be holding a block others wait for. With nothing else
                // runnable this returns at once. Where members share few
                // cores this shortens a small message's latency; large
                // transfers do not notice.
                std::thread::yield_now();
            }
            let Some((group, mut blocks)) = ring.pop_front() else {
                bounded(limit, writer.write_all(&signals)).await?;
                signals.clear();
                clock.sent(Instant::now());
                continue;
            };
            // Alone on the link: larger frames; else fair shares.
            let frame = if ring.is_empty() {
                config.max_frame()
            } else {
                config.chunk_size
            };
            let frame = config.unsent_limit.map_or(frame, |u| frame.min(u.max(1)));
            let block = blocks.front_mut().expect("groups in the ring have blocks");
            let total = block.block.len();
            let len = (total - block.sent).min(frame as usize);
            let header = context.encode(&Header::Data {
                group,
                immediate: block.immediate,
                block_len: total as u64,
                chunk_len: len as u32,
            });
            let chunk = &block.block.as_slice()[block.sent..block.sent + len];
            let (tag, encrypted) = sealer
                .seal_into(header.as_slice(), chunk, &mut scratch)
                .map_err(other)?;
            let body = if encrypted { &scratch[..] } else { chunk };
            // The signals sealed before this frame go ahead of it in the
            // same write: a ready-for-block to the peer a block goes to
            // rides in the block's first segment instead of one of its own.
            let mut frame = [
                IoSlice::new(&signals),
                IoSlice::new(header.as_slice()),
                IoSlice::new(body),
                IoSlice::new(tag.as_slice()),
            ];
            bounded(limit, write_all_vectored(&mut writer, &mut frame)).await?;
            signals.clear();
            block.sent += len;
            if block.sent == total {
                blocks.pop_front();
                tracing::trace!(group = group.0, len = total, "block sent");
                let _ = completions.send(Completion::Sent { group, to: peer });
            }
            if !blocks.is_empty() {
                ring.push_back((group, blocks));
            }
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
    /// Its [`Completion::Progress`] was reported.
    progress_told: bool,
}

/// Why the reader stops, for the log.
type Reason = String;

#[allow(clippy::too_many_arguments)]
async fn read_loop<R: AsyncRead>(
    peer: NodeId,
    mut reader: FrameReader<R>,
    mut opener: Opener,
    posted: Arc<Posted>,
    completions: CompletionSender,
    config: LinkConfig,
    down: Arc<AtomicBool>,
    done: DropGuard,
) {
    let mut partial: HashMap<GroupId, PartialBlock> = HashMap::new();
    let mut scratch: Vec<u8> = Vec::new();
    let failed = |group: GroupId, error: &'static str| {
        tracing::warn!(peer = peer.0, group = group.0, error, "refusing a block");
        let _ = completions.send(Completion::TransferFailed { group, peer, error });
    };
    let liveness = config.liveness();
    let tag_len = opener.mode().tag_len();
    let mut tag = [0u8; MAX_TAG_LEN];
    let mut clock = PeerClock::new(Instant::now());
    // Read into `$dst` within the failure timeout, or stop the loop.
    macro_rules! read_or_break {
        ($dst:expr, $what:literal) => {
            match tokio::time::timeout_at(
                liveness.silence_deadline(&clock),
                reader.read_exact($dst),
            )
            .await
            {
                Err(_) => break format!("{}{}", liveness.silence_reason(), $what),
                Ok(Err(e)) => break format!("connection lost: {e}"),
                Ok(Ok(())) => clock.heard(Instant::now()),
            }
        };
    }
    // Whether the peer closed its side in order, at a frame boundary.
    let mut orderly = false;
    // What the frames read so far let the next leave out.
    let mut context = Context::default();
    let reason: Reason = loop {
        let mut bytes = [0u8; HEADER_LEN];
        let empty = reader.is_empty();
        match tokio::time::timeout_at(
            liveness.silence_deadline(&clock),
            reader.read_exact(&mut bytes[..SHORT_HEADER_LEN]),
        )
        .await
        {
            Err(_) => break liveness.silence_reason(),
            Ok(Err(e)) => {
                // Not a byte of a next frame: the stream ended cleanly.
                orderly =
                    empty && reader.is_empty() && e.kind() == std::io::ErrorKind::UnexpectedEof;
                break format!("connection lost: {e}");
            }
            Ok(Ok(())) => clock.heard(Instant::now()),
        }
        let header_len = Context::header_len(bytes[0]);
        if header_len > SHORT_HEADER_LEN {
            read_or_break!(&mut bytes[SHORT_HEADER_LEN..header_len], " mid-header");
        }
        let bytes = &bytes[..header_len];
        let header = match context.decode(bytes, config.max_frame()) {
            Ok(h) => h,
            Err(e) => break format!("malformed frame: {e}"),
        };
        let (group, immediate, block_len, chunk_len) = match header {
            Header::Heartbeat | Header::Signal { .. } => {
                read_or_break!(&mut tag[..tag_len], " mid-frame");
                if let Err(e) = opener.open(bytes, &mut [], &tag[..tag_len]) {
                    break e.to_string();
                }
                if let Header::Signal { group, signal } = header {
                    let _ = completions.send(Completion::Signal {
                        group,
                        from: peer,
                        signal,
                    });
                }
                continue;
            }
            Header::Data {
                group,
                immediate,
                block_len,
                chunk_len,
            } => (group, immediate, block_len, u64::from(chunk_len)),
        };
        // A refusal is reported only once the frame proves genuine.
        let mut refusal = None;
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
                tracing::trace!(group = group.0, len = block_len, "block arriving");
                let region = lock(&posted).get_mut(&group).and_then(VecDeque::pop_front);
                let region = match region {
                    Some(r) if r.len() as u64 >= block_len => Some(r),
                    Some(_) => {
                        refusal = Some("block longer than the posted receive");
                        None
                    }
                    None => {
                        refusal = Some("block without a posted receive");
                        None
                    }
                };
                e.insert(PartialBlock {
                    region,
                    immediate,
                    block_len,
                    received: 0,
                    progress_told: false,
                })
            }
        };
        // Early announcement: the bytes before the threshold first, then
        // the report, then the rest of the chunk (its tag still checks the
        // whole frame; the report is only a hint, no byte is delivered).
        let left_after = block.block_len - block.received - chunk_len;
        let split = match config.early_announce {
            Some(t) if block.region.is_some() && left_after <= u64::from(t) => {
                // Bytes of this chunk to read before fewer than `t` remain.
                let before = (block.block_len - block.received).saturating_sub(u64::from(t));
                Some(before.min(chunk_len) as usize)
            }
            _ => None,
        };
        let tell = !block.progress_told;
        let start = block.received as usize;
        let end = start + chunk_len as usize;
        let target: &mut [u8] = match block.region.as_mut() {
            Some(region) => &mut region.as_mut_slice()[start..end],
            None => {
                scratch.resize(chunk_len as usize, 0);
                &mut scratch[..]
            }
        };
        let received = block.received;
        let block_len = block.block_len;
        if let Some(split) = split.filter(|_| tell) {
            read_or_break!(&mut target[..split], " mid-block");
            let remaining = block_len - received - split as u64;
            let _ = completions.send(Completion::Progress {
                group,
                from: peer,
                remaining,
            });
            read_or_break!(&mut target[split..], " mid-block");
        } else {
            read_or_break!(&mut *target, " mid-block");
        }
        read_or_break!(&mut tag[..tag_len], " mid-frame");
        if let Err(e) = opener.open(bytes, target, &tag[..tag_len]) {
            break e.to_string();
        }
        if let Some(error) = refusal {
            failed(group, error);
        }
        if split.is_some() {
            block.progress_told = true;
        }
        block.received += chunk_len;
        if block.received == block.block_len {
            let done = partial.remove(&group).expect("present");
            let landed = done.region.is_some();
            // Let go of the receive's memory before reporting it: the
            // receiver may hand the buffer on whole (a message received in
            // its group's first-block buffer becomes the message).
            drop(done);
            if landed {
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
    if orderly {
        // The peer closed its side in order: let the writer finish ours.
        done.disarm();
    }
    tracing::warn!(peer = peer.0, %reason, "peer down");
    let _ = completions.send(Completion::PeerDown { node: peer });
}

#[cfg(test)]
mod tests;
