//! The `tcp` transport's peers as they come and go: one authenticated
//! connection to each other member, kept up for as long as the node runs.
//!
//! Every pair of members has one connection, dialled by the member of higher
//! id (its *keeper*) and accepted by the other. A keeper whose connection
//! breaks dials again, with backoff, until the peer answers — the same run
//! of it after a partition, or a new run after a restart — so a member that
//! restarts is connected again to every member without any of them
//! restarting: it dials the members below it, the members above it dial it.
//!
//! Each run of a node has an *incarnation*, told in the handshake (covered
//! by its proofs): a restarted node's is higher than its last run's. A
//! connection is let in when it comes from the peer's latest run seen or a
//! newer one; a newer run replaces the connection of the older at once,
//! reporting the older run down first
//! ([`Completion::PeerDown`](super::Completion::PeerDown), so that the
//! groups that held it fail) and the new one up
//! ([`Completion::PeerUp`](super::Completion::PeerUp)). A connection from
//! an older run than one already seen is refused, and so is a second
//! connection of a run that is connected.
//!
//! Connected on demand ([`Connections::OnDemand`](crate::Connections::OnDemand)),
//! a node keeps no connection at start: a connection to a peer is made
//! when the node first needs it ([`PeerSet::want`]), by the keeper as
//! always — the peer of lower id waits for the other to dial, which it
//! does as it creates the same group. What is sent or posted to a peer
//! meanwhile waits for its connection, as long as the connect timeout;
//! then its groups fail, naming the peer. A connection no group of its
//! keeper has claimed for the idle timeout is closed by the keeper (an
//! idle close, after everything queued: neither end reports it), and made
//! again when a group needs it.
//!
//! With open membership ([`TcpConfig::with_open_membership`](crate::TcpConfig::with_open_membership)),
//! the member lists may differ: a node beyond a member's list is let in
//! like any (it has the highest id, so it dials), and every node tells its
//! address in its handshakes. A node that starts introduces itself to the
//! members above it (one authenticated connection each, closed at once),
//! so that its keepers dial it where it now is.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::link::{self, AgreeError, Link, LinkConfig, LinkSecurity, Outgoing, RecvLowat};
use crate::collections::HashMap;
use crate::config::EarlyAnnounce;
use crate::ids::{GroupId, NodeId};
use crate::proto::Control;
use crate::transport::RecvRegion;
use crate::transport::mesh::connect::{
    self, Admission, FIRST_DIAL_BACKOFF, OnPeer, Refusals, admit,
};
use crate::transport::mesh::handshake::{Authenticated, Handshake, Vet};
use crate::transport::mesh::{ClusterConfig, ClusterDigest, MeshError, MeshPurpose};
use crate::transport::socket::{TcpStream, bind, listener_from_std};
use crate::transport::{Completion, CompletionSender, Signal};

/// How a keeper waits between dials of a peer whose connection broke: soon
/// enough that a restarted peer is back within about a second.
const REDIAL_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(50), Duration::from_millis(800));
/// How a keeper waits between dials of a peer that left for good: it is
/// let back in when it starts again, at a more leisurely pace.
const LEFT_REDIAL_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(500), Duration::from_secs(5));

/// How the node's links are set up.
#[derive(Clone, Debug)]
pub(crate) struct LinkSetup {
    pub(crate) config: LinkConfig,
    pub(crate) security: LinkSecurity,
    pub(crate) early: Option<EarlyAnnounce>,
    pub(crate) congestion: Option<String>,
}

/// A link's key agreement, to await apart from the link.
type Agreement = BoxFuture<'static, Result<(), AgreeError>>;

/// What waits for a peer's first connection.
#[derive(Debug)]
pub(crate) enum Waiting {
    /// A frame to send.
    Send(GroupId, Outgoing),
    /// A receive to post.
    Post(GroupId, RecvRegion),
}

/// What became of something handed to a peer's link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Handed {
    /// Queued on the link, or waiting for its first connection.
    Queued,
    /// The peer's connection is gone (or, connecting every peer at
    /// start, never was).
    Unreachable,
}

/// The node's connections, and the newest run of every peer seen.
#[derive(Default)]
struct Table {
    links: HashMap<NodeId, Link>,
    known: HashMap<NodeId, u64>,
    /// The key agreements of the links made while the node starts, for
    /// its start to check ([`PeerSet::agreements`]).
    starting: Option<Vec<(NodeId, Agreement)>>,
    /// On demand: what waits for each peer's first connection.
    waiting: HashMap<NodeId, Vec<Waiting>>,
    /// On demand: the peers below this node it keeps a connection to,
    /// each with the generation of its keeper task.
    kept: HashMap<NodeId, u64>,
    /// On demand: how many of this node's groups need each peer.
    claims: HashMap<NodeId, usize>,
    /// The last keeper task's generation.
    generation: u64,
    /// On demand: counts the groups opened ([`PeerSet::open_epoch`]).
    epoch: u64,
    /// On demand: the epoch at which each peer's last connection ended.
    /// A group opened since waits for a new connection of the peer; one
    /// opened before held the connection that ended.
    ended: HashMap<NodeId, u64>,
}

impl Table {
    /// What becomes of a connection from `peer`'s run `incarnation`.
    fn admission(&self, peer: NodeId, incarnation: u64) -> Admission {
        let current = self
            .links
            .get(&peer)
            .map(|l| (l.incarnation(), !l.is_down()));
        admit(self.known.get(&peer).copied(), current, incarnation)
    }

    /// Whether a connection from `peer`'s run `incarnation` may come in.
    fn admit(&self, peer: NodeId, incarnation: u64) -> Result<(), String> {
        match self.admission(peer, incarnation) {
            Admission::Accept => Ok(()),
            Admission::Stale { known } => Err(format!(
                "run {incarnation} of node {peer} is over: run {known} was seen since"
            )),
            Admission::Duplicate => Err(format!(
                "run {incarnation} of node {peer} is connected already"
            )),
        }
    }
}

/// What the peer set's tasks share.
struct Shared {
    me: NodeId,
    /// Where each peer takes connections: the member list's addresses,
    /// and, with open membership, what peers told since.
    book: Mutex<HashMap<NodeId, SocketAddr>>,
    /// How many members the member list names.
    listed: usize,
    /// Whether the member lists may differ.
    open: bool,
    /// With open membership: woken when a peer tells a new address, for
    /// its keeper to dial it there at once.
    moved: Notify,
    handshake: Arc<Handshake>,
    refusals: Arc<Mutex<Refusals>>,
    table: Arc<Mutex<Table>>,
    /// Woken whenever a link is let in.
    changed: Notify,
    completions: CompletionSender,
    setup: LinkSetup,
    stop: CancellationToken,
    /// Whether peers are connected on demand, not all at start.
    on_demand: bool,
    /// On demand: how long a connection no group needs stays open.
    idle_timeout: Option<Duration>,
    /// How long what waits for a peer's first connection waits.
    connect_timeout: Duration,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

/// The `tcp` transport's connections to its peers, as they come and go.
#[derive(Debug)]
pub(crate) struct PeerSet {
    shared: Arc<Shared>,
    /// The task accepting connections (it owns the listener).
    accepting: Mutex<Option<JoinHandle<()>>>,
    _stop: DropGuard,
}

impl PeerSet {
    /// Listen (on the configured listener, or at this node's member
    /// address), accept the members above this one and keep a connection
    /// to each member below it, reporting every link let in and every link
    /// lost to `completions`.
    pub(crate) async fn start(
        cluster: ClusterConfig,
        setup: LinkSetup,
        completions: CompletionSender,
        demand: Option<Option<Duration>>,
    ) -> Result<Self, MeshError> {
        let on_demand = demand.is_some();
        cluster.check_member()?;
        let listener = match cluster.listener {
            Some(l) => listener_from_std(l),
            None => bind(cluster.members[cluster.id.index()]).await,
        }
        .map_err(MeshError::Listen)?;
        let entries: Vec<String> = cluster
            .members
            .iter()
            .map(|m| MeshPurpose::Tcp.digest_entry(m))
            .collect();
        let table = Arc::new(Mutex::new(Table {
            starting: (!on_demand).then(Vec::new),
            ..Table::default()
        }));
        let open = cluster.open_membership;
        let vet: Vet = {
            let (table, me) = (Arc::clone(&table), cluster.id);
            Arc::new(move |peer, incarnation| {
                let table = lock(&table);
                // A connected run's introduction (with open membership, a
                // node below introduces itself as it starts, maybe after
                // this node dialled it) only tells its address again.
                if open && peer < me && table.admission(peer, incarnation) == Admission::Duplicate {
                    return Ok(());
                }
                table.admit(peer, incarnation)
            })
        };
        let digest = if open {
            ClusterDigest::open()
        } else {
            ClusterDigest::of_members(&entries)
        };
        let handshake = Handshake::new(cluster.key, digest, cluster.id, cluster.members.len())
            .with_open_membership(open)
            .with_listen(cluster.members[cluster.id.index()])
            .with_timeout(cluster.handshake_timeout)
            .with_incarnation(cluster.incarnation)
            .with_identity(cluster.identity)
            .with_vet(vet);
        let stop = CancellationToken::new();
        let connect_timeout = cluster.connect_timeout;
        let shared = Arc::new(Shared {
            on_demand,
            idle_timeout: demand.flatten(),
            connect_timeout,
            me: cluster.id,
            listed: cluster.members.len(),
            book: Mutex::new(
                (0..)
                    .map(NodeId)
                    .zip(cluster.members)
                    .filter(|&(id, _)| id != cluster.id)
                    .collect(),
            ),
            open,
            moved: Notify::new(),
            handshake: Arc::new(handshake),
            refusals: Arc::new(Mutex::new(Refusals::default())),
            table,
            changed: Notify::new(),
            completions,
            setup,
            stop: stop.clone(),
        });
        let on_peer: OnPeer = {
            let shared = Arc::clone(&shared);
            Arc::new(move |stream, peer: Authenticated, addr| {
                if shared.open {
                    shared.learn(peer.peer, peer.listen);
                }
                if peer.peer < shared.me && shared.open {
                    tracing::debug!(%addr, peer = peer.peer.0, "a peer introduced itself");
                } else if peer.peer < shared.me {
                    tracing::warn!(%addr, peer = peer.peer.0, "dropped peer: lower ids are dialled, not accepted");
                } else if let Err(reason) = shared.let_in(stream, &peer, addr) {
                    // A peer dialling in as this node exits is no fault.
                    if shared.stop.is_cancelled() {
                        tracing::debug!(%addr, peer = peer.peer.0, %reason, "dropped peer");
                    } else {
                        tracing::warn!(%addr, peer = peer.peer.0, %reason, "dropped peer");
                    }
                }
            })
        };
        let accepting = tokio::spawn(connect::accept_loop(
            Arc::new(listener),
            Arc::clone(&shared.handshake),
            Arc::clone(&shared.refusals),
            on_peer,
            (stop.clone(), CancellationToken::new()),
        ));
        if !on_demand {
            for peer in (0..shared.me.0).map(NodeId) {
                tokio::spawn(keep(Arc::clone(&shared), peer, 0));
            }
        }
        if open {
            for peer in (shared.me.0 + 1..shared.listed as u32).map(NodeId) {
                tokio::spawn(introduce(Arc::clone(&shared), peer));
            }
        }
        Ok(PeerSet {
            shared,
            accepting: Mutex::new(Some(accepting)),
            _stop: stop.drop_guard(),
        })
    }

    /// Wait until every member has been connected, or fail at `deadline` naming
    /// those that are not (and why their connections were refused, when
    /// known).
    pub(crate) async fn all_connected(
        &self,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<(), MeshError> {
        loop {
            let changed = self.shared.changed.notified();
            let missing = self.missing();
            if missing.is_empty() {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                let missing = self.missing();
                if missing.is_empty() {
                    return Ok(());
                }
                let why = lock(&self.shared.refusals).explain(&missing, |p| self.shared.addr_of(p));
                return Err(MeshError::TimedOut {
                    missing,
                    timeout,
                    why,
                });
            }
        }
    }

    /// The members never connected (a connection that was let in, and
    /// then failed, is a peer failure reported as such).
    fn missing(&self) -> Vec<NodeId> {
        let table = lock(&self.shared.table);
        (0..self.shared.listed as u32)
            .map(NodeId)
            .filter(|&p| p != self.shared.me && !table.known.contains_key(&p))
            .collect()
    }

    /// The key agreements of the links made while the node started (asked
    /// once; later links report a failed agreement as their peer down).
    pub(crate) fn agreements(&self) -> Vec<(NodeId, Agreement)> {
        lock(&self.shared.table).starting.take().unwrap_or_default()
    }

    /// On demand: connect to `peer` (if it is below this node: it dials
    /// it; else it waits for the peer to dial). Connecting every peer at
    /// start: nothing to do.
    pub(crate) fn want(&self, peer: NodeId) {
        self.shared.want(peer);
    }
}

impl Shared {
    /// As [`PeerSet::want`].
    fn want(self: &Arc<Self>, peer: NodeId) {
        let shared = self;
        if !shared.on_demand || peer >= shared.me || shared.addr_of(peer).is_none() {
            return;
        }
        let mut table = lock(&shared.table);
        if table.kept.contains_key(&peer) {
            return;
        }
        table.generation += 1;
        let generation = table.generation;
        table.kept.insert(peer, generation);
        tokio::spawn(keep(Arc::clone(shared), peer, generation));
    }
}

impl PeerSet {
    /// Whether a signal handed for `peer` now goes out without waiting on
    /// the peer: a live connection to it is up, or this node is the one to
    /// make it (connecting on demand, the node above dials).
    pub(crate) fn reaches(&self, peer: NodeId) -> bool {
        peer < self.shared.me
            || lock(&self.shared.table)
                .links
                .get(&peer)
                .is_some_and(|l| !l.is_down())
    }

    /// On demand: whether `peer`'s last connection ended and no new one
    /// came (it crashed, say, or is starting again): a signal relayed
    /// through it would wait for it.
    pub(crate) fn is_gone(&self, peer: NodeId) -> bool {
        let table = lock(&self.shared.table);
        match table.links.get(&peer) {
            Some(link) => link.is_down() && !link.is_idle(),
            None => table.ended.contains_key(&peer),
        }
    }

    /// On demand: a group is opened; what it hands to a peer whose
    /// connection ended before now waits for a new connection
    /// ([`PeerSet::hand`]).
    pub(crate) fn open_epoch(&self) -> u64 {
        let mut table = lock(&self.shared.table);
        table.epoch += 1;
        table.epoch
    }

    /// On demand: one more group of this node needs `peer`.
    pub(crate) fn claim(&self, peer: NodeId) {
        if !self.shared.on_demand {
            return;
        }
        *lock(&self.shared.table).claims.entry(peer).or_default() += 1;
        self.want(peer);
    }

    /// On demand: a group that needed `peer` is over here; once no group
    /// has needed it for the idle timeout, its keeper (this node, if
    /// above it) closes the connection.
    pub(crate) fn unclaim(&self, peer: NodeId) {
        let mut table = lock(&self.shared.table);
        let Some(claims) = table.claims.get_mut(&peer) else {
            return;
        };
        *claims -= 1;
        if *claims > 0 {
            return;
        }
        table.claims.remove(&peer);
        if let Some(timeout) = self.shared.idle_timeout
            && peer < self.shared.me
        {
            tokio::spawn(close_when_idle(Arc::clone(&self.shared), peer, timeout));
        }
    }

    /// Hand `item` of a group opened at `epoch` to `peer`'s link; on
    /// demand, it waits for the link's first connection if there has been
    /// none yet, or for a new one if the last ended before the group was
    /// opened (a group opened before held the connection that ended).
    pub(crate) fn hand(&self, peer: NodeId, item: Waiting, epoch: u64) -> Handed {
        let mut table = lock(&self.shared.table);
        let ended = |table: &Table| table.ended.get(&peer).copied();
        if table.links.get(&peer).is_some_and(Link::is_idle) {
            // Closed as idle: made again.
            retire_idle(&mut table, peer);
        } else if self.shared.on_demand
            && table.links.get(&peer).is_some_and(Link::is_down)
            && ended(&table).is_some_and(|e| e < epoch)
        {
            // Gone before the group was opened: a new run of the peer, or
            // the same one connected again, is waited for.
            table.links.remove(&peer);
        }
        if !table.links.contains_key(&peer) && ended(&table).is_some_and(|e| epoch <= e) {
            return Handed::Unreachable;
        }
        if let Some(link) = table.links.get(&peer) {
            let queued = match item {
                Waiting::Send(_, item) => link.send(item),
                Waiting::Post(group, region) => {
                    link.post_recv(group, region);
                    !link.is_down()
                }
            };
            return if queued {
                Handed::Queued
            } else {
                Handed::Unreachable
            };
        }
        if !self.shared.on_demand || peer == self.shared.me {
            return Handed::Unreachable;
        }
        let queue = table.waiting.entry(peer).or_default();
        if queue.is_empty() {
            tokio::spawn(expire(Arc::clone(&self.shared), peer));
        }
        queue.push(item);
        drop(table);
        self.want(peer);
        Handed::Queued
    }

    /// Why `peers` refused this node's connections, or this node theirs.
    pub(crate) fn why_unreachable(&self, peers: &[NodeId]) -> Option<String> {
        let reasons = lock(&self.shared.refusals).reasons(peers, |p| self.shared.addr_of(p));
        (!reasons.is_empty()).then(|| reasons.join("; "))
    }

    /// Forget what waits for a connection for `group`, which ended — but
    /// its failure reports, which are what the peers learn its end from.
    pub(crate) fn release_waiting(&self, group: GroupId) {
        let report = |s: &Signal| matches!(s, Signal::Group(Control::Failed { .. }));
        for queue in lock(&self.shared.table).waiting.values_mut() {
            queue.retain(|w| match w {
                Waiting::Send(g, Outgoing::Signal(_, s) | Outgoing::Relay(_, s, _)) => {
                    *g != group || report(s)
                }
                Waiting::Send(g, _) | Waiting::Post(g, _) => *g != group,
            });
        }
    }

    /// Run `f` on every link.
    pub(crate) fn each_link(&self, mut f: impl FnMut(&Link)) {
        lock(&self.shared.table).links.values().for_each(&mut f);
    }

    /// Stop letting peers in and dialling them; resolves once the listener
    /// is closed, so that its address is free again (a node that failed to
    /// start, or shut down, can be started again at once at the same
    /// address).
    pub(crate) fn stop_listening(&self) -> impl Future<Output = ()> + Send + 'static {
        self.shared.stop.cancel();
        let accepting = lock(&self.accepting).take();
        async move {
            if let Some(task) = accepting {
                let _ = task.await;
            }
        }
    }

    /// Until `limit` has passed, wait for what waits for a connection made
    /// on demand (a failure report among it) to go out, as the node leaves.
    pub(crate) fn drained(&self, limit: Duration) -> impl Future<Output = ()> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        async move {
            let deadline = Instant::now() + limit;
            loop {
                let changed = shared.changed.notified();
                if lock(&shared.table).waiting.is_empty() {
                    return;
                }
                if tokio::time::timeout_at(deadline, changed).await.is_err() {
                    return;
                }
            }
        }
    }

    /// Stop letting peers in and dialling them; hand over every link.
    pub(crate) fn close(&self) -> Vec<Link> {
        self.shared.stop.cancel();
        lock(&self.shared.table)
            .links
            .drain()
            .map(|(_, l)| l)
            .collect()
    }
}

impl Shared {
    /// Where `peer` takes connections, if known.
    fn addr_of(&self, peer: NodeId) -> Option<SocketAddr> {
        lock(&self.book).get(&peer).copied()
    }

    /// With open membership: `peer` says it takes connections at `listen`.
    fn learn(&self, peer: NodeId, listen: Option<SocketAddr>) {
        let Some(listen) = listen else {
            return;
        };
        if let Some(old) = lock(&self.book).insert(peer, listen)
            && old != listen
        {
            tracing::info!(peer = peer.0, %old, new = %listen, "a peer takes connections at a new address");
            self.moved.notify_waiters();
        }
    }

    /// Let in an authenticated connection to `peer`'s run, from (or to)
    /// `addr`: start its link, replacing an older run's; returns the
    /// token cancelled when the new link goes down.
    fn let_in(
        self: &Arc<Self>,
        stream: TcpStream,
        peer: &Authenticated,
        addr: SocketAddr,
    ) -> Result<CancellationToken, String> {
        let id = peer.peer;
        let setup = &self.setup;
        if self.stop.is_cancelled() {
            // A peer that dials this node as it leaves (on demand, to pass
            // on a signal, say) hears its goodbye after the key agreement:
            // it takes the end for this node leaving, not failing. Nobody
            // here hears of the link.
            let (nobody, _) = tokio::sync::mpsc::unbounded_channel();
            let lowat = RecvLowat::of(&stream);
            let security = setup.security.for_connection(peer.link_secret);
            let link = Link::spawn(
                (id, peer.incarnation),
                stream,
                lowat,
                nobody,
                setup.config,
                security,
            );
            drop(link.close());
            return Err("the node is shutting down: said goodbye".to_owned());
        }
        let mut table = lock(&self.table);
        // Asked in the handshake already; asked again, as another
        // connection may have been let in since.
        table.admit(id, peer.incarnation)?;
        if let Some(name) = setup.congestion.as_deref()
            && let Err(reason) = link::set_congestion_control(&stream, name)
        {
            tracing::warn!(peer = id.0, %reason, "could not set the congestion control");
        }
        let lowat = RecvLowat::of(&stream);
        if let Some(early) = setup.early {
            link::limit_unsent(&stream, early.unsent_limit);
        }
        // The older connection's groups fail before the new one is up, and
        // the node hears it is up before anything arrives over it (its
        // link starts after) or is sent over it (the table is locked).
        if let Some(old) = table.links.remove(&id) {
            old.retire(&self.completions);
        }
        let _ = self.completions.send(Completion::PeerUp {
            node: id,
            incarnation: peer.incarnation,
            addr: Some(addr),
        });
        let mut link = Link::spawn(
            (id, peer.incarnation),
            stream,
            lowat,
            self.completions.clone(),
            setup.config,
            setup.security.for_connection(peer.link_secret),
        );
        let ended = link.ended();
        if self.on_demand {
            // A link its peer closed as idle leaves the table as it ends;
            // the end of any other is noted, for the groups opened since
            // to wait for a new connection.
            let (shared, ended) = (Arc::clone(self), ended.clone());
            let incarnation = peer.incarnation;
            let this = link.state();
            tokio::spawn(async move {
                ended.cancelled().await;
                let mut table = lock(&shared.table);
                let current = table.links.get(&id).filter(|l| l.is(&this));
                if current.is_none() {
                    // Retired as idle already (a group handed the peer
                    // something since: a new connection is on its way), or
                    // another connection took its place: its end says
                    // nothing of the peer.
                    tracing::trace!(peer = id.0, "a retired connection ended");
                } else if current.is_some_and(Link::is_idle) {
                    let kept = retire_idle(&mut table, id);
                    drop(table);
                    let _ = shared.completions.send(Completion::PeerIdle {
                        node: id,
                        incarnation,
                    });
                    if kept {
                        // A group here still waits for the peer's blocks.
                        shared.want(id);
                    }
                } else {
                    let epoch = table.epoch;
                    table.ended.insert(id, epoch);
                }
            });
        }
        if let Some(starting) = table.starting.as_mut() {
            starting.push((id, link.take_agreement()));
        }
        // What waited for the peer's first connection goes first.
        for item in table.waiting.remove(&id).unwrap_or_default() {
            match item {
                Waiting::Send(_, item) => {
                    link.send(item);
                }
                Waiting::Post(group, region) => link.post_recv(group, region),
            }
        }
        table.links.insert(id, link);
        table.known.insert(id, peer.incarnation);
        drop(table);
        self.changed.notify_waiters();
        Ok(ended)
    }
}

/// Keep a connection to `peer` (a member below this node) for as long as
/// the node runs: dial it, and dial it again whenever the connection
/// breaks.
async fn keep(shared: Arc<Shared>, peer: NodeId, generation: u64) {
    // On demand, a keeper ends once its connection was closed as idle.
    let current = || !shared.on_demand || lock(&shared.table).kept.get(&peer) == Some(&generation);
    let mut backoff = FIRST_DIAL_BACKOFF;
    loop {
        let dialled = connect::dial(
            (peer, || shared.addr_of(peer)),
            &shared.handshake,
            &shared.refusals,
            (&shared.stop, Some(&shared.moved)),
            backoff,
        )
        .await;
        let Some((stream, authenticated, addr)) = dialled else {
            return;
        };
        match shared.let_in(stream, &authenticated, addr) {
            Ok(ended) => {
                tokio::select! {
                    () = shared.stop.cancelled() => return,
                    () = ended.cancelled() => {}
                }
                if !current() {
                    return;
                }
                let left = lock(&shared.table)
                    .links
                    .get(&peer)
                    .is_some_and(Link::peer_left);
                backoff = if left {
                    LEFT_REDIAL_BACKOFF
                } else {
                    REDIAL_BACKOFF
                };
            }
            Err(reason) => {
                tracing::debug!(peer = peer.0, %reason, "dialled peer not let in");
                tokio::select! {
                    () = shared.stop.cancelled() => return,
                    () = tokio::time::sleep(backoff.1) => {}
                }
            }
        }
    }
}

/// On demand: drop the link to `peer`, closed as idle; the receives posted
/// on it wait for the next connection (a group here may have posted one as
/// the peer closed it). Whether any did.
fn retire_idle(table: &mut Table, peer: NodeId) -> bool {
    let Some(link) = table.links.remove(&peer) else {
        return false;
    };
    let posted = link.take_posted();
    if posted.is_empty() {
        return false;
    }
    let queue = table.waiting.entry(peer).or_default();
    queue.extend(
        posted
            .into_iter()
            .map(|(group, region)| Waiting::Post(group, region)),
    );
    true
}

/// On demand: close the connection to `peer` (below this node, its
/// keeper) once no group of this node has needed it for `timeout`.
async fn close_when_idle(shared: Arc<Shared>, peer: NodeId, timeout: Duration) {
    tokio::select! {
        () = shared.stop.cancelled() => return,
        () = tokio::time::sleep(timeout) => {}
    }
    let mut table = lock(&shared.table);
    let idle = !table.claims.contains_key(&peer)
        && !table.waiting.contains_key(&peer)
        && table.links.get(&peer).is_some_and(|l| !l.is_down());
    if !idle {
        return;
    }
    table.kept.remove(&peer);
    if let Some(link) = table.links.remove(&peer) {
        tracing::debug!(peer = peer.0, "closing an idle connection");
        let _ = shared.completions.send(Completion::PeerIdle {
            node: peer,
            incarnation: link.incarnation(),
        });
        link.close_idle();
    }
}

/// On demand: once the connect timeout has passed since something began
/// waiting for `peer`'s first connection, and it still waits, the peer is
/// unreachable for the groups it waited for.
async fn expire(shared: Arc<Shared>, peer: NodeId) {
    tokio::select! {
        () = shared.stop.cancelled() => return,
        () = tokio::time::sleep(shared.connect_timeout) => {}
    }
    let (waited, incarnation) = {
        let mut table = lock(&shared.table);
        let waited = table.waiting.remove(&peer).unwrap_or_default();
        (waited, table.known.get(&peer).copied().unwrap_or(0))
    };
    // A node leaving waits for what waits (`PeerSet::drained`).
    shared.changed.notify_waiters();
    let mut groups: Vec<GroupId> = waited
        .iter()
        .map(|w| match w {
            Waiting::Send(g, _) | Waiting::Post(g, _) => *g,
        })
        .collect();
    groups.sort_unstable();
    groups.dedup();
    if groups.is_empty() {
        return;
    }
    let why = lock(&shared.refusals).explain(&[peer], |p| shared.addr_of(p));
    let reason = format!(
        "not connected within the connect timeout of {:?}{why}",
        shared.connect_timeout
    );
    // Its groups fail, naming it, with the reason; a later connection of
    // it is a peer up as any.
    let _ = shared.completions.send(Completion::PeerDown {
        node: peer,
        incarnation,
        reason,
    });
}

/// With open membership: tell `peer` (above this node, so its keeper)
/// where this node takes connections, by one authenticated connection
/// closed at once — unless the peer has dialled it already. Gives up after
/// the connect timeout: a peer not running then learns nothing, and dials
/// the address its own list has.
async fn introduce(shared: Arc<Shared>, peer: NodeId) {
    let connected = || {
        lock(&shared.table)
            .links
            .get(&peer)
            .is_some_and(|l| !l.is_down())
    };
    let mut backoff = FIRST_DIAL_BACKOFF.0;
    let deadline = Instant::now() + shared.connect_timeout;
    while !connected() && Instant::now() < deadline && !shared.stop.is_cancelled() {
        let attempt = async {
            let addr = shared.addr_of(peer)?;
            let mut stream = TcpStream::connect(addr).await.ok()?;
            shared
                .handshake
                .initiate_keyed(&mut stream, peer)
                .await
                .ok()
        };
        if tokio::time::timeout_at(deadline, attempt)
            .await
            .ok()
            .flatten()
            .is_some()
        {
            tracing::debug!(peer = peer.0, "introduced this node");
            return;
        }
        tokio::select! {
            () = shared.stop.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(FIRST_DIAL_BACKOFF.1);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
