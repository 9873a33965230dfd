//! The authenticated mesh: one TCP connection between every pair of nodes
//! of the cluster, each authenticated with the cluster key ([`handshake`])
//! before it is used. The `tcp` transport carries all its traffic over the
//! mesh; the `ofi` transport uses it as the rendezvous where nodes swap
//! their fabric addresses.
//!
//! A node dials every node of lower rank and accepts the others.
//! Connections that fail authentication — strangers, garbage, the wrong
//! cluster — are dropped with a logged reason without stalling anything
//! else, and what strangers can hold is bounded: at most
//! [`MAX_PENDING_HANDSHAKES`] connections are authenticated at once (a new
//! one displaces the oldest), one that sends nothing is let go after
//! [`FIRST_HELLO_TIMEOUT`], and once every member is connected every new
//! connection is closed as soon as it is accepted. A node's mesh is up
//! once every member is connected to every member (each tells its peers
//! with a ready byte), so that no node starts timing a peer's silence while
//! the peer still waits for a third member. A mesh that does not
//! complete within the connect timeout names the members missing and, when
//! known, why their connections were refused (another cluster key or
//! member list).

pub(crate) mod handshake;
mod key;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use self::handshake::{Handshake, HandshakeError};
pub(crate) use self::key::ClusterDigest;
pub use self::key::{ClusterKey, ClusterKeyError};
use crate::config::{ClusterConfigError, check_limit};
use crate::ids::NodeId;

/// Default time to wait for every other member to be connected.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default time after which a silent peer is considered failed.
pub(crate) const DEFAULT_FAILURE_TIMEOUT: Duration = Duration::from_secs(3);

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
        let mut seen = HashMap::with_capacity(self.members.len());
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
        Ok(())
    }

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
    fn digest_entry(self, member: &SocketAddr) -> String {
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
#[derive(Debug)]
struct MeshConfig {
    me: NodeId,
    members: Vec<SocketAddr>,
    listener: TcpListener,
    handshake: Arc<Handshake>,
    connect_timeout: Duration,
    handshake_timeout: Duration,
}

/// Why the mesh could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MeshError {
    #[error("node {me} is not in a cluster of {members}")]
    NotAMember { me: NodeId, members: usize },
    #[error("listening: {0}")]
    Listen(#[source] std::io::Error),
    #[error("connected to every member, but not every member was: {why}")]
    Unready { why: String },
    #[error(
        "no connection to node(s) {} within {timeout:?}{why}",
        missing.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
    )]
    TimedOut {
        missing: Vec<NodeId>,
        timeout: Duration,
        /// Why connections were refused, when known: " (reasons)" or "".
        why: String,
    },
}

/// The established connections, one per peer, and the guard that keeps the
/// listener turning strangers away until the node goes.
pub(crate) struct Mesh {
    pub(crate) peers: HashMap<NodeId, TcpStream>,
    pub(crate) _acceptor: DropGuard,
}

/// Bring node `cluster.id` into the mesh for `purpose`: listen (on the
/// given listener, or at its member address), authenticate with the
/// cluster key and a digest of the member list, and connect to every other
/// member within the connect timeout.
pub(crate) async fn bring_up(
    cluster: ClusterConfig,
    purpose: MeshPurpose,
) -> Result<Mesh, MeshError> {
    cluster.check_member()?;
    let ClusterConfig {
        members,
        id,
        key,
        listener,
        connect_timeout,
        handshake_timeout,
        failure_timeout: _,
    } = cluster;
    let listener = match listener {
        Some(l) => l
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(l)),
        None => TcpListener::bind(members[id.index()]).await,
    }
    .map_err(MeshError::Listen)?;
    let entries: Vec<String> = members.iter().map(|m| purpose.digest_entry(m)).collect();
    let digest = ClusterDigest::of_members(&entries);
    let handshake = Handshake::new(key, digest, id, members.len()).with_timeout(handshake_timeout);
    establish(MeshConfig {
        me: id,
        members,
        listener,
        handshake: Arc::new(handshake),
        connect_timeout,
        handshake_timeout,
    })
    .await
}

/// The most connections the acceptor authenticates at once. A connection
/// beyond it displaces the oldest one pending, which is closed: a member
/// completes its handshake within a round trip or two, so a flood must open
/// this many connections in that time to keep a member out even once (and
/// the member dials again). Members dial each other once (again only after
/// a failure), so this is far above what a cluster needs, and it bounds
/// what strangers can hold: this many sockets and tasks.
pub(crate) const MAX_PENDING_HANDSHAKES: usize = 64;

/// The handshakes under way at the acceptor, oldest first.
#[derive(Debug, Default)]
struct Pending {
    queue: VecDeque<(u64, CancellationToken)>,
    next: u64,
}

/// A handshake's place among the [`Pending`] ones, given up when dropped.
struct Admitted {
    pending: Arc<Mutex<Pending>>,
    id: u64,
}

impl Pending {
    /// Admit a new connection, displacing the oldest pending one at the cap;
    /// the token is cancelled when the connection is displaced or `parent`
    /// is cancelled.
    fn admit(this: &Arc<Mutex<Self>>, parent: &CancellationToken) -> (Admitted, CancellationToken) {
        let mut pending = this.lock().unwrap_or_else(|e| e.into_inner());
        if pending.queue.len() >= MAX_PENDING_HANDSHAKES
            && let Some((_, oldest)) = pending.queue.pop_front()
        {
            tracing::debug!("displaced the oldest pending handshake");
            oldest.cancel();
        }
        let id = pending.next;
        pending.next += 1;
        let token = parent.child_token();
        pending.queue.push_back((id, token.clone()));
        let admitted = Admitted {
            pending: Arc::clone(this),
            id,
        };
        (admitted, token)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.queue.retain(|(id, _)| *id != self.id);
    }
}

/// How long an accepted connection may stay silent before the first byte of
/// its hello (at most the handshake timeout). A member sends its hello right
/// after connecting; a silent connection is let go after this, freeing its
/// place among the [`MAX_PENDING_HANDSHAKES`].
pub(crate) const FIRST_HELLO_TIMEOUT: Duration = Duration::from_secs(1);

/// Why connections were refused while the mesh formed: the last reason per
/// member dialled, and the last few distinct reasons for refused incoming
/// connections, so that a mesh that does not complete says why (another
/// key, another member list, nobody listening) without the logs.
#[derive(Debug, Default)]
struct Refusals {
    dialled: HashMap<NodeId, String>,
    incoming: Vec<String>,
    /// When a refused connection was last logged as a warning, and how
    /// many were refused since without one: a flood of garbage gets one
    /// warning a second, not one per connection.
    warned: Option<(Instant, u64)>,
}

/// The least time between two warnings about refused connections.
const REFUSAL_WARNING_INTERVAL: Duration = Duration::from_secs(1);

/// The most distinct reasons for refused incoming connections kept.
const INCOMING_REASONS_KEPT: usize = 3;

impl Refusals {
    fn dial_failed(this: &Mutex<Self>, peer: NodeId, reason: String) {
        this.lock()
            .unwrap_or_else(|e| e.into_inner())
            .dialled
            .insert(peer, reason);
    }

    fn refused(this: &Mutex<Self>, addr: SocketAddr, reason: String) {
        let mut this = this.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match &mut this.warned {
            Some((at, quiet)) if now < *at + REFUSAL_WARNING_INTERVAL => {
                *quiet += 1;
                tracing::debug!(%addr, %reason, "dropped peer");
            }
            warned => {
                let quiet = warned.map_or(0, |(_, quiet)| quiet);
                tracing::warn!(%addr, %reason, refused_quietly_before = quiet, "dropped peer");
                *warned = Some((now, 0));
            }
        }
        let line = format!("refused a connection from {addr}: {reason}");
        // Keep one entry per reason (the latest address), the newest last.
        this.incoming
            .retain(|old| !old.ends_with(&format!(": {reason}")));
        this.incoming.push(line);
        if this.incoming.len() > INCOMING_REASONS_KEPT {
            this.incoming.remove(0);
        }
    }

    /// The reasons that concern `missing`, as one line ("" when none).
    fn explain(&self, missing: &[NodeId], members: &[SocketAddr]) -> String {
        let mut parts: Vec<String> = missing
            .iter()
            .filter_map(|p| {
                let reason = self.dialled.get(p)?;
                Some(format!("node {p} at {}: {reason}", members[p.index()]))
            })
            .collect();
        parts.extend(self.incoming.iter().cloned());
        if parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", parts.join("; "))
        }
    }
}

/// A dialled member's reason for refusing us, worded for the operator: a
/// member that closes the connection mid-handshake most likely holds
/// another key or member list (its own error says which).
fn dial_reason(error: &HandshakeError) -> String {
    match error {
        HandshakeError::Closed => "it closed the connection during the handshake: it may hold \
                                   another cluster key or member list (its own error says which)"
            .to_owned(),
        e => e.to_string(),
    }
}

/// Connect to every other member. Once every member is connected, the
/// acceptor closes every new connection as soon as it is accepted, without
/// a handshake: nothing more is needed, so strangers get nothing and cost
/// one `accept` each. (The listener stays open, so that the port does not
/// look free to another process.)
async fn establish(config: MeshConfig) -> Result<Mesh, MeshError> {
    let n = config.members.len();
    let me = config.me;
    let (found, mut arrivals) = mpsc::unbounded_channel::<(NodeId, TcpStream)>();
    let stop = CancellationToken::new();
    // Cancelled once every member is connected: handshakes and dials stop.
    let complete = stop.child_token();
    let refusals = Arc::new(Mutex::new(Refusals::default()));
    tokio::spawn(accept_loop(
        config.listener,
        (Arc::clone(&config.handshake), me, config.handshake_timeout),
        Arc::clone(&refusals),
        found.clone(),
        (stop.clone(), complete.clone()),
    ));
    for peer in (0..me.0).map(NodeId) {
        tokio::spawn(dial(
            config.members[peer.index()],
            Arc::clone(&config.handshake),
            peer,
            (found.clone(), Arc::clone(&refusals)),
            complete.clone(),
        ));
    }
    drop(found);
    // Validated: at most `MAX_TIMEOUT`, which the clock can add.
    let deadline = Instant::now() + config.connect_timeout;
    let mut peers = HashMap::new();
    while peers.len() + 1 < n {
        match tokio::time::timeout_at(deadline, arrivals.recv()).await {
            Ok(Some((peer, stream))) => {
                if peers.contains_key(&peer) {
                    tracing::warn!(
                        peer = peer.0,
                        "dropped a second connection from a connected peer"
                    );
                    continue;
                }
                tracing::debug!(peer = peer.0, "connected");
                peers.insert(peer, stream);
            }
            Ok(None) | Err(_) => {
                stop.cancel();
                let missing: Vec<NodeId> = (0..n as u32)
                    .map(NodeId)
                    .filter(|p| *p != me && !peers.contains_key(p))
                    .collect();
                let why = refusals
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .explain(&missing, &config.members);
                return Err(MeshError::TimedOut {
                    missing,
                    timeout: config.connect_timeout,
                    why,
                });
            }
        }
    }
    // Every member is connected: let go of any handshake still pending and
    // admit nobody else.
    complete.cancel();
    if let Err(e) = all_ready(&mut peers, deadline, config.connect_timeout).await {
        stop.cancel();
        return Err(e);
    }
    Ok(Mesh {
        peers,
        _acceptor: stop.drop_guard(),
    })
}

/// The byte a node sends every peer once it is connected to every member.
const READY: u8 = 0x52;

/// The mesh's last step: tell every peer this node is connected to every
/// member, and wait until every peer says the same (by `deadline`). Without
/// it, a node whose mesh completed first would start its links — and their
/// failure timeout — while a peer still waits for a third member, and
/// declare that peer failed for the silence.
async fn all_ready(
    peers: &mut HashMap<NodeId, TcpStream>,
    deadline: Instant,
    timeout: Duration,
) -> Result<(), MeshError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let waits = peers.iter_mut().map(|(&peer, stream)| async move {
        let exchange = async {
            stream.write_all(&[READY]).await?;
            let mut byte = [0];
            stream.read_exact(&mut byte).await?;
            Ok::<_, std::io::Error>(byte[0])
        };
        let outcome = match tokio::time::timeout_at(deadline, exchange).await {
            Ok(Ok(READY)) => return Ok(()),
            Ok(Ok(other)) => format!("sent {other:#04x} instead of its ready byte"),
            Ok(Err(e)) => format!("connection lost before it was ready: {e}"),
            Err(_) => format!("not connected to every other member within {timeout:?}"),
        };
        Err((peer, outcome))
    });
    let mut unready: Vec<(NodeId, String)> = futures::future::join_all(waits)
        .await
        .into_iter()
        .filter_map(Result::err)
        .collect();
    if unready.is_empty() {
        return Ok(());
    }
    unready.sort_by_key(|(peer, _)| *peer);
    let why = unready
        .iter()
        .map(|(peer, why)| format!("node {peer}: {why}"))
        .collect::<Vec<_>>()
        .join("; ");
    Err(MeshError::Unready { why })
}

/// Accept connections until stopped: until the mesh is complete,
/// authenticate each in its own task (at most [`MAX_PENDING_HANDSHAKES`] at
/// once, the oldest displaced by a new one, each silent for at most
/// [`FIRST_HELLO_TIMEOUT`]) and hand over the
/// ones from higher-ranked members; once it is, close each at once.
async fn accept_loop(
    listener: TcpListener,
    (handshake, me, handshake_timeout): (Arc<Handshake>, NodeId, Duration),
    refusals: Arc<Mutex<Refusals>>,
    found: mpsc::UnboundedSender<(NodeId, TcpStream)>,
    (stop, complete): (CancellationToken, CancellationToken),
) {
    let first_hello = FIRST_HELLO_TIMEOUT.min(handshake_timeout);
    let pending = Arc::new(Mutex::new(Pending::default()));
    loop {
        let (mut stream, addr) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(50)) => continue,
                    }
                }
            },
        };
        if complete.is_cancelled() {
            tracing::debug!(%addr, "closed a connection: every member is connected");
            drop(stream);
            continue;
        }
        let (slot, displaced) = Pending::admit(&pending, &complete);
        let handshake = Arc::clone(&handshake);
        let found = found.clone();
        let refusals = Arc::clone(&refusals);
        tokio::spawn(async move {
            let _slot = slot;
            let attempt = async {
                let mut first = [0];
                match tokio::time::timeout(first_hello, stream.peek(&mut first)).await {
                    Ok(Ok(n)) if n > 0 => Some(handshake.accept(&mut stream).await),
                    Ok(Ok(_)) => Some(Err(HandshakeError::Closed)),
                    Ok(Err(e)) => Some(Err(e.into())),
                    Err(_) => None,
                }
            };
            let outcome = tokio::select! {
                _ = displaced.cancelled() => return,
                r = attempt => match r {
                    Some(r) => r,
                    None => {
                        tracing::debug!(%addr, "dropped a connection silent for {first_hello:?}");
                        return;
                    }
                },
            };
            match outcome {
                Ok(peer) if peer > me => {
                    let _ = stream.set_nodelay(true);
                    let _ = found.send((peer, stream));
                }
                Ok(peer) => {
                    tracing::warn!(%addr, peer = peer.0, "dropped peer: lower ranks are dialled, not accepted");
                }
                Err(e) => Refusals::refused(&refusals, addr, e.to_string()),
            }
        });
    }
}

/// Dial `peer` until connected and authenticated, or stopped; record why
/// each failed attempt failed.
async fn dial(
    addr: SocketAddr,
    handshake: Arc<Handshake>,
    peer: NodeId,
    (found, refusals): (
        mpsc::UnboundedSender<(NodeId, TcpStream)>,
        Arc<Mutex<Refusals>>,
    ),
    stop: CancellationToken,
) {
    let mut backoff = Duration::from_millis(10);
    loop {
        let attempt = async {
            let mut stream = TcpStream::connect(addr)
                .await
                .map_err(|e| format!("connecting: {e}"))?;
            stream.set_nodelay(true).map_err(|e| e.to_string())?;
            handshake
                .initiate(&mut stream, peer)
                .await
                .map_err(|e| dial_reason(&e))?;
            Ok::<_, String>(stream)
        };
        let outcome = tokio::select! {
            _ = stop.cancelled() => return,
            r = attempt => r,
        };
        match outcome {
            Ok(stream) => {
                let _ = found.send((peer, stream));
                return;
            }
            Err(reason) => {
                tracing::debug!(peer = peer.0, %addr, %reason, "connecting");
                Refusals::dial_failed(&refusals, peer, reason);
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
        }
    }
}
