//! The authenticated mesh: one TCP connection between every pair of nodes
//! of the cluster, each authenticated with the cluster key ([`handshake`])
//! before it is used. The `tcp` transport carries all its traffic over the
//! mesh; the `ofi` transport uses it as the rendezvous where nodes swap
//! their fabric addresses.
//!
//! A node dials every node of lower rank and accepts the others.
//! Connections that fail authentication — strangers, garbage, the wrong
//! cluster — are dropped with a logged reason, for the node's whole
//! lifetime, without stalling anything else.

pub(crate) mod handshake;
mod key;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use self::handshake::Handshake;
pub(crate) use self::key::ClusterDigest;
pub use self::key::{ClusterKey, ClusterKeyError};
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
}

impl MeshPurpose {
    /// How a member's address is written in the cluster digest.
    fn digest_entry(self, member: &SocketAddr) -> String {
        match self {
            MeshPurpose::Tcp => member.to_string(),
            #[cfg(any(feature = "ofi", test))]
            MeshPurpose::OfiRendezvous => format!("ofi:{member}"),
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
}

/// Why the mesh could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MeshError {
    #[error("node {me} is not in a cluster of {members}")]
    NotAMember { me: NodeId, members: usize },
    #[error("listening: {0}")]
    Listen(#[source] std::io::Error),
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
    })
    .await
}

/// Connect to every other member.
async fn establish(config: MeshConfig) -> Result<Mesh, MeshError> {
    let n = config.members.len();
    let me = config.me;
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
