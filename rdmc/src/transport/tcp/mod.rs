//! `tcp`: the default transport — RDMC over TCP, which the RDMC paper
//! leaves to future work.
//!
//! Every pair of nodes shares one authenticated connection ([`mesh`])
//! carrying the signals and blocks of all their groups
//! ([`frame`](super::frame)). Blocks travel in chunks, interleaved round
//! robin across groups, so overlapping groups share a link fairly and a
//! large block never holds another group's traffic back; received chunks go
//! straight into the buffer the protocol core posted for the block
//! ([`link`]). Signals go after the data: a signal queued before a block
//! rides in the block's write, and a link with only signals to write lets
//! the runtime's woken tasks run, then yields its core to the other
//! runnable threads of the machine before writing them, since members
//! sharing a core may be holding blocks others wait for (with nothing else
//! runnable the yield returns at once).
//!
//! Every frame after the handshake is protected as the node's
//! [`WireSecurity`] says: by default authenticated with a per-connection,
//! per-direction key and a sequence number
//! ([`protect`](super::frame::protect)), so bytes altered, injected,
//! replayed, reordered or dropped on the path fail the link (and the groups
//! over it, naming the peer) instead of reaching the application.

pub(crate) mod link;
mod peers;
mod route;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio::time::Instant;

use self::link::{AgreeError, LinkConfig, LinkSecurity, Outgoing};
use self::peers::{Handed, LinkSetup, PeerSet, Waiting};
use self::route::GroupRoute;
use super::frame::protect::WireSecurity;
use super::frame::relay::Route;
use super::mesh::ClusterConfig;
use super::pool::BufferPool;
use super::{
    BlockRef, Completion, CompletionSender, Completions, MessageBuffer, RecvRegion, Signal,
    Transport,
};
use crate::collections::HashMap;
use crate::config::{Connections, EarlyAnnounce};
use crate::error::Error;
use crate::ids::{GroupId, NodeId};
use crate::proto::Control;

/// How long a leaving node waits for connections that what it still has to
/// say waits for (see [`TcpEndpoint`]'s flush).
const DRAIN_LIMIT: Duration = Duration::from_millis(250);

/// One node's connections to all the others.
#[derive(Debug)]
pub(crate) struct TcpEndpoint {
    /// Shared with the leaving node's flush, which outlives the endpoint.
    peers: Arc<PeerSet>,
    completions: CompletionSender,
    /// How long a shutdown waits for queued frames to be written.
    flush_timeout: Duration,
    /// The early-announce threshold its links report blocks' progress at.
    early_announce: Option<u32>,
    pool: BufferPool,
    /// What [`Transport::describe`] says.
    description: String,
    /// This node.
    me: NodeId,
    /// Connecting on demand: each group's routes ([`route`]).
    routes: Option<HashMap<GroupId, GroupRoute>>,
    /// Connecting on demand: the way back to the origin of each signal
    /// relayed here, by group and origin, for the groups this node has no
    /// routes of (answers to a join for a group unknown here).
    returns: HashMap<(GroupId, NodeId), Route>,
    /// Connecting on demand: when each group was opened
    /// ([`PeerSet::open_epoch`]).
    opened: HashMap<GroupId, u64>,
}

/// The most ways back kept; more are forgotten all at once.
const MAX_RETURNS: usize = 1 << 16;

impl TcpEndpoint {
    /// Bring node `cluster.id` into the cluster ([`peers`]: its listener,
    /// a connection to every other member, kept up for as long as the node
    /// runs) and start a link on every connection, cutting blocks into
    /// chunks of `chunk_size` bytes and protecting frames as `security`
    /// says, with a pool keeping at most `pool_budget` bytes of spare
    /// message buffers; with `early`, every socket keeps at most about
    /// `unsent_limit` bytes unsent and the links report a block's progress
    /// at `threshold` bytes left ([`EarlyAnnounce`]).
    ///
    /// Resolves once every member is connected and every first link's
    /// frame keys are agreed, or its agreement failed (at most the
    /// agreement timeout later). A link that failed so is a peer failure
    /// the node learns of as [`Completion::PeerDown`], like any later one —
    /// except a peer with another wire security: a configuration error, so
    /// the node does not start ([`Error::WireSecurityMismatch`], naming the
    /// lowest such peer). Members not connected within the connect timeout
    /// are [`Error::Transport`], naming them. With `congestion`, every
    /// connection uses that TCP congestion control; a name the kernel
    /// refuses is [`Error::CongestionControl`], found on a throwaway socket
    /// before anything connects.
    pub(crate) async fn connect(
        cluster: ClusterConfig,
        chunk_size: u32,
        security: WireSecurity,
        pool_budget: usize,
        early: Option<EarlyAnnounce>,
        (congestion, connections, idle): (Option<&str>, Connections, Option<Duration>),
    ) -> Result<(Self, Completions), Error> {
        let refused = |name: &str, reason: String| Error::CongestionControl {
            name: name.to_owned(),
            reason,
        };
        if let Some(name) = congestion {
            let probe = tokio::net::TcpSocket::new_v4()
                .map_err(|e| refused(name, format!("no socket to try it on: {e}")))?;
            link::set_congestion_control(&probe, name).map_err(|reason| refused(name, reason))?;
        }
        let link = LinkConfig {
            chunk_size,
            failure_timeout: cluster.failure_timeout,
            early_announce: early.map(|e| e.threshold),
            unsent_limit: early.map(|e| e.unsent_limit),
        };
        let security = LinkSecurity {
            mode: security,
            key: cluster.key.clone(),
            me: cluster.id,
            // A peer silent through the agreement is failed like any other,
            // after half as long again as the failure timeout — so that a
            // peer gone silent on an established link (a partition) is
            // named first, not one still finishing its own start.
            timeout: cluster
                .handshake_timeout
                .min(cluster.failure_timeout.saturating_mul(3) / 2),
        };
        let setup = LinkSetup {
            config: link,
            security,
            early,
            congestion: congestion.map(str::to_owned),
        };
        let on_demand = connections == Connections::OnDemand;
        let description = format!(
            "tcp, {} frames{}{}",
            setup.security.mode.name(),
            match cluster.identity {
                Some(_) => ", per-node identities",
                None => "",
            },
            if on_demand {
                ", connected on demand"
            } else {
                ""
            }
        );
        let me = cluster.id;
        let started = Instant::now();
        // Validated: at most `MAX_TIMEOUT`, which the clock can add.
        let timeout = cluster.connect_timeout;
        let (completions, queue) = mpsc::unbounded_channel();
        let transport = |e: super::mesh::MeshError| Error::Transport(e.to_string());
        let demand = on_demand.then_some(idle);
        let peers = PeerSet::start(cluster, setup, completions.clone(), demand)
            .await
            .map_err(transport)?;
        if on_demand {
            tracing::info!("listening; peers are connected as groups need them");
        } else if let Err(e) = mesh_formed(&peers, started, timeout).await {
            // Free the address before saying so: whoever retries binds it.
            peers.stop_listening().await;
            return Err(e);
        }
        Ok((
            TcpEndpoint {
                peers: Arc::new(peers),
                completions,
                flush_timeout: link.failure_timeout,
                early_announce: link.early_announce,
                pool: BufferPool::new(pool_budget),
                description,
                me,
                routes: on_demand.then(HashMap::default),
                returns: HashMap::default(),
                opened: HashMap::default(),
            },
            queue,
        ))
    }

    /// Hand `item` of `group` to `peer`'s link, or report the peer
    /// unreachable for the group.
    fn hand(&mut self, group: GroupId, peer: NodeId, item: Waiting) {
        let epoch = self.opened.get(&group).copied().unwrap_or(0);
        if self.peers.hand(peer, item, epoch) == Handed::Unreachable {
            self.unreachable(group, peer);
        }
    }

    /// Send `signal` of `group` along `route` (its next hop). Relayed for
    /// a group not opened here (a join on its way, the group not created
    /// here yet), it waits for a connection to the next hop if that ended
    /// (a new run of it may be on its way too), as for a group opened now.
    fn relay(&mut self, group: GroupId, signal: Signal, route: Route) {
        let next = route.here();
        let item = Outgoing::Relay(group, signal, route);
        if self.opened.contains_key(&group) {
            return self.hand(group, next, Waiting::Send(group, item));
        }
        if self.peers.hand(next, Waiting::Send(group, item), u64::MAX) == Handed::Unreachable {
            self.unreachable(group, next);
        }
    }

    fn unreachable(&self, group: GroupId, peer: NodeId) {
        let _ = self.completions.send(Completion::TransferFailed {
            group,
            peer,
            error: "peer unreachable",
        });
    }
}

/// Every member connected at start: wait until every member is
/// connected and every first link's frame keys are agreed (or failed),
/// within `timeout` of `started`; a peer with another wire security is a
/// configuration error ([`Error::WireSecurityMismatch`], the lowest such
/// peer).
async fn mesh_formed(peers: &PeerSet, started: Instant, timeout: Duration) -> Result<(), Error> {
    let transport = |e: super::mesh::MeshError| Error::Transport(e.to_string());
    peers
        .all_connected(started + timeout, timeout)
        .await
        .map_err(transport)?;
    let agreements = peers
        .agreements()
        .into_iter()
        .map(|(peer, agreed)| async move { (peer, agreed.await) });
    let mismatch = futures::future::join_all(agreements)
        .await
        .into_iter()
        .filter_map(|(peer, agreed)| match agreed {
            Err(AgreeError::Mismatch { local, remote }) => Some((peer, local, remote)),
            _ => None,
        })
        .min_by_key(|&(peer, ..)| peer);
    if let Some((peer, local, remote)) = mismatch {
        // Dropping the peer set closes every connection.
        return Err(Error::WireSecurityMismatch {
            peer,
            local,
            remote,
        });
    }
    // In the message, so that a campaign can read it whatever the log
    // format.
    tracing::info!("mesh formed in {} ms", started.elapsed().as_millis());
    Ok(())
}

impl Transport for TcpEndpoint {
    fn describe(&self) -> String {
        self.description.clone()
    }

    /// A block's send completes once the socket took its last byte.
    fn sends_complete_when_delivered(&self) -> bool {
        false
    }

    fn early_announce(&self) -> Option<u64> {
        self.early_announce.map(u64::from)
    }

    fn alloc_buffer(
        &mut self,
        len: usize,
    ) -> Result<std::sync::Arc<MessageBuffer>, super::AllocError> {
        self.pool.try_alloc(len)
    }

    fn post_recv(&mut self, group: GroupId, from: NodeId, region: RecvRegion) {
        self.hand(group, from, Waiting::Post(group, region));
    }

    fn post_send(&mut self, group: GroupId, to: NodeId, block: BlockRef, immediate: u64) {
        let item = Outgoing::Data(group, block, immediate);
        self.hand(group, to, Waiting::Send(group, item));
    }

    fn send_signal(&mut self, group: GroupId, to: NodeId, signal: Signal) {
        // A failure report, and a member's word that it lost one, go
        // straight to their member where this node reaches it (connected,
        // or the one to connect): the relay tree may pass through the
        // member that failed. (Signals sent before it by the tree may
        // arrive after it; they are moot once the group failed.)
        let straight = matches!(
            signal,
            Signal::Group(Control::Failed { .. } | Control::Suspect { .. })
        ) && self.peers.reaches(to);
        if let Some(routes) = self.routes.as_ref().filter(|_| !straight) {
            let route = match routes.get(&group) {
                // The root's verdict goes along the relay tree (see
                // `GroupRoute::tree_route_to`).
                Some(routes) if matches!(signal, Signal::Group(Control::Closed)) => {
                    routes.tree_route_to(to)
                }
                Some(routes) => routes.route_to(to),
                None => self.returns.get(&(group, to)).cloned(),
            };
            if let Some(route) = route {
                let first = route.here();
                if !(self.peers.is_gone(first) && self.peers.reaches(to)) {
                    return self.relay(group, signal, route);
                }
                // The first hop is gone (a member that crashed, say): a
                // relayed signal would wait for a new run of it, and be
                // lost if none comes. This one and every later one to `to`
                // go straight.
                tracing::debug!(
                    group = group.0,
                    to = to.0,
                    relay = first.0,
                    "the relay is gone: signals go straight"
                );
                if let Some(routes) = self.routes.as_mut().and_then(|r| r.get_mut(&group)) {
                    routes.detour(to);
                }
                self.returns.remove(&(group, to));
            }
        }
        let item = Outgoing::Signal(group, signal);
        self.hand(group, to, Waiting::Send(group, item));
    }

    fn release_group(&mut self, group: GroupId) {
        self.peers.each_link(|link| link.release_group(group));
        if let Some(routes) = self.routes.as_mut() {
            for peer in routes.remove(&group).iter().flat_map(GroupRoute::direct) {
                self.peers.unclaim(peer);
            }
            self.returns.retain(|&(g, _), _| g != group);
            self.opened.remove(&group);
            self.peers.release_waiting(group);
        }
    }

    fn open_group(&mut self, group: GroupId, members: &[NodeId], rank: usize, partners: &[usize]) {
        let Some(routes) = self.routes.as_mut() else {
            return;
        };
        let route = GroupRoute::new(members, rank, partners);
        for peer in route.direct() {
            self.peers.claim(peer);
        }
        routes.insert(group, route);
        self.opened.insert(group, self.peers.open_epoch());
    }

    fn cut_off_by(&self, group: GroupId, peer: NodeId) -> Vec<NodeId> {
        match self.routes.as_ref().and_then(|r| r.get(&group)) {
            Some(route) => route.cut_off_by(peer),
            None => Vec::new(),
        }
    }

    fn verdict_relayed(&self, group: GroupId) -> bool {
        self.routes
            .as_ref()
            .and_then(|r| r.get(&group))
            .is_some_and(GroupRoute::verdict_relayed)
    }

    fn reconnects_on_demand(&self) -> bool {
        self.routes.is_some()
    }

    fn why_unreachable(&self, peers: &[NodeId]) -> Option<String> {
        self.routes.as_ref()?;
        self.peers.why_unreachable(peers)
    }

    /// Relayed signals are taken only when connecting on demand (the
    /// relaying peer vouches for the origin: it authenticated as a member
    /// of the cluster, and the hop before it too).
    fn forward(
        &mut self,
        group: GroupId,
        from: NodeId,
        signal: Signal,
        route: Route,
    ) -> Option<NodeId> {
        if self.routes.is_none() || route.here() != self.me {
            tracing::warn!(
                peer = from.0,
                group = group.0,
                "dropped a relayed signal not routed to this node"
            );
            return None;
        }
        if !route.arrived() {
            self.relay(group, signal, route.next_hop());
            return None;
        }
        let origin = route.origin();
        if self.returns.len() >= MAX_RETURNS {
            self.returns.clear();
        }
        let mut back = route.path;
        back.reverse();
        if let Some(back) = Route::new(back) {
            self.returns.insert((group, origin), back);
        }
        Some(origin)
    }

    /// Every link writes what it has queued and its goodbye; then the node
    /// reads on until each peer has closed its side too (at most the
    /// failure timeout), so that no connection is reset with bytes unread: a reset
    /// can discard, at the peer, frames this node wrote last (signals it
    /// relayed, among them).
    ///
    /// First, connecting on demand, what waits for a peer's first
    /// connection (a failure report among it) waits for it to be made, at
    /// most [`DRAIN_LIMIT`].
    fn flush(&mut self) -> BoxFuture<'static, ()> {
        let limit = self.flush_timeout;
        // Briefly: a peer that does not connect at once may be cut off,
        // and a leaving node must not outlast the failure it reports.
        let drained = self.peers.drained(limit.min(DRAIN_LIMIT));
        let peers = Arc::clone(&self.peers);
        Box::pin(async move {
            drained.await;
            let listening = peers.stop_listening();
            let (ended, writers): (Vec<_>, Vec<_>) = peers
                .close()
                .into_iter()
                .map(|link| (link.read_done(), link.close()))
                .unzip();
            let all = futures::future::join_all(writers);
            if tokio::time::timeout(limit, all).await.is_err() {
                tracing::warn!("gave up flushing connections after {limit:?}");
            }
            let closed = futures::future::join_all(ended.iter().map(|e| e.cancelled()));
            let _ = tokio::time::timeout(limit, closed).await;
            listening.await;
        })
    }
}
