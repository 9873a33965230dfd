//! The reading side of a link: every frame read, opened and acted on, each
//! data chunk straight into the receive posted for its block; a peer
//! silent past the failure timeout breaks the link.

use std::collections::VecDeque;
use std::collections::hash_map::Entry;
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;
use tokio_util::sync::DropGuard;

use super::{LinkConfig, LinkState, Posted, lock};
use crate::collections::HashMap;
use crate::ids::{GroupId, NodeId};
use crate::transport::frame::protect::{MAX_TAG_LEN, Opener};
use crate::transport::frame::relay::Route;
use crate::transport::frame::{Context, HEADER_LEN, Header, SHORT_HEADER_LEN};
use crate::transport::liveness::{Liveness, PeerClock};
use crate::transport::socket::RecvLowat;
use crate::transport::{Completion, CompletionSender, RecvRegion};

/// Bytes read ahead of what the reader asked for: a frame's tag and the
/// next frame's header usually come in one read, with some of the next
/// payload (copied out of here, a small share of a chunk).
const READ_AHEAD: usize = 4096;

/// The reading side of a connection: small reads (headers, tags, small
/// payloads) through a read-ahead buffer, large payloads straight into
/// their destination.
pub(super) struct FrameReader<R> {
    inner: Pin<Box<R>>,
    lowat: RecvLowat,
    buf: Box<[u8; READ_AHEAD]>,
    start: usize,
    end: usize,
}

impl<R: AsyncRead> FrameReader<R> {
    pub(super) fn new(inner: R, lowat: RecvLowat) -> Self {
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

/// A read that failed: why, and whether the stream ended there.
struct ReadFailed {
    reason: Reason,
    ended: bool,
}

impl From<ReadFailed> for Reason {
    fn from(failed: ReadFailed) -> Reason {
        failed.reason
    }
}

/// The connection's reading half, timed: every read must finish before the
/// peer has been silent for the failure timeout.
struct Wire<R> {
    reader: FrameReader<R>,
    liveness: Liveness,
    clock: PeerClock,
}

impl<R: AsyncRead> Wire<R> {
    /// Fill `dst` before the peer's silence deadline; `what` says where in
    /// a frame, for the reason it fails.
    async fn read(&mut self, dst: &mut [u8], what: &str) -> Result<(), ReadFailed> {
        let deadline = self.liveness.silence_deadline(&self.clock);
        match tokio::time::timeout_at(deadline, self.reader.read_exact(dst)).await {
            Err(_) => Err(ReadFailed {
                reason: format!("{}{what}", self.liveness.silence_reason()),
                ended: false,
            }),
            Ok(Err(e)) => Err(ReadFailed {
                reason: format!("connection lost: {e}"),
                ended: e.kind() == std::io::ErrorKind::UnexpectedEof,
            }),
            Ok(Ok(())) => {
                self.clock.heard(Instant::now());
                Ok(())
            }
        }
    }
}

/// What the reader of a link keeps between frames.
struct LinkReader<R> {
    /// This node, for the trace.
    me: NodeId,
    peer: NodeId,
    wire: Wire<R>,
    opener: Opener,
    tag: [u8; MAX_TAG_LEN],
    tag_len: usize,
    /// What the frames read so far let the next leave out.
    context: Context,
    posted: Arc<Posted>,
    /// The blocks arriving, per group.
    partial: HashMap<GroupId, PartialBlock>,
    /// Where a refused block's chunks are read to (and dropped).
    scratch: Vec<u8>,
    completions: CompletionSender,
    config: LinkConfig,
    /// Whether the peer closed its side in order, at a frame boundary.
    orderly: bool,
    /// Whether the peer said goodbye (it leaves for good; its last frame,
    /// after which the reader ends).
    goodbye: bool,
    /// Whether the peer closed the connection as idle (its last frame).
    idle: bool,
}

/// Read `peer`'s frames to node `me` from `reader` until the connection
/// fails, goes silent or ends; then mark the link `down`, report the peer
/// down (or, after its goodbye, gone for good) and — unless the peer closed
/// its side in order — end the writer too (`done`).
#[allow(clippy::too_many_arguments)]
pub(super) async fn read_loop<R: AsyncRead>(
    (me, peer): (NodeId, NodeId),
    reader: FrameReader<R>,
    opener: Opener,
    posted: Arc<Posted>,
    completions: CompletionSender,
    config: LinkConfig,
    state: Arc<LinkState>,
    done: DropGuard,
) {
    let tag_len = opener.mode().tag_len();
    let mut link = LinkReader {
        me,
        peer,
        wire: Wire {
            reader,
            liveness: config.liveness(),
            clock: PeerClock::new(Instant::now()),
        },
        opener,
        tag: [0; MAX_TAG_LEN],
        tag_len,
        context: Context::default(),
        posted,
        partial: HashMap::default(),
        scratch: Vec::new(),
        completions,
        config,
        orderly: false,
        goodbye: false,
        idle: false,
    };
    let reason = loop {
        if let Err(reason) = link.frame().await {
            break reason;
        }
    };
    if link.idle {
        state.mark_idle();
    }
    state.mark_down();
    state.read_done.cancel();
    if link.orderly || link.idle {
        // The peer closed its side in order: let the writer finish ours.
        done.disarm();
    }
    if state.is_idle() {
        tracing::debug!(peer = peer.0, %reason, "idle connection closed");
    } else if link.goodbye {
        tracing::info!(peer = peer.0, "peer left");
        state.report_left(&link.completions);
    } else {
        if state.is_closing() {
            // This node is leaving: the connection's end is expected.
            tracing::debug!(peer = peer.0, %reason, "connection ended as this node leaves");
        } else {
            // The node reports it, as a warning where a group held the peer.
            tracing::debug!(peer = peer.0, %reason, "peer down");
        }
        state.report_down(&link.completions, &reason);
    }
}

impl<R: AsyncRead> LinkReader<R> {
    /// Read one frame and act on it.
    async fn frame(&mut self) -> Result<(), Reason> {
        let mut bytes = [0u8; HEADER_LEN];
        let empty = self.wire.reader.is_empty();
        if let Err(failed) = self.wire.read(&mut bytes[..SHORT_HEADER_LEN], "").await {
            // Not a byte of a next frame: the stream ended cleanly.
            self.orderly = empty && self.wire.reader.is_empty() && failed.ended;
            return Err(failed.reason);
        }
        let header_len = Context::header_len(bytes[0]);
        if header_len > SHORT_HEADER_LEN {
            let rest = &mut bytes[SHORT_HEADER_LEN..header_len];
            self.wire.read(rest, " mid-header").await?;
        }
        let bytes = &bytes[..header_len];
        let header = self
            .context
            .decode(bytes, self.config.max_frame())
            .map_err(|e| format!("malformed frame: {e}"))?;
        match header {
            Header::Heartbeat | Header::Signal { .. } | Header::Goodbye | Header::Idle => {
                let tag = &mut self.tag[..self.tag_len];
                self.wire.read(tag, " mid-frame").await?;
                self.opener
                    .open(bytes, &mut [], tag)
                    .map_err(|e| e.to_string())?;
                match header {
                    Header::Signal { group, signal } => {
                        let _ = self.completions.send(Completion::Signal {
                            group,
                            from: self.peer,
                            signal,
                        });
                    }
                    Header::Goodbye => {
                        // Its last frame: nothing more is read.
                        self.goodbye = true;
                        return Err("it left".to_owned());
                    }
                    Header::Idle => {
                        // Its last frame too: the link ends, unreported.
                        self.idle = true;
                        return Err("it closed the idle connection".to_owned());
                    }
                    _ => {}
                }
                Ok(())
            }
            Header::Relay {
                group,
                signal,
                route_len,
            } => {
                let mut payload = vec![0; route_len as usize];
                self.wire.read(&mut payload, " mid-frame").await?;
                let tag = &mut self.tag[..self.tag_len];
                self.wire.read(tag, " mid-frame").await?;
                self.opener
                    .open(bytes, &mut payload, tag)
                    .map_err(|e| e.to_string())?;
                let route = Route::decode(&payload)
                    .map_err(|e| format!("malformed relayed signal: {e}"))?;
                if route.previous() != self.peer {
                    return Err(format!(
                        "relayed a signal whose route has node {} before this hop",
                        route.previous().0
                    ));
                }
                let _ = self.completions.send(Completion::Relayed {
                    group,
                    from: self.peer,
                    signal,
                    route,
                });
                Ok(())
            }
            Header::Data {
                group,
                immediate,
                block_len,
                chunk_len,
            } => {
                let chunk = Chunk {
                    group,
                    immediate,
                    block_len,
                    len: u64::from(chunk_len),
                };
                self.chunk(bytes, chunk).await
            }
        }
    }

    /// Read a data chunk (`header` its header's bytes) into its block's
    /// posted receive — or into the scratch buffer, if the block is
    /// refused — reporting the block's progress and its arrival.
    async fn chunk(&mut self, header: &[u8], chunk: Chunk) -> Result<(), Reason> {
        let Chunk { group, len, .. } = chunk;
        // A refusal is reported only once the frame proves genuine.
        let refusal = self.block_for(chunk)?;
        let block = self.partial.get_mut(&group).expect("found or made");
        // Early announcement: the bytes before the threshold first, then
        // the report, then the rest of the chunk (its tag still checks the
        // whole frame; the report is only a hint, no byte is delivered).
        let left_after = block.block_len - block.received - len;
        let split = match self.config.early_announce {
            Some(t) if block.region.is_some() && left_after <= u64::from(t) => {
                // Bytes of this chunk to read before fewer than `t` remain.
                let before = (block.block_len - block.received).saturating_sub(u64::from(t));
                Some(before.min(len) as usize)
            }
            _ => None,
        };
        let tell = !block.progress_told;
        let start = block.received as usize;
        let end = start + len as usize;
        let target: &mut [u8] = match block.region.as_mut() {
            Some(region) => &mut region.as_mut_slice()[start..end],
            None => {
                self.scratch.resize(len as usize, 0);
                &mut self.scratch[..]
            }
        };
        if let Some(split) = split.filter(|_| tell) {
            self.wire.read(&mut target[..split], " mid-block").await?;
            let remaining = block.block_len - block.received - split as u64;
            let _ = self.completions.send(Completion::Progress {
                group,
                from: self.peer,
                remaining,
            });
            self.wire.read(&mut target[split..], " mid-block").await?;
        } else {
            self.wire.read(&mut *target, " mid-block").await?;
        }
        let tag = &mut self.tag[..self.tag_len];
        self.wire.read(tag, " mid-frame").await?;
        self.opener
            .open(header, target, tag)
            .map_err(|e| e.to_string())?;
        if let Some(error) = refusal {
            tracing::warn!(
                peer = self.peer.0,
                group = group.0,
                error,
                "refusing a block"
            );
            let _ = self.completions.send(Completion::TransferFailed {
                group,
                peer: self.peer,
                error,
            });
        }
        if split.is_some() {
            block.progress_told = true;
        }
        block.received += len;
        if block.received == block.block_len {
            self.block_done(group);
        }
        Ok(())
    }

    /// Make sure `chunk`'s block is arriving: the chunk must continue the
    /// block of its group under way, or starts one, taking the receive
    /// posted for it. A block without a fitting receive is refused (the
    /// reason returned) and read to no receive.
    fn block_for(&mut self, chunk: Chunk) -> Result<Option<&'static str>, Reason> {
        let Chunk {
            group,
            immediate,
            block_len,
            len,
        } = chunk;
        match self.partial.entry(group) {
            Entry::Occupied(e) => {
                let p = e.get();
                if p.immediate != immediate
                    || p.block_len != block_len
                    || p.received + len > block_len
                {
                    return Err("a chunk does not continue its block".to_owned());
                }
                Ok(None)
            }
            Entry::Vacant(e) => {
                tracing::trace!(
                    group = group.0,
                    from = self.peer.0,
                    to = self.me.0,
                    len = block_len,
                    "block arriving"
                );
                let region = lock(&self.posted)
                    .get_mut(&group)
                    .and_then(VecDeque::pop_front);
                let (region, refusal) = match region {
                    Some(r) if r.len() as u64 >= block_len => (Some(r), None),
                    Some(_) => (None, Some("block longer than the posted receive")),
                    None => (None, Some("block without a posted receive")),
                };
                e.insert(PartialBlock {
                    region,
                    immediate,
                    block_len,
                    received: 0,
                    progress_told: false,
                });
                Ok(refusal)
            }
        }
    }

    /// `group`'s block is all in: report it, if it landed in a receive.
    fn block_done(&mut self, group: GroupId) {
        let done = self.partial.remove(&group).expect("present");
        let (landed, immediate, len) = (done.region.is_some(), done.immediate, done.block_len);
        // Let go of the receive's memory before reporting it: the receiver
        // may hand the buffer on whole (a message received in its group's
        // first-block buffer becomes the message).
        drop(done);
        if landed {
            let _ = self.completions.send(Completion::Received {
                group,
                from: self.peer,
                immediate,
                len: len as usize,
            });
        }
    }
}

/// A data frame's header: which block its chunk is of, and how long.
#[derive(Clone, Copy)]
struct Chunk {
    group: GroupId,
    immediate: u64,
    block_len: u64,
    len: u64,
}
