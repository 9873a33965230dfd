//! The configuration of a group, and its defaults and bounds.

use std::time::Duration;

use crate::schedule::{AUTO_BLOCK_SIZE_MAX, Algorithm, BlockSize, Topology, TopologyError};
use crate::target::ReceiveTargets;

/// Largest block of the default, automatic block size: 256 KiB (see
/// [`GroupConfig::with_automatic_block_size`]; the papers used fixed 1 MiB
/// blocks over RDMA).
pub const DEFAULT_BLOCK_SIZE: usize = AUTO_BLOCK_SIZE_MAX;

/// Default largest message a receiver accepts: 16 GiB. A receiver holds a
/// whole message in memory before it is delivered (unless its
/// [`ReceiveTargets`] hook puts it in a file), so this bounds what a peer
/// can make it reserve; a larger announced size is a protocol
/// violation by the sender, refused before anything is allocated. Raise it
/// with [`GroupConfig::with_max_message_size`] where memory allows.
pub const DEFAULT_MAX_MESSAGE_SIZE: u64 = 16 << 30;

/// The largest block size a group accepts: 1 GiB. Every receiver holds a
/// block-sized bounce buffer per group, so creating a group with larger
/// blocks fails with [`Error::InvalidConfig`](crate::Error::InvalidConfig)
/// instead of reserving it.
pub const MAX_BLOCK_SIZE: usize = 1 << 30;

/// Default receive window: 64 delivered messages not yet read.
pub const DEFAULT_RECEIVE_WINDOW: u64 = 64;

/// Default time [`Node::create_group`](crate::Node::create_group) waits for
/// every other member to create the group: 30 s.
pub const DEFAULT_CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// Default progress timeout of a group: 30 s (see
/// [`GroupConfig::with_progress_timeout`]).
pub const DEFAULT_PROGRESS_TIMEOUT: Duration = Duration::from_secs(30);

/// Default largest batch of small messages (see
/// [`GroupConfig::with_small_message_batching`]): 16 KiB.
pub const DEFAULT_MAX_BATCH_BYTES: usize = 16 << 10;

/// Bytes a message takes in a batch besides its own: its length.
pub const BATCH_HEADER_BYTES: usize = 4;

/// When a receiver has a message, as far as the root's
/// [`Receipt::delivered`](crate::Receipt::delivered) and
/// [`Sender::close`](crate::Sender::close) are concerned
/// ([`GroupConfig::with_durability`]).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Once the application has taken it from the group's stream: in its
    /// memory, or (received into a file) in the file, through the page
    /// cache.
    #[default]
    Taken,
    /// As `Taken`, and a message received into a file
    /// ([`ReceiveTarget::File`](crate::ReceiveTarget::File)) is on stable
    /// storage first: the stream syncs the file's data
    /// ([`File::sync_data`](std::fs::File::sync_data), off the async
    /// threads) before it yields the message, and a sync that fails fails
    /// the group, naming this member
    /// ([`FailureKind::ReceiveTarget`](crate::FailureKind::ReceiveTarget)).
    /// The stream then acknowledges the message as persisted to the root
    /// ([`Receipt::persisted`](crate::Receipt::persisted)) once every
    /// message before it is. A message in memory is what the application
    /// makes of it, as with `Taken`: it acknowledges it with
    /// [`Receiver::persisted`](crate::Receiver::persisted).
    Synced,
}

/// Configuration of a group.
///
/// Every member must use the same algorithm, block size, largest message
/// size, racks and slow members (creating the group checks this); the
/// receive window, the create timeout and the progress timeout are each
/// member's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupConfig {
    algorithm: Algorithm,
    block_size: BlockSize,
    max_message_size: u64,
    receive_window: Option<u64>,
    create_timeout: Duration,
    progress_timeout: Option<Duration>,
    message_digest: Option<bool>,
    slow_reader_timeout: Option<Duration>,
    max_in_flight: Option<u64>,
    receive_targets: Option<ReceiveTargets>,
    racks: Option<Vec<u32>>,
    slow_members: Vec<usize>,
    small_message_batching: Option<usize>,
    durability: Durability,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            algorithm: Algorithm::BinomialPipeline,
            block_size: BlockSize::AUTOMATIC,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            receive_window: Some(DEFAULT_RECEIVE_WINDOW),
            create_timeout: DEFAULT_CREATE_TIMEOUT,
            progress_timeout: Some(DEFAULT_PROGRESS_TIMEOUT),
            message_digest: None,
            slow_reader_timeout: None,
            max_in_flight: None,
            receive_targets: None,
            racks: None,
            slow_members: Vec::new(),
            small_message_batching: Some(DEFAULT_MAX_BATCH_BYTES),
            durability: Durability::Taken,
        }
    }
}

impl GroupConfig {
    /// The defaults: binomial pipeline, automatic block size (48 KiB to
    /// 256 KiB by message and group size), messages up to 16 GiB,
    /// a receive window of 64 messages, a create timeout of 30 s, a
    /// progress timeout of 30 s.
    pub fn new() -> Self {
        Self::default()
    }

    /// Set the multicast algorithm.
    pub fn with_algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// Cut every message into blocks of `block_size` bytes (at least 1, at
    /// most [`MAX_BLOCK_SIZE`]) instead of choosing per message.
    pub fn with_block_size(mut self, block_size: usize) -> Self {
        self.block_size = BlockSize::Fixed(block_size);
        self
    }

    /// Choose each message's block size from its size and the group (the
    /// default): the smallest power of two up to 256 KiB, at least 48 KiB, that
    /// keeps the algorithm's extra pipeline steps near 1.6 % of the
    /// message's blocks (0.02 % over TCP, whose sends complete once
    /// buffered), so that a message of a few MiB to many members is not
    /// held back by the steps it takes to fill the pipeline, and larger
    /// messages keep larger blocks; then evened out, so that the message's
    /// blocks are all of one size rather than full ones and a short last
    /// one. See [`BlockSize::for_message_over`].
    pub fn with_automatic_block_size(mut self) -> Self {
        self.block_size = BlockSize::AUTOMATIC;
        self
    }

    /// Set the largest message a member accepts; a receiver treats a larger
    /// announced size as a protocol violation by the sender.
    pub fn with_max_message_size(mut self, max: u64) -> Self {
        self.max_message_size = max;
        self
    }

    /// Set how many delivered messages a receiver may hold unread (`None`:
    /// any number). While a receiver's application leaves that many messages
    /// unread, the receiver does not take the next message, which holds the
    /// whole group back: flow control from the slowest reader to the root.
    /// A window of 0 is treated as 1.
    pub fn with_receive_window(mut self, messages: Option<u64>) -> Self {
        self.receive_window = messages.map(|m| m.max(1));
        self
    }

    /// Set how long [`Node::create_group`](crate::Node::create_group) waits
    /// for every other member to create the group too before it fails with
    /// [`Error::CreateTimedOut`](crate::Error::CreateTimedOut). Local to this
    /// member: members may use different timeouts.
    pub fn with_create_timeout(mut self, timeout: Duration) -> Self {
        self.create_timeout = timeout;
        self
    }

    /// Set how long this member waits on another member that makes no
    /// progress before the group fails naming it
    /// ([`FailureKind::NoProgress`](crate::FailureKind::NoProgress));
    /// `None`: forever. Default 30 s.
    ///
    /// Progress is any step of the group: a block, a ready-for-block, a
    /// send completing, a step of the close. A member that stays connected
    /// (its heartbeats keep the failure detector content) but does nothing
    /// would otherwise hold the group forever. The clock runs only while
    /// this member waits on a peer: a ready-for-block for a block it holds,
    /// a send's completion or, on the root, a member's close
    /// acknowledgement count once the timeout; a block from a peer twice
    /// the timeout (that peer may itself be held up, and the member holding
    /// it up should be named first); a receiver's wait for the root's
    /// verdict after acknowledging, four times. An idle group (the root
    /// sends nothing) never times out. The member named is the one waited
    /// on: when a stall spreads through relays (a member held up behind
    /// another that holds the group), a member may time out on one that is
    /// only held up itself and name it.
    ///
    /// The trade-off: a receiver's application is part of the protocol. A
    /// receiver whose receive window is full, or whose application has not
    /// closed, holds the others back, and they time out on it if its
    /// application takes longer than the timeout to take the next message
    /// or to close (for example to persist a large message). Set the
    /// timeout above the longest such pause. Local to this member.
    pub fn with_progress_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.progress_timeout = timeout;
        self
    }

    /// Whether every message carries an end-to-end digest: the root
    /// computes a BLAKE3 hash of each message and sends it after the
    /// message's bytes; every receiver checks it before delivering the
    /// message, and a mismatch fails the group naming the member that sent
    /// the corrupted copy ([`FailureKind::DigestMismatch`](crate::FailureKind::DigestMismatch)).
    /// Meant for transports whose bytes travel on no wire of rdmc's own
    /// (`ofi`, RDMA: a NIC or a provider could corrupt them unseen); the
    /// `tcp` transport authenticates every frame already.
    ///
    /// Off by default on every transport: the hashes run on each node's
    /// actor, the root's before the message's first block goes out, each
    /// receiver's after its last block came, so they add to every
    /// message's time rather than overlapping the transfer (BENCHMARKS.md
    /// in the repository says by how much).
    /// Every member must use the same setting (creating the group checks
    /// this).
    pub fn with_message_digest(mut self, on: bool) -> Self {
        self.message_digest = Some(on);
        self
    }

    /// Carry small messages that the root's application sends while
    /// another message is in flight as one transfer, a batch of at most
    /// `max_batch_bytes` bytes (each message takes its length plus
    /// [`BATCH_HEADER_BYTES`]); every receiver splits it back into the
    /// separate messages, delivered in order, each its own
    /// [`Message`](crate::Message) with its own sequence number, and each
    /// [`Receipt`](crate::Receipt) resolves as it would have. Only
    /// messages already queued when the next transfer starts are batched:
    /// a lone message goes out at once, alone, as without batching, and no
    /// timer holds any message back. A message too large to join a batch
    /// (over `max_batch_bytes - BATCH_HEADER_BYTES` bytes) travels alone
    /// and is never copied; order is total, so a small message never
    /// overtakes a large one. `None`: every message is its own transfer.
    ///
    /// A batch is one transfer: its messages are sent, delivered and
    /// taken together or, if the group fails while it is on the way,
    /// lost together (no receiver gets part of one). The receive window
    /// ([`with_receive_window`](Self::with_receive_window)) counts a batch
    /// as one message. A receiver with a receive-target hook
    /// ([`with_receive_targets`](Self::with_receive_targets)) gets a
    /// batch's messages in memory: the hook is not asked for them (turn
    /// batching off for a group whose every message must go where the
    /// hook says).
    ///
    /// On by default with [`DEFAULT_MAX_BATCH_BYTES`] (16 KiB, about the
    /// size from which a message's time is its bytes on the link rather
    /// than its per-message costs): a burst of small messages then costs a
    /// few transfers instead of one each. Every member must use the same
    /// setting (creating the group checks this). A value below
    /// `BATCH_HEADER_BYTES + 1` is treated as `None`.
    pub fn with_small_message_batching(mut self, max_batch_bytes: Option<usize>) -> Self {
        self.small_message_batching = max_batch_bytes.filter(|&b| b > BATCH_HEADER_BYTES);
        self
    }

    /// The largest batch of small messages, if the group batches them.
    pub fn small_message_batching(&self) -> Option<usize> {
        self.small_message_batching
    }

    /// Fail the group when this receiver's application leaves a delivered
    /// message untaken from the stream for longer than `timeout` (counted
    /// from the message's delivery or the application's previous take,
    /// whichever is later): the error names this member as the suspect,
    /// with [`FailureKind::SlowReader`](crate::FailureKind::SlowReader),
    /// on every member. `None` (the default): a slow reader holds the group
    /// back through its receive window instead, as long as it likes.
    /// Local to this member; ignored on the root.
    pub fn with_slow_reader_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.slow_reader_timeout = timeout;
        self
    }

    /// The slow-reader timeout of this member.
    pub fn slow_reader_timeout(&self) -> Option<Duration> {
        self.slow_reader_timeout
    }

    /// Bound the root's messages in flight: queued and not yet taken by
    /// every member's application (see [`Receipt::delivered`](crate::Receipt::delivered)).
    /// At the bound, [`Sender::send`](crate::Sender::send),
    /// [`Sender::reserve`](crate::Sender::reserve) and the root's
    /// [`Sink`](futures::Sink) wait for room (first come, first served), and
    /// [`Sender::try_send`](crate::Sender::try_send) refuses the message with
    /// [`Error::TooManyInFlight`](crate::Error::TooManyInFlight). `None`
    /// (the default): no bound. A bound of 0 is treated as 1. Local to the
    /// root.
    ///
    /// The wait for room has no timeout of its own: a receiver whose
    /// application stops taking messages holds the root's sends for as
    /// long as it stops, and the [progress timeout](Self::with_progress_timeout)
    /// does not run meanwhile (the group itself waits on nobody). Give the
    /// receivers a [slow-reader timeout](Self::with_slow_reader_timeout), or
    /// bound the send with a timeout of the application's own, where that
    /// matters.
    pub fn with_max_in_flight(mut self, messages: Option<u64>) -> Self {
        self.max_in_flight = messages.map(|m| m.max(1));
        self
    }

    /// The root's bound on messages in flight.
    pub fn max_in_flight(&self) -> Option<u64> {
        self.max_in_flight
    }

    /// Decide, per incoming message, where its bytes go: memory (the
    /// default, delivered as [`Message::data`](crate::Message::data)), a
    /// buffer of the application's, or a file
    /// ([`ReceiveTarget`](crate::ReceiveTarget)). `targets` is called on
    /// this member when a message's first block arrives — its sequence
    /// number and size are known then, before any of its bytes are placed —
    /// and returns a future; the message's other blocks wait for it. Local
    /// to this member (the others need not use one). See
    /// [`ReceiveTargets`] for an example.
    pub fn with_receive_targets(mut self, targets: ReceiveTargets) -> Self {
        self.receive_targets = Some(targets);
        self
    }

    /// When this member (a receiver) has a message, as far as the root's
    /// [`Receipt::delivered`](crate::Receipt::delivered) is concerned:
    /// [`Durability::Taken`] (the default), or, with
    /// [`Durability::Synced`], once a message received into a file is on
    /// stable storage too. Local to this member: the root's `delivered()`
    /// means "on stable storage at every replica" when every receiver
    /// chose `Synced` (a storage service configures its replicas alike).
    ///
    /// What it costs: one `sync_data` per message received into a file, on
    /// the blocking thread pool, before the message is handed over (the
    /// next message's blocks keep arriving meanwhile).
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// This member's [`Durability`].
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// This member's receive-target hook, if any.
    pub fn receive_targets(&self) -> Option<&ReceiveTargets> {
        self.receive_targets.as_ref()
    }

    /// Whether messages carry a digest; `None`: the transport's default.
    pub fn message_digest(&self) -> Option<bool> {
        self.message_digest
    }

    /// The rack of each member, in the order of the member list given to
    /// `create_group` (one entry per member; any `u32` names a rack). The
    /// hybrid algorithm ([`Algorithm::Hybrid`]) sends every block into each
    /// rack once and spreads it inside the rack by a binomial pipeline
    /// ("Pushing Bytes: Cloud-Scale Data Replication with RDMC", Sec.
    /// 4.3.1), whatever order the list interleaves the racks in. Every
    /// member must give the same racks (creating the group checks this);
    /// a list of the wrong length fails creation.
    pub fn with_racks(mut self, racks: Vec<u32>) -> Self {
        self.racks = Some(racks);
        self
    }

    /// Members known to be slow, by rank (position in the member list).
    /// With the binomial pipeline and the hybrid they only receive, fed by
    /// a relay (a fast member outside the pipeline that receives every
    /// block from the pipeline's spare sends) and then by the root, so that
    /// they delay no other member (see [`Hybrid`](crate::schedule::Hybrid));
    /// a slow root still sends. The other algorithms ignore it. Every member
    /// must name the same ones (creating the group checks this); a rank
    /// outside the group fails creation. Without racks, over a transport
    /// whose sends complete once buffered (`tcp`), the other fast members
    /// form a chain of binomial pipelines whose sizes are powers of two (see
    /// [`Hybrid`](crate::schedule::Hybrid)); where sends complete once their
    /// bytes have left (RDMA, the in-memory transport) they stay one
    /// pipeline. The fast members then finish close to a unicast's time and
    /// the slow ones close to their own link's pace, instead of every
    /// member going at the slowest one's (BENCHMARKS.md in the repository
    /// has the measurements). Naming a host slow that is not slow costs the
    /// others time, so name only hosts known to be much slower.
    pub fn with_slow_members(mut self, ranks: impl IntoIterator<Item = usize>) -> Self {
        let mut ranks: Vec<usize> = ranks.into_iter().collect();
        ranks.sort_unstable();
        ranks.dedup();
        self.slow_members = ranks;
        self
    }

    /// The racks given by [`GroupConfig::with_racks`].
    pub fn racks(&self) -> Option<&[u32]> {
        self.racks.as_deref()
    }

    /// The slow members given by [`GroupConfig::with_slow_members`], sorted.
    pub fn slow_members(&self) -> &[usize] {
        &self.slow_members
    }

    /// The schedule topology of a group of `group_size` members under this
    /// configuration.
    pub fn topology(&self, group_size: usize) -> Result<Topology, TopologyError> {
        let mut topology = Topology::flat(group_size)?;
        if let Some(racks) = &self.racks {
            topology = topology.with_racks(racks.clone())?;
        }
        topology.with_slow_members(self.slow_members.iter().copied())
    }

    /// The multicast algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The block size in bytes: the fixed one, or with the automatic
    /// choice the largest block it picks (what every receiver's bounce
    /// buffer holds).
    pub fn block_size(&self) -> usize {
        self.block_size.largest()
    }

    /// How messages are cut into blocks: a fixed size, or chosen per
    /// message.
    pub fn block_size_policy(&self) -> BlockSize {
        self.block_size
    }

    /// The largest message accepted.
    pub fn max_message_size(&self) -> u64 {
        self.max_message_size
    }

    /// How many delivered messages a receiver may hold unread.
    pub fn receive_window(&self) -> Option<u64> {
        self.receive_window
    }

    /// How long creating the group waits for the other members.
    pub fn create_timeout(&self) -> Duration {
        self.create_timeout
    }

    /// How long this member waits on a member that makes no progress.
    pub fn progress_timeout(&self) -> Option<Duration> {
        self.progress_timeout
    }
}
