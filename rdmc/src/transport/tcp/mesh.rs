//! Building the mesh: one authenticated TCP connection between every pair of
//! nodes of the cluster (seed 001 Sec. 2). A node dials every node of lower
//! rank and accepts the others; each connection is authenticated with the
//! cluster key before it is used. Connections that fail authentication —
//! strangers, garbage, the wrong cluster — are dropped with a logged reason,
//! for the node's whole lifetime, without stalling anything else.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::handshake::Handshake;
use crate::ids::NodeId;

/// What a node needs to join the mesh.
#[derive(Debug)]
pub(crate) struct MeshConfig {
    pub(crate) me: NodeId,
    pub(crate) members: Vec<SocketAddr>,
    pub(crate) listener: TcpListener,
    pub(crate) handshake: Arc<Handshake>,
    pub(crate) connect_timeout: Duration,
}

/// Why the mesh could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MeshError {
    #[error("node {me} is not in a cluster of {members}")]
    NotAMember { me: NodeId, members: usize },
    #[error("no connection to node(s) {missing:?} within {timeout:?}")]
    TimedOut {
        missing: Vec<NodeId>,
        timeout: Duration,
    },
}

/// The established connections, one per peer, and the guard that keeps the
/// listener turning strangers away until the node goes.
pub(crate) struct Mesh {
    pub(crate) peers: HashMap<NodeId, TcpStream>,
    pub(crate) _acceptor: DropGuard,
}

/// Connect to every other member.
pub(crate) async fn establish(config: MeshConfig) -> Result<Mesh, MeshError> {
    let n = config.members.len();
    let me = config.me;
    if me.index() >= n {
        return Err(MeshError::NotAMember { me, members: n });
    }
    let (found, mut arrivals) = mpsc::unbounded_channel::<(NodeId, TcpStream)>();
    let stop = CancellationToken::new();
    tokio::spawn(accept_loop(
        config.listener,
        Arc::clone(&config.handshake),
        me,
        found.clone(),
        stop.clone(),
    ));
    for peer in (0..me.0).map(NodeId) {
        tokio::spawn(dial(
            config.members[peer.index()],
            Arc::clone(&config.handshake),
            peer,
            found.clone(),
            stop.clone(),
        ));
    }
    drop(found);
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
                let missing = (0..n as u32)
                    .map(NodeId)
                    .filter(|p| *p != me && !peers.contains_key(p))
                    .collect();
                return Err(MeshError::TimedOut {
                    missing,
                    timeout: config.connect_timeout,
                });
            }
        }
    }
    Ok(Mesh {
        peers,
        _acceptor: stop.drop_guard(),
    })
}

/// Accept connections until stopped: authenticate each in its own task and
/// hand over the ones from higher-ranked members.
async fn accept_loop(
    listener: TcpListener,
    handshake: Arc<Handshake>,
    me: NodeId,
    found: mpsc::UnboundedSender<(NodeId, TcpStream)>,
    stop: CancellationToken,
) {
    loop {
        let (mut stream, addr) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let handshake = Arc::clone(&handshake);
        let found = found.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let outcome = tokio::select! {
                _ = stop.cancelled() => return,
                r = handshake.accept(&mut stream) => r,
            };
            match outcome {
                Ok(peer) if peer > me => {
                    let _ = stream.set_nodelay(true);
                    let _ = found.send((peer, stream));
                }
                Ok(peer) => {
                    tracing::warn!(%addr, peer = peer.0, "dropped peer: lower ranks are dialled, not accepted");
                }
                Err(e) => tracing::warn!(%addr, reason = %e, "dropped peer"),
            }
        });
    }
}

/// Dial `peer` until connected and authenticated, or stopped.
async fn dial(
    addr: SocketAddr,
    handshake: Arc<Handshake>,
    peer: NodeId,
    found: mpsc::UnboundedSender<(NodeId, TcpStream)>,
    stop: CancellationToken,
) {
    let mut backoff = Duration::from_millis(10);
    loop {
        let attempt = async {
            let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
            stream.set_nodelay(true).map_err(|e| e.to_string())?;
            handshake
                .initiate(&mut stream, peer)
                .await
                .map_err(|e| e.to_string())?;
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
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
        }
    }
}
