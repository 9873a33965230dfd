//! What a member is configured with: its place in the group, the schedule
//! and block size, and the limits and rules of its receives.

use std::time::Duration;

use crate::schedule::{Algorithm, BlockSize, Topology};

#[cfg(doc)]
use super::{Control, FailureKind, GroupMember, MemberError};

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
/// half rate, and the binomial pipeline's lock-step dissolves, the more so
/// the larger the group. So a member never receives two blocks at once,
/// and a stream from one sender never waits a round trip per block.
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
    /// The next receives whoever sends them, announced half the ready
    /// window ([`MemberConfig::ready_window`]; four by default) or more at
    /// a time. Right where a send completes
    /// once the transport has buffered it (TCP's socket buffer): a sender
    /// then has blocks to several receivers on the wire at once anyway,
    /// and a receiver that takes blocks from one sender at a time would
    /// leave its port idle while that sender shares its own.
    ///
    /// An announcement to a peer this member sends a block to at an
    /// earlier step than the announced transfer's is held back and rides
    /// in front of that block ([`Action::SendControl`] just before its
    /// [`Action::SendBlock`]), so that over TCP it leaves in the block's
    /// write instead of in a packet of its own: in the binomial pipeline
    /// every announcement but those to the root and to senders a member
    /// never sends to. The peer still holds the announcements for its
    /// blocks before that one, so in the schedule's order this does not
    /// hold it up (a member late with its own block can make it wait).
    ///
    /// [`Action::SendControl`]: super::Action::SendControl
    /// [`Action::SendBlock`]: super::Action::SendBlock
    AnySender,
}

/// Most messages one group carries (2^48): the root refuses more
/// ([`MemberError::TooManyMessages`]), and a close count above it is a
/// protocol violation by the root (a peer announcing `u64::MAX` messages
/// would otherwise hold the group open forever).
pub const MAX_MESSAGES: u64 = 1 << 48;

/// The bit of a block's immediate value that marks its transfer as a batch
/// of small messages ([`GroupMember::submit_batch`]); the other bits are
/// the transfer's size, so a transfer is smaller than this bit.
pub const BATCH_FLAG: u64 = 1 << 63;

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
/// use rdmc_proto::MemberConfig;
/// use rdmc_proto::schedule::{Algorithm, BlockSize};
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
    /// How many receives this member keeps posted and announced ahead
    /// (1 to [`READY_WINDOW`], the default): its senders hold at most this
    /// many of its ready-for-blocks. With [`Announce::AnySender`] the
    /// window is topped up half of it at a time (at least one; four with
    /// the default): over TCP a ready-for-block is a frame of its own on
    /// the receiver's uplink, the link that carries its own forwards;
    /// announced several at a time, one frame to each sender says them
    /// (the driver sends a peer's ready-for-blocks of one pass as one
    /// signal, and those that ride a block in front of it), and a stream
    /// from one sender still has half a window announced ahead.
    pub ready_window: usize,
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
    /// ([`FailureKind::SlowReader`]); `None`: forever. Ignored on the root.
    pub slow_reader_timeout: Option<Duration>,
    /// How long after its progress timeout passed this member still waits
    /// for a report of the failure before it fails the group with
    /// [`FailureKind::NoProgress`]: a report within it decides the suspect
    /// and the kind ([one cause per failure](FailureKind#one-cause-per-failure)).
    /// Set it a little above the time a report takes between two members,
    /// and to the grace period the driver waits after it lost a peer (100 ms
    /// in the `rdmc` library). Zero by default.
    pub report_grace: Duration,
    /// Largest batch of small messages, in bytes on the wire, that the
    /// root may send as one transfer ([`GroupMember::submit_batch`]); a
    /// receiver takes a larger batch, or any batch when `None`, for a
    /// protocol violation. The same on every member.
    pub max_batch: Option<u64>,
}

impl MemberConfig {
    /// Member `rank` of a group of `group_size` running `algorithm` with
    /// `block_size`; by default one rack and no slow members, messages of
    /// any size, no receive window, a ready window of [`READY_WINDOW`],
    /// [`Announce::OneSender`], no progress or slow-reader timeout (and no
    /// report grace), and no batches.
    pub fn new(algorithm: Algorithm, group_size: usize, rank: Rank, block_size: BlockSize) -> Self {
        MemberConfig {
            algorithm,
            topology: None,
            group_size,
            rank,
            block_size,
            max_message_size: u64::MAX,
            receive_window: None,
            ready_window: READY_WINDOW,
            announce: Announce::OneSender,
            early_announce: None,
            progress_timeout: None,
            slow_reader_timeout: None,
            max_batch: None,
            report_grace: Duration::ZERO,
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

    /// How many receives to keep announced ahead
    /// ([`ready_window`](Self::ready_window)): 1 to [`READY_WINDOW`].
    pub fn with_ready_window(mut self, window: usize) -> Self {
        self.ready_window = window;
        self
    }

    /// The receives this member announces at least at once with
    /// [`Announce::AnySender`] (unless fewer are left in the message): half
    /// its [`ready_window`](Self::ready_window), at least one; it tops its
    /// window up only once this many of its announced blocks have arrived.
    pub(crate) fn announce_batch(&self) -> usize {
        (self.ready_window / 2).max(1)
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

    /// Allow batches of up to `bytes` ([`max_batch`](Self::max_batch)).
    pub fn with_max_batch(mut self, bytes: Option<u64>) -> Self {
        self.max_batch = bytes;
        self
    }

    /// How long to wait for a report after the progress timeout
    /// ([`report_grace`](Self::report_grace)).
    pub fn with_report_grace(mut self, grace: Duration) -> Self {
        self.report_grace = grace;
        self
    }

    /// How long a delivered message may stay untaken
    /// ([`slow_reader_timeout`](Self::slow_reader_timeout)).
    pub fn with_slow_reader_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.slow_reader_timeout = timeout;
        self
    }
}
