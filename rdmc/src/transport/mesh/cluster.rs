//! What a node of a cluster is configured with on either network transport
//! (the members, this node's place among them, the key, the time limits),
//! and what can be wrong with it.

use std::net::SocketAddr;
use std::time::Duration;

use super::handshake;
use super::identity::{IdentityError, NodeIdentity};
use super::key::ClusterKey;
use crate::collections::HashMap;
use crate::ids::NodeId;

/// Default time to wait for every other member to be connected.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default time after which a silent peer is considered failed.
pub(crate) const DEFAULT_FAILURE_TIMEOUT: Duration = Duration::from_secs(3);

/// An incarnation for a run starting now: the wall clock's nanoseconds
/// since the Unix epoch, so that a node restarted on the same machine (or
/// one whose clock is not behind) comes back with a higher one.
pub(crate) fn fresh_incarnation() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// What a node of a cluster is configured with on either network
/// transport: the members, this node's place among them, the key, and the
/// time limits.
#[derive(Debug)]
pub(crate) struct ClusterConfig {
    /// The members' mesh addresses, indexed by node id.
    pub(crate) members: Vec<SocketAddr>,
    /// This node.
    pub(crate) id: NodeId,
    /// The key every member holds.
    pub(crate) key: ClusterKey,
    /// A listener bound already, used instead of binding `members[id]`.
    pub(crate) listener: Option<std::net::TcpListener>,
    /// How long to wait for every other member to be connected.
    pub(crate) connect_timeout: Duration,
    /// How long one handshake (or the `ofi` address swap) may take.
    pub(crate) handshake_timeout: Duration,
    /// A peer silent this long is considered failed.
    pub(crate) failure_timeout: Duration,
    /// This run of the node: a restarted node's is higher than its last
    /// run's (the `tcp` transport lets a restarted member back in by it).
    pub(crate) incarnation: u64,
    /// This node's certificate, when nodes prove which node they are.
    pub(crate) identity: Option<NodeIdentity>,
    /// Whether nodes beyond the member list may join and members come back
    /// at other addresses (`tcp` only).
    pub(crate) open_membership: bool,
}

impl ClusterConfig {
    /// Node `id` of the cluster at `members`, with the default time limits.
    pub(crate) fn new(members: Vec<SocketAddr>, id: NodeId, key: ClusterKey) -> Self {
        ClusterConfig {
            members,
            id,
            key,
            listener: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            handshake_timeout: handshake::DEFAULT_TIMEOUT,
            failure_timeout: DEFAULT_FAILURE_TIMEOUT,
            incarnation: fresh_incarnation(),
            identity: None,
            open_membership: false,
        }
    }

    /// The whole configuration's check, before anything is opened (see
    /// `TcpConfig::validate`).
    pub(crate) fn validate(&self) -> Result<(), ClusterConfigError> {
        if self.members.is_empty() {
            return Err(ClusterConfigError::NoMembers);
        }
        if self.id.index() >= self.members.len() {
            return Err(ClusterConfigError::NotAMember {
                id: self.id,
                members: self.members.len(),
            });
        }
        let mut seen: HashMap<_, _> =
            HashMap::with_capacity_and_hasher(self.members.len(), Default::default());
        for (id, &addr) in (0..).map(NodeId).zip(&self.members) {
            if addr.port() == 0 {
                return Err(ClusterConfigError::PortZero { id, addr });
            }
            if addr.ip().is_unspecified() {
                return Err(ClusterConfigError::Unspecified { id, addr });
            }
            if let Some(first) = seen.insert(addr, id) {
                return Err(ClusterConfigError::DuplicateAddress {
                    addr,
                    first,
                    second: id,
                });
            }
        }
        for (what, value) in [
            ("connect timeout", self.connect_timeout),
            ("handshake timeout", self.handshake_timeout),
            ("failure timeout", self.failure_timeout),
        ] {
            check_limit(what, value)?;
        }
        if let Some(identity) = &self.identity {
            identity
                .check_names(self.id)
                .map_err(ClusterConfigError::Identity)?;
        }
        Ok(())
    }
}

/// The longest time limit a cluster configuration accepts: one year.
/// Longer limits are refused (they would overflow the clock arithmetic, and
/// no operator means them).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// What is wrong with a network transport's cluster configuration
/// ([`TcpConfig`](crate::TcpConfig), `OfiConfig`, `RdmaConfig`): every variant reads as one line naming the
/// offending member or setting. [`Node::tcp`](crate::Node::tcp) and
/// `Node::ofi` check the configuration before they open anything and fail
/// with [`Error::ClusterConfig`](crate::Error::ClusterConfig); call
/// [`TcpConfig::validate`](crate::TcpConfig::validate) to check it earlier.
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
    /// This node's identity ([`NodeIdentity`]) is not this node's: its
    /// certificate names another.
    #[error("the node identity does not fit: {0}")]
    Identity(IdentityError),
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
