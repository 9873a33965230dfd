//! One authenticated connection to a peer: a writer task that interleaves
//! the groups' blocks chunk by chunk (fairly, round robin, control signals
//! first; [`writer`]) and a reader task that reads each chunk straight into
//! the receive posted for its block ([`reader`]). Before either runs, the
//! two ends agree on the keys that protect every frame ([`agree`](mod@agree));
//! [`socket`] holds the socket options a link sets.

mod agree;
mod reader;
#[cfg(test)]
mod tests;
mod writer;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

pub(crate) use self::agree::AgreeError;
use self::agree::agree;
use self::reader::{FrameReader, read_loop};
use self::writer::write_loop;
use crate::collections::HashMap;
use crate::ids::{GroupId, NodeId};
use crate::transport::frame::protect::WireSecurity;
use crate::transport::liveness::Liveness;
use crate::transport::mesh::ClusterKey;
pub(crate) use crate::transport::socket::{RecvLowat, limit_unsent, set_congestion_control};
use crate::transport::{BlockRef, Completion, CompletionSender, RecvRegion, Signal};

/// Largest frame payload while a link carries one group's blocks and no
/// signal waits: fewer, larger writes and reads. As soon as a second group
/// or a signal is queued, frames are `chunk_size` again.
pub(crate) const SOLO_FRAME: u32 = 1 << 20;

/// Tuning of a link.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinkConfig {
    /// Largest data chunk on the wire while several groups share the link;
    /// blocks are cut into chunks this big.
    pub(crate) chunk_size: u32,
    /// A peer silent this long is considered failed.
    pub(crate) failure_timeout: Duration,
    /// Report a block's [`Completion::Progress`] once at most this many of
    /// its bytes are still to arrive (early announcement); `None`: never.
    pub(crate) early_announce: Option<u32>,
    /// The socket holds at most about this many bytes unsent
    /// (`TCP_NOTSENT_LOWAT`); data frames are then at most this long, so
    /// a signal waits for no more than one such frame to be written.
    pub(crate) unsent_limit: Option<u32>,
}

impl LinkConfig {
    /// The link's failure detector: heartbeats keep an idle connection's
    /// quiet, silence past the failure timeout breaks the link.
    fn liveness(&self) -> Liveness {
        Liveness::new(self.failure_timeout)
    }

    /// Largest frame payload written (while alone) or accepted.
    fn max_frame(&self) -> u32 {
        self.chunk_size.max(SOLO_FRAME)
    }
}

/// How a link protects its frames, and what it needs to agree on keys.
#[derive(Clone, Debug)]
pub(crate) struct LinkSecurity {
    /// The protection both ends must use.
    pub(crate) mode: WireSecurity,
    /// The cluster key, input of the frame keys.
    pub(crate) key: ClusterKey,
    /// This node.
    pub(crate) me: NodeId,
    /// How long the key agreement may take.
    pub(crate) timeout: Duration,
}

impl LinkSecurity {
    /// The security of one connection: its frame keys come from
    /// `link_secret` (exported from its TLS session, with per-node
    /// identities) instead of the cluster key when there is one.
    pub(crate) fn for_connection(&self, link_secret: Option<[u8; 32]>) -> Self {
        let mut security = self.clone();
        if let Some(secret) = link_secret {
            security.key =
                ClusterKey::from_bytes(secret.to_vec()).expect("32 bytes is long enough");
        }
        security
    }
}

/// What the writer sends.
#[derive(Debug)]
pub(crate) enum Outgoing {
    Signal(GroupId, Signal),
    /// A signal on its way along a route (this link's peer its next hop).
    Relay(GroupId, Signal, crate::transport::frame::relay::Route),
    Data(GroupId, BlockRef, u64),
    /// This node leaves for good: the last frame (after everything queued
    /// before it).
    Goodbye,
    /// This node closes the connection, which no group needs: the last
    /// frame (after everything queued before it).
    Idle,
}

/// Whether a link is down, and which run of which peer it connects to.
#[derive(Debug)]
pub(crate) struct LinkState {
    down: AtomicBool,
    peer: NodeId,
    /// The peer's incarnation on this connection.
    incarnation: u64,
    /// Cancelled once the link is down.
    ended: CancellationToken,
    /// Cancelled once the reader is done: the peer closed its side, or
    /// the connection failed (or never got past the key agreement).
    read_done: CancellationToken,
    /// Whether the node was told the link is down: it is told once, and
    /// the telling holds this lock, so that once someone holding it saw it
    /// told, the report is queued ahead of anything queued after.
    reported: Mutex<bool>,
    /// Whether the peer said goodbye: it left for good, and the
    /// connection's end is no failure.
    left: AtomicBool,
    /// Whether this node closed the link for good (it shuts down): the
    /// connection's end is expected, not worth a warning.
    closing: AtomicBool,
    /// Whether the link was closed as idle, by either end: its end is
    /// neither a failure nor the peer leaving, and is not reported.
    idle: AtomicBool,
}

impl LinkState {
    fn new(peer: NodeId, incarnation: u64) -> Self {
        LinkState {
            down: AtomicBool::new(false),
            peer,
            incarnation,
            ended: CancellationToken::new(),
            read_done: CancellationToken::new(),
            reported: Mutex::new(false),
            left: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            idle: AtomicBool::new(false),
        }
    }

    /// The link was closed as idle (by either end).
    pub(super) fn mark_idle(&self) {
        self.idle.store(true, Ordering::Release);
    }

    /// Whether the link was closed as idle.
    pub(super) fn is_idle(&self) -> bool {
        self.idle.load(Ordering::Acquire)
    }

    /// Mark the link down.
    pub(super) fn mark_down(&self) {
        self.down.store(true, Ordering::Release);
        self.ended.cancel();
    }

    /// Mark the link down and tell the node (once) that this run of its
    /// peer is gone.
    pub(super) fn report_down(
        &self,
        completions: &CompletionSender,
        reason: impl std::fmt::Display,
    ) {
        self.report_once(completions, || {
            Completion::peer_down(self.peer, self.incarnation, reason.to_string())
        });
    }

    /// Mark the link down and tell the node (once) that this run of its
    /// peer left for good, as it said.
    pub(super) fn report_left(&self, completions: &CompletionSender) {
        self.left.store(true, Ordering::Release);
        self.report_once(completions, || Completion::PeerLeft {
            node: self.peer,
            incarnation: self.incarnation,
        });
    }

    fn report_once(&self, completions: &CompletionSender, report: impl FnOnce() -> Completion) {
        let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
        if !*reported && !self.is_idle() {
            *reported = true;
            let _ = completions.send(report());
        }
        self.mark_down();
    }

    /// Whether the peer said goodbye.
    pub(super) fn has_left(&self) -> bool {
        self.left.load(Ordering::Acquire)
    }

    /// Whether this node closed the link for good.
    pub(super) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }
}

/// Receives posted for blocks from one peer, per group, in posting order.
type Posted = Mutex<HashMap<GroupId, VecDeque<RecvRegion>>>;

/// The node's side of a link to one peer.
#[derive(Debug)]
pub(crate) struct Link {
    outgoing: mpsc::UnboundedSender<Outgoing>,
    posted: Arc<Posted>,
    state: Arc<LinkState>,
    writer: tokio::task::JoinHandle<()>,
    /// The key agreement's outcome, until [`Link::agreement`] takes it.
    agreed: Option<oneshot::Receiver<Result<(), AgreeError>>>,
}

impl Link {
    /// Run a link over `stream` (already authenticated by the mesh
    /// handshake) to `peer` in its run `incarnation`; `lowat` tunes the
    /// stream's socket, if it is one. The frame keys are agreed first; a
    /// failed agreement is a peer failure, and its reason is told to
    /// [`Link::agreement`].
    pub(crate) fn spawn<S>(
        (peer, incarnation): (NodeId, u64),
        stream: S,
        lowat: RecvLowat,
        completions: CompletionSender,
        config: LinkConfig,
        security: LinkSecurity,
    ) -> Self
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (outgoing, queue) = mpsc::unbounded_channel();
        let posted = Arc::new(Posted::default());
        let state = Arc::new(LinkState::new(peer, incarnation));
        let span = tracing::debug_span!("rdmc_link", peer = peer.0);
        let _enter = span.enter();
        let reader_posted = Arc::clone(&posted);
        let link_state = Arc::clone(&state);
        let (agreed_tx, agreed) = oneshot::channel();
        let writer = tokio::spawn(tracing::Instrument::in_current_span(async move {
            let (mut reader, mut writer) = tokio::io::split(stream);
            let agreed = tokio::time::timeout(
                security.timeout,
                agree(&mut reader, &mut writer, &security, peer),
            )
            .await
            .unwrap_or_else(|_| {
                Err(AgreeError::Failed(format!(
                    "no key agreement within {:?}",
                    security.timeout
                )))
            });
            let (sealer, opener) = match agreed {
                Ok(halves) => {
                    let _ = agreed_tx.send(Ok(()));
                    halves
                }
                Err(reason) => {
                    // The node reports it, as a warning where a group held the peer.
                    tracing::debug!(peer = peer.0, %reason, "peer down");
                    link_state.read_done.cancel();
                    link_state.report_down(&completions, &reason);
                    let _ = agreed_tx.send(Err(reason));
                    return;
                }
            };
            // A failed reader ends the writer too, so the whole connection
            // closes and the peer learns of the failure at once.
            let reader_done = CancellationToken::new();
            tokio::spawn(tracing::Instrument::in_current_span(read_loop(
                (security.me, peer),
                FrameReader::new(reader, lowat),
                opener,
                reader_posted,
                completions.clone(),
                config,
                Arc::clone(&link_state),
                reader_done.clone().drop_guard(),
            )));
            let writing = write_loop(peer, writer, sealer, queue, completions, config, link_state);
            tokio::select! {
                () = writing => {}
                () = reader_done.cancelled() => {}
            }
        }));
        Link {
            outgoing,
            posted,
            state,
            writer,
            agreed: Some(agreed),
        }
    }

    /// How the key agreement ended (within the agreement timeout): `Ok`
    /// once the frame keys are agreed, or why not. Asked again, `Ok`.
    #[cfg(test)]
    pub(crate) async fn agreement(&mut self) -> Result<(), AgreeError> {
        self.take_agreement().await
    }

    /// Close the sending side, for good: the writer puts everything queued
    /// on the wire, then a goodbye (so that the peer takes the connection's
    /// end for this node leaving, not failing), shuts the connection's write
    /// half and ends (the returned task).
    pub(crate) fn close(self) -> tokio::task::JoinHandle<()> {
        self.state.closing.store(true, Ordering::Release);
        let _ = self.outgoing.send(Outgoing::Goodbye);
        self.writer
    }

    /// Close the link as idle: the writer puts everything queued on the
    /// wire, then the idle close, and ends; the link's end is reported to
    /// nobody (no group needs it).
    pub(crate) fn close_idle(self) {
        self.state.mark_idle();
        let _ = self.outgoing.send(Outgoing::Idle);
    }

    /// Whether the link was closed as idle (by either end).
    pub(crate) fn is_idle(&self) -> bool {
        self.state.is_idle()
    }

    /// Whether the connection is gone.
    pub(crate) fn is_down(&self) -> bool {
        self.state.down.load(Ordering::Acquire)
    }

    /// The peer's incarnation on this link.
    pub(crate) fn incarnation(&self) -> u64 {
        self.state.incarnation
    }

    /// Whether the peer said goodbye (it left for good).
    pub(crate) fn peer_left(&self) -> bool {
        self.state.has_left()
    }

    /// Cancelled once the link is down.
    pub(crate) fn ended(&self) -> CancellationToken {
        self.state.ended.clone()
    }

    /// Whether `self` and `other` are one link (a later connection to the
    /// same peer is another).
    pub(crate) fn is(&self, other: &Arc<LinkState>) -> bool {
        Arc::ptr_eq(&self.state, other)
    }

    /// The link's state, to tell it from later links to the same peer
    /// ([`Link::is`]) and whether it was idle once it is gone.
    pub(crate) fn state(&self) -> Arc<LinkState> {
        Arc::clone(&self.state)
    }

    /// Cancelled once nothing more is read from the connection: the peer
    /// closed its side, or the connection failed.
    pub(crate) fn read_done(&self) -> CancellationToken {
        self.state.read_done.clone()
    }

    /// The key agreement's outcome (as [`Link::agreement`]), to await
    /// apart from the link.
    pub(crate) fn take_agreement(
        &mut self,
    ) -> futures::future::BoxFuture<'static, Result<(), AgreeError>> {
        let agreed = self.agreed.take();
        Box::pin(async move {
            match agreed {
                Some(outcome) => outcome.await.unwrap_or_else(|_| {
                    Err(AgreeError::Failed(
                        "the link ended before agreeing".to_owned(),
                    ))
                }),
                None => Ok(()),
            }
        })
    }

    /// Give the link up for a newer one to the same peer: the node is told
    /// this run of the peer is gone (unless it was told already), ahead of
    /// anything queued after; the connection closes once its queue is
    /// written.
    pub(crate) fn retire(self, completions: &CompletionSender) {
        self.state
            .report_down(completions, "a newer run of it connected");
    }

    /// Post a receive for the next block of `group` from this peer.
    pub(crate) fn post_recv(&self, group: GroupId, region: RecvRegion) {
        lock(&self.posted)
            .entry(group)
            .or_default()
            .push_back(region);
    }

    /// Take back the receives posted on this link (closed as idle: they
    /// go onto the next connection to the peer).
    pub(crate) fn take_posted(&self) -> Vec<(GroupId, RecvRegion)> {
        lock(&self.posted)
            .drain()
            .flat_map(|(group, regions)| regions.into_iter().map(move |r| (group, r)))
            .collect()
    }

    /// Queue a frame; `false` if the connection is gone.
    pub(crate) fn send(&self, item: Outgoing) -> bool {
        !self.is_down() && self.outgoing.send(item).is_ok()
    }

    /// Drop the receives posted for `group`.
    pub(crate) fn release_group(&self, group: GroupId) {
        lock(&self.posted).remove(&group);
    }
}

fn lock(posted: &Posted) -> MutexGuard<'_, HashMap<GroupId, VecDeque<RecvRegion>>> {
    posted.lock().unwrap_or_else(|e| e.into_inner())
}

fn other(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}
