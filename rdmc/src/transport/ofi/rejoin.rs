//! The rendezvous after start: a member that restarts (a newer run, at the
//! same rendezvous address) is let back in without any other member
//! restarting.
//!
//! A running node keeps its rendezvous listener and its passive endpoint
//! open. The restarted member starts as any member does: it dials the
//! members below it at their rendezvous addresses. Each running member
//! authenticates the connection with the cluster key and lets it in only
//! from a newer run of that member than the last it saw (the handshake's
//! vet, and again once authenticated), then answers the restarted
//! member's mesh agreement over that one connection
//! ([`mesh::join_one`]), swaps its fabric address and a fresh token with
//! it ([`swap`]), and tells its driver to accept the new run's endpoints
//! ([`OfiCmd::Join`]): the driver reports the older run down and, once
//! both endpoints are connected, the new run up. Last, it answers the
//! restarted member's second agreement ([`Mesh::confirm`]): the restarted
//! member starts once every member it agreed with has connected it.
//!
//! A restarted member of higher id dials this node, as at any start; one
//! of lower id waits for the members above it to dial it, as at any
//! start: this node dials each member below it whose run its driver
//! reported down, with backoff, until a newer run answers, and connects
//! to that run's passive endpoint itself.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::driver::OfiCmd;
use crate::ids::NodeId;
use crate::transport::fabric_driver::Cmd;
use crate::transport::mesh::connect::{self, Refusals};
use crate::transport::mesh::handshake::{Authenticated, Handshake, Vet};
use crate::transport::mesh::{self, Mesh, MeshError};

/// Longest fabric address accepted from a peer.
pub(crate) const MAX_NAME: usize = 256;

/// Swap (fabric address, token) with a peer over its authenticated stream.
pub(crate) async fn swap(
    stream: &mut TcpStream,
    name: &[u8],
    token: &[u8; 16],
) -> std::io::Result<(Vec<u8>, [u8; 16])> {
    let mut out = Vec::with_capacity(2 + name.len() + 16);
    out.extend_from_slice(&(name.len() as u16).to_be_bytes());
    out.extend_from_slice(name);
    out.extend_from_slice(token);
    stream.write_all(&out).await?;
    let len = stream.read_u16().await? as usize;
    if len == 0 || len > MAX_NAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("fabric address of {len} bytes"),
        ));
    }
    let mut theirs = vec![0u8; len];
    stream.read_exact(&mut theirs).await?;
    let mut their_token = [0u8; 16];
    stream.read_exact(&mut their_token).await?;
    Ok((theirs, their_token))
}

/// A fresh random token.
pub(crate) fn fresh_token() -> [u8; 16] {
    crate::transport::crypto::random()
}

/// The runs of each peer this node has seen, and which it lets in.
#[derive(Debug, Default)]
pub(crate) struct Runs {
    /// Whether the node has started: until then every run is let in (the
    /// mesh's formation decides).
    started: bool,
    /// The newest run of each peer seen.
    known: HashMap<NodeId, u64>,
    /// The peers whose newest run's rendezvous failed: the same run may
    /// try again.
    failed: HashMap<NodeId, u64>,
}

impl Runs {
    /// Whether `peer`'s run `incarnation` may come in (dialled or
    /// accepted).
    fn admit(&self, me: NodeId, peer: NodeId, incarnation: u64) -> Result<(), String> {
        if !self.started {
            return Ok(());
        }
        match self.known.get(&peer) {
            _ if peer == me => Err(format!("node {peer} is this node")),
            None => Err(format!(
                "node {peer} is not a member of this node's cluster"
            )),
            Some(&known) if incarnation > known => Ok(()),
            Some(&known) if incarnation == known && self.failed.get(&peer) == Some(&known) => {
                Ok(())
            }
            Some(&known) => Err(format!(
                "run {incarnation} of node {peer} is over or connected: run {known} was seen"
            )),
        }
    }

    /// Let `peer`'s run `incarnation` in, if it may come in.
    fn let_in(&mut self, me: NodeId, peer: NodeId, incarnation: u64) -> Result<(), String> {
        self.admit(me, peer, incarnation)?;
        self.known.insert(peer, incarnation);
        self.failed.remove(&peer);
        Ok(())
    }
}

/// The table of runs, shared by the handshake's vet and the acceptor.
pub(crate) type RunTable = Arc<Mutex<Runs>>;

fn lock(runs: &Mutex<Runs>) -> MutexGuard<'_, Runs> {
    runs.lock().unwrap_or_else(|e| e.into_inner())
}

/// The vet of node `me`'s handshakes: every run while the node starts, then
/// only newer runs of members than those seen.
pub(crate) fn vet(me: NodeId, runs: &RunTable) -> Vet {
    let runs = Arc::clone(runs);
    Arc::new(move |peer, incarnation| lock(&runs).admit(me, peer, incarnation))
}

/// How this node dials a member below it whose run went down, until a
/// newer run answers.
const REDIAL_BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(1));

/// What the acceptor of restarted members needs.
#[derive(Debug)]
pub(crate) struct Rejoin {
    pub(crate) me: NodeId,
    /// The members' rendezvous addresses.
    pub(crate) members: Vec<SocketAddr>,
    /// This node's passive endpoint's fabric address.
    pub(crate) name: Vec<u8>,
    pub(crate) connect_timeout: Duration,
    pub(crate) handshake_timeout: Duration,
    /// How late a correct member's agreement message may be.
    pub(crate) margin: Duration,
    pub(crate) runs: RunTable,
    /// The driver's commands (weak: the driver ends when the transport
    /// is dropped).
    pub(crate) commands: mpsc::WeakUnboundedSender<Cmd<OfiCmd>>,
}

/// The runs of peers that went down, as the driver tells them.
pub(crate) type Downs = mpsc::UnboundedReceiver<(NodeId, u64)>;

/// Start taking restarted members on `listener`, authenticated by
/// `handshake`, now that the node started with the peers' runs `known`,
/// and dialling each member below this node whose run `downs` tells gone,
/// until a newer run answers; until the guard returned is dropped, when
/// the task returned ends (the listener closed).
pub(crate) fn start(
    rejoin: Rejoin,
    (listener, handshake): (Arc<TcpListener>, Arc<Handshake>),
    (known, downs): (HashMap<NodeId, u64>, Downs),
) -> (DropGuard, JoinHandle<()>) {
    {
        let mut runs = lock(&rejoin.runs);
        runs.known = known;
        runs.started = true;
    }
    let stop = CancellationToken::new();
    let rejoin = Arc::new(rejoin);
    let on_peer: connect::OnPeer = {
        let rejoin = Arc::clone(&rejoin);
        Arc::new(move |stream, peer: Authenticated, addr| {
            let admitted = if peer.peer < rejoin.me {
                Err(format!(
                    "node {} is dialled by this node, not accepted",
                    peer.peer
                ))
            } else {
                lock(&rejoin.runs).let_in(rejoin.me, peer.peer, peer.incarnation)
            };
            match admitted {
                Ok(()) => {
                    tokio::spawn(let_in(Arc::clone(&rejoin), stream, peer));
                }
                Err(reason) => tracing::warn!(%addr, %reason, "dropped peer"),
            }
        })
    };
    let accepting = connect::accept_loop(
        listener,
        Arc::clone(&handshake),
        Arc::new(Mutex::new(Refusals::default())),
        on_peer,
        (stop.clone(), CancellationToken::new()),
    );
    let dialling = redial_gone(rejoin, handshake, downs, stop.clone());
    let task = tokio::spawn(async move {
        tokio::join!(accepting, dialling);
    });
    (stop.drop_guard(), task)
}

/// Dial each member below this node whose run went down (one dialler per
/// member at a time), until `stop`.
async fn redial_gone(
    rejoin: Arc<Rejoin>,
    handshake: Arc<Handshake>,
    mut downs: Downs,
    stop: CancellationToken,
) {
    let dialling = Arc::new(Mutex::new(std::collections::HashSet::new()));
    loop {
        let (peer, _) = tokio::select! {
            _ = stop.cancelled() => return,
            down = downs.recv() => match down {
                Some(down) => down,
                None => return,
            },
        };
        let fresh = peer < rejoin.me
            && dialling
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(peer);
        if fresh {
            let (rejoin, handshake) = (Arc::clone(&rejoin), Arc::clone(&handshake));
            let (stop, dialling) = (stop.clone(), Arc::clone(&dialling));
            tokio::spawn(async move {
                redial(&rejoin, &handshake, peer, &stop).await;
                dialling
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&peer);
            });
        }
    }
}

/// Dial `peer` until a newer run of it answers and is let in (or `stop`).
async fn redial(
    rejoin: &Arc<Rejoin>,
    handshake: &Handshake,
    peer: NodeId,
    stop: &CancellationToken,
) {
    let refusals = Mutex::new(Refusals::default());
    let addr = || rejoin.members.get(peer.index()).copied();
    loop {
        let Some((stream, them, _)) = connect::dial(
            (peer, addr),
            handshake,
            &refusals,
            (stop, None),
            REDIAL_BACKOFF,
        )
        .await
        else {
            return;
        };
        let admitted = lock(&rejoin.runs).let_in(rejoin.me, peer, them.incarnation);
        match admitted {
            Ok(()) if let_in(Arc::clone(rejoin), stream, them).await => return,
            Ok(()) => {}
            Err(reason) => tracing::debug!(peer = peer.0, %reason, "dialled a peer"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            () = tokio::time::sleep(REDIAL_BACKOFF.1) => {}
        }
    }
}

/// Let `peer`'s newer run in (see the module's documentation): whether it
/// is; on a failure, the run may try again.
async fn let_in(rejoin: Arc<Rejoin>, stream: TcpStream, peer: Authenticated) -> bool {
    let (node, incarnation) = (peer.peer, peer.incarnation);
    tracing::info!(peer = node.0, incarnation, "a restarted member connected");
    let Err(why) = rendezvous(&rejoin, stream, peer).await else {
        return true;
    };
    tracing::warn!(peer = node.0, incarnation, reason = %why, "a restarted member was not let in");
    lock(&rejoin.runs).failed.insert(node, incarnation);
    if let Some(commands) = rejoin.commands.upgrade() {
        let _ = commands.send(Cmd::Extra(OfiCmd::Cancel {
            peer: node,
            incarnation,
        }));
    }
    false
}

/// Tell the driver to let `node`'s run `incarnation` in (see
/// [`OfiCmd::Join`]): whether its endpoints connected, when they have.
fn join(
    rejoin: &Rejoin,
    (node, incarnation): (NodeId, u64),
    token: [u8; 16],
    dial: Option<(Vec<u8>, [u8; 16])>,
) -> Result<oneshot::Receiver<Result<(), String>>, String> {
    let (done, connected) = oneshot::channel();
    let commands = rejoin
        .commands
        .upgrade()
        .ok_or("the node is shutting down")?;
    commands
        .send(Cmd::Extra(OfiCmd::Join {
            peer: node,
            incarnation,
            addr: rejoin.members.get(node.index()).copied(),
            token,
            dial,
            done,
        }))
        .map_err(|_| "the node is shutting down")?;
    Ok(connected)
}

/// The steps of [`let_in`].
async fn rendezvous(rejoin: &Rejoin, stream: TcpStream, peer: Authenticated) -> Result<(), String> {
    let (node, incarnation) = (peer.peer, peer.incarnation);
    let timeout = rejoin.connect_timeout;
    let mut mesh = mesh::join_one(
        (rejoin.me, rejoin.members.len()),
        (node, incarnation, stream, peer.key),
        timeout,
        rejoin.margin,
    )
    .await
    .map_err(|e| format!("agreeing on the rendezvous: {e}"))?;
    let token = fresh_token();
    // A peer above connects to us as soon as it has our address: the
    // driver expects it first. We connect to a peer below once we have
    // its address.
    let dials = node < rejoin.me;
    let mut connected = if dials {
        None
    } else {
        Some(join(rejoin, (node, incarnation), token, None)?)
    };
    let deadline = Instant::now() + timeout;
    let joined = async {
        let stream = mesh.peers.get_mut(&node).expect("the one connection");
        let theirs =
            tokio::time::timeout(rejoin.handshake_timeout, swap(stream, &rejoin.name, &token))
                .await
                .map_err(|_| "the fabric address exchange timed out".to_owned())?
                .map_err(|e| format!("the fabric address exchange: {e}"))?;
        let connected = match connected.take() {
            Some(connected) => connected,
            None => join(rejoin, (node, incarnation), token, Some(theirs))?,
        };
        tokio::time::timeout_at(deadline, connected)
            .await
            .map_err(|_| format!("its endpoints did not connect within {timeout:?}"))?
            .map_err(|_| "the node is shutting down".to_owned())?
    };
    if let Err(why) = joined.await {
        abandon(mesh, deadline, timeout, node).await;
        return Err(why);
    }
    mesh.confirm(deadline, timeout)
        .await
        .map_err(|e: MeshError| format!("confirming its start: {e}"))
}

/// Tell the restarted member its start fails because of it.
async fn abandon(mut mesh: Mesh, deadline: Instant, timeout: Duration, node: NodeId) {
    mesh.abandon(deadline, timeout, &[node]).await;
}
