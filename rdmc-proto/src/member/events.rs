//! What members tell each other ([`Control`]), how a group fails
//! ([`Failure`], [`FailureReason`]), what the caller gets wrong
//! ([`MemberError`]) and what a member asks its driver to do ([`Action`]).

use std::fmt;

use super::{MAX_MESSAGES, Rank};

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

/// Why a group failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailureReason {
    /// The transport reported the suspect unreachable: its connection broke,
    /// a transfer to or from it failed, or it timed out.
    PeerUnreachable,
    /// Another member reported the failure.
    Reported {
        /// The member that relayed the failure to us.
        by: Rank,
    },
    /// The suspect broke the protocol (sent something it should not have).
    ProtocolViolation {
        /// What was wrong.
        detail: String,
    },
    /// This member is shutting down (its application left the group, or
    /// its node shut down).
    LocalShutdown,
    /// This member's application closed the group without taking every
    /// message the root sent: its copy is incomplete.
    ClosedUnread,
    /// The suspect made no progress for the progress timeout while this
    /// member waited on it.
    NoProgress,
    /// This member could not get the memory to receive a message of
    /// `size` bytes (its driver reports it through
    /// [`GroupMember::handle_local_failure`]).
    OutOfMemory {
        /// The bytes asked for.
        size: u64,
    },
    /// Message `seq` arrived here with a digest other than the root's: its
    /// bytes were changed on the way. The suspect is the member that sent
    /// this one the message's blocks (the root or a relay).
    DigestMismatch {
        /// The message.
        seq: u64,
    },
    /// This member's process stood still (stopped, or starved of CPU) for
    /// `millis` milliseconds, and lost its peers meanwhile: they declared
    /// it failed.
    Stalled {
        /// How long it stood still.
        millis: u64,
    },
    /// This receiver's application left a delivered message untaken for
    /// longer than the slow-reader timeout
    /// ([`MemberConfig::slow_reader_timeout`]).
    SlowReader {
        /// How long the message waited, in milliseconds.
        millis: u64,
    },
    /// This member could not place a message where its application said
    /// (its driver reports it through
    /// [`GroupMember::handle_local_failure`]).
    ReceiveTarget {
        /// What went wrong.
        detail: String,
    },
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureReason::PeerUnreachable => f.write_str("unreachable"),
            FailureReason::Reported { by } => write!(f, "reported by rank {by}"),
            FailureReason::ProtocolViolation { detail } => {
                write!(f, "protocol violation: {detail}")
            }
            FailureReason::LocalShutdown => f.write_str("local shutdown"),
            FailureReason::ClosedUnread => {
                f.write_str("closed by its application before it took every message")
            }
            FailureReason::NoProgress => f.write_str("no progress within the progress timeout"),
            FailureReason::OutOfMemory { size } => {
                write!(
                    f,
                    "out of memory: cannot allocate {size} bytes for a message"
                )
            }
            FailureReason::DigestMismatch { seq } => {
                write!(f, "message {seq} arrived corrupted (its digest differs)")
            }
            FailureReason::Stalled { millis } => write!(
                f,
                "stood still for {millis} ms (stopped or starved) and lost its peers"
            ),
            FailureReason::SlowReader { millis } => write!(
                f,
                "its application left a delivered message untaken for {millis} ms \
                 (the slow-reader timeout)"
            ),
            FailureReason::ReceiveTarget { detail } => write!(f, "receive target: {detail}"),
        }
    }
}

/// The one terminal failure event of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The member believed to have failed, when known.
    pub suspect: Option<Rank>,
    /// How the failure was detected.
    pub reason: FailureReason,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.suspect {
            Some(rank) => write!(f, "rank {rank} failed ({})", self.reason),
            None => write!(f, "group failed ({})", self.reason),
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
