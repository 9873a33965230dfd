//! Errors callers can match on.

use std::fmt;

use crate::ids::{GroupId, NodeId};
use crate::proto::FailureKind;
use rdmc_proto::write_cause;

/// What is wrong with a group's membership list.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    /// A group needs at least one member.
    #[error("the member list is empty")]
    Empty,
    /// The creating node is not in the list.
    #[error("node {0} is not in the member list")]
    NotAMember(NodeId),
    /// A node appears twice.
    #[error("node {0} appears twice in the member list")]
    Duplicate(NodeId),
    /// A node is not part of the cluster (the cluster's nodes are
    /// numbered from 0, one per address it was given, or the size of the
    /// [`MemCluster`](crate::MemCluster)).
    #[error("node {0} is not in the cluster")]
    UnknownNode(NodeId),
}

/// Errors of rdmc operations.
///
/// Cloneable, because one group failure is handed to every pending future
/// and to the message stream.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The group failed; it does nothing more. `suspect` is the member
    /// believed to have failed, when known, and `kind` the cause — the same
    /// at every member of the group: the member that found the failure
    /// tells the others its cause (see [`FailureKind`] for how members that
    /// find one fault each their way agree).
    ///
    /// ```
    /// # use rdmc::{Error, FailureKind};
    /// fn explain(error: &Error) -> String {
    ///     match error {
    ///         Error::GroupFailed { kind: FailureKind::SlowReader { .. }, suspect: Some(node), .. } => {
    ///             format!("node {node} reads too slowly")
    ///         }
    ///         Error::GroupFailed { kind: FailureKind::Unreachable, suspect: Some(node), .. } => {
    ///             format!("node {node} is gone")
    ///         }
    ///         other => other.to_string(),
    ///     }
    /// }
    /// ```
    #[error("group {group} failed: {}", Cause { suspect: *.suspect, kind, detail: detail.as_deref(), reported_by: *.reported_by })]
    GroupFailed {
        /// The group.
        group: GroupId,
        /// The member believed to have failed.
        suspect: Option<NodeId>,
        /// How the failure was detected (the same at every member).
        kind: FailureKind,
        /// The member that found the failure, when this node learned of it
        /// from a report (directly or relayed); `None`: this node found it.
        reported_by: Option<NodeId>,
        /// What the member that found the failure saw, in words, when the
        /// kind does not say it all (the rule a
        /// [`FailureKind::ProtocolViolation`] broke, the error of a
        /// [`FailureKind::ReceiveTarget`]); only that member has it.
        detail: Option<String>,
    },
    /// Only the group's root (its first member) sends.
    #[error("only the root of group {0} can send")]
    NotRoot(GroupId),
    /// Reading or mapping a file to send failed
    /// ([`Sender::send_file`](crate::Sender::send_file)).
    #[error("{message}")]
    Io {
        /// The I/O error's kind.
        kind: std::io::ErrorKind,
        /// What failed, and the system's message.
        message: String,
    },
    /// The group is closing or closed.
    #[error("group {0} is closed")]
    Closed(GroupId),
    /// The group carried the most messages a group can
    /// ([`proto::MAX_MESSAGES`](crate::proto::MAX_MESSAGES)).
    #[error("group {group} carried the most messages a group can ({max})")]
    TooManyMessages {
        /// The group.
        group: GroupId,
        /// The limit.
        max: u64,
    },
    /// The root has [`GroupConfig::with_max_in_flight`](crate::GroupConfig::with_max_in_flight)
    /// messages in flight (queued and not yet taken by every member), so
    /// [`Sender::try_send`](crate::Sender::try_send) cannot queue another:
    /// [`Sender::send`](crate::Sender::send), [`Sender::reserve`](crate::Sender::reserve)
    /// and the root's [`Sink`](futures::Sink) wait for room instead.
    #[error("group {group} has its most messages in flight ({max})")]
    TooManyInFlight {
        /// The group.
        group: GroupId,
        /// The bound.
        max: u64,
    },
    /// The group closed before every receiver's application said it had
    /// the message on stable storage
    /// ([`Receipt::persisted`](crate::Receipt::persisted)): every member
    /// took it, these did not persist it
    /// ([`Receiver::persisted`](crate::Receiver::persisted)).
    #[error("group {group} closed before {} persisted the message", Nodes(members))]
    NotPersisted {
        /// The group.
        group: GroupId,
        /// The receivers that did not, in rank order.
        members: Vec<NodeId>,
    },
    /// [`Receiver::persisted`](crate::Receiver::persisted) named a message
    /// the application has not taken from the stream.
    #[error("message {seq} of group {group} was not taken from its stream yet")]
    NotTaken {
        /// The group.
        group: GroupId,
        /// The message named.
        seq: u64,
    },
    /// The message is larger than the group's configured limit.
    #[error("a message of {size} bytes exceeds the group's limit of {max} bytes")]
    MessageTooLarge {
        /// The message's size.
        size: u64,
        /// The limit ([`GroupConfig::with_max_message_size`](crate::GroupConfig::with_max_message_size)).
        max: u64,
    },
    /// The member list is invalid.
    #[error("invalid membership: {0}")]
    Membership(#[from] MembershipError),
    /// This node runs a group with this id, or ran one among its last
    /// [`USED_IDS_KEPT`](crate::proto::USED_IDS_KEPT) groups that ended.
    #[error("group id {0} was already used on this node")]
    GroupIdInUse(GroupId),
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(&'static str),
    /// The group's racks or slow members
    /// ([`GroupConfig::with_racks`](crate::GroupConfig::with_racks),
    /// [`GroupConfig::with_slow_members`](crate::GroupConfig::with_slow_members))
    /// do not fit its member list.
    #[error("invalid group topology: {0}")]
    InvalidTopology(#[from] crate::schedule::TopologyError),
    /// A network transport's cluster configuration is invalid (checked
    /// before anything is opened).
    #[error("invalid cluster configuration: {0}")]
    ClusterConfig(#[from] crate::config::ClusterConfigError),
    /// The node could not join its transport.
    #[error("transport: {0}")]
    Transport(String),
    /// The kernel refused the TCP congestion control
    /// [`TcpConfig::with_congestion_control`](crate::TcpConfig::with_congestion_control)
    /// names: not built in, or not allowed to this process. The node does
    /// not start.
    #[error("TCP congestion control {name:?} refused: {reason}")]
    CongestionControl {
        /// The name asked for.
        name: String,
        /// Why, with the congestion controls the kernel has.
        reason: String,
    },
    /// This node and `peer` protect the frames of the `tcp` transport
    /// differently ([`TcpConfig::with_wire_security`](crate::TcpConfig::with_wire_security)):
    /// every member of a cluster must use the same mode, so the two can
    /// never talk. Found when their connection's frame keys are agreed,
    /// right after every member connected; the node does not start. Both
    /// ends of such a pair fail so, each naming the other (a member that
    /// agrees with both only loses them as peers). With several such peers,
    /// `peer` is the one with the lowest id.
    #[error(
        "wire security mismatch with node {peer}: this node uses {local}, node {peer} uses {}",
        PeerMode(*remote)
    )]
    WireSecurityMismatch {
        /// The member that uses another mode.
        peer: NodeId,
        /// This node's mode.
        local: crate::WireSecurity,
        /// The peer's mode; `None` if this version of rdmc does not know
        /// the mode the peer named.
        remote: Option<crate::WireSecurity>,
    },
    /// The `rdma` transport cannot run here: no RDMA device, or not the
    /// configured one, or its port or GID index is unusable (feature `rdma`).
    #[cfg(feature = "rdma")]
    #[error("rdma: {0}")]
    Rdma(#[from] crate::transport::rdma::RdmaError),
    /// The node has shut down.
    #[error("node {0} has shut down")]
    NodeShutDown(NodeId),
    /// The members did not all create the group with the same membership
    /// (ids in the same order) and configuration (algorithm, block size,
    /// largest message size, …), or a member refused the group's id
    /// because it has used it already. The group is not created, on any
    /// member that learns of it; its id stays used.
    ///
    /// `peer` is the member whose view of the group differs from this
    /// node's — or, when a member that agreed with this node found the
    /// difference with a third member first, that member — and `mismatch`
    /// says what differs: which settings ([`GroupSetting`](crate::GroupSetting)),
    /// or that the peer is not in this node's member list, or passed a
    /// third member's refusal on, or uses the id already.
    ///
    /// ```
    /// # use rdmc::{Error, GroupId, GroupSetting, Mismatch, NodeId};
    /// let e = Error::MembershipMismatch {
    ///     group: GroupId(5),
    ///     peer: NodeId(2),
    ///     mismatch: Mismatch::Settings(vec![GroupSetting::BlockSize]),
    /// };
    /// assert_eq!(e.to_string(), "group 5: node 2 created it with a different block size");
    /// ```
    #[error("group {group}: node {peer} {mismatch}")]
    MembershipMismatch {
        /// The group.
        group: GroupId,
        /// The member that disagreed (or refused).
        peer: NodeId,
        /// What differs.
        mismatch: crate::proto::Mismatch,
    },
    /// Not every other member created the group within the create timeout
    /// ([`GroupConfig::with_create_timeout`](crate::GroupConfig::with_create_timeout)).
    /// The group is not created; its id stays used.
    #[error("group {group}: timed out waiting for {} to create it{}", Nodes(missing), Why(why.as_deref()))]
    CreateTimedOut {
        /// The group.
        group: GroupId,
        /// The members whose creation had not been heard of, in rank order.
        missing: Vec<NodeId>,
        /// What this node knows of why some of them could not be reached
        /// (connecting on demand: a connection refused, and why), in words.
        why: Option<String>,
    },
}

/// " (why)", or nothing.
struct Why<'a>(Option<&'a str>);

impl std::fmt::Display for Why<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(why) => write!(f, " ({why})"),
            None => Ok(()),
        }
    }
}

struct Nodes<'a>(&'a [NodeId]);

impl fmt::Display for Nodes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.len() == 1 { "node " } else { "nodes " })?;
        for (i, node) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{node}")?;
        }
        Ok(())
    }
}

struct PeerMode(Option<crate::WireSecurity>);

impl fmt::Display for PeerMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(mode) => mode.fmt(f),
            None => f.write_str("a mode this version does not know"),
        }
    }
}

/// "node 2 failed (no progress within the progress timeout; reported by
/// node 1)".
struct Cause<'a> {
    suspect: Option<NodeId>,
    kind: &'a FailureKind,
    detail: Option<&'a str>,
    reported_by: Option<NodeId>,
}

impl fmt::Display for Cause<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let by = self.reported_by.map(|node| ("node", u64::from(node.0)));
        match self.suspect {
            Some(node) => {
                write!(f, "node {node} failed (")?;
                write_cause(f, self.kind, self.detail, by)?;
                f.write_str(")")
            }
            None => write_cause(f, self.kind, self.detail, by),
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io {
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        use std::io::ErrorKind;
        let kind = match &e {
            Error::GroupFailed { .. } => ErrorKind::ConnectionAborted,
            Error::NotRoot(_) => ErrorKind::PermissionDenied,
            Error::Closed(_) | Error::NodeShutDown(_) => ErrorKind::NotConnected,
            Error::MessageTooLarge { .. }
            | Error::Membership(_)
            | Error::InvalidConfig(_)
            | Error::InvalidTopology(_)
            | Error::ClusterConfig(_)
            | Error::CongestionControl { .. }
            | Error::TooManyMessages { .. }
            | Error::NotTaken { .. } => ErrorKind::InvalidInput,
            Error::NotPersisted { .. } => ErrorKind::Other,
            Error::TooManyInFlight { .. } => ErrorKind::WouldBlock,
            Error::GroupIdInUse(_) => ErrorKind::AlreadyExists,
            Error::MembershipMismatch { .. } | Error::WireSecurityMismatch { .. } => {
                ErrorKind::InvalidData
            }
            Error::CreateTimedOut { .. } => ErrorKind::TimedOut,
            Error::Transport(_) => ErrorKind::Other,
            Error::Io { kind, .. } => *kind,
            #[cfg(feature = "rdma")]
            Error::Rdma(_) => ErrorKind::NotFound,
        };
        std::io::Error::new(kind, e)
    }
}
