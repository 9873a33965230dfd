//! The receive-target hook at work on the actor: a message's first block
//! has arrived; the hook's future chooses where the message goes, on a
//! task of its own (a file is resized and mapped on a blocking thread),
//! while the member's actions wait; then the message begins in that buffer.
//! A message received into a file whose blocks are written to it directly
//! is delivered once they all are.

use std::sync::Arc;

use bytes::Bytes;

use tokio::sync::oneshot;

use super::super::timing::{MessageTimings, Stopwatch};
use super::{DIGEST_LEN, GroupState, checked_in_place};
use crate::ids::GroupId;
use crate::proto::FailureKind;
use crate::target::{Incoming, ReceiveTarget, ReceivedFile};
use crate::transport::{MessageBuffer, Transport};

/// A message begun by the member, waiting for its buffer.
pub(crate) struct PendingBegin {
    pub(in crate::runtime) seq: u64,
    /// Its size on the wire (with the digest, if any).
    pub(in crate::runtime) size: u64,
    pub(in crate::runtime) first_block: usize,
    pub(in crate::runtime) first_block_len: usize,
    pub(in crate::runtime) block_size: usize,
    pub(in crate::runtime) watch: Stopwatch,
    /// The hook's task, while it runs.
    pub(in crate::runtime) task: Option<tokio::task::AbortHandle>,
}

impl PendingBegin {
    /// The buffer's length in bytes (sizes above `usize` are refused by
    /// the core's largest message size).
    pub(in crate::runtime) fn len(&self) -> usize {
        usize::try_from(self.size).unwrap_or(usize::MAX)
    }

    /// The group ended: stop the hook's task.
    pub(in crate::runtime) fn abort(self) {
        if let Some(task) = self.task {
            task.abort();
        }
    }
}

/// What a hook's task reports to the actor.
#[derive(Debug)]
pub(crate) struct TargetReady {
    pub(in crate::runtime) group: GroupId,
    pub(in crate::runtime) seq: u64,
    /// The buffer (`None`: memory from the node's pool), or why there is none.
    pub(in crate::runtime) result: Result<Option<Arc<MessageBuffer>>, NoBuffer>,
}

/// What the tasks and threads working for the receive targets report to
/// the actor.
#[derive(Debug)]
pub(crate) enum TargetEvent {
    /// A hook chose a message's buffer (or failed to).
    Ready(TargetReady),
    /// Every block of message `seq`, received into a file written
    /// directly, is in the file (or could not be written).
    Written {
        group: GroupId,
        seq: u64,
        result: std::io::Result<()>,
    },
}

impl TargetEvent {
    /// The group it is for.
    pub(in crate::runtime) fn group(&self) -> GroupId {
        match self {
            TargetEvent::Ready(ready) => ready.group,
            TargetEvent::Written { group, .. } => *group,
        }
    }
}

/// A message complete at this member whose blocks are still being written
/// to its file: delivered once they are.
pub(in crate::runtime) struct Writing {
    seq: u64,
    /// Its number in the application's count, taken when it completed.
    number: u64,
    buf: Arc<MessageBuffer>,
    timings: MessageTimings,
    /// Whether every message was delivered meanwhile: the stream ends
    /// after this one.
    pub(in crate::runtime) last: bool,
}

/// Carry out `event` at its group `g`: begin the message whose buffer is
/// ready, deliver the message that is written.
pub(in crate::runtime) fn on_event<T: Transport>(
    g: &mut GroupState,
    transport: &mut T,
    event: TargetEvent,
) {
    match event {
        TargetEvent::Ready(ready) => {
            let Some(pending) = g.pending_begin.take_if(|p| p.seq == ready.seq) else {
                return;
            };
            let buf = match ready.result {
                Ok(Some(buf)) => Ok(buf),
                Ok(None) => transport
                    .alloc_buffer(pending.len())
                    .map_err(|_| (FailureKind::OutOfMemory { size: pending.size }, None)),
                Err(no_buffer) => Err(no_buffer),
            };
            begin_message(g, pending, buf);
        }
        TargetEvent::Written { seq, result, .. } => {
            let Some(writing) = g.writing.take_if(|w| w.seq == seq) else {
                return;
            };
            if let Err(e) = result {
                tracing::warn!(seq, error = %e, "cannot write a message to its file");
                let detail = format!("cannot write the file: {e}");
                return g.member.handle_local_failure(
                    None,
                    FailureKind::ReceiveTarget,
                    Some(detail),
                );
            }
            deliver_file(g, seq, writing.buf, writing.timings, writing.number);
            if writing.last {
                g.deliveries = None;
            }
        }
    }
}

/// Message `seq`, complete here in `buf`, a file written directly: deliver
/// it once every block is in the file; the next message's target waits
/// for that.
pub(in crate::runtime) fn deliver_when_written(
    g: &mut GroupState,
    seq: u64,
    buf: Arc<MessageBuffer>,
    timings: MessageTimings,
) {
    let (tx, rx) = oneshot::channel();
    g.written = Some(rx);
    let (events, group) = (g.target_tx.clone(), g.id);
    buf.when_written(Box::new(move |result| {
        let _ = events.send(TargetEvent::Written { group, seq, result });
        let _ = tx.send(());
    }));
    // The next message's number (its file's name, say) follows this one's.
    g.writing = Some(Writing {
        seq,
        number: g.take_number(),
        buf,
        timings,
        last: false,
    });
}

/// Ask the group's hook where `pending` goes (a batch goes to memory); the
/// actor hears back through [`TargetEvent::Ready`], after the message
/// before is delivered.
pub(in crate::runtime) fn choose(g: &mut GroupState, mut pending: PendingBegin, batch: bool) {
    let targets = g.targets.as_ref().expect("a group with a hook");
    let extra = if g.digest { DIGEST_LEN } else { 0 };
    let incoming = Incoming {
        group: g.id,
        // The application's count (batches split), not the transfer's.
        seq: g.next_seq,
        size: pending.size - extra,
    };
    let chosen = if batch {
        Box::pin(std::future::ready(Ok(ReceiveTarget::Memory)))
    } else {
        targets.choose(incoming)
    };
    let tx = g.target_tx.clone();
    let (group, seq, len) = (g.id, pending.seq, pending.len());
    // A digest is checked by reading the file back: through its mapping.
    let direct = !g.digest;
    let written = g.written.take();
    let task = tokio::spawn(async move {
        let result = match chosen.await {
            Ok(ReceiveTarget::Memory) => Ok(None),
            Ok(ReceiveTarget::Buffer(vec)) => Ok(Some(MessageBuffer::from_vec(vec, len))),
            Ok(ReceiveTarget::File(file)) => map(file, len, direct).await.map(Some),
            Err(e) => Err((
                FailureKind::ReceiveTarget,
                Some(format!("the hook failed: {e}")),
            )),
        };
        // The message before first (its event is sent before this).
        if let Some(written) = written {
            let _ = written.await;
        }
        let _ = tx.send(TargetEvent::Ready(TargetReady { group, seq, result }));
    });
    pending.task = Some(task.abort_handle());
    tracing::debug!(seq, "waiting for the receive target");
    g.pending_begin = Some(pending);
}

/// The file's mapping (written directly if `direct`); a mapping the
/// address space has no room for is the member running out of memory, as
/// a buffer it could not get would be.
#[cfg(target_os = "linux")]
async fn map(
    file: std::fs::File,
    len: usize,
    direct: bool,
) -> Result<Arc<MessageBuffer>, NoBuffer> {
    let target = |detail: String| (FailureKind::ReceiveTarget, Some(detail));
    let map = move || {
        if direct {
            MessageBuffer::map_file_direct(file, len)
        } else {
            MessageBuffer::map_file(file, len, true)
        }
    };
    match tokio::task::spawn_blocking(map).await {
        Err(e) => Err(target(e.to_string())),
        Ok(Ok(buf)) => Ok(buf),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::OutOfMemory => Err((
            FailureKind::OutOfMemory { size: len as u64 },
            Some(format!("cannot map the file: {e}")),
        )),
        Ok(Err(e)) => Err(target(format!("cannot map the file: {e}"))),
    }
}

#[cfg(not(target_os = "linux"))]
async fn map(
    _file: std::fs::File,
    _len: usize,
    _direct: bool,
) -> Result<Arc<MessageBuffer>, NoBuffer> {
    Err((
        FailureKind::ReceiveTarget,
        Some("file targets need Linux".to_owned()),
    ))
}

/// Why a message has no buffer: the cause its group fails with, and what
/// went wrong in words when the kind does not say it.
pub(in crate::runtime) type NoBuffer = (FailureKind, Option<String>);

/// Begin `pending` in `buf`: copy its first block there from the bounce
/// buffer. Without a buffer, the group fails naming this member.
pub(in crate::runtime) fn begin_message(
    g: &mut GroupState,
    pending: PendingBegin,
    buf: Result<Arc<MessageBuffer>, NoBuffer>,
) {
    let PendingBegin {
        seq,
        size,
        first_block,
        first_block_len,
        block_size,
        mut watch,
        ..
    } = pending;
    let buf = match buf {
        Ok(buf) => buf,
        Err((kind, detail)) => {
            tracing::warn!(seq, %kind, ?detail, "cannot receive a message");
            // Fails the group; the actions queued for this message
            // (its receives and sends) find no buffer and are skipped.
            g.member.handle_local_failure(None, kind, detail);
            return;
        }
    };
    let Some(bounce) = g.bounce.as_ref() else {
        unreachable!("non-roots have a bounce buffer");
    };
    let copy_start = std::time::Instant::now();
    buf.region(first_block * block_size, first_block_len)
        .write(bounce.block(0, first_block_len).as_slice());
    watch.add_copy(copy_start.elapsed());
    tracing::debug!(seq, size, "message begins");
    g.receiving = Some((seq, buf));
    g.receive_watch = Some(watch);
}

/// Begin `pending` in `buf`, which already holds its first (and only)
/// block: the group's first-block buffer it arrived in.
pub(in crate::runtime) fn begin_in_place(
    g: &mut GroupState,
    pending: PendingBegin,
    buf: Arc<MessageBuffer>,
) {
    tracing::debug!(
        seq = pending.seq,
        size = pending.size,
        "message begins in place"
    );
    g.receiving = Some((pending.seq, buf));
    g.receive_watch = Some(pending.watch);
}

/// Deliver message `seq`, received into a file's mapping `buf`: check its
/// digest (if the group's messages carry one) and cut it off the file,
/// unmap, and hand the application the file as its message `number`.
/// Whether it hashed.
pub(in crate::runtime) fn deliver_file(
    g: &mut GroupState,
    seq: u64,
    buf: Arc<MessageBuffer>,
    timings: MessageTimings,
    number: u64,
) -> bool {
    let file = Arc::clone(buf.file().expect("a file-backed buffer"));
    let mut len = buf.len() as u64;
    if g.digest {
        if !checked_in_place(&buf) {
            let suspect = g.block_senders.first().copied();
            tracing::warn!(seq, "message corrupted: digest mismatch");
            g.member
                .handle_local_failure(suspect, FailureKind::DigestMismatch { seq }, None);
            return true;
        }
        len -= DIGEST_LEN;
        if let Err(e) = file.set_len(len) {
            g.member.handle_local_failure(
                None,
                FailureKind::ReceiveTarget,
                Some(format!("cannot cut the digest off the file: {e}")),
            );
            return true;
        }
    }
    g.block_senders.clear();
    drop(buf);
    let file = Some(ReceivedFile::new(file, len));
    g.deliver_numbered(number, Bytes::new(), file, timings);
    tracing::debug!(seq, "message complete (in a file)");
    g.digest
}
