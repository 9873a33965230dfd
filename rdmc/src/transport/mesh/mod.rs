//! The authenticated mesh: one TCP connection between every pair of nodes
//! of the cluster, each authenticated with the cluster key ([`handshake`])
//! before it is used. The `tcp` transport carries all its traffic over such
//! connections, kept up by its peer set (`tcp::peers`: a member that
//! restarts is let back in); the `ofi` and `rdma` transports form a mesh
//! once ([`bring_up`]) as the rendezvous where nodes swap their fabric
//! addresses, and `ofi` keeps its listener to answer members that restart,
//! over one connection each (`join_one`).
//!
//! A node dials every node of lower rank and accepts the others
//! ([`connect`]). Connections that fail authentication — strangers,
//! garbage, the wrong cluster — are dropped with a logged reason without
//! stalling anything else, and what strangers can hold is bounded: at most
//! [`MAX_PENDING_HANDSHAKES`](connect::MAX_PENDING_HANDSHAKES) connections
//! are authenticated at once (a new one displaces the oldest), one that
//! sends nothing is let go after
//! [`FIRST_HELLO_TIMEOUT`](connect::FIRST_HELLO_TIMEOUT), and once every
//! member of a formed mesh is connected every new connection is closed as
//! soon as it is accepted. A formed mesh is up once every member is
//! connected to every member and every member has said so ([`Formation`]:
//! `Ready`, then `Go`, each message authenticated with the connection's
//! session key), so that no node starts timing a peer's silence while the
//! peer still waits for a third member. A mesh that does not form names the
//! members that kept it from forming — the same ones on every member that
//! fails, never one that only gave up because of them: a node that gives up
//! tells its peers whom it blames before it closes — and, when known, why
//! their connections were refused (another cluster key or member list).

mod agreement;
mod cluster;
#[cfg(test)]
mod confirm_tests;
pub(crate) mod connect;
mod formation;
pub(crate) mod handshake;
mod identity;
mod key;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::collections::HashMap;
use crate::transport::socket::{TcpListener, TcpStream, bind, listener_from_std};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use self::agreement::{Formation, Link};
pub(crate) use self::cluster::{ClusterConfig, check_limit};
pub use self::cluster::{ClusterConfigError, MAX_TIMEOUT};
use self::connect::Refusals;
#[cfg(test)]
use self::connect::{FIRST_HELLO_TIMEOUT, MAX_PENDING_HANDSHAKES, REFUSAL_WARNING_INTERVAL};
use self::formation::Direction;
use self::handshake::{Handshake, SessionKey};
pub use self::identity::{IdentityError, MAX_IDENTITY_FILE_LEN, NodeIdentity};
pub(crate) use self::key::ClusterDigest;
pub use self::key::{ClusterKey, ClusterKeyError, MAX_KEY_FILE_LEN};
use crate::ids::NodeId;

impl ClusterConfig {
    /// Fails unless this node is one of the members.
    pub(crate) fn check_member(&self) -> Result<(), MeshError> {
        if self.id.index() < self.members.len() {
            Ok(())
        } else {
            Err(MeshError::NotAMember {
                me: self.id,
                members: self.members.len(),
            })
        }
    }
}

/// What a mesh is for. It enters the cluster digest, so that a node of a
/// `tcp` cluster and a node of an `ofi` cluster at the same addresses
/// refuse each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MeshPurpose {
    /// The `tcp` transport's connections.
    Tcp,
    /// The `ofi` transport's rendezvous.
    #[cfg(any(feature = "ofi", test))]
    OfiRendezvous,
    /// The `rdma` transport's rendezvous.
    #[cfg(feature = "rdma")]
    RdmaRendezvous,
}

impl MeshPurpose {
    /// How a member's address is written in the cluster digest.
    pub(crate) fn digest_entry(self, member: &SocketAddr) -> String {
        match self {
            MeshPurpose::Tcp => member.to_string(),
            #[cfg(any(feature = "ofi", test))]
            MeshPurpose::OfiRendezvous => format!("ofi:{member}"),
            #[cfg(feature = "rdma")]
            MeshPurpose::RdmaRendezvous => format!("rdma:{member}"),
        }
    }
}

/// What a node needs to join the mesh, its listener bound.
#[cfg_attr(not(any(feature = "ofi", feature = "rdma")), allow(dead_code))]
struct MeshConfig {
    me: NodeId,
    members: Vec<SocketAddr>,
    listener: Arc<TcpListener>,
    handshake: Arc<Handshake>,
    connect_timeout: Duration,
    /// How late a correct member's formation message may be.
    margin: Duration,
}

// By hand: a simulated listener (`--cfg rdmc_sim`) has no `Debug`.
impl std::fmt::Debug for MeshConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshConfig")
            .field("me", &self.me)
            .field("members", &self.members)
            .field("connect_timeout", &self.connect_timeout)
            .field("margin", &self.margin)
            .finish_non_exhaustive()
    }
}

/// Why the mesh could not be built.
#[cfg_attr(not(any(feature = "ofi", feature = "rdma")), allow(dead_code))]
#[derive(Debug, thiserror::Error)]
pub(crate) enum MeshError {
    #[error("node {me} is not in a cluster of {members}")]
    NotAMember { me: NodeId, members: usize },
    #[error("listening: {0}")]
    Listen(#[source] std::io::Error),
    #[error("connected to every member, but not every member was: {why}")]
    Unready { missing: Vec<NodeId>, why: String },
    #[error(
        "every member was connected to every member, but node(s) {} did not confirm it \
         within {timeout:?} and a margin",
        list(missing)
    )]
    Unconfirmed {
        missing: Vec<NodeId>,
        timeout: Duration,
    },
    #[error(
        "the cluster did not form because of node(s) {} (reported by node {from})",
        list(blame)
    )]
    GaveUp { from: NodeId, blame: Vec<NodeId> },
    #[error("lost node {peer} while the cluster formed: {why}")]
    Lost { peer: NodeId, why: String },
    #[error("no connection to node(s) {} within {timeout:?}{why}", list(missing))]
    TimedOut {
        missing: Vec<NodeId>,
        timeout: Duration,
        /// Why connections were refused, when known: " (reasons)" or "".
        why: String,
    },
}

impl MeshError {
    /// The members this node blames for the failure (none for a failure
    /// of its own, such as listening).
    #[cfg(test)]
    pub(crate) fn blame(&self) -> Vec<NodeId> {
        match self {
            MeshError::NotAMember { .. } | MeshError::Listen(_) => Vec::new(),
            MeshError::Unready { missing, .. }
            | MeshError::Unconfirmed { missing, .. }
            | MeshError::TimedOut { missing, .. } => missing.clone(),
            MeshError::GaveUp { blame, .. } => blame.clone(),
            MeshError::Lost { peer, .. } => vec![*peer],
        }
    }
}

/// Node ids as a list: "1, 3".
fn list(ids: &[NodeId]) -> String {
    ids.iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The established connections, one per peer, and the guard that keeps the
/// listener turning strangers away until the node goes.
#[cfg_attr(not(any(feature = "ofi", feature = "rdma")), allow(dead_code))]
pub(crate) struct Mesh {
    pub(crate) peers: HashMap<NodeId, TcpStream>,
    pub(crate) _acceptor: DropGuard,
    /// Each connection's formation messages, both ways, for a later
    /// agreement ([`Mesh::confirm`]).
    #[cfg_attr(not(any(feature = "ofi", feature = "rdma", test)), allow(dead_code))]
    directions: HashMap<NodeId, (Direction, Direction)>,
    #[cfg_attr(not(any(feature = "ofi", feature = "rdma", test)), allow(dead_code))]
    me: NodeId,
    #[cfg_attr(not(any(feature = "ofi", feature = "rdma", test)), allow(dead_code))]
    members: usize,
    #[cfg_attr(not(any(feature = "ofi", feature = "rdma", test)), allow(dead_code))]
    margin: Duration,
    /// How many peers an agreement over the mesh waits for: every other
    /// member, or one (`join_one`).
    #[cfg_attr(not(any(feature = "ofi", feature = "rdma", test)), allow(dead_code))]
    want: usize,
    /// The listener and the handshake it authenticates with, for a
    /// transport that keeps taking connections after start
    /// (`Mesh::into_acceptor`).
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    acceptor: Option<(Arc<TcpListener>, Arc<Handshake>)>,
    /// The run of each peer connected, as its handshake told.
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    incarnations: HashMap<NodeId, u64>,
}

#[cfg(any(feature = "ofi", feature = "rdma", test))]
impl Mesh {
    /// The agreement of the mesh's formation once more, over its
    /// connections, after a setup step of the transport's (fabric endpoints,
    /// queue pairs) that every member has finished — its part done by
    /// `deadline` at the latest (`timeout` after the setup started): either
    /// every member goes on, or every member that fails names the members
    /// that made the setup fail, never one that only gave up because of
    /// them. The streams carry nothing of their own from the time a member
    /// calls this or [`Mesh::abandon`].
    pub(crate) async fn confirm(
        &mut self,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<(), MeshError> {
        let (mut formation, hearing) = self.agreement(deadline, timeout);
        for (peer, link) in self.links() {
            if let Err(failure) = formation.connected(peer, link).await {
                formation.abandon(&failure.blame, hearing).await;
                return Err(failure.error);
            }
        }
        let mut none = mpsc::unbounded_channel().1;
        let links = formation
            .run(hearing, &mut none, &CancellationToken::new(), &|_| {
                String::new()
            })
            .await?;
        self.keep(links);
        Ok(())
    }

    /// This member's part of a setup step after the mesh failed because of
    /// `blame`: tell every member (whose [`Mesh::confirm`] then fails naming
    /// them), then close the connections.
    pub(crate) async fn abandon(&mut self, deadline: Instant, timeout: Duration, blame: &[NodeId]) {
        let (mut formation, hearing) = self.agreement(deadline, timeout);
        for (peer, link) in self.links() {
            // A connection that cannot take our `Info` will not take the
            // `Fail` either; the others still get theirs.
            let _ = formation.connected(peer, link).await;
        }
        formation.abandon(blame, hearing).await;
    }

    fn agreement(
        &self,
        deadline: Instant,
        timeout: Duration,
    ) -> (Formation, mpsc::UnboundedReceiver<agreement::Heard>) {
        let stop = CancellationToken::new();
        let (formation, hearing) = Formation::new(
            (self.me, self.members),
            deadline,
            timeout,
            self.margin,
            stop,
        );
        (formation.with_peers(self.want), hearing)
    }

    /// The connections with their formation directions, taken out of the mesh.
    fn links(&mut self) -> Vec<(NodeId, Link)> {
        let mut links: Vec<(NodeId, Link)> = std::mem::take(&mut self.peers)
            .into_iter()
            .map(|(peer, stream)| {
                let (out, inbound) = self.directions.remove(&peer).expect("a direction per peer");
                (
                    peer,
                    Link {
                        stream,
                        out,
                        inbound,
                    },
                )
            })
            .collect();
        links.sort_unstable_by_key(|(peer, _)| *peer);
        links
    }
}

#[cfg(feature = "ofi")]
impl Mesh {
    /// The run of `peer` connected, as its handshake told.
    pub(crate) fn incarnation(&self, peer: NodeId) -> Option<u64> {
        self.incarnations.get(&peer).copied()
    }

    /// Close the connections and hand over the listener (open) and the
    /// handshake, for the transport to take connections of restarted
    /// members on; `None` for a mesh of one connection ([`join_one`]).
    pub(crate) fn into_acceptor(mut self) -> Option<(Arc<TcpListener>, Arc<Handshake>)> {
        self.acceptor.take()
    }
}

/// A running member's agreement with a restarted one over their new
/// authenticated connection (`peer`'s run `incarnation`, its session key
/// `key`): a mesh of that one connection, formed once both ends said so.
/// The restarted member forms its mesh with every member as at any start;
/// each running member answers it over its connection alone, so that the
/// restarted member's agreement (and the later [`Mesh::confirm`]) holds.
#[cfg(feature = "ofi")]
pub(crate) async fn join_one(
    (me, members): (NodeId, usize),
    (peer, incarnation, stream, key): (NodeId, u64, TcpStream, SessionKey),
    connect_timeout: Duration,
    margin: Duration,
) -> Result<Mesh, MeshError> {
    let stop = CancellationToken::new();
    let (formation, hearing) = Formation::new(
        (me, members),
        Instant::now() + connect_timeout,
        connect_timeout,
        margin,
        stop.clone(),
    );
    let (found, mut arrivals) = mpsc::unbounded_channel::<Arrival>();
    let _ = found.send((peer, stream, key));
    drop(found);
    let links = formation
        .with_peers(1)
        .run(hearing, &mut arrivals, &CancellationToken::new(), &|_| {
            String::new()
        })
        .await?;
    let mut mesh = Mesh::formed((me, members), stop.drop_guard(), margin, 1);
    mesh.incarnations.insert(peer, incarnation);
    mesh.keep(links);
    Ok(mesh)
}

impl Mesh {
    /// A mesh of node `me` of `members` that formed, its acceptor stopped
    /// by `acceptor`'s drop, agreeing with `want` peers, its connections
    /// to be put in ([`Mesh::keep`]).
    fn formed(
        (me, members): (NodeId, usize),
        acceptor: DropGuard,
        margin: Duration,
        want: usize,
    ) -> Self {
        Mesh {
            peers: HashMap::default(),
            _acceptor: acceptor,
            directions: HashMap::default(),
            me,
            members,
            margin,
            want,
            acceptor: None,
            incarnations: HashMap::default(),
        }
    }

    /// Put agreed connections back into the mesh.
    #[cfg_attr(not(any(feature = "ofi", feature = "rdma")), allow(dead_code))]
    fn keep(&mut self, links: HashMap<NodeId, Link>) {
        for (peer, link) in links {
            self.peers.insert(peer, link.stream);
            self.directions.insert(peer, (link.out, link.inbound));
        }
    }
}

/// Bring node `cluster.id` into the mesh for `purpose`: listen (on the
/// given listener, or at its member address), authenticate with the
/// cluster key and a digest of the member list, and connect to every other
/// member within the connect timeout.
#[cfg_attr(not(any(feature = "rdma", test)), allow(dead_code))]
pub(crate) async fn bring_up(
    cluster: ClusterConfig,
    purpose: MeshPurpose,
) -> Result<Mesh, MeshError> {
    bring_up_vetted(cluster, purpose, None).await
}

/// [`bring_up`], its handshakes letting in only the peers' runs `vet`
/// admits (all, without one).
#[cfg_attr(not(any(feature = "ofi", feature = "rdma")), allow(dead_code))]
pub(crate) async fn bring_up_vetted(
    cluster: ClusterConfig,
    purpose: MeshPurpose,
    vet: Option<handshake::Vet>,
) -> Result<Mesh, MeshError> {
    cluster.check_member()?;
    let ClusterConfig {
        members,
        id,
        key,
        listener,
        connect_timeout,
        handshake_timeout,
        failure_timeout,
        incarnation,
        identity,
        open_membership: _,
    } = cluster;
    let listener = match listener {
        Some(l) => listener_from_std(l),
        None => bind(members[id.index()]).await,
    }
    .map_err(MeshError::Listen)?;
    let entries: Vec<String> = members.iter().map(|m| purpose.digest_entry(m)).collect();
    let digest = ClusterDigest::of_members(&entries);
    let handshake = Handshake::new(key, digest, id, members.len())
        .with_timeout(handshake_timeout)
        .with_incarnation(incarnation)
        .with_identity(identity);
    let handshake = match vet {
        Some(vet) => handshake.with_vet(vet),
        None => handshake,
    };
    establish(MeshConfig {
        me: id,
        members,
        listener: Arc::new(listener),
        handshake: Arc::new(handshake),
        connect_timeout,
        margin: failure_timeout / 2,
    })
    .await
}

/// Connect to every other member, then agree that the mesh formed (see
/// [`Formation`]). Once every member is connected, the acceptor closes
/// every new connection as soon as it is accepted, without a handshake:
/// nothing more is needed, so strangers get nothing and cost one `accept`
/// each. (The listener stays open, so that the port does not look free to
/// another process.)
#[cfg_attr(not(any(feature = "ofi", feature = "rdma")), allow(dead_code))]
async fn establish(config: MeshConfig) -> Result<Mesh, MeshError> {
    let me = config.me;
    let (found, mut arrivals) = mpsc::unbounded_channel::<Arrival>();
    let stop = CancellationToken::new();
    // Cancelled once every member is connected: handshakes and dials stop.
    let complete = stop.child_token();
    let refusals = Arc::new(Mutex::new(Refusals::default()));
    let runs = Arc::new(Mutex::new(HashMap::default()));
    let on_peer: connect::OnPeer = {
        let (found, runs) = (found.clone(), Arc::clone(&runs));
        Arc::new(move |stream, peer: handshake::Authenticated, addr| {
            if peer.peer > me {
                lock(&runs).insert(peer.peer, peer.incarnation);
                let _ = found.send((peer.peer, stream, peer.key));
            } else {
                tracing::warn!(%addr, peer = peer.peer.0, "dropped peer: lower ranks are dialled, not accepted");
            }
        })
    };
    tokio::spawn(connect::accept_loop(
        Arc::clone(&config.listener),
        Arc::clone(&config.handshake),
        Arc::clone(&refusals),
        on_peer,
        (stop.clone(), complete.clone()),
    ));
    for peer in (0..me.0).map(NodeId) {
        let (found, refusals) = (found.clone(), Arc::clone(&refusals));
        let (handshake, stop) = (Arc::clone(&config.handshake), complete.clone());
        let runs = Arc::clone(&runs);
        let addr = config.members[peer.index()];
        tokio::spawn(async move {
            let backoff = connect::FIRST_DIAL_BACKOFF;
            if let Some((stream, a, _)) = connect::dial(
                (peer, || Some(addr)),
                &handshake,
                &refusals,
                (&stop, None),
                backoff,
            )
            .await
            {
                lock(&runs).insert(peer, a.incarnation);
                let _ = found.send((peer, stream, a.key));
            }
        });
    }
    drop(found);
    let now = Instant::now();
    let members = config.members.len();
    let (formation, hearing) = Formation::new(
        (me, members),
        // Validated: at most `MAX_TIMEOUT`, which the clock can add.
        now + config.connect_timeout,
        config.connect_timeout,
        config.margin,
        stop.clone(),
    );
    let why = |missing: &[NodeId]| {
        refusals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .explain(missing, |p| config.members.get(p.index()).copied())
    };
    let links = formation
        .run(hearing, &mut arrivals, &complete, &why)
        .await?;
    // In the message, so that a campaign can read it whatever the log
    // format.
    tracing::info!("mesh formed in {} ms", now.elapsed().as_millis());
    let want = members.saturating_sub(1);
    let mut mesh = Mesh::formed((me, members), stop.drop_guard(), config.margin, want);
    mesh.acceptor = Some((config.listener, config.handshake));
    mesh.incarnations = std::mem::take(&mut *lock(&runs));
    mesh.keep(links);
    Ok(mesh)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An authenticated connection to a member, as a dial or the acceptor hands
/// it over, with its session key.
#[cfg_attr(not(any(feature = "ofi", feature = "rdma")), allow(dead_code))]
type Arrival = (NodeId, TcpStream, SessionKey);
