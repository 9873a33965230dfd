//! The configuration of a node on the `tcp` transport.

use std::net::SocketAddr;
use std::time::Duration;

use super::cluster::cluster_builders;
use crate::ids::NodeId;
use crate::transport::frame::protect::WireSecurity;
use crate::transport::mesh::{ClusterConfig, ClusterKey};

/// How long a connection no group needs stays open, connected on demand
/// ([`TcpConfig::with_idle_timeout`]).
pub(crate) const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Default size of the chunks the `tcp` transport cuts blocks into on the
/// wire: 256 KiB.
pub(crate) const DEFAULT_CHUNK_SIZE: u32 = 256 * 1024;

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

/// Which peers a node on the `tcp` transport connects to, and when
/// ([`TcpConfig::with_connections`]).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Connections {
    /// Every pair of members is connected at start (the default):
    /// [`Node::tcp`](crate::Node::tcp) returns once every member is, and a
    /// node knows at once of every peer's failure. N members keep N − 1
    /// connections each, with a heartbeat on each.
    #[default]
    All,
    /// A node connects to a peer when a group it creates needs it: the
    /// members it exchanges blocks with, and its neighbours in the group's
    /// relay tree (the binomial tree over the group's ranks). Signals to
    /// the other members travel hop by hop along that tree. A member of
    /// groups of N keeps about 2⌈log₂ N⌉ connections at most for each
    /// group (for the binomial pipeline over a power of two, ⌈log₂ N⌉), so
    /// that hundreds of members can share a machine.
    /// [`Node::tcp`](crate::Node::tcp) returns once the node listens. A
    /// member that cannot be reached within the connect timeout fails its
    /// groups, naming it; a peer's failure is noticed by those connected
    /// to it and reaches the other members of its groups as the groups'
    /// failure reports. A relaying member vouches for the origin of what
    /// it relays (each hop is an authenticated connection of the cluster).
    /// A peer whose connection ended (it left, crashed or restarted) is
    /// tried again by the next group that includes it.
    OnDemand,
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
    pub(crate) connections: Connections,
    pub(crate) idle_timeout: Option<Duration>,
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
            connections: Connections::All,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
        }
    }

    /// Connected on demand: how long a connection no group of this node
    /// has needed stays open before the node that dialled it closes it
    /// (default 60 s; `None`: never). It is made again when a group needs
    /// it. Connecting every member at start, connections never close.
    pub fn with_idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Which peers the node connects to, and when (default
    /// [`Connections::All`]: every member at start). Every member should
    /// choose the same.
    pub fn with_connections(mut self, connections: Connections) -> Self {
        self.connections = connections;
        self
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

    /// This run's *incarnation*: what tells a restarted node from its
    /// earlier run. Every run must have a higher one than the node's runs
    /// before it: the other members let a connection in only from the
    /// newest run of a node they have seen. Default: the wall clock's
    /// nanoseconds since the Unix epoch at the time the configuration is
    /// made, which grows from run to run unless the clock is set back; set
    /// it (from a counter the node keeps on disk, say) where that cannot
    /// be relied on.
    pub fn with_incarnation(mut self, incarnation: u64) -> Self {
        self.cluster.incarnation = incarnation;
        self
    }

    /// *Open membership* (default off): the member list is where this node
    /// starts, not the whole cluster. A node that is not in the other
    /// members' lists may join — give it the next free id and a list with
    /// its own address appended — and a member may come back, restarted,
    /// at another address. Every member of the cluster must choose the
    /// same (a member with open membership and one without refuse each
    /// other).
    ///
    /// A node tells its address (its entry in its member list) in every
    /// handshake, and when it starts it introduces itself to the members
    /// above it in its list (one short authenticated connection each), so
    /// that those who dial it learn where it now is. Without open
    /// membership, the handshake binds the whole member list, so that
    /// members configured with different lists refuse each other instead
    /// of misbehaving; with it, what is checked is the cluster key (or
    /// the node's certificate) and the claimed id, so give every node a
    /// [`NodeIdentity`](crate::NodeIdentity) where members must not be
    /// able to claim each other's ids.
    ///
    /// A joined node beyond a member's list is known to that member once
    /// it has connected: [`Node::peers`](crate::Node::peers) lists it, and
    /// a group may include it. A later run claiming the same id is taken
    /// for a restart of it (a higher incarnation replaces the lower), so
    /// give every node a [`NodeIdentity`](crate::NodeIdentity) where only
    /// the holder of a node's certificate may be that node. Connecting every member at start
    /// ([`Connections::All`]), [`Node::tcp`](crate::Node::tcp) waits for
    /// the members of its own list.
    pub fn with_open_membership(mut self, open: bool) -> Self {
        self.cluster.open_membership = open;
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::cluster::tests::{check_cluster_builders, cluster};

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
}
