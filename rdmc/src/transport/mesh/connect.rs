//! Connections of the mesh, one at a time: accepting them (a bounded number
//! of handshakes at once, silent ones let go), dialling a member until it
//! answers, and remembering why connections were refused, so that a peer
//! that never connects can be explained. Both the mesh's formation
//! ([`bring_up`](super::bring_up)) and the `tcp` transport's peer set use
//! them.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::collections::HashMap;
use crate::transport::socket::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::handshake::{Authenticated, Handshake, HandshakeError};
use crate::ids::NodeId;

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
pub(crate) struct Refusals {
    /// Per member dialled: why, and whether it got as far as the handshake.
    dialled: HashMap<NodeId, (String, bool)>,
    pub(super) incoming: Vec<String>,
    /// When a refused connection was last logged as a warning, and how
    /// many were refused since without one: a flood of garbage gets one
    /// warning a second, not one per connection.
    pub(super) warned: Option<(Instant, u64)>,
}

/// The least time between two warnings about refused connections.
pub(crate) const REFUSAL_WARNING_INTERVAL: Duration = Duration::from_secs(1);

/// The most distinct reasons for refused incoming connections kept.
const INCOMING_REASONS_KEPT: usize = 3;

impl Refusals {
    /// A dial of `peer` failed: connecting (`handshake` false) or in the
    /// handshake. A handshake's reason says more (another key, another
    /// member list) than a later refused connection — the peer gave up and
    /// closed its listener —, so it is kept.
    pub(crate) fn dial_failed(this: &Mutex<Self>, peer: NodeId, reason: String, handshake: bool) {
        let mut this = this.lock().unwrap_or_else(|e| e.into_inner());
        let keep = this.dialled.get(&peer).is_some_and(|(_, h)| *h) && !handshake;
        if !keep {
            this.dialled.insert(peer, (reason, handshake));
        }
    }

    pub(crate) fn refused(refusals: &Mutex<Self>, addr: SocketAddr, reason: String) {
        let mut this = refusals.lock().unwrap_or_else(|e| e.into_inner());
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
        drop(this);
        Self::remember(refusals, addr, reason);
    }

    /// Keep `reason` for `addr` among the incoming refusals, without a log.
    pub(crate) fn remember(this: &Mutex<Self>, addr: SocketAddr, reason: String) {
        let mut this = this.lock().unwrap_or_else(|e| e.into_inner());
        let line = format!("refused a connection from {addr}: {reason}");
        // Keep one entry per reason (the latest address), the newest last.
        this.incoming
            .retain(|old| !old.ends_with(&format!(": {reason}")));
        this.incoming.push(line);
        if this.incoming.len() > INCOMING_REASONS_KEPT {
            this.incoming.remove(0);
        }
    }

    /// The reasons that concern `missing`, as one line ("" when none);
    /// `addr_of` says where each peer was dialled.
    pub(crate) fn explain(
        &self,
        missing: &[NodeId],
        addr_of: impl Fn(NodeId) -> Option<SocketAddr>,
    ) -> String {
        let parts = self.reasons(missing, addr_of);
        if parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", parts.join("; "))
        }
    }

    /// The reasons that concern `missing`: why each refused this node's
    /// dial, and why this node refused the latest connections.
    pub(crate) fn reasons(
        &self,
        missing: &[NodeId],
        addr_of: impl Fn(NodeId) -> Option<SocketAddr>,
    ) -> Vec<String> {
        let mut parts: Vec<String> = missing
            .iter()
            .filter_map(|&p| {
                let (reason, _) = self.dialled.get(&p)?;
                Some(match addr_of(p) {
                    Some(addr) => format!("node {p} at {addr}: {reason}"),
                    None => format!("node {p}: {reason}"),
                })
            })
            .collect();
        parts.extend(self.incoming.iter().cloned());
        parts
    }
}

/// A dialled member's reason for refusing us, worded for the operator: a
/// member that closes the connection mid-handshake most likely holds
/// another key or member list (its own error says which).
fn dial_reason(error: &HandshakeError) -> String {
    match error {
        HandshakeError::Closed => "it closed the connection during the handshake: it may hold \
                                   another cluster key or member list, or have seen a newer run \
                                   of this node (its own log says which)"
            .to_owned(),
        e => e.to_string(),
    }
}

/// What to do with an authenticated connection: its stream, who is at the
/// other end, and from where it came.
pub(crate) type OnPeer = Arc<dyn Fn(TcpStream, Authenticated, SocketAddr) + Send + Sync>;

/// Accept connections until `stop`: until `complete`, authenticate each in
/// its own task (at most [`MAX_PENDING_HANDSHAKES`] at once, the oldest
/// displaced by a new one, each silent for at most [`FIRST_HELLO_TIMEOUT`])
/// and hand each authenticated one to `on_peer`; once `complete`, close
/// each at once (strangers get nothing and cost one `accept` each; the
/// listener stays open, so that the port does not look free to another
/// process).
pub(crate) async fn accept_loop(
    listener: Arc<TcpListener>,
    handshake: Arc<Handshake>,
    refusals: Arc<Mutex<Refusals>>,
    on_peer: OnPeer,
    (stop, complete): (CancellationToken, CancellationToken),
) {
    let first_hello = FIRST_HELLO_TIMEOUT.min(handshake.timeout());
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
        let on_peer = Arc::clone(&on_peer);
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
                Ok(peer) => {
                    let _ = stream.set_nodelay(true);
                    on_peer(stream, peer, addr);
                }
                // A peer that went away mid-handshake (a dialler that gave
                // up, a node shutting down, a port scan) is remembered for
                // the explanation of a mesh that does not form, but is no
                // cause for a warning: a refusal for a reason (another key,
                // another member list, a certificate) is.
                Err(HandshakeError::Closed) => {
                    tracing::debug!(%addr, "a connection closed during its handshake");
                    Refusals::remember(&refusals, addr, HandshakeError::Closed.to_string());
                }
                Err(e) => Refusals::refused(&refusals, addr, e.to_string()),
            }
        });
    }
}

/// How a node waits between dials of a peer it has not reached yet (one
/// not started yet refuses them): from 10 ms, doubling up to 100 ms. The
/// cap is how late a node can learn that the peer is up, so it adds to the
/// forming of a cluster whose members start seconds apart (started over
/// ssh, say); at 500 ms, half a second of a 16-host push on the lab went
/// to it. A refused dial costs a SYN and a reset.
pub(crate) const FIRST_DIAL_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(10), Duration::from_millis(100));

/// Dial `peer` at `addr` until connected and authenticated (`None` if
/// `stop` comes first), waiting between attempts from `backoff.0` doubling
/// up to `backoff.1`; record why each failed attempt failed. `addr` is
/// asked again before each attempt (a peer may tell a new one meanwhile),
/// and `wake`, if given, cuts a wait short. Returns the connection, the
/// peer, and the address dialled.
pub(crate) async fn dial(
    (peer, addr): (NodeId, impl Fn() -> Option<SocketAddr>),
    handshake: &Handshake,
    refusals: &Mutex<Refusals>,
    (stop, wake): (&CancellationToken, Option<&tokio::sync::Notify>),
    (mut backoff, most): (Duration, Duration),
) -> Option<(TcpStream, Authenticated, SocketAddr)> {
    loop {
        let addr = addr();
        let attempt = async {
            let addr = addr.ok_or_else(|| {
                (
                    "its address is not known here (it is not in this node's member list \
                     and has not told it)"
                        .to_owned(),
                    false,
                )
            })?;
            let mut stream = TcpStream::connect(addr)
                .await
                .map_err(|e| (format!("connecting: {e}"), false))?;
            stream
                .set_nodelay(true)
                .map_err(|e| (e.to_string(), false))?;
            let authenticated = handshake
                .initiate_keyed(&mut stream, peer)
                .await
                .map_err(|e| (dial_reason(&e), true))?;
            Ok::<_, (String, bool)>((stream, authenticated, addr))
        };
        let outcome = tokio::select! {
            _ = stop.cancelled() => return None,
            r = attempt => r,
        };
        match outcome {
            Ok(connected) => return Some(connected),
            Err((reason, handshake)) => {
                tracing::debug!(peer = peer.0, ?addr, %reason, "connecting");
                Refusals::dial_failed(refusals, peer, reason, handshake);
                let woken = async {
                    match wake {
                        Some(wake) => wake.notified().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = stop.cancelled() => return None,
                    _ = tokio::time::sleep(backoff) => {}
                    _ = woken => {}
                }
                backoff = (backoff * 2).min(most);
            }
        }
    }
}

/// What becomes of a new connection from a peer's run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Let it in (replacing the connection of an older run, or a broken one).
    Accept,
    /// A newer run of the peer was seen already.
    Stale {
        /// The newest run seen.
        known: u64,
    },
    /// This run of the peer is connected already.
    Duplicate,
}

/// Whether to let in a connection from a peer's run `incarnation`, given
/// the newest run of it seen (`known`) and its current connection's run,
/// if any, and whether that connection is up.
pub(crate) fn admit(
    known: Option<u64>,
    current: Option<(u64, bool)>,
    incarnation: u64,
) -> Admission {
    match (known, current) {
        (Some(known), _) if incarnation < known => Admission::Stale { known },
        (_, Some((run, true))) if run == incarnation => Admission::Duplicate,
        _ => Admission::Accept,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_let_in_unless_a_newer_one_was_seen_or_it_is_connected() {
        // Never seen: in.
        assert_eq!(admit(None, None, 5), Admission::Accept);
        // The same run again after its connection broke (a partition healed).
        assert_eq!(admit(Some(5), Some((5, false)), 5), Admission::Accept);
        assert_eq!(admit(Some(5), None, 5), Admission::Accept);
        // A newer run (a restart), whether or not the old connection is
        // known to be broken yet.
        assert_eq!(admit(Some(5), Some((5, true)), 6), Admission::Accept);
        assert_eq!(admit(Some(5), Some((5, false)), 9), Admission::Accept);
        // The connected run a second time.
        assert_eq!(admit(Some(5), Some((5, true)), 5), Admission::Duplicate);
        // An older run than one seen: never again.
        assert_eq!(
            admit(Some(5), Some((5, true)), 4),
            Admission::Stale { known: 5 }
        );
        assert_eq!(admit(Some(5), None, 0), Admission::Stale { known: 5 });
    }
}
