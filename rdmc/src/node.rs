//! [`Node`]: one process's (or task's) membership in a cluster.

use std::fmt;
use std::future::Future;

use tokio::sync::{mpsc, oneshot};

use crate::config::{GroupConfig, NodeConfig, TcpConfig};
use crate::error::Error;
use crate::group::Group;
use crate::ids::{GroupId, NodeId};
use crate::runtime::{Actor, Command};
use crate::transport::mem::MemCluster;
use crate::transport::pool::DEFAULT_BUDGET as DEFAULT_POOL_BUDGET;
use crate::transport::tcp::TcpEndpoint;
use crate::transport::{Completions, Transport};

/// A member of a cluster. It owns an actor task that runs every group the
/// node belongs to; dropping the `Node` shuts that task down, failing any
/// group still open.
pub struct Node {
    id: NodeId,
    commands: mpsc::UnboundedSender<Command>,
    counters: std::sync::Arc<crate::stats::NodeCounters>,
    actor: Option<tokio::task::JoinHandle<()>>,
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
    /// ```
    /// use rdmc::{MemCluster, Node, NodeConfig, NodeId};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), rdmc::Error> {
    /// let cluster = MemCluster::new(2);
    /// let a = Node::in_memory(&cluster, NodeId(0), NodeConfig::new())?;
    /// let b = Node::in_memory(&cluster, NodeId(1), NodeConfig::new())?;
    /// // Each id runs once.
    /// assert!(Node::in_memory(&cluster, NodeId(1), NodeConfig::new()).is_err());
    /// assert_eq!((a.id(), b.id()), (NodeId(0), NodeId(1)));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// An id whose node [shut down](Node::shutdown) may start again (the
    /// others see it [leave](crate::PeerEvent::Left) and come back
    /// [up](crate::PeerEvent::Up)); one [killed](MemCluster::kill) may not.
    ///
    /// # Errors
    /// [`Error::Transport`] if `id` is not in the cluster, is already
    /// running, or was killed.
    pub fn in_memory(cluster: &MemCluster, id: NodeId, config: NodeConfig) -> Result<Self, Error> {
        let (transport, completions) = cluster
            .attach(id, config.buffer_pool().unwrap_or(DEFAULT_POOL_BUDGET))
            .map_err(|e| Error::Transport(e.to_string()))?;
        Ok(Self::start(
            id,
            cluster.len(),
            transport,
            completions,
            config,
        ))
    }

    /// Start a node on the `tcp` transport: connect to every other member
    /// of the cluster (authenticating with the cluster key) and start the
    /// node's actor. Resolves once every member is connected and every
    /// connection's frame keys are agreed ([`TcpConfig::with_wire_security`]).
    ///
    /// The connections are kept up for as long as the node runs: one that
    /// breaks is dialled again, so a member that crashes and is started
    /// again (at the same address) is let back in without any other member
    /// restarting. It comes back as a new *incarnation*: the groups that
    /// held its earlier run fail, nothing of the earlier run is accepted
    /// again, new groups may include it. [`Node::peer_events`] reports each
    /// peer's comings and goings.
    ///
    /// Must be called within a tokio runtime.
    ///
    /// ```
    /// use rdmc::{ClusterKey, Node, NodeConfig, NodeId, TcpConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Three members on loopback. Each binds port 0 first, so that every
    /// // member's address is known before any node starts.
    /// let listeners = (0..3)
    ///     .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
    ///     .collect::<Result<Vec<_>, _>>()?;
    /// let members = listeners
    ///     .iter()
    ///     .map(|l| l.local_addr())
    ///     .collect::<Result<Vec<_>, _>>()?;
    /// let key = ClusterKey::from_bytes(*b"the cluster's shared secret")?;
    ///
    /// // In a real cluster each member starts in its own process.
    /// let starts = listeners.into_iter().enumerate().map(|(id, listener)| {
    ///     let config = TcpConfig::new(members.clone(), NodeId(id as u32), key.clone())
    ///         .with_listener(listener);
    ///     Node::tcp(config, NodeConfig::new())
    /// });
    /// let nodes = futures::future::try_join_all(starts).await?;
    /// assert_eq!(nodes[2].id(), NodeId(2));
    /// for node in nodes {
    ///     node.shutdown().await;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::ClusterConfig`] if the configuration is invalid (see
    /// [`TcpConfig::validate`]: duplicate or undialable addresses, this
    /// node outside the member list, a zero or overlong time limit), before
    /// anything is opened; [`Error::Transport`] if the listener cannot be
    /// bound, or not every member connected within the connect timeout
    /// (naming those missing, and why their connections were refused when
    /// known: another cluster key, another member list).
    /// [`Error::WireSecurityMismatch`] if a member protects its frames
    /// otherwise ([`TcpConfig::with_wire_security`]).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops the connections made so far.
    pub async fn tcp(config: TcpConfig, node: NodeConfig) -> Result<Self, Error> {
        config.validate()?;
        let (id, mut nodes) = (config.cluster.id, config.cluster.members.len());
        if config.cluster.open_membership {
            // Any node id may join.
            nodes = u32::MAX as usize + 1;
        }
        let budget = node.buffer_pool().unwrap_or(DEFAULT_POOL_BUDGET);
        let (transport, completions) = TcpEndpoint::connect(
            config.cluster,
            config.chunk_size,
            config.wire_security,
            budget,
            config.early_announce,
            (
                config.congestion_control.as_deref(),
                config.connections,
                config.idle_timeout,
            ),
        )
        .await?;
        Ok(Self::start(id, nodes, transport, completions, node))
    }

    /// Start a node on the `ofi` transport (cargo feature `ofi`): choose the
    /// libfabric provider, rendezvous with every other member over the
    /// authenticated TCP mesh, connect a data and a control endpoint to
    /// each, and start the node's actor. Resolves once every member is
    /// connected.
    ///
    /// The node's [`CompletionMode`](crate::CompletionMode) says how its
    /// fabric completion queue is waited on: sleeping on its file
    /// descriptor, spinning on it, or spinning for a window after activity.
    ///
    /// Must be called within a tokio runtime with I/O enabled.
    ///
    /// ```no_run
    /// use rdmc::{ClusterKey, Node, NodeConfig, NodeId, OfiConfig};
    ///
    /// # async fn start() -> Result<(), Box<dyn std::error::Error>> {
    /// // Node 0 of two, on an RDMA fabric; the rendezvous runs over TCP at
    /// // the members' addresses.
    /// let members = vec!["10.0.0.1:7000".parse()?, "10.0.0.2:7000".parse()?];
    /// let key = ClusterKey::from_file("/etc/rdmc/cluster.key")?;
    /// let config = OfiConfig::new(members, NodeId(0), key).with_provider("verbs");
    /// let node = Node::ofi(config, NodeConfig::new()).await?;
    /// node.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::ClusterConfig`] if the configuration is invalid (as for
    /// [`Node::tcp`]); [`Error::Transport`] if no provider matches (libfabric's message
    /// says why), the provider needs modes this transport does not
    /// implement, the rendezvous listener cannot be bound, or not every
    /// member connected within the connect timeout.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future closes what was opened so far.
    #[cfg(feature = "ofi")]
    pub async fn ofi(config: crate::config::OfiConfig, node: NodeConfig) -> Result<Self, Error> {
        config.validate()?;
        let (id, nodes) = (config.cluster.id, config.cluster.members.len());
        let driver = node.driver_options(config.driver);
        let (transport, completions) = crate::transport::ofi::establish(
            config.cluster,
            driver,
            config.fabric,
            node.completion_mode(),
        )
        .await?;
        Ok(Self::start_driven(id, nodes, transport, completions, node))
    }

    /// Start a node on the `rdma` transport (cargo feature `rdma`): open
    /// the RDMA device, create a queue pair to every other member, swap
    /// their addresses over the authenticated TCP mesh (the cluster key
    /// proves membership, as on [`Node::tcp`]), connect them, and start the
    /// node's actor. Resolves once every member is connected.
    ///
    /// Must be called within a tokio runtime.
    ///
    /// ```no_run
    /// use rdmc::{ClusterKey, Node, NodeConfig, NodeId, RdmaConfig};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let members = vec!["10.0.0.1:7000".parse()?, "10.0.0.2:7000".parse()?];
    /// let key = ClusterKey::from_bytes(*b"the cluster's shared secret")?;
    /// let config = RdmaConfig::new(members, NodeId(0), key).with_device("mlx5_0");
    /// let node = Node::rdma(config, NodeConfig::new()).await?;
    /// # node.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::ClusterConfig`] if the configuration is invalid (as for
    /// [`Node::tcp`]); [`Error::Rdma`] if there is no RDMA device here (or
    /// not the one configured, or its port or GID index is unusable) —
    /// before any peer is contacted; [`Error::Transport`] if the rendezvous
    /// listener cannot be bound, a queue pair cannot be connected, or not
    /// every member connected within the connect timeout.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future closes what was opened so far.
    #[cfg(feature = "rdma")]
    pub async fn rdma(config: crate::config::RdmaConfig, node: NodeConfig) -> Result<Self, Error> {
        config.validate()?;
        let (id, mode) = (config.cluster.id, node.completion_mode());
        let nodes = config.cluster.members.len();
        let options = node.driver_options(config.driver);
        let (transport, completions) =
            crate::transport::rdma::establish(config.cluster, options, config.device, mode).await?;
        Ok(Self::start_driven(id, nodes, transport, completions, node))
    }

    /// Start a node whose transport runs a fabric driver (`ofi`, `rdma`).
    /// The completion mode is carried out where the completions are: the
    /// driver polls (or sleeps on) its completion queue. The actor just
    /// waits for what the driver hands it; spinning there too would only
    /// take CPU from the pollers (on two cores it halved the throughput).
    #[cfg(any(feature = "ofi", feature = "rdma"))]
    fn start_driven<T: Transport>(
        id: NodeId,
        nodes: usize,
        transport: T,
        completions: Completions,
        node: NodeConfig,
    ) -> Self {
        let actor = node.with_completion_mode(crate::config::CompletionMode::Interrupt);
        Self::start(id, nodes, transport, completions, actor)
    }

    /// Start node `id` of a cluster of `nodes` on `transport` (the crate's
    /// own tests drive the transports directly).
    pub(crate) fn start<T: Transport>(
        id: NodeId,
        nodes: usize,
        transport: T,
        completions: Completions,
        config: NodeConfig,
    ) -> Self {
        let (commands, inbox) = mpsc::unbounded_channel();
        let mode = config.completion_mode();
        let actor = Actor::new(id, nodes, transport, inbox, completions, mode);
        let counters = actor.counters();
        let actor = tokio::spawn(actor.run());
        Node {
            id,
            commands,
            counters,
            actor: Some(actor),
        }
    }

    /// Start every node of `cluster`, with ids `0..cluster.len()`. The
    /// [crate-level example](crate) uses it.
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

    /// What this node has moved so far, per peer over all its groups (block
    /// bytes and blocks each way), and how many groups it is in: a snapshot
    /// of counters the node keeps as it works (cheap to take). The same
    /// numbers go to the `metrics` facade ([`stats`](crate::stats) lists
    /// the names), for an application with a recorder installed.
    pub fn stats(&self) -> crate::NodeStats {
        self.counters.snapshot()
    }

    /// Every peer this node has heard of: its id, its latest run
    /// (incarnation), where it is connected, and whether it is up now.
    /// Connected on demand ([`Connections::OnDemand`](crate::Connections)),
    /// only the peers this node's groups have connected it to.
    ///
    /// # Errors
    /// [`Error::NodeShutDown`] if the node has shut down.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn peers(&self) -> Result<Vec<crate::Peer>, Error> {
        let (reply, response) = tokio::sync::oneshot::channel();
        let gone = || Error::NodeShutDown(self.id);
        self.commands
            .send(Command::Peers { reply })
            .map_err(|_| gone())?;
        response.await.map_err(|_| gone())
    }

    /// A stream of this node's [`PeerEvent`](crate::PeerEvent)s: an `Up`
    /// for every peer connected now, then every peer that comes up (a new
    /// connection, or a restarted node in a new incarnation) or goes down.
    /// Connected on demand ([`Connections::OnDemand`](crate::Connections)),
    /// it tells of the peers this node's groups connect it to; an
    /// application that watches every node's coming and going connects
    /// every member ([`Connections::All`](crate::Connections)).
    /// It ends when the node shuts down (at once if it has).
    pub fn peer_events(&self) -> crate::PeerEvents {
        let (events, stream) = mpsc::unbounded_channel();
        let _ = self.commands.send(Command::WatchPeers { events });
        crate::PeerEvents::new(stream)
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
    /// - [`Error::Membership`] for an empty list, a duplicate, a node that
    ///   is not in the cluster ([`MembershipError::UnknownNode`](crate::MembershipError::UnknownNode),
    ///   naming it), or a list without this node — at once, before any
    ///   other member hears of it; [`Error::InvalidConfig`]; [`Error::GroupIdInUse`]
    ///   if this node used `id` before — also after a create that failed —
    ///   among its last [`USED_IDS_KEPT`](crate::proto::USED_IDS_KEPT) groups;
    /// - [`Error::MembershipMismatch`] if a member created the group with a
    ///   different member list or configuration (or a node outside the list
    ///   created it): every member that creates the group gets this error,
    ///   saying what differs ([`Mismatch`](crate::Mismatch)); also if a
    ///   member has used `id` already and refuses it
    ///   ([`Mismatch::IdInUse`](crate::Mismatch::IdInUse));
    /// - [`Error::CreateTimedOut`], naming the members not heard of, if they
    ///   did not all create the group within the timeout;
    /// - [`Error::GroupFailed`] naming the member, if a member is down (or
    ///   goes down) before the rendezvous completes, or if another member
    ///   gave up on the group (its creation timed out): it names the first
    ///   member it had not heard from but this one, or itself if this one
    ///   was the only one missing;
    /// - [`Error::NodeShutDown`].
    ///
    /// A create that completes just as another member's create times out
    /// (every other member's `Join` had come, and that member's word that
    /// it gave up was still on its way) returns the group, which then fails
    /// at once naming that member: its stream's first item, or the root's
    /// first send, is the failure. Over the in-process transport, where
    /// nothing is on its way, the create itself fails instead.
    ///
    /// ```
    /// use rdmc::{Error, GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let nodes = Node::in_memory_all(&MemCluster::new(2), NodeConfig::new())?;
    /// let members = [NodeId(0), NodeId(1)];
    /// let (root, receiver) = tokio::try_join!(
    ///     nodes[0].create_group(GroupId(7), &members, GroupConfig::new()),
    ///     nodes[1].create_group(GroupId(7), &members, GroupConfig::new()),
    /// )?;
    /// assert_eq!(root.members(), receiver.members());
    ///
    /// // A used id is refused.
    /// let again = nodes[0].create_group(GroupId(7), &members, GroupConfig::new());
    /// assert!(matches!(again.await, Err(Error::GroupIdInUse(_))));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// The future holds no borrow of `self` or `members` (both are copied
    /// when it is made), so it can be spawned or joined with others freely.
    ///
    /// # Cancel safety
    /// Cancel safe, if the create is made again: dropping the future (a
    /// `tokio::time::timeout` or `select!` that gave up on it) does not
    /// withdraw this node from the group. Its rendezvous goes on, and a
    /// `create_group` of the same group (the same `id` and `members`, and
    /// the same settings every member must share) adopts it: it resolves
    /// when the rendezvous completes, or at once if it has, with the group
    /// as the dropped future would have given it (with its local settings:
    /// its receive window, create timeout, …), messages delivered meanwhile
    /// included. The other members see nothing of it. A group nobody
    /// adopts within its create timeout (counted from when its rendezvous
    /// completed) is left, which its other members see as this node
    /// leaving; a `create_group` of the id with other members or settings
    /// meanwhile is [`Error::GroupIdInUse`], as is one after a creation
    /// that failed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rdmc::{GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), rdmc::Error> {
    /// let nodes = Node::in_memory_all(&MemCluster::new(2), NodeConfig::new())?;
    /// let members = [NodeId(0), NodeId(1)];
    /// let create = |node: &Node| node.create_group(GroupId(3), &members, GroupConfig::new());
    /// // Node 1 has not created the group yet: node 0 gives up waiting...
    /// let early = tokio::time::timeout(Duration::from_millis(1), create(&nodes[0])).await;
    /// assert!(early.is_err());
    /// // ...and tries again, which node 1 meets.
    /// let (root, receiver) = tokio::try_join!(create(&nodes[0]), create(&nodes[1]))?;
    /// assert!(root.is_root() && !receiver.is_root());
    /// # Ok(())
    /// # }
    /// ```
    pub fn create_group(
        &self,
        id: GroupId,
        members: &[NodeId],
        config: GroupConfig,
    ) -> impl Future<Output = Result<Group, Error>> + Send + 'static + use<> {
        let node = self.id;
        let members = members.to_vec();
        let commands = self.commands.clone();
        async move {
            let (reply, response) = oneshot::channel();
            commands
                .send(Command::CreateGroup {
                    id,
                    members: members.clone(),
                    config,
                    reply,
                })
                .map_err(|_| Error::NodeShutDown(node))?;
            let mut pending = PendingCreate {
                id,
                response,
                commands: commands.clone(),
            };
            let joined = (&mut pending.response)
                .await
                .map_err(|_| Error::NodeShutDown(node))??;
            Ok(Group::new(id, node, members, commands, joined))
        }
    }

    /// Shut the node down: every group still open fails (its other members
    /// see this node leave), everything queued is put on the wire, and the
    /// actor task ends. Call this before a process exits, so that the last
    /// messages of a closed group (the root's "closed" to every member among
    /// them) are not lost with the process. The last word to every peer says
    /// this node leaves for good: the peers report it
    /// [`PeerEvent::Left`](crate::PeerEvent::Left), not down, and log no
    /// warning (over `tcp` and in-process; `ofi` and `rdma` peers see a
    /// peer down).
    ///
    /// ```
    /// use rdmc::{MemCluster, Node, NodeConfig, NodeId};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), rdmc::Error> {
    /// let node = Node::in_memory(&MemCluster::new(1), NodeId(0), NodeConfig::new())?;
    /// node.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: the shutdown proceeds without the future.
    pub async fn shutdown(mut self) {
        let _ = self.commands.send(Command::Shutdown);
        if let Some(actor) = self.actor.take() {
            let _ = actor.await;
        }
    }
}

/// A `create_group` future's end of the actor's answer. Dropped before the
/// answer was taken (the future was cancelled), it closes the answer —
/// the actor then keeps a group it completes for a `create_group` to
/// adopt — and gives a group already in it back to the actor.
struct PendingCreate {
    id: GroupId,
    response: oneshot::Receiver<Result<crate::runtime::Joined, Error>>,
    commands: mpsc::UnboundedSender<Command>,
}

impl Drop for PendingCreate {
    fn drop(&mut self) {
        // Closed first: a group is then either in the answer already, or
        // kept by the actor when it finds the answer closed.
        self.response.close();
        if let Ok(Ok(joined)) = self.response.try_recv() {
            let group = self.id;
            let _ = self.commands.send(Command::Unclaimed { group, joined });
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Shutdown);
    }
}
