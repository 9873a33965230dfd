//! The agreement that ends the mesh's formation ([`Formation`]): every
//! member says it is connected to every member (`Ready`), then that every
//! member said so (`Go`), or gives up naming whom it blames (`Fail`).
//!
//! A transport that sets up more after the mesh (the `ofi` transport's
//! fabric endpoints, the `rdma` transport's queue pairs) runs the same
//! agreement again over the mesh's connections ([`super::Mesh::confirm`]),
//! `Ready` then meaning "my part of the setup is done": so either every
//! member starts, or every member that fails names the member that made the
//! setup fail — never a member that only gave up because of it.

#![cfg_attr(not(any(feature = "ofi", feature = "rdma")), allow(dead_code))]

use std::time::Duration;

use crate::collections::HashMap;
use crate::transport::socket::{OwnedReadHalf, OwnedWriteHalf, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::formation::{Direction, Message};
use super::{Arrival, MeshError};
use crate::ids::NodeId;

/// An authenticated connection once the agreement is over: the stream and
/// the formation messages' two directions (their sequence numbers go on in
/// a later agreement over the same connection).
#[derive(Debug)]
pub(super) struct Link {
    pub(super) stream: TcpStream,
    /// Our messages to the peer.
    pub(super) out: Direction,
    /// The peer's messages to us.
    pub(super) inbound: Direction,
}

/// What a connection's reader reports.
#[derive(Debug)]
pub(super) enum Heard {
    /// A formation message other than `Go`.
    Message(NodeId, Message),
    /// The peer's `Go`, its last formation message: the read half,
    /// positioned right after it, and the direction of its messages.
    Done(NodeId, OwnedReadHalf, Direction),
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
    /// Its `Go` arrived: the read half and the direction of its messages,
    /// back from the reader.
    done: Option<(OwnedReadHalf, Direction)>,
    /// Its reader ended without a `Go`.
    lost: bool,
}

/// A node's mesh failed: the error, and the members it blames (told to
/// every peer in a `Fail`).
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) error: MeshError,
    pub(super) blame: Vec<NodeId>,
}

/// How long a node that gives up waits for its peers to close their ends
/// after its `Fail`, so that closing its own with their messages unread
/// (which resets the connection) cannot discard the `Fail` before they read
/// it.
const LINGER: Duration = Duration::from_millis(250);

/// One node's view of the mesh's formation: a small protocol over the
/// authenticated connections, each message MAC'd with the connection's
/// session key ([`formation`](super::formation)), so that every member that fails names the
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
pub(super) struct Formation {
    me: NodeId,
    n: usize,
    /// How many peers to be connected to before `Ready`: every other
    /// member, or the one a running member lets back in
    /// ([`Formation::with_peers`]).
    want: usize,
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
    /// Node `me` of `n` starts an agreement it gives up at `deadline` at
    /// the latest (`connect_timeout` from its start), waiting `margin` for a
    /// correct member's late message; and the channel its connections'
    /// readers report to.
    pub(super) fn new(
        (me, n): (NodeId, usize),
        deadline: Instant,
        connect_timeout: Duration,
        margin: Duration,
        stop: CancellationToken,
    ) -> (Self, mpsc::UnboundedReceiver<Heard>) {
        let (heard, hearing) = mpsc::unbounded_channel();
        let formation = Formation {
            me,
            n,
            want: n.saturating_sub(1),
            deadline,
            connect_timeout,
            margin,
            phase: Phase::Connecting,
            peers: HashMap::default(),
            heard,
            stop,
        };
        (formation, hearing)
    }

    /// The same, `Ready` once connected to `want` peers rather than to
    /// every other member: a running member agrees with a restarted one
    /// over their one connection, while the restarted one agrees with
    /// every member.
    pub(super) fn with_peers(mut self, want: usize) -> Self {
        self.want = want;
        self
    }

    /// A new authenticated connection from the mesh's dial or acceptor.
    async fn arrived(&mut self, (peer, stream, key): Arrival) -> Result<(), Failure> {
        let link = Link {
            stream,
            out: Direction::new(key.clone(), self.me, peer),
            inbound: Direction::new(key, peer, self.me),
        };
        self.connected(peer, link).await
    }

    /// An authenticated connection to `peer`: send our `Info` and start
    /// reading its messages.
    pub(super) async fn connected(&mut self, peer: NodeId, link: Link) -> Result<(), Failure> {
        let Link {
            stream,
            out,
            inbound,
        } = link;
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
            inbound,
            self.n,
            self.heard.clone(),
            self.stop.clone(),
        ));
        self.peers.insert(
            peer,
            Peer {
                writer,
                out,
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
            Heard::Done(peer, read, inbound) => {
                let p = self.peer(peer);
                p.ready = true;
                p.done = Some((read, inbound));
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

    /// Run the agreement to its end: the connections, once every member's
    /// `Go` is in, or the failure (told to every peer first). `arrivals`
    /// brings the mesh's new connections (none in a later agreement);
    /// `complete` is cancelled once every member is connected; `why`
    /// explains why members never connected.
    pub(super) async fn run(
        mut self,
        mut hearing: mpsc::UnboundedReceiver<Heard>,
        arrivals: &mut mpsc::UnboundedReceiver<Arrival>,
        complete: &CancellationToken,
        why: &(dyn Fn(&[NodeId]) -> String + Sync),
    ) -> Result<HashMap<NodeId, Link>, MeshError> {
        let failure = loop {
            // First of all, so that a cluster of one is up at once.
            match self.advance(complete).await {
                Ok(Some(links)) => return Ok(links),
                Ok(None) => {}
                Err(failure) => break failure,
            }
            let wake = self.wake();
            let step = tokio::select! {
                Some(arrival) = arrivals.recv() => self.arrived(arrival).await,
                Some(event) = hearing.recv() => self.heard(event),
                () = tokio::time::sleep_until(wake) => Err(self.timed_out(why)),
            };
            if let Err(failure) = step {
                break failure;
            }
        };
        self.give_up(&failure.blame, &mut hearing).await;
        self.stop.cancel();
        Err(failure.error)
    }

    /// Give up at once, blaming `blame`: tell every peer, then close.
    #[cfg(any(feature = "ofi", feature = "rdma", test))]
    pub(super) async fn abandon(
        mut self,
        blame: &[NodeId],
        mut hearing: mpsc::UnboundedReceiver<Heard>,
    ) {
        self.give_up(blame, &mut hearing).await;
        self.stop.cancel();
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
    ) -> Result<Option<HashMap<NodeId, Link>>, Failure> {
        if self.phase == Phase::Connecting && self.peers.len() == self.want {
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
                    let (read, inbound) = p.done.expect("checked above");
                    let stream = read
                        .reunite(p.writer)
                        .expect("the halves of one connection");
                    let link = Link {
                        stream,
                        out: p.out,
                        inbound,
                    };
                    (peer, link)
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
    pub(super) async fn give_up(
        &mut self,
        blame: &[NodeId],
        hearing: &mut mpsc::UnboundedReceiver<Heard>,
    ) {
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
                    Heard::Done(peer, read, inbound) => {
                        self.peer(peer).done = Some((read, inbound));
                    }
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
                let _ = heard.send(Heard::Done(peer, read, incoming));
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
