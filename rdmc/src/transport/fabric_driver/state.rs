//! The state a fabric driver keeps whatever its fabric: each peer's link
//! and what waits to go to it, the receive slots and credits, the commands,
//! failure detection, the flush, the registered control slots and the
//! registrations of a root's messages.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::control_slots::{CTRL_SENDS, ControlSlots};
use super::endpoint::Cmd;
use super::slots::SlotTable;
use super::wire::{Credit, MSG_LEN};
use crate::collections::HashMap;
use crate::ids::{GroupId, NodeId};
use crate::transport::liveness::{Liveness, PeerClock};
use crate::transport::{BlockRef, Completion, CompletionSender, MessageBuffer};
use crate::wait::CompletionMode;

/// Block writes in flight per peer.
pub(crate) const WRITES_IN_FLIGHT: usize = 16;
/// Most commands and completions handled before yielding.
pub(crate) const BATCH: usize = 256;

/// A block write: waiting for room, or (in the driver's own bookkeeping)
/// in flight.
#[derive(Debug)]
pub(crate) struct WriteOp {
    pub(crate) group: GroupId,
    /// The bytes, kept alive until the write completes.
    pub(crate) block: BlockRef,
    /// Where the receiver said the block goes.
    pub(crate) credit: Credit,
}

/// A root's whole message, registered once for all its block writes (`M`
/// is the fabric's registration). Holds the bytes, so they outlive the
/// registration (dropped first: fields drop in order).
#[derive(Debug)]
pub(crate) struct RootRegistration<M> {
    pub(crate) mr: M,
    message: Bytes,
}

/// Per group, the registration of the message its root sends now, so a
/// message is registered once, not per block (the root sends a group's
/// messages one after another).
#[derive(Debug)]
pub(crate) struct RootRegistrations<M>(HashMap<GroupId, Arc<RootRegistration<M>>>);

impl<M> Default for RootRegistrations<M> {
    fn default() -> Self {
        RootRegistrations(HashMap::default())
    }
}

impl<M> RootRegistrations<M> {
    /// The registration of the root's message `block` is part of: the
    /// group's, if it is of that message, or else one `register` makes of
    /// the message (whose bytes the registration then holds), kept as the
    /// group's.
    pub(crate) fn get_or_register<E>(
        &mut self,
        group: GroupId,
        block: &BlockRef,
        register: impl FnOnce(&Bytes) -> Result<M, E>,
    ) -> Result<Arc<RootRegistration<M>>, E> {
        let message = block.message().expect("a root's block").clone();
        if let Some(reg) = self.0.get(&group)
            && reg.message.as_ptr() == message.as_ptr()
            && reg.message.len() == message.len()
        {
            return Ok(Arc::clone(reg));
        }
        let mr = register(&message)?;
        let reg = Arc::new(RootRegistration { mr, message });
        self.0.insert(group, Arc::clone(&reg));
        Ok(reg)
    }

    /// The group is over here: drop its registration.
    pub(crate) fn remove(&mut self, group: GroupId) {
        self.0.remove(&group);
    }
}

/// What a post call said.
pub(crate) enum Posted {
    Yes,
    /// No room now: retry after reading completions.
    Again,
}

/// The fabric's connection to one peer (its endpoints, its queue pair).
pub(crate) trait PeerLink {
    /// Block writes posted on it and not completed.
    fn writes_in_flight(&self) -> usize;

    /// The peer's run it connects to (0 where the fabric does not tell
    /// runs apart).
    fn incarnation(&self) -> u64 {
        0
    }
}

/// One connected peer: its fabric link `L`, and what waits to go to it.
#[derive(Debug)]
pub(crate) struct Peer<L> {
    pub(crate) link: L,
    pub(crate) down: bool,
    pub(super) ctrl_backlog: VecDeque<[u8; MSG_LEN]>,
    /// The peer's control send slots not in flight.
    pub(super) free_sends: Vec<usize>,
    pub(super) write_backlog: VecDeque<WriteOp>,
    /// When anything last came from the peer, and when a control message
    /// last went to it.
    pub(super) clock: PeerClock,
}

impl<L: PeerLink> Peer<L> {
    /// A peer just connected through `link`.
    pub(crate) fn new(link: L) -> Self {
        Peer {
            clock: PeerClock::new(Instant::now()),
            link,
            down: false,
            ctrl_backlog: VecDeque::new(),
            free_sends: (0..CTRL_SENDS).rev().collect(),
            write_backlog: VecDeque::new(),
        }
    }

    /// Whether nothing waits to go to the peer, nor is in flight.
    pub(super) fn idle(&self) -> bool {
        self.down
            || (self.ctrl_backlog.is_empty()
                && self.free_sends.len() == CTRL_SENDS
                && self.write_backlog.is_empty()
                && self.link.writes_in_flight() == 0)
    }
}

/// The state a driver keeps whatever its fabric: the peers (`L` their
/// fabric link), the receive slots and credits, the commands (`X` the
/// driver's own), failure detection and the flush, the registered control
/// slots and the registrations of a root's messages (`M` the fabric's
/// registration of memory).
pub(crate) struct Core<L, X, M> {
    /// This node.
    pub(crate) me: NodeId,
    pub(crate) peers: HashMap<NodeId, Peer<L>>,
    /// Receive slots, and the credits peers gave.
    pub(crate) slots: SlotTable,
    pub(crate) commands: mpsc::UnboundedReceiver<Cmd<X>>,
    completions: CompletionSender,
    /// When peers are down, and when they are due a heartbeat.
    pub(super) liveness: Liveness,
    pub(crate) next_liveness_check: Instant,
    pub(super) flushing: Option<(oneshot::Sender<()>, Instant)>,
    /// How the driver waits for completions.
    pub(super) mode: CompletionMode,
    /// Per group, the registration of the message its root sends now.
    pub(crate) root_registrations: RootRegistrations<M>,
    /// The registered control-message slots; `None` once freed (after
    /// every link is closed).
    control_slots: Option<ControlSlots<M>>,
}

impl<L: std::fmt::Debug, X, M> std::fmt::Debug for Core<L, X, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("me", &self.me)
            .field("peers", &self.peers)
            .finish()
    }
}

impl<L, X, M> Core<L, X, M> {
    /// The state of node `me`'s driver, connected to `peers`, its control
    /// messages in `control_slots`, reading `commands`, reporting to
    /// `completions` and waiting for them as `mode` says; a peer silent for
    /// `failure_timeout` is down.
    pub(crate) fn new(
        me: NodeId,
        peers: HashMap<NodeId, Peer<L>>,
        control_slots: ControlSlots<M>,
        commands: mpsc::UnboundedReceiver<Cmd<X>>,
        completions: CompletionSender,
        mode: CompletionMode,
        failure_timeout: Duration,
    ) -> Self {
        Core {
            me,
            peers,
            slots: SlotTable::default(),
            commands,
            completions,
            liveness: Liveness::new(failure_timeout),
            next_liveness_check: Instant::now(),
            flushing: None,
            mode,
            root_registrations: RootRegistrations::default(),
            control_slots: Some(control_slots),
        }
    }

    /// Report `c` to the runtime.
    pub(crate) fn emit(&self, c: Completion) {
        let _ = self.completions.send(c);
    }

    /// Report that `peer` cannot be reached for `group`.
    pub(super) fn unreachable(&self, group: GroupId, peer: NodeId) {
        self.emit(Completion::TransferFailed {
            group,
            peer,
            error: "peer unreachable",
        });
    }

    /// Whether anything may be posted to `peer`: it is up and the driver
    /// is not flushing.
    pub(super) fn usable(&self, peer: NodeId) -> bool {
        self.peers.get(&peer).is_some_and(|p| !p.down) && self.flushing.is_none()
    }

    /// The known peer `peer`.
    pub(crate) fn peer_mut(&mut self, peer: NodeId) -> &mut Peer<L> {
        self.peers.get_mut(&peer).expect("a known peer")
    }

    /// The peer `peer`, if it is known and up.
    pub(crate) fn up(&mut self, peer: NodeId) -> Option<&mut Peer<L>> {
        self.peers.get_mut(&peer).filter(|p| !p.down)
    }

    /// The peer `peer`, if it is known and up, and the control slots.
    pub(crate) fn up_with_slots(
        &mut self,
        peer: NodeId,
    ) -> (Option<&mut Peer<L>>, &ControlSlots<M>) {
        let slots = self
            .control_slots
            .as_ref()
            .expect("the control slots live until the driver's links are closed");
        (self.peers.get_mut(&peer).filter(|p| !p.down), slots)
    }

    /// Something came from `peer`.
    pub(crate) fn heard(&mut self, peer: NodeId) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.clock.heard(Instant::now());
        }
    }

    /// Send slot `slot` of `peer` is free again: its send completed.
    pub(crate) fn ctrl_sent(&mut self, peer: NodeId, slot: usize) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.free_sends.push(slot);
        }
    }

    /// The deadline of the flush under way, if one is.
    pub(crate) fn flush_deadline(&self) -> Option<Instant> {
        self.flushing.as_ref().map(|(_, at)| *at)
    }

    /// The registered control-message slots.
    pub(crate) fn control_slots(&self) -> &ControlSlots<M> {
        self.control_slots
            .as_ref()
            .expect("the control slots live until the driver's links are closed")
    }

    /// Free the control slots (and their registration): the driver's
    /// links are closed, so the fabric touches them no more.
    pub(crate) fn free_control_slots(&mut self) {
        drop(self.control_slots.take());
    }
}

/// The registration `R` of `buf`'s memory: the one made before, if it is
/// this fabric's (`ours`; else the error `theirs` makes), or one
/// `register` makes now of the whole allocation, kept in the buffer — which
/// drops it before freeing its memory, or hands both over together to the
/// node's pool — so that a buffer is registered once however many receives
/// and writes use it.
pub(crate) fn buffer_registration<R, E>(
    buf: &MessageBuffer,
    ours: impl FnOnce(&R) -> bool,
    theirs: impl FnOnce() -> E,
    register: impl FnOnce(&MessageBuffer) -> Result<R, E>,
) -> Result<&R, E>
where
    R: std::any::Any + Send + Sync,
{
    if buf.registration().get().is_none() {
        let reg = register(buf)?;
        let _ = buf.registration().set(Box::new(reg));
    }
    match buf.registration().get().and_then(|r| r.downcast_ref::<R>()) {
        Some(reg) if ours(reg) => Ok(reg),
        _ => Err(theirs()),
    }
}
