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
//! Only members of higher id than this node are let in this way (they
//! dial); a restarted member of lower id would need the members above it to
//! dial it, which this node does not do yet.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
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
    let mut token = [0u8; 16];
    rand::rng().fill_bytes(&mut token);
    token
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
    /// Whether `peer`'s run `incarnation` may come in.
    fn admit(&self, me: NodeId, peer: NodeId, incarnation: u64) -> Result<(), String> {
        if !self.started {
            return Ok(());
        }
        if peer <= me {
            return Err(format!("node {peer} is dialled by this node, not accepted"));
        }
        match self.known.get(&peer) {
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
}

/// The table of runs, shared by the handshake's vet and the acceptor.
pub(crate) type RunTable = Arc<Mutex<Runs>>;

fn lock(runs: &Mutex<Runs>) -> MutexGuard<'_, Runs> {
    runs.lock().unwrap_or_else(|e| e.into_inner())
}

/// The vet of node `me`'s handshakes: every run while the node starts, then
/// only newer runs of members above it.
pub(crate) fn vet(me: NodeId, runs: &RunTable) -> Vet {
    let runs = Arc::clone(runs);
    Arc::new(move |peer, incarnation| lock(&runs).admit(me, peer, incarnation))
}

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

/// Start taking restarted members on `listener`, authenticated by
/// `handshake`, now that the node started with the peers' runs `known`;
/// until the guard returned is dropped.
pub(crate) fn start(
    rejoin: Rejoin,
    (listener, handshake): (Arc<TcpListener>, Arc<Handshake>),
    known: HashMap<NodeId, u64>,
) -> DropGuard {
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
            let admitted = {
                let mut runs = lock(&rejoin.runs);
                let admitted = runs.admit(rejoin.me, peer.peer, peer.incarnation);
                if admitted.is_ok() {
                    runs.known.insert(peer.peer, peer.incarnation);
                    runs.failed.remove(&peer.peer);
                }
                admitted
            };
            match admitted {
                Ok(()) => {
                    tokio::spawn(let_in(Arc::clone(&rejoin), stream, peer));
                }
                Err(reason) => tracing::warn!(%addr, %reason, "dropped peer"),
            }
        })
    };
    tokio::spawn(connect::accept_loop(
        listener,
        handshake,
        Arc::new(Mutex::new(Refusals::default())),
        on_peer,
        (stop.clone(), CancellationToken::new()),
    ));
    stop.drop_guard()
}

/// Let `peer`'s newer run in (see the module's documentation); on a
/// failure, the run may try again.
async fn let_in(rejoin: Arc<Rejoin>, stream: TcpStream, peer: Authenticated) {
    let (node, incarnation) = (peer.peer, peer.incarnation);
    tracing::info!(peer = node.0, incarnation, "a restarted member dialled");
    if let Err(why) = rendezvous(&rejoin, stream, peer).await {
        tracing::warn!(peer = node.0, incarnation, reason = %why, "a restarted member was not let in");
        lock(&rejoin.runs).failed.insert(node, incarnation);
        if let Some(commands) = rejoin.commands.upgrade() {
            let _ = commands.send(Cmd::Extra(OfiCmd::Cancel {
                peer: node,
                incarnation,
            }));
        }
    }
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
    let (done, connected) = oneshot::channel();
    let commands = rejoin
        .commands
        .upgrade()
        .ok_or("the node is shutting down")?;
    // Before the swap: the peer may connect as soon as it has our address.
    commands
        .send(Cmd::Extra(OfiCmd::Join {
            peer: node,
            incarnation,
            addr: rejoin.members.get(node.index()).copied(),
            token,
            done,
        }))
        .map_err(|_| "the node is shutting down")?;
    drop(commands);
    let deadline = Instant::now() + timeout;
    let joined = async {
        let stream = mesh.peers.get_mut(&node).expect("the one connection");
        tokio::time::timeout(rejoin.handshake_timeout, swap(stream, &rejoin.name, &token))
            .await
            .map_err(|_| "the fabric address exchange timed out".to_owned())?
            .map_err(|e| format!("the fabric address exchange: {e}"))?;
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
