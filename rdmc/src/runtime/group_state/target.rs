//! The receive-target hook at work on the actor: a message's first block
//! has arrived; the hook's future chooses where the message goes, on a
//! task of its own (a file is resized and mapped on a blocking thread),
//! while the member's actions wait; then the message begins in that buffer.

use std::sync::Arc;

use bytes::Bytes;

use super::super::timing::{MessageTimings, Stopwatch};
use super::{DIGEST_LEN, GroupState, checked_in_place};
use crate::ids::GroupId;
use crate::proto::FailureKind;
use crate::target::{Incoming, ReceiveTarget, ReceivedFile};
use crate::transport::MessageBuffer;

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

/// Ask the group's hook where `pending` goes; the actor hears back through
/// [`TargetReady`].
pub(in crate::runtime) fn choose(g: &mut GroupState, mut pending: PendingBegin) {
    let targets = g.targets.as_ref().expect("a group with a hook");
    let extra = if g.digest { DIGEST_LEN } else { 0 };
    let incoming = Incoming {
        group: g.id,
        // The application's count (batches split), not the transfer's.
        seq: g.next_seq,
        size: pending.size - extra,
    };
    let chosen = targets.choose(incoming);
    let tx = g.target_tx.clone();
    let (group, seq, len) = (g.id, pending.seq, pending.len());
    let task = tokio::spawn(async move {
        let result = match chosen.await {
            Ok(ReceiveTarget::Memory) => Ok(None),
            Ok(ReceiveTarget::Buffer(vec)) => Ok(Some(MessageBuffer::from_vec(vec, len))),
            Ok(ReceiveTarget::File(file)) => map(file, len).await.map(Some),
            Err(e) => Err((
                FailureKind::ReceiveTarget,
                Some(format!("the hook failed: {e}")),
            )),
        };
        let _ = tx.send(TargetReady { group, seq, result });
    });
    pending.task = Some(task.abort_handle());
    tracing::debug!(seq, "waiting for the receive target");
    g.pending_begin = Some(pending);
}

/// The file's mapping; a mapping the address space has no room for is the
/// member running out of memory, as a buffer it could not get would be.
#[cfg(target_os = "linux")]
async fn map(file: std::fs::File, len: usize) -> Result<Arc<MessageBuffer>, NoBuffer> {
    let target = |detail: String| (FailureKind::ReceiveTarget, Some(detail));
    match tokio::task::spawn_blocking(move || MessageBuffer::map_file(file, len, true)).await {
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
async fn map(_file: std::fs::File, _len: usize) -> Result<Arc<MessageBuffer>, NoBuffer> {
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
/// unmap, and hand the application the file. Whether it hashed.
pub(in crate::runtime) fn deliver_file(
    g: &mut GroupState,
    seq: u64,
    buf: Arc<MessageBuffer>,
    timings: MessageTimings,
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
    g.deliver(Bytes::new(), Some(ReceivedFile::new(file, len)), timings);
    tracing::debug!(seq, "message complete (in a file)");
    g.digest
}
