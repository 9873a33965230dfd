//! The verbs driver: one task per node that owns every verbs object of the
//! node — the queue pairs (one per peer), the one CQ they share and its
//! completion channel, the registered control buffers — posts every
//! operation and reads every completion.
//!
//! The runtime's calls ([`Transport`](crate::transport::Transport)) reach it
//! as [`Cmd`]s, in order, so a receive is registered and its credit is on
//! the QP before the ready-for-block that follows it.
//!
//! Completions are waited for as the node's [`CompletionMode`] says (the
//! shared run loop's, [`run`](crate::transport::fabric_driver::run)); to
//! sleep, the driver waits on the completion channel through tokio's
//! reactor — drain, arm, drain again, await readiness, read and acknowledge
//! the events — and on the peers' rendezvous connections.
//!
//! The logic the fabric drivers share (commands, credits, backlogs,
//! control messages, liveness, peers going down, the flush, the run loop)
//! is [`FabricDriver`]'s; this module holds the driver's state and its
//! verbs primitives. Submodules by job: [`control`] (the registered control
//! slots, control sends and receives), [`data`] (block writes,
//! registrations of receive buffers and of a root's messages),
//! [`completions`] (reading the CQ, a failed peer's QP destroyed, the end).

mod completions;
mod control;
mod data;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use super::ffi::Notifier;
use super::verbs::{Device, Mr, Qp, RdmaError};
use crate::ids::NodeId;
use crate::transport::RecvRegion;
use crate::transport::fabric_driver::{self, FabricDriver, PeerLink, Posted, WriteOp};
#[cfg(doc)]
use crate::wait::CompletionMode;

pub(crate) use self::control::ControlPool;
use self::data::PostedWrite;

/// Receives kept posted per QP (control messages and block writes each
/// consume one). More than a peer can have in flight
/// ([`CTRL_SENDS`] + [`WRITES_IN_FLIGHT`]), so a peer rarely meets an
/// empty receive queue; when it does, it retries (`rnr_retry` 7).
pub(crate) const CTRL_RECVS: usize = 256;
pub(crate) use crate::transport::fabric_driver::control_slots::CTRL_SENDS;
pub(crate) use crate::transport::fabric_driver::state::WRITES_IN_FLIGHT;

/// What the runtime (and, in tests, a test) asks of the driver.
pub(crate) type Cmd = fabric_driver::Cmd<Extra>;

/// The driver's own commands: none, except in tests.
#[cfg(not(test))]
pub(crate) type Extra = std::convert::Infallible;

/// The driver's own commands, in tests.
#[cfg(test)]
#[derive(Debug)]
pub(crate) enum Extra {
    /// Move the QP to `peer` to the error state, as a device fault would.
    BreakQp { peer: NodeId },
}

/// What a work request is, in the top byte of its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WrKind {
    /// A receive into control slot `index` of the peer.
    Recv = 1,
    /// A control send from send slot `index` of the peer.
    Send = 2,
    /// A block write, `index` its number.
    Write = 3,
}

/// A work request id: kind, peer and index.
pub(crate) fn wr_id(kind: WrKind, peer: NodeId, index: u32) -> u64 {
    (kind as u64) << 56 | (u64::from(peer.0) & 0xFF_FFFF) << 32 | u64::from(index)
}

/// The (kind, peer, index) of a work request id.
pub(crate) fn parse_wr_id(id: u64) -> Option<(WrKind, NodeId, u32)> {
    let kind = match id >> 56 {
        1 => WrKind::Recv,
        2 => WrKind::Send,
        3 => WrKind::Write,
        _ => return None,
    };
    Some((kind, NodeId(((id >> 32) & 0xFF_FFFF) as u32), id as u32))
}

/// One connected peer.
pub(crate) type Peer = fabric_driver::Peer<QpLink>;

/// The state every fabric driver keeps, of this one.
pub(crate) type Core = fabric_driver::Core<QpLink, Extra, Mr>;

/// The queue pair to one peer.
#[derive(Debug)]
pub(crate) struct QpLink {
    /// The QP; `None` once the peer is down (destroyed).
    pub(crate) qp: Option<Qp>,
    /// Block writes posted and not completed, by work request id.
    writes: HashMap<u64, PostedWrite>,
}

impl QpLink {
    /// A peer's connected QP.
    pub(crate) fn new(qp: Qp) -> Self {
        QpLink {
            qp: Some(qp),
            writes: HashMap::new(),
        }
    }
}

impl PeerLink for QpLink {
    fn writes_in_flight(&self) -> usize {
        self.writes.len()
    }
}

/// Everything the driver owns. Field order is drop order after
/// `Drop::drop`: the reactor's registration of the channel fd first, then
/// the QPs, and last the device (CQ, channel, PD).
pub(crate) struct Driver {
    notifier: Option<AsyncFd<Notifier>>,
    /// Whether the CQ is armed to raise an event on the channel (else the
    /// driver polls every millisecond).
    armed: bool,
    /// The peers, receive slots and credits, commands, liveness, flush,
    /// control slots and registrations of a root's messages.
    core: Core,
    next_write: u32,
    /// Peers whose rendezvous connection closed (their process is gone),
    /// and the tasks watching those connections (aborted — closing the
    /// connection — when the peer is down or the driver ends).
    link_closed: Option<mpsc::UnboundedReceiver<NodeId>>,
    watchers: HashMap<NodeId, tokio::task::JoinHandle<()>>,
    pub(crate) device: Arc<Device>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").field("me", &self.core.me).finish()
    }
}

/// What wakes the driver from the fabric's side.
#[derive(Debug)]
pub(crate) enum Wake {
    /// The CQ may have completions.
    Completions,
    /// A peer's rendezvous connection closed; `None`: no watcher is left.
    LinkClosed(Option<NodeId>),
}

impl Driver {
    /// The driver of `core`'s node on `device`, woken by `notifier`.
    pub(crate) fn new(core: Core, device: Arc<Device>, notifier: AsyncFd<Notifier>) -> Self {
        Driver {
            notifier: Some(notifier),
            armed: false,
            core,
            next_write: 0,
            link_closed: None,
            watchers: HashMap::new(),
            device,
        }
    }

    /// Watch the peers' rendezvous connections: `closed` names a peer whose
    /// connection closed; `watchers` are the tasks watching them.
    pub(crate) fn with_links(
        mut self,
        closed: mpsc::UnboundedReceiver<NodeId>,
        watchers: HashMap<NodeId, tokio::task::JoinHandle<()>>,
    ) -> Self {
        self.link_closed = Some(closed);
        self.watchers = watchers;
        self
    }

    /// Peers whose connection closed are down — after the completions that
    /// came before are read (a peer's last messages are in the CQ before
    /// its connection closes).
    fn check_links(&mut self) {
        let mut closed = Vec::new();
        if let Some(links) = self.link_closed.as_mut() {
            while let Ok(peer) = links.try_recv() {
                closed.push(peer);
            }
        }
        if closed.is_empty() {
            return;
        }
        self.poll_cq();
        for peer in closed {
            self.peer_failed(peer, "its rendezvous connection closed");
        }
    }
}

/// The verbs primitives; the logic every fabric driver shares is
/// [`FabricDriver`]'s.
impl FabricDriver for Driver {
    type Link = QpLink;
    type Extra = Extra;
    type Registration = Mr;
    type Error = RdmaError;
    type Wake = Wake;
    const QUEUES: &'static str = "queue pairs";
    /// A write's length is a work request's 32-bit length.
    const MAX_WRITE: u64 = u32::MAX as u64;

    fn core(&self) -> &Core {
        &self.core
    }

    fn core_mut(&mut self) -> &mut Core {
        &mut self.core
    }

    fn post_ctrl_send(
        &mut self,
        to: NodeId,
        slot: usize,
        at: *mut u8,
    ) -> Result<Posted, RdmaError> {
        let (p, slots) = self.core.up_with_slots(to);
        let qp = p
            .and_then(|p| p.link.qp.as_mut())
            .expect("usable peers have a QP");
        slots.post_send(qp, to, slot, at).map(|()| Posted::Yes)
    }

    fn post_recv_slot(&mut self, peer: NodeId, slot: usize) -> Result<(), RdmaError> {
        let (p, slots) = self.core.up_with_slots(peer);
        let qp = p
            .and_then(|p| p.link.qp.as_mut())
            .expect("up peers have a QP");
        slots.post_recv(qp, peer, slot)
    }

    fn post_write(&mut self, to: NodeId, op: WriteOp) -> Result<Option<WriteOp>, RdmaError> {
        self.post_block_write(to, op)
    }

    fn register_recv(&mut self, region: &RecvRegion) -> Result<(u64, u64), String> {
        let (_, rkey) = self.buffer_mr(region.buffer()).map_err(|e| e.to_string())?;
        let at = region.buffer().as_ptr() as u64 + region.offset() as u64;
        Ok((at, u64::from(rkey)))
    }

    fn close_link(&mut self, peer: NodeId) {
        self.destroy_qp(peer);
    }

    #[cfg(not(test))]
    fn on_extra(&mut self, never: Extra) {
        match never {}
    }

    #[cfg(test)]
    fn on_extra(&mut self, extra: Extra) {
        match extra {
            Extra::BreakQp { peer } => {
                if let Some(qp) = self
                    .core
                    .peers
                    .get_mut(&peer)
                    .and_then(|p| p.link.qp.as_mut())
                {
                    qp.move_to_error().expect("ibv_modify_qp(ERR)");
                }
            }
        }
    }

    fn poll(&mut self) -> usize {
        let n = self.poll_cq();
        self.check_links();
        n
    }

    fn arm(&mut self) -> bool {
        // Arm, then poll once more: a completion that arrived between the
        // last poll and the arming raised no event.
        let notifier = self.notifier.as_ref().expect("open");
        self.armed = match notifier.get_ref().arm() {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "ibv_req_notify_cq failed: polling every millisecond");
                false
            }
        };
        !self.armed || self.poll_cq() == 0
    }

    fn wake_sources(
        &mut self,
    ) -> (
        &mut mpsc::UnboundedReceiver<Cmd>,
        impl Future<Output = Wake> + Send + '_,
    ) {
        let armed = self.armed;
        let notifier = self.notifier.as_ref().expect("open");
        let links = self.link_closed.as_mut();
        let woken = async move {
            let link_closed = async move {
                match links {
                    Some(links) => links.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                guard = notifier.readable(), if armed => {
                    if let Ok(mut guard) = guard {
                        // Read (and acknowledge) every event before clearing
                        // readiness: the fd is edge-triggered in the reactor.
                        guard.get_inner().take_events();
                        guard.clear_ready();
                    }
                    Wake::Completions
                }
                () = tokio::time::sleep(Duration::from_millis(1)), if !armed => Wake::Completions,
                peer = link_closed => Wake::LinkClosed(peer),
            }
        };
        (&mut self.core.commands, woken)
    }

    fn on_wake(&mut self, wake: Wake) {
        match wake {
            Wake::Completions => {}
            Wake::LinkClosed(Some(peer)) => {
                self.poll_cq();
                self.peer_failed(peer, "its rendezvous connection closed");
            }
            Wake::LinkClosed(None) => self.link_closed = None,
        }
    }
}
