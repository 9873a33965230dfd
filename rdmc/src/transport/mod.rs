//! Transports: reliable, ordered, two-sided point-to-point transfer of a block
//! plus an immediate value, with completions.
//!
//! A transport follows the verbs contract the protocol core is written for:
//! a block send consumes a receive the peer posted on the same (group, link)
//! beforehand — never one posted for anything else — completions arrive in
//! order per link, and every node's completions come through one queue (a
//! channel, the analogue of a completion queue).
//!
//! The transports: [`mem`] (in-process), [`tcp`] and, behind the cargo
//! features `ofi` and `rdma`, `ofi` (libfabric) and `rdma` (RDMA verbs).
//! What every transport shares is here: [`Transport`], [`Completion`],
//! [`Signal`], the message buffers ([`buffer`]) and the node's buffer pool
//! ([`pool`]). What the network transports share has one home each:
//! [`mesh`] (the authenticated TCP mesh, the whole of `tcp`'s connections
//! and the rendezvous of `ofi` and `rdma`), [`frame`] (the signal codec)
//! and [`liveness`] (the failure detector). What only `ofi` and `rdma`
//! share — the driver task that posts their sends and receives — is
//! `fabric_driver` (behind either feature).
//!
//! # Messages, and which is which
//!
//! - [`proto::Control`](crate::proto::Control): the group protocol's own
//!   control messages (ready-for-block, close, failed, …), made and taken by
//!   the protocol core.
//! - [`Signal`]: what a transport carries between two nodes about one group —
//!   a protocol `Control`, or the group-creation rendezvous's `JoinSettings`,
//!   `Join`, `JoinRejected` and `IdInUse`.
//! - [`Completion`]: what a transport reports to its own node — a block
//!   received or sent, a signal arrived, a transfer or a peer failed.
//! - [`frame::Header`]: the 32-byte frame header on the wire: on `tcp` a
//!   data chunk, a signal or a heartbeat; `ofi` embeds signal frames.
//! - `fabric_driver::wire::ControlMessage`: a control message of `ofi` and
//!   `rdma` — a signal, a credit, a block header or a heartbeat.
//!
//! Inside a transport, `tcp::link::Outgoing` is an item of a link's write
//! queue and `fabric_driver::Cmd` a request to the `ofi` or `rdma` driver
//! task.

pub(crate) mod buffer;
pub(crate) mod crypto;
#[cfg(any(feature = "ofi", feature = "rdma"))]
pub(crate) mod fabric_driver;
pub(crate) mod frame;
pub(crate) mod liveness;
pub mod mem;
pub(crate) mod mesh;
#[cfg(feature = "ofi")]
#[allow(unsafe_code)]
pub(crate) mod ofi;
pub(crate) mod pool;
#[cfg(feature = "rdma")]
#[allow(unsafe_code)]
pub(crate) mod rdma;
pub(crate) mod socket;
pub(crate) mod tcp;

use futures::future::BoxFuture;
use tokio::sync::mpsc;

use crate::ids::{GroupId, NodeId};
use crate::proto::Control;
pub(crate) use buffer::{AllocError, BlockRef, MessageBuffer, RecvRegion};

/// A completion or incoming message, as a transport reports it to its node.
#[derive(Debug)]
pub(crate) enum Completion {
    /// A block arrived into the receive posted for (`group`, `from`).
    Received {
        group: GroupId,
        from: NodeId,
        immediate: u64,
        len: usize,
    },
    /// The block arriving from `from` into the receive posted for
    /// (`group`, `from`) has `remaining` bytes still to come (at most the
    /// transport's [`Transport::early_announce`] threshold): reported once
    /// per block, before its `Received`, by transports that see a block's
    /// progress.
    Progress {
        group: GroupId,
        from: NodeId,
        remaining: u64,
    },
    /// The block send to `to` completed.
    Sent { group: GroupId, to: NodeId },
    /// A control-plane message arrived.
    Signal {
        group: GroupId,
        from: NodeId,
        signal: Signal,
    },
    /// A transfer with `peer` in `group` failed (error completion).
    TransferFailed {
        group: GroupId,
        peer: NodeId,
        error: &'static str,
    },
    /// `node` is gone: its connection broke or it stopped answering.
    /// `incarnation` names the run of `node` that is gone (0 on transports
    /// that do not tell runs apart), so that a late report about an old
    /// run does not fail the groups of a newer one.
    /// `reason` says why, in words.
    PeerDown {
        node: NodeId,
        incarnation: u64,
        reason: String,
    },
    /// `node`'s run `incarnation` left for good, as it said (its node
    /// shut down): like [`Completion::PeerDown`] for its groups, but no
    /// failure of the peer.
    PeerLeft { node: NodeId, incarnation: u64 },
    /// `node`'s run `incarnation` is no longer connected, its connection
    /// closed as no group needed it (connecting on demand): no failure, and
    /// the same run may connect again; a group made since is made over a
    /// connection to come.
    PeerIdle { node: NodeId, incarnation: u64 },
    /// `node`, in its run `incarnation`, is connected (at `addr`, on a
    /// network): a new connection, or a node that came back (reported by
    /// `tcp`, `mem` and `ofi`).
    PeerUp {
        node: NodeId,
        incarnation: u64,
        addr: Option<std::net::SocketAddr>,
    },
    /// A signal of `group` relayed to or through this node arrived from
    /// `from`, along `route` ([`Transport::forward`] passes it on).
    Relayed {
        group: GroupId,
        from: NodeId,
        signal: Signal,
        route: frame::relay::Route,
    },
}

/// A control-plane message between two nodes about one group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    /// One of the group protocol's own control messages.
    Group(Control),
    /// "I created this group; its membership and configuration hash to
    /// `digest`." Every member sends it to every other at creation.
    Join { digest: u128 },
    /// "Your `Join` does not match my group: mine hashes to `digest`."
    JoinRejected { digest: u128 },
    /// "The settings of my group have this fingerprint": sent right before
    /// a `Join` or `JoinRejected`, so that a member whose digest differs
    /// can say which settings do
    /// ([`SettingsFingerprint`](crate::proto::SettingsFingerprint)).
    JoinSettings { fingerprint: u128 },
    /// "I have used this group's id already (a group with it runs here, or
    /// ended recently): I refuse your `Join`."
    IdInUse,
    /// `count` (2 to [`READY_WINDOW`](crate::proto::READY_WINDOW)) of the
    /// group protocol's ready-for-blocks in one signal: what the
    /// announcements a member makes to one peer at once travel as.
    ReadyForBlocks { count: u8 },
}

impl Completion {
    /// [`Completion::PeerDown`] of `node`'s run `incarnation`, for `reason`.
    pub(crate) fn peer_down(node: NodeId, incarnation: u64, reason: impl Into<String>) -> Self {
        Completion::PeerDown {
            node,
            incarnation,
            reason: reason.into(),
        }
    }
}

impl Signal {
    /// The group protocol's control message this signal carries, and how
    /// many times; `None` for the rendezvous's own signals.
    pub(crate) fn group_control(self) -> Option<(Control, u8)> {
        match self {
            Signal::Group(control) => Some((control, 1)),
            Signal::ReadyForBlocks { count } => Some((Control::ReadyForBlock, count)),
            Signal::Join { .. }
            | Signal::JoinRejected { .. }
            | Signal::JoinSettings { .. }
            | Signal::IdInUse => None,
        }
    }
}

/// The sending side of a node's completion queue.
pub(crate) type CompletionSender = mpsc::UnboundedSender<Completion>;
/// The receiving side of a node's completion queue, read by the node's actor.
pub(crate) type Completions = mpsc::UnboundedReceiver<Completion>;

/// What the runtime asks of a transport. Every call returns at once; results
/// come back as [`Completion`]s.
pub(crate) trait Transport: Send + 'static {
    /// Post a receive for the next block `from` sends in `group`.
    fn post_recv(&mut self, group: GroupId, from: NodeId, region: RecvRegion);
    /// Send `block` with `immediate` to `to` in `group`, into its posted receive.
    fn post_send(&mut self, group: GroupId, to: NodeId, block: BlockRef, immediate: u64);
    /// Send a control-plane message; delivered in order per (sender, receiver).
    fn send_signal(&mut self, group: GroupId, to: NodeId, signal: Signal);
    /// The group is over here: drop its posted receives.
    fn release_group(&mut self, group: GroupId);
    /// This node created `group` with `members` (in rank order, this
    /// node at `rank`), exchanging blocks with the members at `partners`:
    /// a transport that connects peers on demand connects what the group
    /// needs now. The default does nothing (every peer is connected).
    fn open_group(
        &mut self,
        _group: GroupId,
        _members: &[NodeId],
        _rank: usize,
        _partners: &[usize],
    ) {
    }
    /// Whether a peer whose connection ended is connected again when a new
    /// group needs it (connecting on demand), rather than failing the
    /// group at once.
    fn reconnects_on_demand(&self) -> bool {
        false
    }
    /// What this transport knows of why `peers` could not be reached, in
    /// words (connecting on demand: refused connections, and why).
    fn why_unreachable(&self, _peers: &[NodeId]) -> Option<String> {
        None
    }
    /// The members of `group` whose signals reach this node through `peer`
    /// (relayed), and so are cut off with it. The default: none (every
    /// member is connected straight).
    fn cut_off_by(&self, _group: GroupId, _peer: NodeId) -> Vec<NodeId> {
        Vec::new()
    }
    /// Whether the root's verdict on `group` (that it closed) reaches this
    /// node relayed by other members, so that it may still be on its way
    /// after the root left. The default: no (it comes straight).
    fn verdict_relayed(&self, _group: GroupId) -> bool {
        false
    }
    /// A relayed signal arrived ([`Completion::Relayed`]): pass it on
    /// along its route, or, if this node is its destination, return the
    /// node it came from first, for the signal to be taken as arrived from
    /// it. The default (no transport of which relays): drop it.
    fn forward(
        &mut self,
        _group: GroupId,
        _from: NodeId,
        _signal: Signal,
        _route: frame::relay::Route,
    ) -> Option<NodeId> {
        None
    }
    /// A buffer of `len` bytes for a message (or a group's first-block
    /// buffer) this node receives, from the node's [`pool::BufferPool`];
    /// an error, never an abort, if the memory cannot be had.
    fn alloc_buffer(&mut self, len: usize) -> Result<std::sync::Arc<MessageBuffer>, AllocError>;
    /// Whether a group's messages carry an end-to-end digest unless its
    /// configuration says otherwise
    /// ([`GroupConfig::with_message_digest`](crate::GroupConfig::with_message_digest)).
    /// No transport turns it on today (its cost is not small); a transport
    /// whose bytes travel on no wire of rdmc's own may.
    fn digest_by_default(&self) -> bool {
        false
    }
    /// What this transport is and how it protects its traffic, for the
    /// info line of each group's creation (for example `tcp, authenticated
    /// frames`).
    fn describe(&self) -> String;
    /// Whether a send completes only once its bytes have left this node
    /// (RDMA's semantics), rather than once the transport buffered them
    /// (TCP's socket buffer): it decides how a receiver announces receives
    /// ahead ([`Announce`](crate::proto::Announce)).
    fn sends_complete_when_delivered(&self) -> bool {
        true
    }
    /// The bytes left of an arriving block at which this transport reports
    /// its [`Completion::Progress`], if it does: receivers then take blocks
    /// from one sender at a time and announce the next sender's receive at
    /// that point ([`MemberConfig::early_announce`](crate::proto::MemberConfig::early_announce)).
    /// `None` (the default): no progress reports; the announce rule
    /// follows [`sends_complete_when_delivered`](Self::sends_complete_when_delivered).
    fn early_announce(&self) -> Option<u64> {
        None
    }
    /// The node is shutting down: stop taking new work and resolve once
    /// everything already queued has been handed to the network (or the
    /// transport gave up on it).
    fn flush(&mut self) -> BoxFuture<'static, ()>;
}
