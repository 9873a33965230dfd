//! [`GroupMember`]: the per-(group, member) protocol state machine.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use crate::schedule::{
    Algorithm, BlockSize, NodeSchedule, Schedule, ScheduleError, Topology, Transfer,
};

mod close;
mod delivery;
mod early;
mod progress;

use delivery::Unread;
use progress::Stall;

/// A member's rank in a group: its index in the membership list; 0 is the root.
pub type Rank = usize;

/// How many receives a member keeps posted ahead, each announced to its
/// sender with a [`Control::ReadyForBlock`]; a sender holds at most this many
/// unused ready-for-blocks from a peer (more is a protocol violation). Which
/// of them are announced at once is the member's [`Announce`] rule.
///
/// The original RDMC posts one receive at a time, so every step of the
/// schedule waits for a ready-for-block to cross the network after the
/// previous block arrived — free on RDMA, where it takes microseconds, but
/// on TCP the signal queues behind the bulk data already in the sender's
/// socket, which costs a round trip per block where one sender streams
/// consecutive blocks to one receiver (the chain, the first and last steps
/// of the binomial pipeline). Receives are posted in the schedule's step
/// order, up to this many ahead, and by default ([`Announce::OneSender`])
/// **all the announced ones from one sender**: the receive of a block from another sender is announced only
/// once every block announced to the current one has arrived. A window
/// across senders lets a member that is ahead of the schedule send its next
/// block while its partner still receives the previous step's block from
/// someone else; the two blocks then share the partner's port, both run at
/// half rate, and the binomial pipeline's lock-step dissolves (simulated:
/// 2.1× a unicast at 4096 members instead of 1.04×; the project's benchmark
/// report has the measurements). So a member never receives two blocks at
/// once, and a stream from one sender never waits a round trip per block.
pub const READY_WINDOW: usize = 8;

/// Which of the (up to [`READY_WINDOW`]) receives a member posts ahead it
/// announces at once: the same rule on every member of a group is not
/// required (each one only limits what its own senders may send it).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Announce {
    /// Only receives from one sender at a time: the next receive from
    /// another sender is announced once every block announced to the
    /// current one has arrived, so no two blocks ever share the member's
    /// port. Right where a send completes once its bytes have left the
    /// sender (RDMA, the in-memory transport): the schedule's lock-step
    /// then holds, and the binomial pipeline stays flat in the group size.
    #[default]
    OneSender,
    /// The next receives whoever sends them. Right where a send completes
    /// once the transport has buffered it (TCP's socket buffer): a sender
    /// then has blocks to several receivers on the wire at once anyway,
    /// and a receiver that takes blocks from one sender at a time would
    /// leave its port idle while that sender shares its own.
    AnySender,
}

/// Most messages one group carries (2^48): the root refuses more
/// ([`MemberError::TooManyMessages`]), and a close count above it is a
/// protocol violation by the root (a peer announcing `u64::MAX` messages
/// would otherwise hold the group open forever).
pub const MAX_MESSAGES: u64 = 1 << 48;

/// Number of blocks of a `size`-byte message. An empty message is one empty block.
pub fn block_count(size: u64, block_size: usize) -> usize {
    if size == 0 {
        1
    } else {
        usize::try_from(size.div_ceil(block_size as u64)).unwrap_or(usize::MAX)
    }
}

/// Length in bytes of block `block` of a `size`-byte message (the last may be short).
pub fn block_len(size: u64, block_size: usize, block: usize) -> usize {
    let start = block as u64 * block_size as u64;
    // Bounded by `block_size`, so the cast back is lossless.
    size.saturating_sub(start).min(block_size as u64) as usize
}

/// What a [`GroupMember`] needs to know about its group.
///
/// Made by [`MemberConfig::new`] with the defaults it lists, then its
/// `with_*` methods (or by setting its public fields); more fields may
/// come, so it cannot be written as a struct literal outside this crate.
///
/// ```
/// use rdmc::proto::MemberConfig;
/// use rdmc::schedule::{Algorithm, BlockSize};
///
/// let config = MemberConfig::new(Algorithm::BinomialPipeline, 8, 3, BlockSize::Fixed(1 << 20))
///     .with_max_message_size(1 << 30)
///     .with_receive_window(Some(16));
/// assert_eq!(config.rank, 3);
/// ```
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberConfig {
    /// The multicast algorithm every member uses.
    pub algorithm: Algorithm,
    /// The group's racks and slow members (the same on every member);
    /// `None`: one rack, none slow.
    pub topology: Option<Topology>,
    /// Number of members (n ≥ 1).
    pub group_size: usize,
    /// This member's rank (`< group_size`).
    pub rank: Rank,
    /// How messages are cut into blocks: a fixed size, or chosen per
    /// message ([`BlockSize::for_message`]); every block size ≥ 1.
    pub block_size: BlockSize,
    /// Largest message a receiver accepts; a larger announced size is a
    /// protocol violation by the sender of that block.
    pub max_message_size: u64,
    /// Most messages a receiver holds completed but not yet consumed by the
    /// application (see [`GroupMember::message_consumed`]); while it holds
    /// that many it does not arm for the next message, which holds the group
    /// back (flow control). `None`: no limit.
    pub receive_window: Option<u64>,
    /// Which receives posted ahead are announced at once.
    pub announce: Announce,
    /// With [`Announce::OneSender`]: announce the receive from the next
    /// sender once the last block announced to the current one has at most
    /// this many bytes still to arrive, as the transport reports it
    /// ([`GroupMember::handle_block_progress`]), so the next sender's
    /// ready-for-block crosses the network while those last bytes do. Two
    /// senders' blocks then share the member's port for at most this many
    /// bytes. `None` (or a transport that reports no progress): the next
    /// sender waits for the block's arrival, as [`Announce::OneSender`] says.
    pub early_announce: Option<u64>,
    /// How long the member waits on a peer without any progress of the
    /// group before it fails the group naming that peer (see
    /// [`GroupMember::handle_timeout`]); `None`: forever.
    pub progress_timeout: Option<Duration>,
    /// How long a receiver's application may leave a delivered message
    /// untaken before this member fails the group naming itself
    /// ([`FailureReason::SlowReader`]); `None`: forever. Ignored on the root.
    pub slow_reader_timeout: Option<Duration>,
}

impl MemberConfig {
    /// Member `rank` of a group of `group_size` running `algorithm` with
    /// `block_size`; by default one rack and no slow members, messages of
    /// any size, no receive window, [`Announce::OneSender`], and no progress
    /// or slow-reader timeout.
    pub fn new(algorithm: Algorithm, group_size: usize, rank: Rank, block_size: BlockSize) -> Self {
        MemberConfig {
            algorithm,
            topology: None,
            group_size,
            rank,
            block_size,
            max_message_size: u64::MAX,
            receive_window: None,
            announce: Announce::OneSender,
            early_announce: None,
            progress_timeout: None,
            slow_reader_timeout: None,
        }
    }

    /// The group's racks and slow members ([`topology`](Self::topology)).
    pub fn with_topology(mut self, topology: Option<Topology>) -> Self {
        self.topology = topology;
        self
    }

    /// The largest message a receiver accepts ([`max_message_size`](Self::max_message_size)).
    pub fn with_max_message_size(mut self, bytes: u64) -> Self {
        self.max_message_size = bytes;
        self
    }

    /// Flow control at receivers ([`receive_window`](Self::receive_window)).
    pub fn with_receive_window(mut self, messages: Option<u64>) -> Self {
        self.receive_window = messages;
        self
    }

    /// Which receives are announced at once ([`announce`](Self::announce)).
    pub fn with_announce(mut self, announce: Announce) -> Self {
        self.announce = announce;
        self
    }

    /// Announce the next sender's receive when the current block has at
    /// most `bytes` left to arrive ([`early_announce`](Self::early_announce)).
    pub fn with_early_announce(mut self, bytes: Option<u64>) -> Self {
        self.early_announce = bytes;
        self
    }

    /// How long to wait on a silent peer ([`progress_timeout`](Self::progress_timeout)).
    pub fn with_progress_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.progress_timeout = timeout;
        self
    }

    /// How long a delivered message may stay untaken
    /// ([`slow_reader_timeout`](Self::slow_reader_timeout)).
    pub fn with_slow_reader_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.slow_reader_timeout = timeout;
        self
    }
}

/// Control messages exchanged between members of one group.
///
/// `ReadyForBlock` is the papers' only protocol message besides data; the
/// others carry the close barrier and failure relay this crate adds.
#[non_exhaustive]
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
#[non_exhaustive]
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

/// A request the state machine refuses.
#[non_exhaustive]
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
        /// The immediate value: the message's total size in bytes.
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

/// Progress on the message currently being transferred.
#[derive(Debug)]
struct MessageProgress {
    seq: u64,
    size: u64,
    /// This message's block size.
    block_size: usize,
    blocks: usize,
    steps: usize,
    /// Next send step to consider.
    send_step: usize,
    /// Target of the one outstanding block send, if any.
    sending: Option<Rank>,
    /// The block of the outstanding send.
    sending_block: usize,
    /// Sends of each block this member has not completed yet (for
    /// [`Action::ReleaseBlock`]).
    sends_left: Vec<u32>,
    /// Receives posted and announced with a ready-for-block whose blocks
    /// have not arrived, in step order (at most [`READY_WINDOW`]; all from
    /// one sender with [`Announce::OneSender`]), with the step each belongs to.
    expected: VecDeque<(usize, Transfer)>,
    /// The first step not yet considered for posting a receive.
    post_cursor: usize,
    /// The one block in `expected` has at most the early-announce threshold
    /// of bytes left (its transport said so): the next sender's receive
    /// may be announced ([`MemberConfig::early_announce`]).
    nearly_done: bool,
    /// Which blocks have arrived (empty on the root).
    received: Vec<bool>,
    num_received: usize,
}

#[derive(Debug)]
enum Phase {
    Open,
    Closed,
    Failed(Failure),
}

#[derive(Debug)]
struct Closing {
    /// Number of messages in the group's lifetime.
    total: u64,
    /// Root: which members acknowledged. Others: whether we acknowledged.
    acked: Vec<bool>,
}

/// The protocol state machine of one member of one group.
///
/// Drive it by calling one of the input methods ([`submit`](Self::submit),
/// [`close`](Self::close), [`message_consumed`](Self::message_consumed),
/// [`handle_block`](Self::handle_block),
/// [`handle_block_progress`](Self::handle_block_progress),
/// [`handle_send_complete`](Self::handle_send_complete),
/// [`handle_control`](Self::handle_control),
/// [`handle_peer_failure`](Self::handle_peer_failure),
/// [`shutdown`](Self::shutdown)), then passing the time with
/// [`handle_timeout`](Self::handle_timeout), and then draining
/// [`poll_action`](Self::poll_action) until it returns `None`; call
/// `handle_timeout` again at [`poll_timeout`](Self::poll_timeout). Actions
/// must be carried out in the order given; in particular a `PostRecv` comes
/// before the `ReadyForBlock` that allows the peer to send into it.
///
/// A receiver's application takes part in the close: the member
/// acknowledges the root's close only once the application has taken every
/// message ([`message_consumed`](Self::message_consumed)) and closed
/// ([`close`](Self::close)), which says what happens when it closes early.
#[derive(Debug)]
pub struct GroupMember {
    config: MemberConfig,
    schedule: NodeSchedule,
    /// Peers I exchange blocks with (by rank).
    neighbour: Vec<bool>,
    /// Ready-for-blocks each peer sent that no block sent to it used yet.
    ready: Vec<u8>,
    /// Where every message's first block comes from (non-root).
    first: Option<Transfer>,
    /// Whether the first-block receive of the next message is posted.
    armed: bool,
    /// The root's queue of submitted messages not yet started: (seq, size).
    queued: VecDeque<(u64, u64)>,
    /// Root: sequence number of the next submitted message.
    next_seq: u64,
    /// Messages completed locally.
    completed: u64,
    /// Messages the application consumed (receivers).
    consumed: u64,
    /// Receiver: the application called `close` (it persisted what it took).
    app_closed: bool,
    /// Receiver: `Action::AllDelivered` was emitted.
    all_delivered: bool,
    current: Option<MessageProgress>,
    closing: Option<Closing>,
    phase: Phase,
    actions: VecDeque<Action>,
    /// Inputs handled so far: each one is progress (see `handle_timeout`).
    progress: u64,
    /// Since when this member has seen no progress, when it has checked.
    stall: Option<Stall>,
    /// Root: how many messages each member's application has taken (the
    /// root's own entry unused).
    taken: Vec<u64>,
    /// Root: messages every member's application has taken, as reported.
    delivered: u64,
    /// Receiver: since when a delivered message waits for the application.
    unread: Option<Unread>,
}

impl GroupMember {
    /// A new member; on a non-root it immediately arms for the first message.
    pub fn new(config: MemberConfig) -> Result<Self, ScheduleError> {
        let valid = match config.block_size {
            BlockSize::Fixed(size) => size > 0,
            BlockSize::Automatic { min, max } => min > 0 && min <= max,
        };
        assert!(valid, "block sizes must be positive");
        let schedule = match &config.topology {
            Some(topology) if topology.group_size() == config.group_size => {
                NodeSchedule::with_topology(config.algorithm, topology, config.rank)?
            }
            Some(topology) => {
                return Err(ScheduleError::TopologySize {
                    topology: topology.group_size(),
                    group_size: config.group_size,
                });
            }
            None => NodeSchedule::new(config.algorithm, config.group_size, config.rank)?,
        };
        let mut neighbour = vec![false; config.group_size];
        for peer in schedule.connections() {
            neighbour[peer] = true;
        }
        let first = schedule.first_block();
        let mut member = GroupMember {
            ready: vec![0; config.group_size],
            neighbour,
            first,
            armed: false,
            queued: VecDeque::new(),
            next_seq: 0,
            completed: 0,
            consumed: 0,
            app_closed: false,
            all_delivered: false,
            current: None,
            closing: None,
            phase: Phase::Open,
            actions: VecDeque::new(),
            progress: 0,
            stall: None,
            taken: vec![0; config.group_size],
            delivered: 0,
            unread: None,
            schedule,
            config,
        };
        member.arm();
        Ok(member)
    }

    /// This member's configuration.
    pub fn config(&self) -> &MemberConfig {
        &self.config
    }

    /// Whether this member is the root.
    pub fn is_root(&self) -> bool {
        self.config.rank == 0
    }

    /// Whether this member holds the block its schedule sends next, with no
    /// send outstanding, and only waits for the target's ready-for-block
    /// (the papers' "waiting" state).
    pub fn waiting_for_ready(&self) -> bool {
        let Some(cur) = self.current.as_ref() else {
            return false;
        };
        if cur.sending.is_some() {
            return false;
        }
        let next = self
            .schedule
            .next_outgoing(cur.blocks, cur.send_step)
            .map(|(_, t)| t);
        next.is_some_and(|t| (self.is_root() || cur.received[t.block]) && self.ready[t.peer] == 0)
    }

    /// Number of messages completed locally so far.
    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// The failure, once the group failed.
    pub fn failure(&self) -> Option<&Failure> {
        match &self.phase {
            Phase::Failed(f) => Some(f),
            _ => None,
        }
    }

    /// Whether the group reached a terminal state (closed or failed).
    pub fn is_finished(&self) -> bool {
        !matches!(self.phase, Phase::Open)
    }

    /// Next action for the driver, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Root: queue a `size`-byte message; returns its sequence number.
    /// Messages are transferred one after another in submission order.
    pub fn submit(&mut self, size: u64) -> Result<u64, MemberError> {
        if !self.is_root() {
            return Err(MemberError::NotRoot);
        }
        self.check_open()?;
        if self.closing.is_some() {
            return Err(MemberError::Closed);
        }
        if size > self.config.max_message_size {
            return Err(MemberError::TooLarge {
                size,
                max: self.config.max_message_size,
            });
        }
        if self.next_seq >= MAX_MESSAGES {
            return Err(MemberError::TooManyMessages);
        }
        self.progress += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queued.push_back((seq, size));
        if self.current.is_none() {
            self.start_next();
        }
        Ok(seq)
    }

    /// A block arrived from `from` into the receive posted for it, carrying
    /// `immediate` (the message size) and `len` bytes.
    pub fn handle_block(&mut self, from: Rank, immediate: u64, len: usize) {
        if self.is_finished() {
            return;
        }
        self.progress += 1;
        let Some(cur) = self.current.as_mut() else {
            self.first_block(from, immediate, len);
            return;
        };
        if cur.expected.is_empty() {
            return self.violation(from, "a block arrived when none was expected");
        }
        // Each peer's blocks come in the order their receives were posted.
        let Some(index) = cur.expected.iter().position(|(_, t)| t.peer == from) else {
            return self.violation(from, "a block arrived from the wrong member");
        };
        let (_, expected) = cur.expected[index];
        if immediate != cur.size {
            return self.violation(from, "the message size changed between blocks");
        }
        if len != block_len(cur.size, cur.block_size, expected.block) {
            return self.violation(from, "a block has the wrong length");
        }
        if std::mem::replace(&mut cur.received[expected.block], true) {
            return self.violation(from, "a block arrived twice");
        }
        cur.num_received += 1;
        cur.expected.remove(index);
        cur.nearly_done = false;
        tracing::trace!(
            seq = cur.seq,
            block = expected.block,
            from,
            "block received"
        );
        self.release_if_done(expected.block);
        self.expect_next_block();
        self.try_send();
        self.check_complete();
    }

    /// The outstanding block send to `to` completed.
    pub fn handle_send_complete(&mut self, to: Rank) {
        if self.is_finished() {
            return;
        }
        self.progress += 1;
        let block = match self.current.as_mut() {
            Some(cur) if cur.sending == Some(to) => {
                cur.sending = None;
                cur.sends_left[cur.sending_block] -= 1;
                cur.sending_block
            }
            _ => return self.violation(to, "a send completed that was not outstanding"),
        };
        tracing::trace!(to, "block send complete");
        self.release_if_done(block);
        self.try_send();
        self.check_complete();
    }

    /// A control message arrived from `from`.
    pub fn handle_control(&mut self, from: Rank, control: Control) {
        if from >= self.config.group_size || from == self.config.rank {
            // Not a member: the driver routes by membership, so this is its bug.
            return;
        }
        if self.is_finished() {
            return;
        }
        self.progress += 1;
        match control {
            Control::ReadyForBlock => {
                if !self.neighbour[from] {
                    return self.violation(from, "ready-for-block from a non-neighbour");
                }
                if usize::from(self.ready[from]) >= READY_WINDOW {
                    return self.violation(from, "more ready-for-blocks than the window allows");
                }
                self.ready[from] += 1;
                tracing::trace!(from, ready = self.ready[from], "ready-for-block");
                self.try_send();
                self.check_complete();
            }
            Control::Close { messages } => {
                if from != 0 || self.is_root() {
                    return self.violation(from, "close from a non-root");
                }
                if self.closing.is_some() {
                    return self.violation(from, "close sent twice");
                }
                if messages < self.completed {
                    return self.violation(from, "close count below messages already received");
                }
                if messages > MAX_MESSAGES {
                    return self.violation(from, "impossible close count");
                }
                self.closing = Some(Closing {
                    total: messages,
                    acked: vec![false],
                });
                if self.completed == messages && self.current.is_none() {
                    // Nothing more will come: the armed first-block receive is moot.
                    self.armed = false;
                }
                self.check_close();
            }
            Control::CloseAck => {
                let Some(closing) = self.closing.as_mut().filter(|_| self.config.rank == 0) else {
                    return self.violation(from, "close acknowledged before close");
                };
                if std::mem::replace(&mut closing.acked[from], true) {
                    return self.violation(from, "close acknowledged twice");
                }
                self.check_close();
            }
            Control::Closed => {
                let acked = self.closing.as_ref().is_some_and(|c| c.acked[0]);
                if from != 0 || !acked {
                    return self.violation(from, "closed before every member acknowledged");
                }
                self.phase = Phase::Closed;
                self.actions.push_back(Action::Closed);
            }
            Control::Taken { messages } => self.handle_taken(from, messages),
            Control::Failed { suspect } => {
                if !self.failure_is_moot(suspect, Some(from)) {
                    self.fail(Failure {
                        suspect,
                        reason: FailureReason::Reported { by: from },
                    });
                }
            }
        }
    }

    /// Non-root: post the first-block receive for the next message and tell
    /// its sender we are ready.
    ///
    /// Not while a message is in progress, once the close count is reached,
    /// or while the receive window is full.
    fn arm(&mut self) {
        let done = self
            .closing
            .as_ref()
            .is_some_and(|c| self.completed >= c.total);
        let window_full = self
            .config
            .receive_window
            .is_some_and(|w| self.completed - self.consumed >= w);
        if self.armed || self.current.is_some() || done || window_full {
            return;
        }
        if let Some(first) = self.first {
            self.armed = true;
            self.actions
                .push_back(Action::PostFirstBlockRecv { from: first.peer });
            self.control(first.peer, Control::ReadyForBlock);
        }
    }

    /// Non-root: the first block of a new message arrived in the bounce buffer.
    fn first_block(&mut self, from: Rank, size: u64, len: usize) {
        let first = match self.first {
            Some(first) if self.armed && from == first.peer => first,
            _ => return self.violation(from, "a first block arrived that was not asked for"),
        };
        if self.app_closed {
            // The application said it took everything it will take.
            return self.fail_closed_unread();
        }
        if self
            .closing
            .as_ref()
            .is_some_and(|c| self.completed >= c.total)
        {
            return self.violation(from, "a message arrived after the close count");
        }
        if size > self.config.max_message_size {
            return self.violation(from, "announced message size exceeds the limit");
        }
        let bs = self.config.block_size.for_message(&self.schedule, size);
        let blocks = block_count(size, bs);
        let block = first.block.min(blocks - 1);
        if len != block_len(size, bs, block) {
            return self.violation(from, "the first block has the wrong length");
        }
        self.armed = false;
        let steps = self.schedule.total_steps(blocks);
        // The schedule's first incoming transfer for this k is the first block
        // (checked by the schedule tests).
        let first_step = self.schedule.next_incoming(blocks, 0).map(|(s, _)| s);
        debug_assert_eq!(
            first_step.and_then(|s| self.schedule.incoming(blocks, s)),
            Some(Transfer {
                peer: first.peer,
                block
            })
        );
        let mut received = vec![false; blocks];
        received[block] = true;
        let seq = self.completed;
        tracing::trace!(seq, size, blocks, block, from, "first block received");
        self.actions.push_back(Action::BeginMessage {
            seq,
            size,
            first_block: block,
            first_block_len: len,
            block_size: bs,
        });
        let sends_left = self.sends_per_block(blocks, steps);
        self.current = Some(MessageProgress {
            seq,
            size,
            block_size: bs,
            blocks,
            steps,
            send_step: 0,
            sending: None,
            sending_block: 0,
            sends_left,
            expected: VecDeque::new(),
            post_cursor: first_step.map_or(steps, |s| s + 1),
            nearly_done: false,
            received,
            num_received: 1,
        });
        self.release_if_done(block);
        self.expect_next_block();
        self.try_send();
        self.check_complete();
    }

    /// Post the next receives of the schedule, in step order, and send
    /// their ready-for-blocks: at most [`READY_WINDOW`] ahead and, with
    /// [`Announce::OneSender`], all from one sender: the next receive from
    /// another sender is announced only once every block announced to the
    /// current one has arrived.
    fn expect_next_block(&mut self) {
        let one_sender = self.config.announce == Announce::OneSender;
        let cur = self.current.as_mut().expect("a message is in progress");
        let bs = cur.block_size;
        while cur.expected.len() < READY_WINDOW {
            let next = self.schedule.next_incoming(cur.blocks, cur.post_cursor);
            let Some((step, t)) = next else {
                cur.post_cursor = cur.steps;
                return;
            };
            if one_sender && cur.expected.back().is_some_and(|(_, e)| e.peer != t.peer) {
                // Another sender: it may send only once the current one's
                // blocks are here (no two blocks ever share our port), or
                // its one block has little enough left to arrive.
                let early = cur.nearly_done && cur.expected.len() == 1;
                if !early {
                    return;
                }
                cur.nearly_done = false;
            }
            cur.post_cursor = step + 1;
            cur.expected.push_back((step, t));
            self.actions.push_back(Action::PostRecv {
                from: t.peer,
                seq: cur.seq,
                offset: t.block * bs,
                len: block_len(cur.size, bs, t.block),
            });
            self.actions.push_back(Action::SendControl {
                to: t.peer,
                control: Control::ReadyForBlock,
            });
        }
    }

    /// Root: begin the next queued message, if any.
    fn start_next(&mut self) {
        let Some((seq, size)) = self.queued.pop_front() else {
            return;
        };
        let block_size = self.config.block_size.for_message(&self.schedule, size);
        let blocks = block_count(size, block_size);
        tracing::trace!(seq, size, blocks, "message started");
        let steps = self.schedule.total_steps(blocks);
        let sends_left = self.sends_per_block(blocks, steps);
        self.current = Some(MessageProgress {
            seq,
            size,
            block_size,
            blocks,
            steps,
            send_step: 0,
            sending: None,
            sending_block: 0,
            sends_left,
            expected: VecDeque::new(),
            post_cursor: 0,
            nearly_done: false,
            received: Vec::new(),
            num_received: 0,
        });
        // Blocks the root never sends (a group of one) are done at once.
        for block in 0..blocks {
            self.release_if_done(block);
        }
        self.try_send();
        self.check_complete();
    }

    /// Issue the next send of the schedule if its block is here and its
    /// target is ready; at most one block send is outstanding.
    fn try_send(&mut self) {
        let is_root = self.is_root();
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        let bs = cur.block_size;
        if cur.sending.is_some() {
            return;
        }
        cur.send_step = self
            .schedule
            .next_outgoing(cur.blocks, cur.send_step)
            .map_or(cur.steps, |(s, _)| s);
        let Some(t) = self
            .schedule
            .outgoing(cur.blocks, cur.send_step)
            .filter(|_| cur.send_step < cur.steps)
        else {
            return;
        };
        if (!is_root && !cur.received[t.block]) || self.ready[t.peer] == 0 {
            return;
        }
        self.ready[t.peer] -= 1;
        cur.sending = Some(t.peer);
        cur.sending_block = t.block;
        cur.send_step += 1;
        tracing::trace!(seq = cur.seq, block = t.block, to = t.peer, "block send");
        self.actions.push_back(Action::SendBlock {
            to: t.peer,
            seq: cur.seq,
            offset: t.block * bs,
            len: block_len(cur.size, bs, t.block),
            immediate: cur.size,
        });
    }

    /// Complete the current message once all its sends and receives are done.
    fn check_complete(&mut self) {
        let Some(cur) = self.current.as_ref() else {
            return;
        };
        let sends_done = cur.sending.is_none()
            && self
                .schedule
                .next_outgoing(cur.blocks, cur.send_step)
                .is_none();
        if !sends_done || (!self.is_root() && cur.num_received < cur.blocks) {
            return;
        }
        let seq = cur.seq;
        tracing::debug!(seq, size = cur.size, "message complete");
        self.current = None;
        self.completed += 1;
        self.actions.push_back(Action::MessageComplete { seq });
        if self.is_root() {
            self.check_delivered();
            self.start_next();
        } else {
            self.arm();
        }
        self.check_close();
    }
}
