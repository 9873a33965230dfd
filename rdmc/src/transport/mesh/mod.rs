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
//! once every member is connected to every member and every member has
//! said so ([`Formation`]: `Ready`, then `Go`, each message authenticated
//! with the connection's session key), so that no node starts timing a
//! peer's silence while the peer still waits for a third member. A mesh
//! that does not form names the members that kept it from forming — the
//! same ones on every member that fails, never one that only gave up
//! because of them: a node that gives up tells its peers whom it blames
//! before it closes — and, when known, why their connections were refused
//! (another cluster key or member list).

mod formation;
pub(crate) mod handshake;
mod key;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use self::formation::{Direction, Message};
use self::handshake::{Handshake, HandshakeError, SessionKey};
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
    /// How late a correct member's formation message may be.
    margin: Duration,
}

/// Why the mesh could not be built.
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
        failure_timeout,
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
        margin: failure_timeout / 2,
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

/// Connect to every other member, then agree that the mesh formed (see
/// [`Formation`]). Once every member is connected, the acceptor closes
/// every new connection as soon as it is accepted, without a handshake:
/// nothing more is needed, so strangers get nothing and cost one `accept`
/// each. (The listener stays open, so that the port does not look free to
/// another process.)
async fn establish(config: MeshConfig) -> Result<Mesh, MeshError> {
    let me = config.me;
    let (found, mut arrivals) = mpsc::unbounded_channel::<Arrival>();
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
    let (heard, mut hearing) = mpsc::unbounded_channel();
    let now = Instant::now();
    let mut formation = Formation {
        me,
        n: config.members.len(),
        // Validated: at most `MAX_TIMEOUT`, which the clock can add.
        deadline: now + config.connect_timeout,
        connect_timeout: config.connect_timeout,
        margin: config.margin,
        phase: Phase::Connecting,
        peers: HashMap::new(),
        heard,
        stop: stop.clone(),
    };
    let failure = loop {
        // First of all, so that a cluster of one is up at once.
        match formation.advance(&complete).await {
            Ok(Some(peers)) => {
                // In the message, so that a campaign can read it whatever the
                // log format.
                tracing::info!("mesh formed in {} ms", now.elapsed().as_millis());
                return Ok(Mesh {
                    peers,
                    _acceptor: stop.drop_guard(),
                });
            }
            Ok(None) => {}
            Err(failure) => break failure,
        }
        let wake = formation.wake();
        let step = tokio::select! {
            Some((peer, stream, key)) = arrivals.recv() => {
                formation.connected(peer, stream, key).await
            }
            Some(event) = hearing.recv() => formation.heard(event),
            () = tokio::time::sleep_until(wake) => {
                let why = |missing: &[NodeId]| {
                    refusals
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .explain(missing, &config.members)
                };
                Err(formation.timed_out(why))
            }
        };
        if let Err(failure) = step {
            break failure;
        }
    };
    formation.give_up(&failure.blame, &mut hearing).await;
    stop.cancel();
    Err(failure.error)
}

/// An authenticated connection to a member, as a dial or the acceptor hands
/// it over, with its session key.
type Arrival = (NodeId, TcpStream, SessionKey);

/// What a connection's reader reports.
#[derive(Debug)]
enum Heard {
    /// A formation message other than `Go`.
    Message(NodeId, Message),
    /// The peer's `Go`, its last formation message: the read half,
    /// positioned right after it.
    Done(NodeId, OwnedReadHalf),
    /// The connection broke, or carried something other than an authentic
    /// formation message.
    Lost(NodeId, String),
}

/// Where a node is in the mesh's formation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Not connected to every member yet.
    Connecting,
    /// Connected to every member, `Ready` sent; waiting for every member's.
    Ready,
    /// Every member's `Ready` in, `Go` sent; waiting for every member's.
    Go,
}

/// One connection while the mesh forms.
#[derive(Debug)]
struct Peer {
    writer: OwnedWriteHalf,
    /// Our direction of its formation messages.
    out: Direction,
    /// When the peer gives up at the latest, on our clock (its `Info`).
    deadline: Option<Instant>,
    /// Its `Ready` (or `Go`) arrived.
    ready: bool,
    /// Its `Go` arrived: the read half, back from the reader.
    done: Option<OwnedReadHalf>,
    /// Its reader ended without a `Go`.
    lost: bool,
}

/// A node's mesh failed: the error, and the members it blames (told to
/// every peer in a `Fail`).
#[derive(Debug)]
struct Failure {
    error: MeshError,
    blame: Vec<NodeId>,
}

/// How long a node that gives up waits for its peers to close their ends
/// after its `Fail`, so that closing its own with their messages unread
/// (which resets the connection) cannot discard the `Fail` before they read
/// it.
const LINGER: Duration = Duration::from_millis(250);

/// One node's view of the mesh's formation: a small protocol over the
/// authenticated connections, each message MAC'd with the connection's
/// session key ([`formation`]), so that every member that fails names the
/// member(s) that caused it, never one that only gave up because of them.
///
/// 1. On every new connection each end first sends `Info`: how long until it
///    gives up at the latest.
/// 2. *Connecting*: once connected to every member, a node sends `Ready` to
///    all. At its deadline (start + connect timeout) a node still missing
///    connections gives up, blaming the members it has no connection to.
/// 3. *Ready*: once it has every member's `Ready`, a node sends `Go` to all.
///    Until then, a member whose `Ready` is missing is still connecting (or
///    faulty): the node waits until that member's own deadline + margin
///    (and at least until its own deadline) for its `Ready` or its `Fail`,
///    then gives up blaming the members still silent.
/// 4. *Go*: once it has every member's `Go`, the node is up. A member whose
///    `Go` is missing sent `Ready` (so it is in step 3 or later) and gives up
///    by the latest deadline + margin at the latest: the node waits one
///    margin more, then gives up blaming the members still silent.
///
/// In every step, a `Fail` from a peer makes the node give up blaming the
/// members the `Fail` blames (never itself: if the peer blames this node, it
/// blames the peer), and a connection lost before its `Go` (without a
/// `Fail`) blames that peer. A node that gives up sends its `Fail` to every
/// peer before it closes.
///
/// Why every node that fails names a member that caused it, with at most
/// one member faulty (killed, stopped, or cut off) or the cluster split in
/// two, as long as a correct member's messages arrive within the margin
/// (half the failure timeout: a member later than that counts as failed
/// anyway):
///
/// - *No node that gives up is blamed by a node that formed.* A node is up
///   only with every member's `Go`, and a node never sends `Fail` after
///   `Go`; so when node X gives up, nobody has X's `Go`, and every node in
///   step 4 waits for X's `Go` or `Fail` until the latest deadline + two
///   margins, past X's last moment to give up + one margin: X's `Fail`
///   reaches it first, and it gives up too, with X's blame. Nobody is up.
/// - *The blame is the faulty member.* A node gives up on its own only at a
///   deadline, blaming members silent past theirs: in step 2 the members it
///   has no connection to (faulty, or across the split), in step 3 members
///   connected but silent past their own deadline + margin — a correct one
///   connecting would have sent `Ready` or its own `Fail` by then, which the
///   node adopts —, in step 4 members silent past the time a correct one
///   sends `Go` or `Fail`. Blame travels unchanged in `Fail`s, so every
///   node names the member the first node to give up found silent.
/// - A node that formed and then finds a peer gone (its `Go` sent, then
///   killed or cut off) is past the mesh: the transport names that peer,
///   which is right, as it had formed.
///
/// The one gap: a member stopped (or cut off) in the instant between
/// writing its `Go` to one peer and to another leaves one peer up and the
/// other giving up at step 4 — blaming the right member, but the peer that
/// is up sees it leave. Every message to all peers is written in one go, so
/// that window is a few system calls wide.
#[derive(Debug)]
struct Formation {
    me: NodeId,
    n: usize,
    /// When this node gives up connecting.
    deadline: Instant,
    connect_timeout: Duration,
    /// How late a correct member's message may be (half the failure
    /// timeout).
    margin: Duration,
    phase: Phase,
    peers: HashMap<NodeId, Peer>,
    /// Where the connections' readers report.
    heard: mpsc::UnboundedSender<Heard>,
    /// Ends the readers when the node gives up.
    stop: CancellationToken,
}

impl Formation {
    /// A new authenticated connection to `peer`: send our `Info` and start
    /// reading its messages.
    async fn connected(
        &mut self,
        peer: NodeId,
        stream: TcpStream,
        key: SessionKey,
    ) -> Result<(), Failure> {
        if self.peers.contains_key(&peer) {
            tracing::warn!(
                peer = peer.0,
                "dropped a second connection from a connected peer"
            );
            return Ok(());
        }
        tracing::debug!(peer = peer.0, "connected");
        let (read, writer) = stream.into_split();
        tokio::spawn(read_formation(
            peer,
            read,
            Direction::new(key.clone(), peer, self.me),
            self.n,
            self.heard.clone(),
            self.stop.clone(),
        ));
        self.peers.insert(
            peer,
            Peer {
                writer,
                out: Direction::new(key, self.me, peer),
                deadline: None,
                ready: false,
                done: None,
                lost: false,
            },
        );
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        let info = Message::Info {
            remaining_ms: u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
        };
        self.send(peer, &info).await
    }

    /// Send `message` to `peer`; a connection that cannot take it (within
    /// the margin) is lost.
    async fn send(&mut self, peer: NodeId, message: &Message) -> Result<(), Failure> {
        use tokio::io::AsyncWriteExt;
        let p = self.peers.get_mut(&peer).expect("a connected peer");
        let bytes = p.out.seal(message);
        let why = match tokio::time::timeout(self.margin, p.writer.write_all(&bytes)).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => format!("connection lost: {e}"),
            Err(_) => format!("took no message for {:?}", self.margin),
        };
        Err(lost(peer, why))
    }

    /// Send `message` to every peer, in one go.
    async fn broadcast(&mut self, message: &Message) -> Result<(), Failure> {
        let mut peers: Vec<NodeId> = self.peers.keys().copied().collect();
        peers.sort_unstable();
        for peer in peers {
            self.send(peer, message).await?;
        }
        Ok(())
    }

    /// What a reader reported.
    fn heard(&mut self, event: Heard) -> Result<(), Failure> {
        let now = Instant::now();
        match event {
            Heard::Message(peer, Message::Info { remaining_ms }) => {
                // Bounded by ours: a peer cannot keep us waiting longer.
                let remaining = Duration::from_millis(remaining_ms).min(self.connect_timeout);
                self.peer(peer).deadline = Some(now + remaining);
            }
            Heard::Message(peer, Message::Ready) => self.peer(peer).ready = true,
            Heard::Done(peer, read) => {
                let p = self.peer(peer);
                p.ready = true;
                p.done = Some(read);
            }
            Heard::Message(peer, Message::Fail { blame }) => {
                let mut blame: Vec<NodeId> = blame.into_iter().filter(|&b| b != self.me).collect();
                blame.sort_unstable();
                blame.dedup();
                if blame.is_empty() {
                    // It blames this node, which is well: blame it.
                    blame.push(peer);
                }
                return Err(Failure {
                    error: MeshError::GaveUp {
                        from: peer,
                        blame: blame.clone(),
                    },
                    blame,
                });
            }
            Heard::Message(_, Message::Go) => unreachable!("a reader hands over the read half"),
            Heard::Lost(peer, why) => {
                self.peer(peer).lost = true;
                return Err(lost(peer, why));
            }
        }
        Ok(())
    }

    fn peer(&mut self, peer: NodeId) -> &mut Peer {
        self.peers
            .get_mut(&peer)
            .expect("readers run for connected peers")
    }

    /// Move on as far as the messages so far allow; the connections once
    /// every member's `Go` is in.
    async fn advance(
        &mut self,
        complete: &CancellationToken,
    ) -> Result<Option<HashMap<NodeId, TcpStream>>, Failure> {
        if self.phase == Phase::Connecting && self.peers.len() + 1 == self.n {
            // Every member is connected: let go of any handshake still
            // pending and admit nobody else.
            complete.cancel();
            self.phase = Phase::Ready;
            self.broadcast(&Message::Ready).await?;
        }
        if self.phase == Phase::Ready && self.peers.values().all(|p| p.ready) {
            self.phase = Phase::Go;
            self.broadcast(&Message::Go).await?;
        }
        if self.phase == Phase::Go && self.peers.values().all(|p| p.done.is_some()) {
            let peers = std::mem::take(&mut self.peers)
                .into_iter()
                .map(|(peer, p)| {
                    let read = p.done.expect("checked above");
                    let stream = read
                        .reunite(p.writer)
                        .expect("the halves of one connection");
                    (peer, stream)
                })
                .collect();
            return Ok(Some(peers));
        }
        Ok(None)
    }

    /// When this node gives up unless something arrives.
    fn wake(&self) -> Instant {
        let deadline_of = |p: &Peer| p.deadline.unwrap_or(self.deadline);
        match self.phase {
            Phase::Connecting => self.deadline,
            Phase::Ready => self
                .peers
                .values()
                .filter(|p| !p.ready)
                .map(|p| deadline_of(p) + self.margin)
                .fold(self.deadline, Instant::max),
            Phase::Go => {
                self.peers
                    .values()
                    .map(deadline_of)
                    .fold(self.deadline, Instant::max)
                    + self.margin * 2
            }
        }
    }

    /// Nothing arrived in time: whom this node blames, and why (`why`
    /// explains refused connections).
    fn timed_out(&self, why: impl Fn(&[NodeId]) -> String) -> Failure {
        let timeout = self.connect_timeout;
        let mut missing: Vec<NodeId> = match self.phase {
            Phase::Connecting => (0..self.n as u32)
                .map(NodeId)
                .filter(|p| *p != self.me && !self.peers.contains_key(p))
                .collect(),
            Phase::Ready => self
                .peers
                .iter()
                .filter(|(_, p)| !p.ready)
                .map(|(&id, _)| id)
                .collect(),
            Phase::Go => self
                .peers
                .iter()
                .filter(|(_, p)| p.done.is_none())
                .map(|(&id, _)| id)
                .collect(),
        };
        missing.sort_unstable();
        let error = match self.phase {
            Phase::Connecting => MeshError::TimedOut {
                why: why(&missing),
                missing: missing.clone(),
                timeout,
            },
            Phase::Ready => MeshError::Unready {
                why: missing
                    .iter()
                    .map(|p| {
                        format!("node {p}: not connected to every other member within {timeout:?}")
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
                missing: missing.clone(),
            },
            Phase::Go => MeshError::Unconfirmed {
                missing: missing.clone(),
                timeout,
            },
        };
        Failure {
            error,
            blame: missing,
        }
    }

    /// Tell every peer whom this node blames, close our ends, and wait (at
    /// most [`LINGER`]) for the peers to close theirs.
    async fn give_up(&mut self, blame: &[NodeId], hearing: &mut mpsc::UnboundedReceiver<Heard>) {
        use tokio::io::AsyncWriteExt;
        let fail = Message::Fail {
            blame: blame.to_vec(),
        };
        let linger = tokio::time::sleep(LINGER);
        tokio::pin!(linger);
        for p in self.peers.values_mut() {
            let bytes = p.out.seal(&fail);
            let sent = async {
                p.writer.write_all(&bytes).await?;
                p.writer.shutdown().await
            };
            tokio::select! {
                _ = sent => {}
                () = &mut linger => break,
            }
        }
        while self.peers.values().any(|p| !p.lost && p.done.is_none()) {
            tokio::select! {
                Some(event) = hearing.recv() => match event {
                    Heard::Lost(peer, _) => self.peer(peer).lost = true,
                    Heard::Done(peer, read) => self.peer(peer).done = Some(read),
                    Heard::Message(..) => {}
                },
                () = &mut linger => break,
            }
        }
    }
}

/// A failure blaming `peer`, whose connection was lost before its `Go`.
fn lost(peer: NodeId, why: String) -> Failure {
    Failure {
        error: MeshError::Lost { peer, why },
        blame: vec![peer],
    }
}

/// Read `peer`'s formation messages from `read` and report them, until its
/// `Go` (then hand the read half back, nothing past it read), a broken
/// connection, or `stop`.
async fn read_formation(
    peer: NodeId,
    mut read: OwnedReadHalf,
    mut incoming: Direction,
    members: usize,
    heard: mpsc::UnboundedSender<Heard>,
    stop: CancellationToken,
) {
    loop {
        let message = tokio::select! {
            _ = stop.cancelled() => return,
            m = incoming.open(&mut read, members) => m,
        };
        let event = match message {
            Ok(Message::Go) => {
                let _ = heard.send(Heard::Done(peer, read));
                return;
            }
            Ok(message) => Heard::Message(peer, message),
            Err(e) => {
                let _ = heard.send(Heard::Lost(peer, e.to_string()));
                return;
            }
        };
        let _ = heard.send(event);
    }
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
    found: mpsc::UnboundedSender<Arrival>,
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
                    Ok(Ok(n)) if n > 0 => Some(handshake.accept_keyed(&mut stream).await),
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
                Ok((peer, key)) if peer > me => {
                    let _ = stream.set_nodelay(true);
                    let _ = found.send((peer, stream, key));
                }
                Ok((peer, _)) => {
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
    (found, refusals): (mpsc::UnboundedSender<Arrival>, Arc<Mutex<Refusals>>),
    stop: CancellationToken,
) {
    let mut backoff = Duration::from_millis(10);
    loop {
        let attempt = async {
            let mut stream = TcpStream::connect(addr)
                .await
                .map_err(|e| format!("connecting: {e}"))?;
            stream.set_nodelay(true).map_err(|e| e.to_string())?;
            let key = handshake
                .initiate_keyed(&mut stream, peer)
                .await
                .map_err(|e| dial_reason(&e))?;
            Ok::<_, String>((stream, key))
        };
        let outcome = tokio::select! {
            _ = stop.cancelled() => return,
            r = attempt => r,
        };
        match outcome {
            Ok((stream, key)) => {
                let _ = found.send((peer, stream, key));
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
