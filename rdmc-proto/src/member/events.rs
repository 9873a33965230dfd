//! What members tell each other ([`Control`]), how a group fails
//! ([`Failure`], [`FailureKind`]), what the caller gets wrong
//! ([`MemberError`]) and what a member asks its driver to do ([`Action`]).

use std::fmt;

use super::{MAX_MESSAGES, Rank};
use crate::ids::NodeId;

#[cfg(doc)]
use super::{BATCH_FLAG, GroupMember, MemberConfig, READY_WINDOW};
#[cfg(doc)]
use crate::schedule::BlockSize;

/// Control messages exchanged between members of one group.
///
/// `ReadyForBlock` is the papers' only protocol message besides data; the
/// others carry the close barrier and failure relay this crate adds.
/// Exhaustive, like every enum a driver handles: a driver carries each one
/// over its wire, so a new one is a compile error in every driver, not a
/// message it drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// "I have posted the receive for another block I expect from you"
    /// (at most [`READY_WINDOW`] outstanding).
    ReadyForBlock,
    /// Root → every member: the group closes after `messages` messages
    /// (at most [`MAX_MESSAGES`]).
    Close {
        /// Total number of messages the root sent.
        messages: u64,
    },
    /// Member → root: "My application has taken every message up to the
    /// close count and closed the group" (it persisted what it took).
    CloseAck,
    /// Root → every member: every member has every message; the group is closed.
    Closed,
    /// Receiver → root: "My application has taken the first `messages`
    /// messages" (cumulative: each one counts up). The root's per-message
    /// delivery ([`Action::MessageDelivered`]) follows from every
    /// receiver's count.
    Taken {
        /// How many messages the application has taken so far.
        messages: u64,
    },
    /// "This group failed; `suspect` is the member I believe failed."
    Failed {
        /// The suspected member, when known.
        suspect: Option<Rank>,
    },
}

/// How a group failure was detected.
///
/// `M` names members: a [`NodeId`] in the errors of the `rdmc` library
/// (the default), a [`Rank`] in the protocol core's [`Failure`]s; a
/// driver names the reporting member its way with
/// [`map_member`](Self::map_member).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailureKind<M = NodeId> {
    /// The suspect's connection broke, a transfer with it failed, or it
    /// stopped answering.
    Unreachable,
    /// Another member reported the failure.
    ReportedBy(M),
    /// The suspect broke the protocol (for example sent a block nobody
    /// asked for).
    ProtocolViolation(String),
    /// This member is shutting down: its application left the group, or
    /// its node shut down.
    LocalShutdown,
    /// This member's application closed the group before it took every
    /// message the root sent: its copy is incomplete.
    ClosedUnread,
    /// The suspect made no progress within the progress timeout while this
    /// member waited on it (`GroupConfig::with_progress_timeout` in the
    /// library, [`MemberConfig::progress_timeout`] here).
    NoProgress,
    /// The suspect (this member, or the member that reported it) could not
    /// get the memory to receive a message of `size` bytes. Allocation is
    /// fallible: a member that runs out of memory fails the group, it never
    /// aborts (its driver reports it through
    /// [`GroupMember::handle_local_failure`]).
    OutOfMemory {
        /// The bytes asked for.
        size: u64,
    },
    /// Message `seq` arrived with a digest other than the root's
    /// (`GroupConfig::with_message_digest` in the library): its bytes were
    /// changed on the way. The suspect is the member that sent the
    /// corrupted copy's blocks (the root or a relay).
    DigestMismatch {
        /// The message.
        seq: u64,
    },
    /// This member's process stood still — stopped (`SIGSTOP`, a debugger,
    /// a paused VM) or starved of CPU — for `millis` milliseconds, and lost
    /// its peers meanwhile: they declared it failed. The suspect is this
    /// member.
    Stalled {
        /// How long it stood still.
        millis: u64,
    },
    /// The suspect's application left a delivered message untaken for
    /// `millis` milliseconds, longer than its slow-reader timeout
    /// (`GroupConfig::with_slow_reader_timeout` in the library,
    /// [`MemberConfig::slow_reader_timeout`] here).
    SlowReader {
        /// How long the message waited.
        millis: u64,
    },
    /// The suspect (this member, or the member that reported it) could not
    /// place a message where its application said (the library's
    /// `ReceiveTargets` hook failed, or the target could not be used: a
    /// file that cannot be resized or mapped; its driver reports it through
    /// [`GroupMember::handle_local_failure`]).
    ReceiveTarget(String),
}

impl<M> FailureKind<M> {
    /// The same kind, with the member that reported it named by `name`
    /// (the library maps the protocol core's ranks to node ids so).
    pub fn map_member<N>(self, name: impl FnOnce(M) -> N) -> FailureKind<N> {
        match self {
            FailureKind::ReportedBy(member) => FailureKind::ReportedBy(name(member)),
            FailureKind::Unreachable => FailureKind::Unreachable,
            FailureKind::ProtocolViolation(detail) => FailureKind::ProtocolViolation(detail),
            FailureKind::LocalShutdown => FailureKind::LocalShutdown,
            FailureKind::ClosedUnread => FailureKind::ClosedUnread,
            FailureKind::NoProgress => FailureKind::NoProgress,
            FailureKind::OutOfMemory { size } => FailureKind::OutOfMemory { size },
            FailureKind::DigestMismatch { seq } => FailureKind::DigestMismatch { seq },
            FailureKind::Stalled { millis } => FailureKind::Stalled { millis },
            FailureKind::SlowReader { millis } => FailureKind::SlowReader { millis },
            FailureKind::ReceiveTarget(detail) => FailureKind::ReceiveTarget(detail),
        }
    }
}

impl<M: fmt::Display> FailureKind<M> {
    /// The kind in words; `member` says what the reporting member is (a
    /// node, a rank).
    fn describe(&self, member: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureKind::Unreachable => f.write_str("unreachable"),
            FailureKind::ReportedBy(by) => write!(f, "reported by {member} {by}"),
            FailureKind::ProtocolViolation(detail) => write!(f, "protocol violation: {detail}"),
            FailureKind::LocalShutdown => f.write_str("local shutdown"),
            FailureKind::ClosedUnread => {
                f.write_str("closed by its application before it took every message")
            }
            FailureKind::NoProgress => f.write_str("no progress within the progress timeout"),
            FailureKind::OutOfMemory { size } => write!(
                f,
                "out of memory: cannot allocate {size} bytes for a message"
            ),
            FailureKind::DigestMismatch { seq } => {
                write!(f, "message {seq} arrived corrupted (its digest differs)")
            }
            FailureKind::Stalled { millis } => write!(
                f,
                "stood still for {millis} ms (stopped or starved) and lost its peers"
            ),
            FailureKind::SlowReader { millis } => write!(
                f,
                "its application left a delivered message untaken for {millis} ms \
                 (the slow-reader timeout)"
            ),
            FailureKind::ReceiveTarget(detail) => write!(f, "receive target: {detail}"),
        }
    }
}

/// In words, the reporting member named as a node ("reported by node 2").
impl fmt::Display for FailureKind<NodeId> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.describe("node", f)
    }
}

/// In words, the reporting member named by its rank ("reported by rank 2").
impl fmt::Display for FailureKind<Rank> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.describe("rank", f)
    }
}

/// The one terminal failure event of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The member believed to have failed, when known.
    pub suspect: Option<Rank>,
    /// How the failure was detected.
    pub kind: FailureKind<Rank>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.suspect {
            Some(rank) => write!(f, "rank {rank} failed ({})", self.kind),
            None => write!(f, "group failed ({})", self.kind),
        }
    }
}

/// A request the state machine refuses (exhaustive: a driver answers its
/// caller for each).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemberError {
    /// Only the root (rank 0) sends.
    #[error("only the root (rank 0) can send")]
    NotRoot,
    /// The group is closing or closed; no more messages can be sent.
    #[error("the group is closed")]
    Closed,
    /// The group failed.
    #[error("the group failed: {0}")]
    Failed(Failure),
    /// The group carried [`MAX_MESSAGES`] messages already.
    #[error("a group carries at most {MAX_MESSAGES} messages")]
    TooManyMessages,
    /// A batch ([`GroupMember::submit_batch`]) in a group without batches.
    #[error("the group does not carry batches of small messages")]
    NoBatches,
    /// The message is larger than the group accepts.
    #[error("message of {size} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Size asked for.
        size: u64,
        /// The configured limit.
        max: u64,
    },
}

/// An instruction from the state machine to its driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Post a receive for the first block of the next message from `from`
    /// into a bounce buffer of the largest block size
    /// ([`BlockSize::largest`]; the message's size is not known yet).
    PostFirstBlockRecv {
        /// Rank the first block comes from.
        from: Rank,
    },
    /// The first block of message `seq` arrived in the bounce buffer: make a
    /// `size`-byte buffer for the message and copy the bounce buffer's first
    /// `first_block_len` bytes to offset `first_block * block_size`.
    BeginMessage {
        /// Message sequence number (0, 1, 2, ... in send order).
        seq: u64,
        /// Total size in bytes.
        size: u64,
        /// Block number that landed in the bounce buffer.
        first_block: usize,
        /// Its length.
        first_block_len: usize,
        /// The message's block size (see [`MemberConfig::block_size`]).
        block_size: usize,
        /// Whether the transfer is a batch of small messages that the
        /// root packed ([`GroupMember::submit_batch`]): the driver splits
        /// it once it is complete.
        batch: bool,
    },
    /// Post a receive from `from` into message `seq`'s buffer at `offset..offset+len`.
    PostRecv {
        /// Rank the block comes from.
        from: Rank,
        /// Message the block belongs to.
        seq: u64,
        /// Byte offset in the message.
        offset: usize,
        /// Exact block length.
        len: usize,
    },
    /// Send `offset..offset+len` of message `seq` to `to`, carrying `immediate`.
    SendBlock {
        /// Destination rank.
        to: Rank,
        /// Message the block belongs to.
        seq: u64,
        /// Byte offset in the message.
        offset: usize,
        /// Block length.
        len: usize,
        /// The immediate value: the message's total size in bytes, with
        /// [`BATCH_FLAG`] set for a batch.
        immediate: u64,
    },
    /// Send a control message to `to`.
    SendControl {
        /// Destination rank.
        to: Rank,
        /// The message.
        control: Control,
    },
    /// This member is done with block `offset..offset+len` of message
    /// `seq`: it is here (received, or the root's own) and every send of it
    /// has completed. Emitted once per block and member, after the block's
    /// last `SendBlock` completed (or on arrival, for a block this member
    /// does not relay). A driver that keeps a message somewhere other than
    /// memory (a file) may drop the block's memory then.
    ReleaseBlock {
        /// The message.
        seq: u64,
        /// Byte offset in the message.
        offset: usize,
        /// Block length.
        len: usize,
    },
    /// Root: every receiver's application has taken message `seq` (and
    /// every earlier one), as their [`Control::Taken`] counts say; emitted
    /// in order, once each, after the message's `MessageComplete`.
    MessageDelivered {
        /// The message.
        seq: u64,
    },
    /// Message `seq` is complete here: every block this member receives has
    /// arrived and every block it sends has been sent. A receiver delivers
    /// it; the root's send of it is done.
    MessageComplete {
        /// The message.
        seq: u64,
    },
    /// Receiver: every message up to the root's close count has been
    /// delivered (`MessageComplete`); none follows. The driver ends the
    /// application's stream; the member acknowledges the close once the
    /// application has taken every message and called
    /// [`close`](GroupMember::close).
    AllDelivered,
    /// Every member's application has taken every message and closed; the
    /// group closed cleanly. Terminal.
    Closed,
    /// The group failed. Terminal: the member ignores everything afterwards.
    Failed(Failure),
}
