//! What members tell each other ([`Control`]), how a group fails
//! ([`Failure`], [`FailureKind`]), what the caller gets wrong
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
    /// Receiver → root: "My application has the first `messages` messages
    /// on stable storage" (cumulative: each one counts up, and never above
    /// the messages it took). The root's per-message persistence
    /// ([`Action::MessagePersisted`]) follows from every receiver's count.
    Persisted {
        /// How many messages the application has persisted so far.
        messages: u64,
    },
    /// Receiver → root: "I lost `suspect`, after acknowledging the close."
    /// The member's own outcome is the root's verdict, which it waits
    /// for; the root, which may not reach `suspect` itself (members
    /// connected on demand), takes it as its own finding: the group fails,
    /// naming `suspect`, unless `suspect` acknowledged the close already.
    Suspect {
        /// The member lost.
        suspect: Rank,
    },
    /// "This group failed: `detector` found `kind`, naming `suspect`."
    ///
    /// Every member that fails tells every other member so, the suspect
    /// too. A member that learned of the failure from a report relays it as
    /// it got it: the detector and the cause stay those of the member that
    /// found the failure, so every member fails with the same cause (see
    /// [`FailureKind`] for when two members find one fault each their way).
    Failed {
        /// The suspected member, when known.
        suspect: Option<Rank>,
        /// How the detector found the failure.
        kind: FailureKind,
        /// The member that found the failure.
        detector: Rank,
    },
}

/// How a group failure was detected: its cause, the same at every member
/// (it travels with every report of the failure, [`Control::Failed`]);
/// [`Failure::reported_by`] says whether this member found it or learned of
/// it from a report, and [`Failure::detail`] holds what only the detector
/// knows in words (a broken rule, an error of the file system).
///
/// # One cause per failure
///
/// A member that learns of a failure from a report fails with the report's
/// suspect and kind, and relays the report as it got it. Two members may
/// still find one fault each their own way; so that they agree, causes come
/// in two sorts:
///
/// * causes a member finds **about itself** — its application left
///   ([`LocalShutdown`](Self::LocalShutdown)), closed early
///   ([`ClosedUnread`](Self::ClosedUnread)) or reads too slowly
///   ([`SlowReader`](Self::SlowReader)), it ran out of memory or could not
///   place a message ([`OutOfMemory`](Self::OutOfMemory),
///   [`ReceiveTarget`](Self::ReceiveTarget)), it stood still
///   ([`Stalled`](Self::Stalled)) — or **sees directly** in what a peer
///   sent ([`ProtocolViolation`](Self::ProtocolViolation),
///   [`DigestMismatch`](Self::DigestMismatch)) fail the group at once, and
///   the report leaves before the member does anything else (before it
///   stops serving the group, before its connections close);
/// * causes **seen from outside** the suspect
///   ([`is_seen_from_outside`](Self::is_seen_from_outside)): it is
///   [`Unreachable`](Self::Unreachable) or made
///   [`NoProgress`](Self::NoProgress), fail the group only a grace period
///   after the member found them (the `rdmc` library waits 100 ms after
///   its transport lost a peer, and as long after a progress timeout,
///   [`MemberConfig::report_grace`]); a report that arrives meanwhile
///   decides the suspect and the kind.
///
/// So a finding seen from outside gives way to a report of any cause found
/// elsewhere up to the grace period (less a report's delay on the way)
/// after it, and to any finding made earlier by more than a report's
/// delay: the earlier finding fails its member first (a cause of the
/// first sort at once, one of the second a grace period later, which is
/// no later than the later finding's own), and its report arrives before
/// the later finding's grace period ends. In general a member fails with
/// its own finding only if no report reached it before, so two members
/// end with different kinds only if each failed with its own finding
/// within a report's delay (a fraction of a millisecond on a LAN) of the
/// other — and then they mostly saw the same fault the same way:
///
/// * a member that leaves or closes early reports it before anything else
///   sees it: its connections close after the report went out on them
///   (links are FIFO), and it stops serving the group only then;
/// * a fault nobody can report — a crashed or hung member, a dead link —
///   is seen from outside only, the same way by every member that sees it:
///   they agree on [`Unreachable`](Self::Unreachable) naming the member
///   they lost, found or heard of;
/// * a member that waits on a peer that may itself be held up by another
///   waits twice the progress timeout (see
///   [`GroupMember::handle_timeout`]), so the member that waits on the
///   stuck one directly finds it first, and its report, naming the stuck
///   one, reaches the others first.
///
/// Two different causes found independently within a report's delay —
/// a progress timeout about as long as the slow-reader timeout, say — can
/// still end in different kinds at different members: keep such timeouts
/// well apart. And a member that stood still ([`Stalled`](Self::Stalled))
/// names itself stalled, while the members that gave up on it meanwhile
/// found it [`Unreachable`](Self::Unreachable).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The suspect's connection broke, a transfer with it failed, or it
    /// stopped answering.
    Unreachable,
    /// The suspect broke the protocol (for example sent a block nobody
    /// asked for); the detector's [`Failure::detail`] says how.
    ProtocolViolation,
    /// The suspect is shutting down: its application left the group, its
    /// node shut down, or its creation of the group failed (it gave up
    /// waiting for the others).
    LocalShutdown,
    /// The suspect's application closed the group before it took every
    /// message the root sent: its copy is incomplete.
    ClosedUnread,
    /// The suspect made no progress within the progress timeout while the
    /// detector waited on it (`GroupConfig::with_progress_timeout` in the
    /// library, [`MemberConfig::progress_timeout`] here).
    NoProgress,
    /// The suspect could not get the memory to receive a message of `size`
    /// bytes. Allocation is fallible: a member that runs out of memory
    /// fails the group, it never aborts (its driver reports it through
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
    /// The suspect's process stood still — stopped (`SIGSTOP`, a debugger,
    /// a paused VM) or starved of CPU — for `millis` milliseconds, and lost
    /// its peers meanwhile: they declared it failed.
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
    /// The suspect could not place a message where its application said
    /// (the library's `ReceiveTargets` hook failed, or the target could not
    /// be used: a file that cannot be resized or mapped; its driver reports
    /// it through [`GroupMember::handle_local_failure`]); the detector's
    /// [`Failure::detail`] says why.
    ReceiveTarget,
}

impl FailureKind {
    /// Whether the kind is seen from outside the suspect (it is
    /// unreachable, or made no progress): a member that finds it waits a
    /// grace period for a report of the failure before it fails with it
    /// (see [one cause per failure](Self#one-cause-per-failure)).
    pub fn is_seen_from_outside(&self) -> bool {
        matches!(self, FailureKind::Unreachable | FailureKind::NoProgress)
    }

    /// The kind as a driver puts it on its wire: a code stable across
    /// builds (0 to 9 today; a new kind takes the next) and the kind's
    /// number (the size, message or milliseconds it carries; 0 for a kind
    /// without one). [`from_code`](Self::from_code) reads it back.
    pub fn to_code(&self) -> (u8, u64) {
        match *self {
            FailureKind::Unreachable => (0, 0),
            FailureKind::ProtocolViolation => (1, 0),
            FailureKind::LocalShutdown => (2, 0),
            FailureKind::ClosedUnread => (3, 0),
            FailureKind::NoProgress => (4, 0),
            FailureKind::OutOfMemory { size } => (5, size),
            FailureKind::DigestMismatch { seq } => (6, seq),
            FailureKind::Stalled { millis } => (7, millis),
            FailureKind::SlowReader { millis } => (8, millis),
            FailureKind::ReceiveTarget => (9, 0),
        }
    }

    /// The kind of [`to_code`](Self::to_code)'s `code` and `number`;
    /// `None` for a code this build does not know, or a number on a kind
    /// without one (only the canonical form reads back).
    pub fn from_code(code: u8, number: u64) -> Option<Self> {
        let bare = |kind| (number == 0).then_some(kind);
        match code {
            0 => bare(FailureKind::Unreachable),
            1 => bare(FailureKind::ProtocolViolation),
            2 => bare(FailureKind::LocalShutdown),
            3 => bare(FailureKind::ClosedUnread),
            4 => bare(FailureKind::NoProgress),
            5 => Some(FailureKind::OutOfMemory { size: number }),
            6 => Some(FailureKind::DigestMismatch { seq: number }),
            7 => Some(FailureKind::Stalled { millis: number }),
            8 => Some(FailureKind::SlowReader { millis: number }),
            9 => bare(FailureKind::ReceiveTarget),
            _ => None,
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureKind::Unreachable => f.write_str("unreachable"),
            FailureKind::ProtocolViolation => f.write_str("protocol violation"),
            FailureKind::LocalShutdown => f.write_str("left the group"),
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
            FailureKind::ReceiveTarget => f.write_str("receive target failed"),
        }
    }
}

/// The one terminal failure event of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The member believed to have failed, when known.
    pub suspect: Option<Rank>,
    /// How the failure was detected (the same at every member).
    pub kind: FailureKind,
    /// The member that detected the failure, when this member learned of it
    /// from a report (directly from that member or relayed by another);
    /// `None`: this member detected it.
    pub reported_by: Option<Rank>,
    /// What the detector saw, in words, when the kind does not say it all
    /// (the rule a [`ProtocolViolation`](FailureKind::ProtocolViolation)
    /// broke, the error of a [`ReceiveTarget`](FailureKind::ReceiveTarget));
    /// only the detector has it (`None` at the members it told).
    pub detail: Option<String>,
}

impl Failure {
    /// A failure of `suspect` this member detected as `kind`, without a detail.
    pub fn new(suspect: Option<Rank>, kind: FailureKind) -> Self {
        Failure {
            suspect,
            kind,
            reported_by: None,
            detail: None,
        }
    }

    /// The same failure, with what the detector saw in words.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

/// "rank 2 failed (protocol violation: a block arrived twice; reported by
/// rank 1)".
impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.suspect {
            Some(rank) => write!(f, "rank {rank} failed (")?,
            None => f.write_str("group failed (")?,
        }
        let by = self.reported_by.map(|rank| ("rank", rank as u64));
        write_cause(f, &self.kind, self.detail.as_deref(), by)?;
        f.write_str(")")
    }
}

/// A failure's cause in words: its kind, its detail if any, and who
/// reported it if another member did ("no progress within the progress
/// timeout; reported by rank 1"). `reported_by` names the reporting member
/// as the caller names members: a word and a number (`("rank", 1)` here,
/// `("node", 4)` in the `rdmc` library).
#[doc(hidden)]
pub fn write_cause(
    f: &mut fmt::Formatter<'_>,
    kind: &FailureKind,
    detail: Option<&str>,
    reported_by: Option<(&str, u64)>,
) -> fmt::Result {
    write!(f, "{kind}")?;
    if let Some(detail) = detail {
        write!(f, ": {detail}")?;
    }
    if let Some((word, member)) = reported_by {
        write!(f, "; reported by {word} {member}")?;
    }
    Ok(())
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
    /// Root: every receiver's application has message `seq` (and every
    /// earlier one) on stable storage, as their [`Control::Persisted`]
    /// counts say; emitted in order, once each, after the message's
    /// `MessageComplete`.
    MessagePersisted {
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
