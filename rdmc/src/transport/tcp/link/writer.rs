//! The writing side of a link: signals first, then the groups' blocks
//! chunk by chunk, round robin, every frame sealed; heartbeats while idle.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{LinkConfig, LinkState, Outgoing, other};
use crate::ids::{GroupId, NodeId};
use crate::transport::frame::protect::Sealer;
use crate::transport::frame::{Context, Header};
use crate::transport::liveness::PeerClock;
use crate::transport::{BlockRef, Completion, CompletionSender};

/// A block being written, chunk by chunk.
#[derive(Debug)]
struct PendingBlock {
    block: BlockRef,
    immediate: u64,
    sent: usize,
}

/// Groups with blocks to send, served round robin one chunk at a time.
type Ring = VecDeque<(GroupId, VecDeque<PendingBlock>)>;

/// What the writer holds between writes.
#[derive(Default)]
struct Pending {
    /// Signal frames, sealed, to go ahead of the next data frame.
    signals: Vec<u8>,
    /// Blocks to send.
    ring: Ring,
    /// The last frame, once everything else is written: the goodbye, or
    /// the idle close.
    last: Option<Header>,
}

/// Take `item` into the writer's state: a signal is sealed into the
/// pending signal frames at once (frames are sealed in the order they go
/// on the wire), a block joins its group in the ring, a goodbye waits for
/// everything else.
fn enqueue(
    item: Outgoing,
    sealer: &mut Sealer,
    context: &mut Context,
    pending: &mut Pending,
) -> std::io::Result<()> {
    let Pending {
        signals,
        ring,
        last,
    } = pending;
    let header = match item {
        Outgoing::Signal(group, signal) => Header::Signal { group, signal },
        Outgoing::Relay(group, signal, route) => {
            let mut payload = route.encode();
            let header = context.encode(&Header::Relay {
                group,
                signal,
                route_len: payload.len() as u32,
            });
            let mut sealed = Vec::new();
            let (tag, encrypted) = sealer
                .seal_into(header.as_slice(), &payload, &mut sealed)
                .map_err(other)?;
            if encrypted {
                payload = sealed;
            }
            signals.extend_from_slice(header.as_slice());
            signals.extend_from_slice(&payload);
            signals.extend_from_slice(tag.as_slice());
            return Ok(());
        }
        Outgoing::Goodbye | Outgoing::Idle => {
            *last = Some(if matches!(item, Outgoing::Idle) {
                Header::Idle
            } else {
                Header::Goodbye
            });
            return Ok(());
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
            return Ok(());
        }
    };
    let header = context.encode(&header);
    let tag = sealer
        .seal_into(header.as_slice(), &[], &mut Vec::new())
        .map_err(other)?
        .0;
    signals.extend_from_slice(header.as_slice());
    signals.extend_from_slice(tag.as_slice());
    Ok(())
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
pub(super) async fn write_loop<W: AsyncWrite>(
    peer: NodeId,
    writer: W,
    mut sealer: Sealer,
    mut queue: mpsc::UnboundedReceiver<Outgoing>,
    completions: CompletionSender,
    config: LinkConfig,
    state: Arc<LinkState>,
) {
    tokio::pin!(writer);
    // A write that makes no progress for this long means the peer is gone
    // (or stopped reading): the writer must not block forever on it.
    let liveness = config.liveness();
    let limit = liveness.failure_timeout();
    let mut clock = PeerClock::new(Instant::now());
    let mut pending = Pending::default();
    // What the frames written so far let the next leave out.
    let mut context = Context::default();
    // Encrypted payloads, on their way to the wire.
    let mut scratch: Vec<u8> = Vec::new();
    let result: std::io::Result<()> = async {
        loop {
            if pending.signals.is_empty() && pending.ring.is_empty() {
                let due = liveness.heartbeat_due_at(&clock);
                match tokio::time::timeout_at(due, queue.recv()).await {
                    Ok(Some(item)) => enqueue(item, &mut sealer, &mut context, &mut pending)?,
                    Ok(None) => {
                        if let Some(last) = pending.last {
                            let frame = (last, &mut context, &mut sealer);
                            write_bare(&mut writer, frame, &mut scratch, limit).await?;
                        }
                        return bounded(limit, writer.shutdown()).await;
                    }
                    Err(_) => {
                        let frame = (Header::Heartbeat, &mut context, &mut sealer);
                        write_bare(&mut writer, frame, &mut scratch, limit).await?;
                        clock.sent(Instant::now());
                        continue;
                    }
                }
            }
            let mut yielded = false;
            loop {
                while let Ok(item) = queue.try_recv() {
                    enqueue(item, &mut sealer, &mut context, &mut pending)?;
                }
                if yielded || pending.signals.is_empty() || !pending.ring.is_empty() {
                    break;
                }
                // Only pending.signals to write: let the tasks already woken run
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
            let Some((group, mut blocks)) = pending.ring.pop_front() else {
                bounded(limit, writer.write_all(&pending.signals)).await?;
                pending.signals.clear();
                clock.sent(Instant::now());
                continue;
            };
            // Alone on the link: larger frames; else fair shares.
            let frame = if pending.ring.is_empty() {
                config.max_frame()
            } else {
                config.chunk_size
            };
            let frame = config.unsent_limit.map_or(frame, |u| frame.min(u.max(1)));
            let block = blocks
                .front_mut()
                .expect("groups in the pending.ring have blocks");
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
            // The pending.signals sealed before this frame go ahead of it in the
            // same write: a ready-for-block to the peer a block goes to
            // rides in the block's first segment instead of one of its own.
            let mut frame = [
                IoSlice::new(&pending.signals),
                IoSlice::new(header.as_slice()),
                IoSlice::new(body),
                IoSlice::new(tag.as_slice()),
            ];
            bounded(limit, write_all_vectored(&mut writer, &mut frame)).await?;
            pending.signals.clear();
            block.sent += len;
            if block.sent == total {
                blocks.pop_front();
                tracing::trace!(group = group.0, len = total, "block sent");
                let _ = completions.send(Completion::Sent { group, to: peer });
            }
            if !blocks.is_empty() {
                pending.ring.push_back((group, blocks));
            }
            clock.sent(Instant::now());
        }
    }
    .await;
    state.mark_down();
    if let Err(e) = result {
        if state.is_closing() {
            tracing::debug!(peer = peer.0, error = %e, "connection lost as this node leaves");
        } else {
            tracing::warn!(peer = peer.0, error = %e, "connection lost while writing");
        }
        state.report_down(
            &completions,
            format_args!("connection lost while writing: {e}"),
        );
    }
}

/// Write a frame of a header alone (a heartbeat, the goodbye), sealed.
async fn write_bare<W: AsyncWrite>(
    writer: &mut Pin<&mut W>,
    (header, context, sealer): (Header, &mut Context, &mut Sealer),
    scratch: &mut Vec<u8>,
    limit: Duration,
) -> std::io::Result<()> {
    let header = context.encode(&header);
    let tag = sealer
        .seal_into(header.as_slice(), &[], scratch)
        .map_err(other)?
        .0;
    let mut frame = [
        IoSlice::new(header.as_slice()),
        IoSlice::new(tag.as_slice()),
    ];
    bounded(limit, write_all_vectored(writer, &mut frame)).await
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
