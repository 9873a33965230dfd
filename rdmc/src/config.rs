//! Node and group configuration.

use std::net::SocketAddr;
use std::time::Duration;

use crate::ids::NodeId;
use crate::schedule::{AUTO_BLOCK_SIZE_MAX, Algorithm, BlockSize, Topology, TopologyError};
use crate::target::ReceiveTargets;
pub use crate::transport::frame::protect::WireSecurity;
use crate::transport::mesh::ClusterConfig;
pub use crate::transport::mesh::{ClusterKey, ClusterKeyError};
#[cfg(feature = "ofi")]
use crate::transport::ofi::FabricOptions;
#[cfg(feature = "rdma")]
use crate::transport::rdma::DeviceOptions;
pub use crate::wait::CompletionMode;

/// Configuration of a [`Node`](crate::Node).
#[derive(Clone, Debug, Default)]
pub struct NodeConfig {
    completion_mode: CompletionMode,
    buffer_pool: Option<usize>,
}

impl NodeConfig {
    /// The defaults: [`CompletionMode::Adaptive`] (interrupt-driven, spinning
    /// only while completions stream in and a core is free for it; see
    /// [`CompletionMode`] for the modes and what each costs).
    pub fn new() -> Self {
        Self::default()
    }

    /// Set how the node waits for completions.
    pub fn with_completion_mode(mut self, mode: CompletionMode) -> Self {
        self.completion_mode = mode;
        self
    }

    /// How the node waits for completions.
    pub fn completion_mode(&self) -> CompletionMode {
        self.completion_mode
    }

    /// The most bytes of spare message buffers the node keeps for reuse
    /// (0: none). A delivered message's buffer returns to the node's pool
    /// when the application drops the [`Message`](crate::Message); the next
    /// message of a similar size reuses it instead of mapping (and, on
    /// registered-memory transports, registering) fresh memory.
    ///
    /// Default: 512 MiB on the `mem` and `tcp` transports; on `ofi`, what
    /// `OfiConfig::with_buffer_pool` says (feature `ofi`; 1 GiB unless set).
    /// Set here, it applies to every transport.
    pub fn with_buffer_pool(mut self, bytes: usize) -> Self {
        self.buffer_pool = Some(bytes);
        self
    }

    /// The buffer pool budget set with [`with_buffer_pool`](Self::with_buffer_pool), if any.
    pub fn buffer_pool(&self) -> Option<usize> {
        self.buffer_pool
    }
}

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
    /// [`SendFuture`](crate::SendFuture) resolves as it would have. Only
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

    /// Bound the root's messages in flight: sent and not yet taken by every
    /// member's application (see [`SendFuture::delivered`](crate::SendFuture::delivered)).
    /// At the bound, [`Group::ready`](crate::Group::ready) and the group's
    /// [`Sink`](futures::Sink) wait for room, and
    /// [`Group::send`](crate::Group::send) refuses the message with
    /// [`Error::TooManyInFlight`](crate::Error::TooManyInFlight). `None`
    /// (the default): no bound. A bound of 0 is treated as 1. Local to the
    /// root.
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

/// Default size of the chunks the `tcp` transport cuts blocks into on the
/// wire: 256 KiB.
pub(crate) const DEFAULT_CHUNK_SIZE: u32 = 256 * 1024;

/// The longest time limit a cluster configuration accepts: one year.
/// Longer limits are refused (they would overflow the clock arithmetic, and
/// no operator means them).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// What is wrong with a network transport's cluster configuration
/// ([`TcpConfig`], `OfiConfig`): every variant reads as one line naming the
/// offending member or setting. [`Node::tcp`](crate::Node::tcp) and
/// `Node::ofi` check the configuration before they open anything and fail
/// with [`Error::ClusterConfig`](crate::Error::ClusterConfig); call
/// [`TcpConfig::validate`] to check it earlier.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClusterConfigError {
    /// The member list is empty.
    #[error("the member list is empty")]
    NoMembers,
    /// This node's id is not below the number of members.
    #[error("node {id} is not in a cluster of {members}")]
    NotAMember {
        /// This node's id.
        id: NodeId,
        /// The number of members.
        members: usize,
    },
    /// Two members have the same address.
    #[error("nodes {first} and {second} have the same address {addr}")]
    DuplicateAddress {
        /// The address.
        addr: SocketAddr,
        /// The first member with it.
        first: NodeId,
        /// The next member with it.
        second: NodeId,
    },
    /// A member's address has port 0, which nobody can dial.
    #[error("node {id}'s address {addr} has port 0, which the other members cannot dial")]
    PortZero {
        /// The member.
        id: NodeId,
        /// Its address.
        addr: SocketAddr,
    },
    /// A member's address is the unspecified address (`0.0.0.0`, `::`),
    /// which nobody can dial.
    #[error("node {id}'s address {addr} is unspecified, which the other members cannot dial")]
    Unspecified {
        /// The member.
        id: NodeId,
        /// Its address.
        addr: SocketAddr,
    },
    /// A time limit is zero.
    #[error("the {what} must be longer than zero")]
    ZeroTimeout {
        /// Which limit, for example `failure timeout`.
        what: &'static str,
    },
    /// A time limit is longer than [`MAX_TIMEOUT`].
    #[error("the {what} of {value:?} is longer than the most accepted, {MAX_TIMEOUT:?}")]
    TimeoutTooLong {
        /// Which limit, for example `connect timeout`.
        what: &'static str,
        /// The limit given.
        value: Duration,
    },
}

/// Fails unless the time limit `what` is above zero and at most
/// [`MAX_TIMEOUT`].
pub(crate) fn check_limit(what: &'static str, value: Duration) -> Result<(), ClusterConfigError> {
    if value.is_zero() {
        Err(ClusterConfigError::ZeroTimeout { what })
    } else if value > MAX_TIMEOUT {
        Err(ClusterConfigError::TimeoutTooLong { what, value })
    } else {
        Ok(())
    }
}

/// The builders of what both network transports' configurations hold in
/// their `cluster` field (a [`ClusterConfig`]), written once for both: the
/// closure lists the configuration's own time limits for `validate`, the
/// attributes given document the transport's failure timeout.
macro_rules! cluster_builders {
    ($config:ident, $own_limits:expr, $(#[$failure_timeout_doc:meta])*) => {
        impl $config {
            /// Check the configuration without opening anything: the member
            /// addresses are distinct and dialable (no port 0, no
            /// unspecified address), this node is one of the members, and
            /// every time limit is above zero and at most [`MAX_TIMEOUT`].
            /// The node's start runs the same check first.
            ///
            /// # Errors
            /// The first problem found, as a one-line [`ClusterConfigError`].
            pub fn validate(&self) -> Result<(), ClusterConfigError> {
                self.cluster.validate()?;
                let own_limits: fn(&Self) -> Vec<(&'static str, Duration)> = $own_limits;
                for (what, value) in own_limits(self) {
                    check_limit(what, value)?;
                }
                Ok(())
            }

            /// Accept the mesh's connections on this already bound listener
            /// instead of binding this node's member address (useful with
            /// port 0).
            pub fn with_listener(mut self, listener: std::net::TcpListener) -> Self {
                self.cluster.listener = Some(listener);
                self
            }

            /// How long to wait for every other member to be connected
            /// (default 30 s; more than zero, at most [`MAX_TIMEOUT`]).
            pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
                self.cluster.connect_timeout = timeout;
                self
            }

            $(#[$failure_timeout_doc])*
            pub fn with_failure_timeout(mut self, timeout: Duration) -> Self {
                self.cluster.failure_timeout = timeout;
                self
            }
        }
    };
}

/// Early announcement over TCP ([`TcpConfig::with_early_announce`]).
///
/// A TCP send completes once the socket buffered it, so without a limit a
/// sender runs ahead to its next partner while its previous block still
/// leaves, and two of its blocks share its port; a receiver that takes one
/// sender at a time then waits a ready-for-block round trip at each change
/// of sender. With both settings, every socket holds at most about
/// `unsent_limit` unsent bytes (`TCP_NOTSENT_LOWAT`: a send completes
/// once all but that much has left), and a receiver announces the next
/// sender's receive once the current block has `threshold` bytes or fewer
/// still to come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EarlyAnnounce {
    /// Bytes left of an arriving block at which the next sender is announced.
    pub threshold: u32,
    /// Most unsent bytes a socket holds (`TCP_NOTSENT_LOWAT`).
    pub unsent_limit: u32,
}

/// Configuration of a node on the `tcp` transport: the cluster's members
/// (one address per node id, in id order), this node's id, and the cluster
/// key every member holds.
///
/// [`Node::tcp`](crate::Node::tcp) has an example.
#[derive(Debug)]
pub struct TcpConfig {
    pub(crate) cluster: ClusterConfig,
    pub(crate) chunk_size: u32,
    pub(crate) wire_security: WireSecurity,
    pub(crate) early_announce: Option<EarlyAnnounce>,
    pub(crate) congestion_control: Option<String>,
}

impl TcpConfig {
    /// Node `id` of the cluster whose members listen at `members` (indexed by
    /// node id), authenticating with `key`.
    pub fn new(members: Vec<SocketAddr>, id: NodeId, key: ClusterKey) -> Self {
        TcpConfig {
            cluster: ClusterConfig::new(members, id, key),
            chunk_size: DEFAULT_CHUNK_SIZE,
            wire_security: WireSecurity::default(),
            early_announce: None,
            congestion_control: None,
        }
    }

    /// How the bytes on the wire are protected after the handshake
    /// (default [`WireSecurity::Authenticated`]: every frame carries a MAC;
    /// [`WireSecurity::Encrypted`] hides the payloads too;
    /// [`WireSecurity::None`] is for trusted fabrics only). Every member
    /// must choose the same; [`WireSecurity`] says what an attacker on the
    /// path can and cannot do in each mode.
    pub fn with_wire_security(mut self, security: WireSecurity) -> Self {
        self.wire_security = security;
        self
    }

    /// Size of the chunks blocks are cut into on the wire while several
    /// groups share a link (default 256 KiB): smaller chunks interleave
    /// overlapping groups more finely. While a link carries a single
    /// group's blocks and no signal waits, frames grow to 1 MiB (or this
    /// size, if larger); every member should use the same chunk size.
    pub fn with_chunk_size(mut self, bytes: u32) -> Self {
        self.chunk_size = bytes.max(1);
        self
    }

    /// Early announcement ([`EarlyAnnounce`]; default off): each socket
    /// keeps at most about `unsent_limit` bytes unsent, and receivers take
    /// blocks from one sender at a time, announcing the next sender once
    /// the current block has `threshold` bytes or fewer still to arrive.
    /// `None`: sends complete once buffered and receivers announce to any
    /// sender. Every member should choose the same.
    pub fn with_early_announce(mut self, early: Option<EarlyAnnounce>) -> Self {
        self.early_announce = early;
        self
    }

    /// The TCP congestion control of this node's connections (Linux's
    /// `TCP_CONGESTION`: `"cubic"`, `"bbr"`, `"reno"`, ... — one the kernel
    /// has, and, for a process without `CAP_NET_ADMIN`, one
    /// `net.ipv4.tcp_allowed_congestion_control` lists). Default: the
    /// machine's (`net.ipv4.tcp_congestion_control`).
    ///
    /// It governs what this node sends; every member should choose the
    /// same. The binomial pipeline is sensitive to it: each member sends
    /// to a different partner at every step, so each connection carries a
    /// block, then idles. It ran faster over `cubic` than over `bbr` on the
    /// project's emulated cluster (a reading of the runs: BBR paces each
    /// connection at the link's whole rate, so a member's connections that
    /// overlap overfill its link); the chain, one steady connection per
    /// member, hardly cared.
    ///
    /// [`Node::tcp`](crate::Node::tcp) checks the name before it connects:
    /// [`Error::CongestionControl`](crate::Error::CongestionControl) if
    /// the kernel refuses it.
    pub fn with_congestion_control(mut self, name: impl Into<String>) -> Self {
        self.congestion_control = Some(name.into());
        self
    }
}

cluster_builders!(
    TcpConfig,
    |_| vec![],
    /// After how long without a byte from a peer (heartbeats included) it is
    /// considered failed (default 3 s); failures are reported within this
    /// bound, sooner when a connection breaks outright. Writing one chunk
    /// (see [`with_chunk_size`](Self::with_chunk_size)) must also finish
    /// within it, so a peer that stops reading is detected too.
);

/// Configuration of a node on the `ofi` transport (cargo feature `ofi`):
/// libfabric endpoints to every other member, found through a rendezvous
/// over the same authenticated TCP mesh the `tcp` transport uses.
///
/// `members` are the members' rendezvous addresses (one per node id, in id
/// order); the fabric endpoints bind to this node's rendezvous IP unless
/// [`with_fabric_addr`](Self::with_fabric_addr) says otherwise. The
/// provider is `tcp` unless [`with_provider`](Self::with_provider) names
/// another (`verbs` on RDMA fabrics).
///
/// [`Node::ofi`](crate::Node::ofi) has an example.
#[cfg(feature = "ofi")]
#[derive(Debug)]
pub struct OfiConfig {
    pub(crate) cluster: ClusterConfig,
    pub(crate) fabric: FabricOptions,
}

#[cfg(feature = "ofi")]
impl OfiConfig {
    /// Node `id` of the cluster whose members rendezvous at `members`
    /// (indexed by node id), authenticating with `key`.
    pub fn new(members: Vec<SocketAddr>, id: NodeId, key: ClusterKey) -> Self {
        OfiConfig {
            cluster: ClusterConfig::new(members, id, key),
            fabric: FabricOptions::default(),
        }
    }

    /// The libfabric provider to use (default `tcp`), as `fi_info -l` names
    /// it.
    pub fn with_provider(mut self, provider: impl Into<String>) -> Self {
        self.fabric.provider = provider.into();
        self
    }

    /// The local address the fabric endpoints bind to (default: the IP of
    /// this node's member address) — for example the IPoIB address of the
    /// RDMA NIC while the rendezvous runs over another network.
    pub fn with_fabric_addr(mut self, addr: std::net::IpAddr) -> Self {
        self.fabric.fabric_addr = Some(addr);
        self
    }

    /// The most bytes of spare registered receive buffers the node keeps
    /// for reuse (default 1 GiB; 0: none). A delivered message's buffer
    /// returns to the pool, registration included, when the application
    /// drops the message; the next message of a similar size reuses it
    /// instead of registering (on hardware: pinning) fresh memory.
    /// [`NodeConfig::with_buffer_pool`], when set, takes precedence.
    pub fn with_buffer_pool(mut self, bytes: usize) -> Self {
        self.fabric.pool_budget = bytes;
        self
    }

    /// How long a shutdown waits for queued control messages to be sent
    /// (default 3 s; more than zero, at most [`MAX_TIMEOUT`]).
    pub fn with_flush_timeout(mut self, timeout: Duration) -> Self {
        self.fabric.flush_timeout = timeout;
        self
    }
}

#[cfg(feature = "ofi")]
cluster_builders!(
    OfiConfig,
    |config| vec![("flush timeout", config.fabric.flush_timeout)],
    /// After how long without a message from a peer (heartbeats included)
    /// it is considered failed (default 3 s). A peer whose process dies is
    /// noticed sooner, when its endpoints shut down; this bound is for one
    /// that hangs, or a path that drops everything.
);

// ---------------------------------------------------------------------------
// The `rdma` transport's configuration.

/// Configuration of a node on the `rdma` transport (cargo feature `rdma`):
/// an RC queue pair to every other member on an RDMA device (InfiniBand,
/// RoCE, iWARP, or Soft-RoCE's `rxe`), set up through the same
/// authenticated TCP mesh the `tcp` transport uses.
///
/// `members` are the members' rendezvous addresses (one per node id, in id
/// order). The device is the first one `ibv_devices` lists unless
/// [`with_device`](Self::with_device) names another; port 1 unless set; the
/// GID index as [`with_gid_index`](Self::with_gid_index) says (`show_gids`
/// lists a device's GIDs).
///
/// [`Node::rdma`](crate::Node::rdma) has an example.
#[cfg(feature = "rdma")]
#[derive(Debug)]
pub struct RdmaConfig {
    pub(crate) cluster: ClusterConfig,
    pub(crate) device: DeviceOptions,
}

#[cfg(feature = "rdma")]
impl RdmaConfig {
    /// Node `id` of the cluster whose members rendezvous at `members`
    /// (indexed by node id), authenticating with `key`.
    pub fn new(members: Vec<SocketAddr>, id: NodeId, key: ClusterKey) -> Self {
        RdmaConfig {
            cluster: ClusterConfig::new(members, id, key),
            device: DeviceOptions::default(),
        }
    }

    /// The names of this machine's RDMA devices, as `ibv_devices` lists
    /// them — what [`with_device`](Self::with_device) takes.
    ///
    /// # Errors
    /// [`RdmaError::NoDevice`](crate::RdmaError::NoDevice) if there is
    /// none (or libibverbs is not installed).
    pub fn devices() -> Result<Vec<String>, crate::RdmaError> {
        crate::transport::rdma::device_names()
    }

    /// The RDMA device to use, as `ibv_devices` names it (for example
    /// `mlx5_0` or `rxe0`; default: the first device).
    pub fn with_device(mut self, name: impl Into<String>) -> Self {
        self.device.device = Some(name.into());
        self
    }

    /// The device's port (default 1).
    pub fn with_port(mut self, port: u8) -> Self {
        self.device.port = port;
        self
    }

    /// The GID index. Every member's GID at this index must be reachable
    /// from the others (on RoCE v2: an IPv4-mapped or global IPv6 GID on
    /// the network the members share). Default: the first RoCE v2 GID
    /// holding an IPv4 address, else the first RoCE v2 GID, else 0
    /// (InfiniBand).
    pub fn with_gid_index(mut self, index: u8) -> Self {
        self.device.gid_index = Some(index);
        self
    }

    /// The most bytes of spare registered receive buffers the node keeps
    /// for reuse (default 1 GiB; 0: none): a delivered message's buffer
    /// returns to the pool, registration included, when the application
    /// drops the message. [`NodeConfig::with_buffer_pool`], when set, takes
    /// precedence.
    pub fn with_buffer_pool(mut self, bytes: usize) -> Self {
        self.device.pool_budget = bytes;
        self
    }

    /// How long a shutdown waits for queued control messages to be sent
    /// (default 3 s; more than zero, at most [`MAX_TIMEOUT`]).
    pub fn with_flush_timeout(mut self, timeout: Duration) -> Self {
        self.device.flush_timeout = timeout;
        self
    }
}

#[cfg(feature = "rdma")]
cluster_builders!(
    RdmaConfig,
    |config| vec![("flush timeout", config.device.flush_timeout)],
    /// After how long without a message from a peer (heartbeats included)
    /// it is considered failed (default 3 s). A peer whose process dies is
    /// usually noticed sooner, when a send to its vanished QP runs out of
    /// retries (about half a second); this bound is for one that hangs.
);

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> (Vec<SocketAddr>, ClusterKey) {
        let members = vec!["127.0.0.1:7000".parse().unwrap(); 2];
        let key = ClusterKey::from_bytes(*b"config unit test key").unwrap();
        (members, key)
    }

    /// The shared builders set the shared fields, and nothing else, on `$config`.
    macro_rules! check_cluster_builders {
        ($config:expr) => {{
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let config = $config
                .with_listener(listener)
                .with_connect_timeout(Duration::from_millis(1234))
                .with_failure_timeout(Duration::from_millis(567));
            let cluster = &config.cluster;
            assert_eq!(cluster.id, NodeId(1));
            assert_eq!(cluster.members.len(), 2);
            let bound = cluster.listener.as_ref().unwrap().local_addr().unwrap();
            assert_eq!(bound.port(), port);
            assert_eq!(cluster.connect_timeout, Duration::from_millis(1234));
            assert_eq!(cluster.failure_timeout, Duration::from_millis(567));
            assert_eq!(cluster.handshake_timeout, Duration::from_secs(5));
            config
        }};
    }

    #[test]
    fn tcp_config_defaults_and_builders() {
        let (members, key) = cluster();
        let config = TcpConfig::new(members.clone(), NodeId(1), key.clone());
        assert_eq!(config.chunk_size, 256 * 1024);
        assert_eq!(config.cluster.connect_timeout, Duration::from_secs(30));
        assert_eq!(config.cluster.failure_timeout, Duration::from_secs(3));
        assert!(config.cluster.listener.is_none());
        let config = check_cluster_builders!(TcpConfig::new(members, NodeId(1), key));
        assert_eq!(config.chunk_size, 256 * 1024);
        assert_eq!(config.with_chunk_size(0).chunk_size, 1);
    }

    #[cfg(feature = "rdma")]
    #[test]
    fn rdma_config_defaults_and_builders() {
        let (members, key) = cluster();
        let config = RdmaConfig::new(members.clone(), NodeId(1), key.clone());
        assert_eq!(config.device.device, None);
        assert_eq!(config.device.port, 1);
        assert_eq!(config.device.gid_index, None);
        assert_eq!(config.device.pool_budget, 1 << 30);
        assert_eq!(config.device.flush_timeout, Duration::from_secs(3));
        let config = check_cluster_builders!(RdmaConfig::new(members, NodeId(1), key))
            .with_device("rxe0")
            .with_port(2)
            .with_gid_index(1)
            .with_buffer_pool(0)
            .with_flush_timeout(Duration::from_secs(1));
        assert_eq!(config.device.device.as_deref(), Some("rxe0"));
        assert_eq!(config.device.port, 2);
        assert_eq!(config.device.gid_index, Some(1));
        assert_eq!(config.device.pool_budget, 0);
        assert_eq!(config.device.flush_timeout, Duration::from_secs(1));
        // The flush timeout is one of its limits.
        let members: Vec<SocketAddr> = vec!["127.0.0.1:7000".parse().unwrap()];
        let key = ClusterKey::from_bytes(*b"config unit test key").unwrap();
        let config = RdmaConfig::new(members, NodeId(0), key);
        assert_eq!(config.validate(), Ok(()));
        let zero = config.with_flush_timeout(Duration::ZERO).validate();
        assert_eq!(
            zero,
            Err(ClusterConfigError::ZeroTimeout {
                what: "flush timeout"
            })
        );
    }

    #[cfg(feature = "ofi")]
    #[test]
    fn ofi_config_defaults_and_builders() {
        let (members, key) = cluster();
        let config = OfiConfig::new(members.clone(), NodeId(1), key.clone());
        assert_eq!(config.fabric.provider, "tcp");
        assert_eq!(config.fabric.pool_budget, 1 << 30);
        assert_eq!(config.fabric.flush_timeout, Duration::from_secs(3));
        assert_eq!(config.cluster.connect_timeout, Duration::from_secs(30));
        assert_eq!(config.cluster.failure_timeout, Duration::from_secs(3));
        let config = check_cluster_builders!(OfiConfig::new(members, NodeId(1), key))
            .with_provider("verbs")
            .with_fabric_addr("10.1.0.1".parse().unwrap())
            .with_buffer_pool(0)
            .with_flush_timeout(Duration::from_secs(1));
        assert_eq!(config.fabric.provider, "verbs");
        assert_eq!(config.fabric.fabric_addr, Some("10.1.0.1".parse().unwrap()));
        assert_eq!(config.fabric.pool_budget, 0);
        assert_eq!(config.fabric.flush_timeout, Duration::from_secs(1));
        assert!(!config.fabric.strict_modes);
        // The flush timeout is one of its limits.
        let members: Vec<SocketAddr> = vec!["127.0.0.1:7000".parse().unwrap()];
        let key = ClusterKey::from_bytes(*b"config unit test key").unwrap();
        let config = OfiConfig::new(members, NodeId(0), key);
        assert_eq!(config.validate(), Ok(()));
        let zero = config.with_flush_timeout(Duration::ZERO).validate();
        assert_eq!(
            zero,
            Err(ClusterConfigError::ZeroTimeout {
                what: "flush timeout"
            })
        );
    }
}
