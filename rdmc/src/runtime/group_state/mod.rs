//! The state the actor keeps per group beside its [`GroupMember`], and the
//! execution of the member's actions over the transport.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

mod acks;
pub(super) mod target;

use super::message::Message;
use super::timing::{MessageTimings, Stopwatch, message_span};
use crate::collections::HashMap;
use crate::config::BATCH_HEADER_BYTES;
use crate::error::Error;
use crate::ids::{GroupId, NodeId};
use crate::in_flight::InFlight;
use crate::proto::{
    Action, Control, Failure, FailureKind, GroupMember, MemberError, READY_WINDOW, Rank,
};
use crate::stats::{GroupCounters, NodeCounters, Role};
use crate::target::{ReceiveTargets, ReceivedFile};
use crate::transport::{BlockRef, MessageBuffer, Signal, Transport};
use target::{PendingBegin, TargetEvent, Writing};

/// The receiving end of a group's deliveries.
/// Bytes of a message's digest on the wire (BLAKE3).
pub(super) const DIGEST_LEN: u64 = blake3::OUT_LEN as u64;

pub(crate) type Deliveries = mpsc::UnboundedReceiver<Result<Message, Error>>;

/// Where a root's send future learns its outcome.
pub(super) type SendReply = oneshot::Sender<Result<MessageTimings, Error>>;

pub(crate) use acks::Acks;

/// What a member's [`Group`](crate::Group) handle is made of.
#[derive(Debug)]
pub(crate) struct Joined {
    pub(crate) deliveries: Deliveries,
    pub(crate) in_flight: Arc<InFlight>,
    /// The group's counters ([`GroupStats`](crate::GroupStats)).
    pub(crate) counters: Arc<GroupCounters>,
    /// The group's largest message (its root's sends check it).
    pub(crate) max_message_size: u64,
    /// When this member (a receiver) has a message.
    pub(crate) durability: crate::config::Durability,
}

/// Where a `create_group` future learns its outcome.
pub(crate) type CreateReply = oneshot::Sender<Result<Joined, Error>>;

/// A creation in progress: the group exists locally, but the user gets its
/// handle only once every other member has joined (the node's
/// [`Rendezvous`](crate::proto::Rendezvous) says when).
pub(super) struct Creating {
    pub(super) reply: CreateReply,
    pub(super) joined: Joined,
}

/// The handle of a group whose create future was dropped (a cancelled
/// `create_group`) once its rendezvous completed: it waits for a
/// `create_group` of the same group to adopt it, until `until` (also in
/// the actor's timers).
pub(super) struct Unclaimed {
    pub(super) joined: Joined,
    pub(super) until: tokio::time::Instant,
}

/// Root: a message (or a batch of them) submitted and not yet complete.
pub(super) struct Sending {
    pub(super) seq: u64,
    /// The transfer's bytes: the message, or the batch's frame.
    pub(super) data: Bytes,
    /// The message's digest, sent after its bytes (when the group's
    /// messages carry one).
    pub(super) digest: Option<blake3::Hash>,
    /// The mapped file the bytes are, for a message sent from a file.
    pub(super) source: Option<Arc<MessageBuffer>>,
    /// The send future of each message in the transfer, in order.
    pub(super) replies: Vec<SendReply>,
    pub(super) watch: Stopwatch,
}

/// Root: small messages sent while another transfer is in flight, waiting
/// to go out as one batch when the transfers before them are done.
pub(super) struct OpenBatch {
    pub(super) messages: Vec<Bytes>,
    /// Bytes of the batch's frame so far.
    pub(super) bytes: usize,
    pub(super) replies: Vec<(SendReply, Acks)>,
    /// When its first message was sent.
    pub(super) started: Instant,
}

pub(super) struct GroupState {
    pub(super) id: GroupId,
    pub(super) member: GroupMember,
    pub(super) members: Vec<NodeId>,
    pub(super) rank_of: HashMap<NodeId, Rank>,
    pub(super) block_size: usize,
    /// Whether every message carries a digest after its bytes
    /// ([`GroupConfig::with_message_digest`](crate::GroupConfig::with_message_digest)).
    pub(super) digest: bool,
    /// With digests: the members that sent blocks of the message being
    /// received, in the order of their first block (the first is blamed
    /// for a corrupted copy).
    pub(super) block_senders: Vec<Rank>,
    /// Where each message's first block lands before its size is known.
    pub(super) bounce: Option<Arc<MessageBuffer>>,
    /// The message being received.
    pub(super) receiving: Option<(u64, Arc<MessageBuffer>)>,
    /// The timings of the message being received.
    pub(super) receive_watch: Option<Stopwatch>,
    /// When the completion being handled was taken from the transport.
    pub(super) event_at: Instant,
    /// Whether, after the last event, the member only waited for a
    /// ready-for-block (for [`MessageTimings::waiting`]).
    pub(super) waiting_for_ready: bool,
    /// Root: messages submitted and not yet complete, in order.
    pub(super) sending: VecDeque<Sending>,
    pub(super) deliveries: Option<mpsc::UnboundedSender<Result<Message, Error>>>,
    pub(super) close_waiters: Vec<oneshot::Sender<Result<(), Error>>>,
    pub(super) outcome: Option<Result<(), Error>>,
    /// Whether the user's handle is gone.
    pub(super) left: bool,
    pub(super) span: tracing::Span,
    /// Until every member has joined.
    pub(super) creating: Option<Creating>,
    /// The group's digest as this node created it: a `create_group` that
    /// adopts a cancelled creation of the group must come to the same.
    pub(super) identity: u128,
    /// How long a cancelled creation's group waits to be adopted: the
    /// group's create timeout.
    pub(super) create_timeout: std::time::Duration,
    /// A cancelled creation's group waiting to be adopted.
    pub(super) unclaimed: Option<Unclaimed>,
    /// The member's progress deadline as entered in the actor's timers
    /// (possibly earlier than the member's current one).
    pub(super) deadline: Option<tokio::time::Instant>,
    /// The peers the transport reported unreachable and the group has not
    /// acted on yet, in the order reported: the group acts on them when
    /// the grace period ends, unless a report of the failure that caused
    /// it arrived first (see [`FAILURE_GRACE`](super::actor::FAILURE_GRACE)).
    pub(super) unreachable: Vec<Rank>,
    /// Members connected again since the group was made (a new
    /// connection, or a new run of their node): whatever comes from them
    /// over the new connection came after a gap, and is ignored.
    pub(super) lost: Vec<Rank>,
    /// Which of the node's groups this is, counted as they are created
    /// (a peer's new connection is a gap only for groups made before its
    /// last one ended).
    pub(super) made: u64,
    /// The end of the grace period (also entered in the actor's timers).
    pub(super) grace: Option<tokio::time::Instant>,
    /// The root left (said goodbye) while this member's verdict was on its
    /// way through relays: the root said its last word, and failing to
    /// reach it now is no failure of it.
    pub(super) root_left: bool,
    /// Receiver: the application's hook choosing where messages go.
    pub(super) targets: Option<ReceiveTargets>,
    /// Where the hook's tasks report to the actor.
    pub(super) target_tx: mpsc::UnboundedSender<TargetEvent>,
    /// Receiver: a message whose target the hook is choosing; the member's
    /// actions wait meanwhile.
    pub(super) pending_begin: Option<PendingBegin>,
    /// Receiver: a message complete here, being written to its file.
    pub(super) writing: Option<Writing>,
    /// Receiver: resolves once the message being written is delivered
    /// (the next message's target waits for it).
    pub(super) written: Option<oneshot::Receiver<()>>,
    /// Root: messages not yet taken by every member, with who waits for that.
    pub(super) durable: VecDeque<(u64, Acks)>,
    /// Root: messages taken by every member and not yet persisted by every
    /// member, with who waits for that.
    pub(super) persisting: VecDeque<(u64, oneshot::Sender<Result<(), Error>>)>,
    /// Root: the count of messages in flight, shared with the handle.
    pub(super) in_flight: Arc<InFlight>,
    /// The largest batch of small messages, if the group batches them
    /// ([`GroupConfig::with_small_message_batching`](crate::GroupConfig::with_small_message_batching)).
    pub(super) batching: Option<usize>,
    /// Root: the batch gathering behind the transfers in flight.
    pub(super) open_batch: Option<OpenBatch>,
    /// Receiver: whether the transfer being received is a batch.
    pub(super) receiving_batch: bool,
    /// Receiver: the sequence number of the next message delivered (the
    /// application's count, batches split).
    pub(super) next_seq: u64,
    /// Receiver: for each transfer delivered whose messages the
    /// application has not all taken, how many it has not taken yet.
    pub(super) untaken: VecDeque<usize>,
    /// Receiver: messages the application took.
    pub(super) app_taken: u64,
    /// Receiver: for each transfer taken whose messages the application
    /// has not all persisted, its count of messages taken at the
    /// transfer's end.
    pub(super) transfer_ends: VecDeque<u64>,
    /// Receiver: transfers whose every message the application persisted.
    pub(super) transfers_persisted: u64,
    /// The group's counters, shared with its handle.
    pub(super) counters: Arc<GroupCounters>,
    /// The node's counters.
    pub(super) node_counters: Arc<NodeCounters>,
}

impl GroupState {
    /// A cancelled creation's group that no `create_group` adopted before
    /// its time ran out (`now`): it is left (the other members see this
    /// node leave it).
    pub(super) fn unclaimed_expired(&mut self, now: tokio::time::Instant) {
        if self.unclaimed.as_ref().is_none_or(|u| u.until > now) {
            return;
        }
        self.span.in_scope(|| {
            tracing::warn!("no create_group adopted the cancelled creation's group: leaving it");
        });
        self.unclaimed = None;
        self.left = true;
        self.member.shutdown();
    }

    /// The group's entries in the actor's timers: its progress deadline,
    /// the end of its grace period, and until when it waits to be adopted.
    pub(super) fn armed(&self) -> impl Iterator<Item = tokio::time::Instant> + use<> {
        let unclaimed = self.unclaimed.as_ref().map(|u| u.until);
        [self.deadline, self.grace, unclaimed].into_iter().flatten()
    }

    /// Receiver: hand the application its next message: `data`, or the
    /// file it arrived in.
    pub(super) fn deliver(
        &mut self,
        data: Bytes,
        file: Option<ReceivedFile>,
        timings: MessageTimings,
    ) {
        let seq = self.take_number();
        self.deliver_numbered(seq, data, file, timings);
    }

    /// Receiver: the application's count for the next message delivered,
    /// taken.
    pub(super) fn take_number(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq - 1
    }

    /// Receiver: hand the application its message `seq` (in its count,
    /// taken earlier with [`take_number`](Self::take_number)).
    pub(super) fn deliver_numbered(
        &mut self,
        seq: u64,
        data: Bytes,
        file: Option<ReceivedFile>,
        timings: MessageTimings,
    ) {
        let message = Message {
            group: self.id,
            seq,
            data,
            file,
            timings,
        };
        NodeCounters::completed(
            &self.counters,
            Role::Receiver,
            1,
            (message.timings.total, message.timings.waiting),
        );
        if let Some(tx) = &self.deliveries {
            let _ = tx.send(Ok(message));
        }
    }

    /// Root: answer a message's send, delivered and persisted futures
    /// with `error` and count it out of the messages in flight (it never
    /// went out).
    pub(super) fn fail_send(&self, reply: SendReply, acks: Acks, error: &Error) {
        self.in_flight.remove();
        let _ = reply.send(Err(error.clone()));
        acks.fail(error);
    }

    /// Root: a message of `len` bytes may join a batch.
    pub(super) fn batchable(&self, len: usize) -> bool {
        self.batching
            .is_some_and(|max| len.saturating_add(BATCH_HEADER_BYTES) <= max)
    }

    /// Root: send the open batch, if any (a batch of one as a plain
    /// message); its messages fail together if the member refuses it.
    pub(super) fn seal_batch(&mut self) {
        let Some(batch) = self.open_batch.take() else {
            return;
        };
        let OpenBatch {
            mut messages,
            bytes,
            replies,
            started,
        } = batch;
        let (data, batch) = if messages.len() == 1 {
            (messages.pop().expect("one message"), false)
        } else {
            let mut frame = Vec::with_capacity(bytes);
            for m in &messages {
                let len = u32::try_from(m.len()).expect("batched messages are small");
                frame.extend_from_slice(&len.to_le_bytes());
                frame.extend_from_slice(m);
            }
            (Bytes::from(frame), true)
        };
        let extra = if self.digest { DIGEST_LEN } else { 0 };
        let size = data.len() as u64 + extra;
        let submitted = if batch {
            self.member.submit_batch(size)
        } else {
            self.member.submit(size)
        };
        match submitted {
            Ok(seq) => {
                tracing::trace!(seq, messages = replies.len(), bytes = size, "batch sealed");
                let digest = self.digest.then(|| blake3::hash(&data));
                let span = message_span(&self.span, seq, data.len());
                let mut sends = Vec::with_capacity(replies.len());
                for (reply, acks) in replies {
                    sends.push(reply);
                    self.durable.push_back((seq, acks));
                }
                self.sending.push_back(Sending {
                    seq,
                    data,
                    digest,
                    source: None,
                    replies: sends,
                    watch: Stopwatch::start(started).traced(span),
                });
            }
            Err(e) => {
                let e = member_error(self, e);
                for (reply, acks) in replies {
                    self.fail_send(reply, acks, &e);
                }
            }
        }
    }
}

/// The messages of a batch's frame (each a 4-byte little-endian length and
/// that many bytes, to the frame's end), or what is wrong with it.
pub(super) fn split_batch(frame: &Bytes) -> Result<Vec<Bytes>, &'static str> {
    let mut messages = Vec::new();
    let mut at = 0;
    while at < frame.len() {
        let Some(header) = frame.get(at..at + BATCH_HEADER_BYTES) else {
            return Err("a batch ends inside a message's length");
        };
        let len = u32::from_le_bytes(header.try_into().expect("4 bytes")) as usize;
        at += BATCH_HEADER_BYTES;
        if len > frame.len() - at {
            return Err("a batched message runs past the batch's end");
        }
        messages.push(frame.slice(at..at + len));
        at += len;
    }
    if messages.len() < 2 {
        return Err("a batch of fewer than two messages");
    }
    Ok(messages)
}

pub(super) fn member_error(g: &GroupState, e: MemberError) -> Error {
    match e {
        MemberError::NotRoot => Error::NotRoot(g.id),
        MemberError::Closed => Error::Closed(g.id),
        MemberError::Failed(f) => failure_error(g, &f),
        MemberError::TooLarge { size, max } => Error::MessageTooLarge { size, max },
        MemberError::NoBatches => {
            Error::InvalidConfig("the group does not carry batches of small messages")
        }
        MemberError::TooManyMessages => Error::TooManyMessages {
            group: g.id,
            max: crate::proto::MAX_MESSAGES,
        },
    }
}

fn failure_error(g: &GroupState, f: &Failure) -> Error {
    Error::GroupFailed {
        group: g.id,
        suspect: f.suspect.map(|r| g.members[r]),
        kind: f.kind,
        reported_by: f.reported_by.map(|r| g.members[r]),
        detail: f.detail.clone(),
    }
}

/// The ready-for-blocks one pass over a member's actions sends, counted
/// per peer: each peer's go as one signal (several at most a window's
/// worth each), once the receives they announce are posted.
#[derive(Debug, Default)]
pub(super) struct ReadyForBlocks(Vec<(Rank, usize)>);

impl ReadyForBlocks {
    /// One more ready-for-block to `to`.
    pub(super) fn add(&mut self, to: Rank) {
        match self.0.iter_mut().find(|(r, _)| *r == to) {
            Some((_, n)) => *n += 1,
            None => self.0.push((to, 1)),
        }
    }

    /// Send those to `to` now (before a block to it).
    pub(super) fn send_to<T: Transport>(&mut self, to: Rank, g: &GroupState, transport: &mut T) {
        if let Some(at) = self.0.iter().position(|(r, _)| *r == to) {
            let (_, count) = self.0.swap_remove(at);
            send_ready(g, transport, to, count);
        }
    }

    /// Send them.
    pub(super) fn send<T: Transport>(self, g: &GroupState, transport: &mut T) {
        for (to, count) in self.0 {
            send_ready(g, transport, to, count);
        }
    }
}

/// Send `left` ready-for-blocks to `to`, a window's worth per signal.
fn send_ready<T: Transport>(g: &GroupState, transport: &mut T, to: Rank, mut left: usize) {
    // Not to a member connected again since (see `Action::SendControl`).
    if g.lost.contains(&to) {
        return;
    }
    while left > 0 {
        let count = left.min(READY_WINDOW);
        let signal = match count {
            1 => Signal::Group(Control::ReadyForBlock),
            _ => Signal::ReadyForBlocks { count: count as u8 },
        };
        transport.send_signal(g.id, g.members[to], signal);
        left -= count;
    }
}

/// Carry out `action`; whether it hashed a message (checked its digest).
pub(super) fn execute<T: Transport>(g: &mut GroupState, transport: &mut T, action: Action) -> bool {
    match action {
        // Receiving a transfer.
        Action::PostFirstBlockRecv { from } => post_first_block_recv(g, transport, from),
        Action::BeginMessage {
            seq,
            size,
            first_block,
            first_block_len,
            block_size,
            batch,
        } => {
            let pending = PendingBegin {
                seq,
                size,
                first_block,
                first_block_len,
                block_size,
                watch: Stopwatch::start(g.event_at).traced(message_span(
                    &g.span,
                    seq,
                    usize::try_from(size).unwrap_or(usize::MAX),
                )),
                task: None,
            };
            begin_message(g, transport, pending, batch);
        }
        Action::PostRecv {
            from,
            seq,
            offset,
            len,
        } => {
            if let Some(buf) = receiving(g, seq) {
                transport.post_recv(g.id, g.members[from], buf.region(offset, len));
            }
        }
        // Sending (and relaying) blocks, and the member's control signals.
        Action::SendBlock {
            to,
            seq,
            offset,
            len,
            immediate,
        } => send_block(g, transport, to, seq, offset, len, immediate),
        Action::ReleaseBlock { seq, offset, len } => release_block(g, seq, offset, len),
        // Not to a member connected again since the group was made (a new
        // run of its node, or a new connection): it is not in this group
        // any more, and a new run may have made a group of the same id.
        Action::SendControl { to, control } if !g.lost.contains(&to) => {
            transport.send_signal(g.id, g.members[to], Signal::Group(control));
        }
        Action::SendControl { .. } => {}
        // A transfer's end, and the application's taking its messages.
        Action::MessageComplete { seq } => return complete_message(g, seq),
        Action::MessageDelivered { seq } => acks::answer_delivered(g, seq),
        Action::MessagePersisted { seq } => acks::answer_persisted(g, seq),
        Action::AllDelivered => {
            // Every message is in the stream (or the one being written
            // will be): it ends once they are read.
            tracing::debug!("every message delivered");
            match g.writing.as_mut() {
                Some(writing) => writing.last = true,
                None => g.deliveries = None,
            }
        }
        // The group's end.
        Action::Closed => close(g, transport),
        Action::Failed(failure) => fail(g, transport, &failure),
    }
    false
}

/// Post the receive of a transfer's first block from `from` into the
/// group's first-block buffer.
fn post_first_block_recv<T: Transport>(g: &GroupState, transport: &mut T, from: Rank) {
    // A member without one failed at creation (out of memory).
    if let Some(bounce) = g.bounce.as_ref() {
        transport.post_recv(g.id, g.members[from], bounce.region(0, g.block_size));
    }
}

/// A transfer's first block arrived: give its message a buffer (the
/// application's hook chooses one, the first-block buffer becomes it, or a
/// fresh one is allocated) and begin it there.
fn begin_message<T: Transport>(
    g: &mut GroupState,
    transport: &mut T,
    pending: PendingBegin,
    batch: bool,
) {
    g.receiving_batch = batch;
    // A batch's messages go to memory: the hook chooses for one message at
    // a time. A batch after a message still being written waits for it.
    if g.targets.is_some() && (!batch || g.writing.is_some()) {
        target::choose(g, pending, batch);
    } else if let Some(buf) = take_bounce_as_message(g, transport, &pending) {
        target::begin_in_place(g, pending, buf);
    } else {
        let size = pending.size;
        let buf = transport
            .alloc_buffer(pending.len())
            .map_err(|_| (FailureKind::OutOfMemory { size }, None));
        target::begin_message(g, pending, buf);
    }
}

/// Send bytes `offset..offset + len` of message `seq` to `to`: the root
/// from the message it sends, a relay from the buffer it receives into.
fn send_block<T: Transport>(
    g: &mut GroupState,
    transport: &mut T,
    to: Rank,
    seq: u64,
    offset: usize,
    len: usize,
    immediate: u64,
) {
    let (id, peer) = (g.id, g.members[to]);
    if !g.member.is_root() {
        if let Some(buf) = receiving(g, seq) {
            transport.post_send(id, peer, buf.block(offset, len), immediate);
            g.node_counters.sent(&g.counters, peer, len);
        }
        return;
    }
    let sending = g
        .sending
        .iter_mut()
        .find(|s| s.seq == seq)
        .expect("the root sends only submitted messages");
    let block = match &sending.digest {
        Some(digest) if offset + len > sending.data.len() => {
            BlockRef::from_message(with_digest(&sending.data, digest, offset, len), 0, len)
        }
        // A file's block as part of its mapping (a transport that registers
        // memory sends it from a registered copy).
        _ => match &sending.source {
            Some(source) => source.block(offset, len),
            None => BlockRef::from_message(sending.data.clone(), offset, len),
        },
    };
    transport.post_send(id, peer, block, immediate);
    sending.watch.end_setup(Instant::now());
    g.node_counters.sent(&g.counters, peer, len);
}

/// The member is done with bytes `offset..offset + len` of message `seq`:
/// the buffer (or the file sent from) may let them go.
fn release_block(g: &GroupState, seq: u64, offset: usize, len: usize) {
    if g.member.is_root() {
        let source = g.sending.iter().find(|s| s.seq == seq);
        if let Some(source) = source.and_then(|s| s.source.as_ref()) {
            // A block overlapping the digest is partly past the file.
            let len = len.min(source.len().saturating_sub(offset));
            source.release(offset, len);
        }
    } else if let Some(buf) = receiving(g, seq) {
        buf.release(offset, len);
    }
}

/// Transfer `seq` is complete at this member: the root answers its send
/// futures, a receiver delivers its messages. Whether it hashed the
/// message (checked its digest).
fn complete_message(g: &mut GroupState, seq: u64) -> bool {
    let now = Instant::now();
    if !g.member.is_root() {
        return complete_receiving(g, seq, now);
    }
    let sending = g.sending.pop_front().expect("a message was in flight");
    debug_assert_eq!(sending.seq, seq);
    let timings = sending.watch.finish(now);
    let messages = sending.replies.len() as u64;
    NodeCounters::completed(
        &g.counters,
        Role::Root,
        messages,
        (timings.total, timings.waiting),
    );
    for reply in sending.replies {
        let _ = reply.send(Ok(timings));
    }
    if g.sending.is_empty() {
        // Nothing in flight: what gathered meanwhile goes now.
        g.seal_batch();
    }
    tracing::debug!(seq, "message complete");
    false
}

/// Receiver: transfer `seq` arrived whole; check its digest, split its
/// batch and deliver its messages (or its file). Whether it hashed the
/// message.
fn complete_receiving(g: &mut GroupState, seq: u64, now: Instant) -> bool {
    let Some((s, buf)) = g.receiving.take() else {
        // Its buffer could not be had: the group failed, and this
        // completion (queued before) is moot.
        debug_assert!(g.member.is_finished());
        return false;
    };
    debug_assert_eq!(s, seq);
    let watch = g
        .receive_watch
        .take()
        .unwrap_or_else(|| Stopwatch::start(g.event_at));
    if buf.file().is_some() {
        g.untaken.push_back(1);
        if buf.writes_directly() {
            target::deliver_when_written(g, seq, buf, watch.finish(now));
            return false;
        }
        let number = g.take_number();
        return target::deliver_file(g, seq, buf, watch.finish(now), number);
    }
    let Some(data) = intact_received(g, seq, buf.into_bytes()) else {
        return true;
    };
    let timings = watch.finish(now);
    let Some(messages) = received_messages(g, seq, data) else {
        return g.digest;
    };
    g.untaken.push_back(messages.len());
    for data in messages {
        g.deliver(data, None, timings);
    }
    tracing::debug!(seq, "message complete");
    g.digest
}

/// Receiver: the bytes of transfer `seq` as received, without their digest
/// if the group's messages carry one; `None` if the digest does not match
/// (the member failed, blaming the first member that sent it a block).
fn intact_received(g: &mut GroupState, seq: u64, data: Bytes) -> Option<Bytes> {
    let senders = std::mem::take(&mut g.block_senders);
    if !g.digest {
        return Some(data);
    }
    let intact = checked(data);
    if intact.is_none() {
        let suspect = senders.first().copied();
        tracing::warn!(seq, ?senders, "message corrupted: digest mismatch");
        let corrupted = FailureKind::DigestMismatch { seq };
        g.member.handle_local_failure(suspect, corrupted, None);
    }
    intact
}

/// Receiver: the messages transfer `seq` carries (a batch's, split, or the
/// one it is); `None` if it is a batch that lies (the member failed,
/// blaming the root).
fn received_messages(g: &mut GroupState, seq: u64, data: Bytes) -> Option<Vec<Bytes>> {
    if !std::mem::take(&mut g.receiving_batch) {
        return Some(vec![data]);
    }
    match split_batch(&data) {
        Ok(messages) => Some(messages),
        Err(detail) => {
            // Only the root packs batches (relays copy bytes).
            tracing::warn!(seq, detail, "a batch that lies");
            let detail = Some(detail.to_owned());
            let violation = FailureKind::ProtocolViolation;
            g.member.handle_local_failure(Some(0), violation, detail);
            None
        }
    }
}

/// The group closed: every message's futures learn their outcome.
fn close<T: Transport>(g: &mut GroupState, transport: &mut T) {
    tracing::info!("group closed");
    acks::answer_closed(g);
    finish(g, transport, Ok(()));
}

/// The group failed: every send, delivered future, message in progress and
/// the delivery stream learn why.
fn fail<T: Transport>(g: &mut GroupState, transport: &mut T, failure: &Failure) {
    if g.left {
        // The application left the group (dropped its handle, or its
        // process is ending): what follows is its own doing, not news.
        tracing::debug!(%failure, "group failed after the application left it");
    } else {
        tracing::warn!(%failure, "group failed");
    }
    NodeCounters::group_failed(&failure.kind);
    let error = failure_error(g, failure);
    for sending in g.sending.drain(..) {
        for reply in sending.replies {
            let _ = reply.send(Err(error.clone()));
        }
    }
    if let Some(batch) = g.open_batch.take() {
        for (reply, acks) in batch.replies {
            g.fail_send(reply, acks, &error);
        }
    }
    acks::answer_failed(g, &error);
    if let Some(pending) = g.pending_begin.take() {
        pending.abort();
    }
    g.receiving = None;
    g.receive_watch = None;
    // A message still being written to its file is not handed over: the
    // stream ends with the failure.
    g.writing = None;
    if let Some(tx) = &g.deliveries {
        let _ = tx.send(Err(error.clone()));
    }
    finish(g, transport, Err(error));
}

/// A message that arrived whole in the group's first-block buffer and
/// fills at least half of it becomes its own buffer: the group takes a
/// fresh first-block buffer from the node's pool instead of copying the
/// message out (a smaller message is copied, so a message the application
/// holds never pins a much larger buffer). `None`: copy it.
fn take_bounce_as_message<T: Transport>(
    g: &mut GroupState,
    transport: &mut T,
    pending: &PendingBegin,
) -> Option<Arc<MessageBuffer>> {
    let bounce = g.bounce.as_mut()?;
    let len = pending.len();
    // Held elsewhere too (a transport's receive not yet let go): copy.
    if pending.first_block_len != len || len < bounce.len() / 2 || Arc::strong_count(bounce) > 1 {
        return None;
    }
    let fresh = transport.alloc_buffer(bounce.len()).ok()?;
    let old = std::mem::replace(bounce, fresh);
    match old.into_prefix(len) {
        Ok(message) => Some(message),
        Err(old) => {
            // Taken meanwhile (it cannot be: the actor holds the group).
            *bounce = old;
            None
        }
    }
}

/// Bytes `offset..offset + len` of `data` followed by `digest`: a block of
/// the message as it travels, overlapping the digest.
fn with_digest(data: &Bytes, digest: &blake3::Hash, offset: usize, len: usize) -> Bytes {
    let n = data.len();
    let end = offset + len;
    let mut block = Vec::with_capacity(len);
    block.extend_from_slice(&data[offset.min(n)..end.min(n)]);
    block.extend_from_slice(&digest.as_bytes()[offset.max(n) - n..end - n]);
    Bytes::from(block)
}

/// A received message followed by its digest: the message, if the digest
/// is its BLAKE3 hash (compared in constant time); `None` if not, or if
/// it is too short to hold one.
fn checked(received: Bytes) -> Option<Bytes> {
    let n = received.len().checked_sub(blake3::OUT_LEN)?;
    let digest: [u8; blake3::OUT_LEN] = received[n..].try_into().ok()?;
    (blake3::hash(&received[..n]) == digest).then(|| received.slice(..n))
}

/// A received message followed by its digest, in a buffer that may not fit
/// in memory whole (a file's mapping): whether the digest is the BLAKE3
/// hash of the rest, read a part at a time and released behind.
pub(super) fn checked_in_place(buf: &Arc<MessageBuffer>) -> bool {
    const PART: usize = 64 << 20;
    let Some(n) = buf.len().checked_sub(blake3::OUT_LEN) else {
        return false;
    };
    let mut hasher = blake3::Hasher::new();
    let mut at = 0;
    while at < n {
        let len = PART.min(n - at);
        hasher.update(buf.block(at, len).as_slice());
        buf.release(at, len);
        at += len;
    }
    let digest = buf.block(n, blake3::OUT_LEN);
    hasher.finalize() == *<&[u8; blake3::OUT_LEN]>::try_from(digest.as_slice()).expect("32 bytes")
}

/// The buffer of message `seq`, in progress; `None` only when it could not
/// be allocated (the group failed, and the message's remaining actions are
/// moot).
pub(super) fn receiving(g: &GroupState, seq: u64) -> Option<&Arc<MessageBuffer>> {
    match &g.receiving {
        Some((s, buf)) if *s == seq => Some(buf),
        _ => {
            debug_assert!(
                g.member.is_finished(),
                "the core posts only for the message in progress"
            );
            None
        }
    }
}

fn finish<T: Transport>(g: &mut GroupState, transport: &mut T, outcome: Result<(), Error>) {
    if g.outcome.is_none() {
        g.node_counters.group_ended();
    }
    transport.release_group(g.id);
    g.in_flight.end(outcome.clone());
    g.deliveries = None;
    for w in g.close_waiters.drain(..) {
        let _ = w.send(outcome.clone());
    }
    g.outcome = Some(outcome);
}
