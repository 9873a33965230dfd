//! [`Node`]: one process's (or task's) membership in a cluster.

use std::fmt;

use tokio::sync::{mpsc, oneshot};

use crate::config::{GroupConfig, NodeConfig};
use crate::error::Error;
use crate::group::Group;
use crate::ids::{GroupId, NodeId};
use crate::runtime::{Actor, Command};
use crate::transport::mem::MemCluster;

/// A member of a cluster. It owns an actor task that runs every group the
/// node belongs to; dropping the `Node` shuts that task down, failing any
/// group still open.
pub struct Node {
    id: NodeId,
    commands: mpsc::UnboundedSender<Command>,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node").field("id", &self.id).finish()
    }
}

impl Node {
    /// Start node `id` of an in-process [`MemCluster`].
    ///
    /// Must be called within a tokio runtime (the node's actor is spawned on it).
    ///
    /// # Errors
    /// [`Error::Transport`] if `id` is not in the cluster or is already running.
    pub fn in_memory(cluster: &MemCluster, id: NodeId, config: NodeConfig) -> Result<Self, Error> {
        let (transport, completions) = cluster
            .attach(id)
            .map_err(|e| Error::Transport(e.to_string()))?;
        let (commands, inbox) = mpsc::unbounded_channel();
        let actor = Actor::new(id, transport, inbox, completions, config.completion_mode());
        tokio::spawn(actor.run());
        Ok(Node { id, commands })
    }

    /// Start every node of `cluster`, with ids `0..cluster.len()`.
    ///
    /// # Errors
    /// As [`Node::in_memory`].
    pub fn in_memory_all(cluster: &MemCluster, config: NodeConfig) -> Result<Vec<Self>, Error> {
        (0..cluster.len() as u32)
            .map(|id| Node::in_memory(cluster, NodeId(id), config.clone()))
            .collect()
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Create (join) group `id`. Every member calls this with the same
    /// `members` — node ids in rank order, the first being the root — and the
    /// same `config` (algorithm, block size, largest message size; the
    /// receive window and the create timeout may differ), concurrently.
    ///
    /// This is a rendezvous: the future resolves once every other member has
    /// created the group too with the same membership and configuration
    /// (each member sends the others a digest of both). Members may call it
    /// at different times, within the create timeout
    /// ([`GroupConfig::with_create_timeout`], 30 s by default). A group of
    /// one resolves at once.
    ///
    /// # Errors
    /// - [`Error::Membership`] for an empty list, a duplicate, or a list
    ///   without this node; [`Error::InvalidConfig`]; [`Error::GroupIdInUse`]
    ///   if this node used `id` before — also after a create that failed, as
    ///   ids are never reused;
    /// - [`Error::MembershipMismatch`] if a member created the group with a
    ///   different member list or configuration (or a node outside the list
    ///   created it): every member that creates the group gets this error;
    /// - [`Error::CreateTimedOut`], naming the members not heard of, if they
    ///   did not all create the group within the timeout;
    /// - [`Error::GroupFailed`] naming the member, if a member is down (or
    ///   goes down) before the rendezvous completes, or if another member
    ///   gave up on the group;
    /// - [`Error::NodeShutDown`].
    ///
    /// # Cancel safety
    /// Not cancel safe: if the future is dropped after the node accepted the
    /// request, the group is created, and left as soon as its rendezvous
    /// completes, which its other members see as this node's failure. The
    /// id stays used.
    pub async fn create_group(
        &self,
        id: GroupId,
        members: &[NodeId],
        config: GroupConfig,
    ) -> Result<Group, Error> {
        let (reply, response) = oneshot::channel();
        let members = members.to_vec();
        self.command(Command::CreateGroup {
            id,
            members: members.clone(),
            config,
            reply,
        })?;
        let deliveries = response.await.map_err(|_| Error::NodeShutDown(self.id))??;
        Ok(Group::new(
            id,
            self.id,
            members,
            self.commands.clone(),
            deliveries,
        ))
    }

    /// Shut the node down: every group still open fails (its other members
    /// see this node leave), and the actor task ends.
    pub fn shutdown(self) {
        drop(self);
    }

    fn command(&self, command: Command) -> Result<(), Error> {
        self.commands
            .send(command)
            .map_err(|_| Error::NodeShutDown(self.id))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Shutdown);
    }
}
