//! What the driver tasks of the RDMA-style transports (`ofi` over
//! libfabric, `rdma` over verbs) share: the state of each peer's queues,
//! and the decisions that do not depend on the fabric — the commands, the
//! send path (a usable peer, a credit taken, the header sent, the write
//! posted or queued for room), the receive path (a slot kept, its credit
//! sent), the control messages, failure detection, peers going down and
//! the flush.
//!
//! A driver implements [`FabricDriver`] with its fabric's primitives —
//! post a control send, post a block write, register a receive buffer,
//! close a failed peer's link — and gets the rest as provided methods.
//! What stays in each driver really differs: how operations are posted
//! and their completions read (operation contexts and `fi_cq_read`, work
//! request ids and `ibv_poll_cq`), how a landed write names its slot and
//! its peer, how a root's message is registered, and how the run loop
//! sleeps (a CQ's and an EQ's fds, a completion channel and the
//! rendezvous connections).

use std::collections::{HashMap, VecDeque};
use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::endpoint::Cmd;
use super::slots::{NoSlot, SlotTable};
use super::wire::{ControlMessage, Credit, MSG_LEN};
use crate::ids::{GroupId, NodeId};
use crate::transport::liveness::{Liveness, PeerClock};
use crate::transport::{BlockRef, Completion, CompletionSender, RecvRegion};

/// Control sends in flight per peer (each holds a registered 64-byte slot).
pub(crate) const CTRL_SENDS: usize = 64;
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
        RootRegistrations(HashMap::new())
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
}

/// One connected peer: its fabric link `L`, and what waits to go to it.
#[derive(Debug)]
pub(crate) struct Peer<L> {
    pub(crate) link: L,
    pub(crate) down: bool,
    ctrl_backlog: VecDeque<[u8; MSG_LEN]>,
    /// The peer's control send slots not in flight.
    pub(crate) free_sends: Vec<usize>,
    write_backlog: VecDeque<WriteOp>,
    /// When anything last came from the peer, and when a control message
    /// last went to it.
    pub(crate) clock: PeerClock,
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
    fn idle(&self) -> bool {
        self.down
            || (self.ctrl_backlog.is_empty()
                && self.free_sends.len() == CTRL_SENDS
                && self.write_backlog.is_empty()
                && self.link.writes_in_flight() == 0)
    }
}

/// The state a driver keeps whatever its fabric: the peers, the receive
/// slots and credits, the commands, failure detection and the flush; `X`
/// is the driver's own commands.
pub(crate) struct Core<L, X> {
    pub(crate) peers: HashMap<NodeId, Peer<L>>,
    /// Receive slots, and the credits peers gave.
    pub(crate) slots: SlotTable,
    pub(crate) commands: mpsc::UnboundedReceiver<Cmd<X>>,
    completions: CompletionSender,
    /// When peers are down, and when they are due a heartbeat.
    liveness: Liveness,
    pub(crate) next_liveness_check: Instant,
    pub(crate) flushing: Option<(oneshot::Sender<()>, Instant)>,
}

impl<L: std::fmt::Debug, X> std::fmt::Debug for Core<L, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core").field("peers", &self.peers).finish()
    }
}

impl<L, X> Core<L, X> {
    /// The state of a driver connected to `peers`, reading `commands` and
    /// reporting to `completions`; a peer silent for `failure_timeout` is
    /// down.
    pub(crate) fn new(
        peers: HashMap<NodeId, Peer<L>>,
        commands: mpsc::UnboundedReceiver<Cmd<X>>,
        completions: CompletionSender,
        failure_timeout: Duration,
    ) -> Self {
        Core {
            peers,
            slots: SlotTable::default(),
            commands,
            completions,
            liveness: Liveness::new(failure_timeout),
            next_liveness_check: Instant::now(),
            flushing: None,
        }
    }

    /// Report `c` to the runtime.
    pub(crate) fn emit(&self, c: Completion) {
        let _ = self.completions.send(c);
    }

    /// Report that `peer` cannot be reached for `group`.
    fn unreachable(&self, group: GroupId, peer: NodeId) {
        self.emit(Completion::TransferFailed {
            group,
            peer,
            error: "peer unreachable",
        });
    }

    /// Whether anything may be posted to `peer`: it is up and the driver
    /// is not flushing.
    fn usable(&self, peer: NodeId) -> bool {
        self.peers.get(&peer).is_some_and(|p| !p.down) && self.flushing.is_none()
    }

    /// The known peer `peer`.
    pub(crate) fn peer_mut(&mut self, peer: NodeId) -> &mut Peer<L> {
        self.peers.get_mut(&peer).expect("a known peer")
    }

    /// The deadline of the flush under way, if one is.
    pub(crate) fn flush_deadline(&self) -> Option<Instant> {
        self.flushing.as_ref().map(|(_, at)| *at)
    }
}

/// A driver task of an RDMA-style transport: its fabric's primitives, and
/// the logic both drivers share as provided methods.
pub(crate) trait FabricDriver {
    /// The fabric's connection to a peer.
    type Link: PeerLink;
    /// The driver's own commands.
    type Extra;
    /// What a failed post says.
    type Error: Display;
    /// What a flush waits to be idle, for the logs.
    const QUEUES: &'static str;
    /// The longest block one write can carry.
    const MAX_WRITE: u64;

    /// The shared state.
    fn core(&self) -> &Core<Self::Link, Self::Extra>;
    /// The shared state, to change.
    fn core_mut(&mut self) -> &mut Core<Self::Link, Self::Extra>;

    /// Post `bytes` to `to` (a usable peer) from a free control send slot;
    /// `Posted::Again` if there is none, or no room.
    fn try_send_ctrl(&mut self, to: NodeId, bytes: &[u8; MSG_LEN]) -> Result<Posted, Self::Error>;

    /// Post one block write to `to` (a usable peer); `Ok(Some(op))` if
    /// there is no room now.
    fn try_write(&mut self, to: NodeId, op: WriteOp) -> Result<Option<WriteOp>, Self::Error>;

    /// Register the memory of `region` (not empty) for the peer's write:
    /// the (address, key) its credit carries.
    fn register_recv(&mut self, region: &RecvRegion) -> Result<(u64, u64), String>;

    /// `group` is over here: drop what the driver keeps for it besides its
    /// slots and credits (the registration of its root's message).
    fn release_registrations(&mut self, group: GroupId);

    /// `peer` is down: close its link, so the fabric touches none of the
    /// memory posted for it any more, and drop what its operations held.
    fn close_link(&mut self, peer: NodeId);

    /// Act on one of the driver's own commands.
    fn on_extra(&mut self, extra: Self::Extra);

    /// Report `c` to the runtime.
    fn emit(&self, c: Completion) {
        self.core().emit(c);
    }

    /// Act on a command of the runtime.
    fn on_command(&mut self, cmd: Cmd<Self::Extra>) {
        match cmd {
            Cmd::PostRecv {
                group,
                from,
                region,
            } => self.post_recv(group, from, region),
            Cmd::PostSend {
                group,
                to,
                block,
                immediate,
            } => self.post_send(group, to, block, immediate),
            Cmd::Signal { group, to, signal } => {
                if self.core().usable(to) {
                    self.send_ctrl(to, ControlMessage::Signal { group, signal });
                } else {
                    self.core().unreachable(group, to);
                }
            }
            Cmd::Release { group } => {
                self.core_mut().slots.release(group);
                self.release_registrations(group);
            }
            Cmd::Flush { done, limit } => {
                self.core_mut().flushing = Some((done, Instant::now() + limit));
            }
            Cmd::Extra(extra) => self.on_extra(extra),
        }
    }

    /// Handle the commands waiting (a batch at most): how many, or `None`
    /// if the transport is gone.
    fn take_commands(&mut self) -> Option<usize> {
        let mut handled = 0;
        while handled < BATCH {
            match self.core_mut().commands.try_recv() {
                Ok(cmd) => self.on_command(cmd),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return None,
            }
            handled += 1;
        }
        Some(handled)
    }

    /// After reading completions: post what waited for room, check the
    /// peers' liveness when due, and say whether the driver is done (a
    /// flush complete or timed out).
    fn upkeep(&mut self) -> bool {
        self.retry_backlogs();
        if Instant::now() >= self.core().next_liveness_check {
            self.check_liveness();
        }
        self.flush_done()
    }

    /// Queue a control message to `to`, in order.
    fn send_ctrl(&mut self, to: NodeId, msg: ControlMessage) {
        let bytes = msg.encode();
        let peer = self.core_mut().peer_mut(to);
        if !peer.ctrl_backlog.is_empty() {
            peer.ctrl_backlog.push_back(bytes);
            return;
        }
        match self.try_send_ctrl(to, &bytes) {
            Ok(Posted::Yes) => {}
            Ok(Posted::Again) => self.core_mut().peer_mut(to).ctrl_backlog.push_back(bytes),
            Err(e) => self.peer_failed(to, &e.to_string()),
        }
    }

    /// The sender's half of a block transfer: take the receiver's credit,
    /// send the block's header, and write the block there (or queue the
    /// write for room).
    fn post_send(&mut self, group: GroupId, to: NodeId, block: BlockRef, immediate: u64) {
        if !self.core().usable(to) {
            return self.core().unreachable(group, to);
        }
        let Some(credit) = self.core_mut().slots.take_credit(to, group) else {
            return self.emit(Completion::TransferFailed {
                group,
                peer: to,
                error: "the receiver posted no receive",
            });
        };
        let len = block.len() as u64;
        if len > credit.len || len > Self::MAX_WRITE {
            return self.emit(Completion::TransferFailed {
                group,
                peer: to,
                error: "block longer than the posted receive",
            });
        }
        self.send_ctrl(
            to,
            ControlMessage::BlockHeader {
                group,
                slot: credit.slot,
                len,
                immediate,
            },
        );
        if len == 0 {
            // Nothing to write: the header alone completes the receive.
            return self.emit(Completion::Sent { group, to });
        }
        let op = WriteOp {
            group,
            block,
            credit,
        };
        let peer = self.core_mut().peer_mut(to);
        if peer.write_backlog.is_empty() && peer.link.writes_in_flight() < WRITES_IN_FLIGHT {
            match self.try_write(to, op) {
                Ok(None) => {}
                Ok(Some(op)) => self.core_mut().peer_mut(to).write_backlog.push_back(op),
                Err(e) => self.peer_failed(to, &e.to_string()),
            }
        } else {
            peer.write_backlog.push_back(op);
        }
    }

    /// The receiver's half of a block transfer: register the memory, keep
    /// the region in a slot, and give the peer a credit for it.
    fn post_recv(&mut self, group: GroupId, from: NodeId, region: RecvRegion) {
        if !self.core().usable(from) {
            return self.core().unreachable(group, from);
        }
        let (addr, key) = if region.len() == 0 {
            (0, 0)
        } else {
            match self.register_recv(&region) {
                Ok(at) => at,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot register a receive buffer");
                    return self.emit(Completion::TransferFailed {
                        group,
                        peer: from,
                        error: "memory registration failed",
                    });
                }
            }
        };
        let len = region.len() as u64;
        let slot = self.core_mut().slots.insert(group, from, region);
        let credit = Credit {
            group,
            slot,
            len,
            addr,
            key,
        };
        tracing::trace!(group = group.0, from = from.0, slot, len, "receive posted");
        self.send_ctrl(from, ControlMessage::Credit(credit));
    }

    /// Post what waited for room, in order, per peer.
    fn retry_backlogs(&mut self) {
        let ids: Vec<NodeId> = self
            .core()
            .peers
            .iter()
            .filter(|(_, p)| !p.down && (!p.ctrl_backlog.is_empty() || !p.write_backlog.is_empty()))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            while let Some(bytes) = self.core().peers[&id].ctrl_backlog.front().copied() {
                match self.try_send_ctrl(id, &bytes) {
                    Ok(Posted::Yes) => {
                        self.core_mut().peer_mut(id).ctrl_backlog.pop_front();
                    }
                    Ok(Posted::Again) => break,
                    Err(e) => {
                        self.peer_failed(id, &e.to_string());
                        break;
                    }
                }
            }
            while !self.core().peers[&id].down
                && self.core().peers[&id].link.writes_in_flight() < WRITES_IN_FLIGHT
            {
                let Some(op) = self.core_mut().peer_mut(id).write_backlog.pop_front() else {
                    break;
                };
                match self.try_write(id, op) {
                    Ok(None) => {}
                    Ok(Some(op)) => {
                        self.core_mut().peer_mut(id).write_backlog.push_front(op);
                        break;
                    }
                    Err(e) => {
                        self.peer_failed(id, &e.to_string());
                        break;
                    }
                }
            }
        }
    }

    /// A control message from `from` arrived in `bytes`: act on it (a
    /// malformed one fails the peer).
    fn on_ctrl_message(&mut self, from: NodeId, bytes: &[u8; MSG_LEN]) {
        match ControlMessage::decode(bytes) {
            Ok(c) => self.on_control(from, c),
            Err(err) => {
                tracing::warn!(peer = from.0, error = %err, "malformed control message");
                self.peer_failed(from, "malformed control message");
            }
        }
    }

    /// Act on control message `c` from `from`.
    fn on_control(&mut self, from: NodeId, c: ControlMessage) {
        match c {
            ControlMessage::Signal { group, signal } => self.emit(Completion::Signal {
                group,
                from,
                signal,
            }),
            ControlMessage::Credit(credit) => self.core_mut().slots.add_credit(from, credit),
            ControlMessage::BlockHeader {
                group,
                slot,
                len,
                immediate,
            } => match self
                .core_mut()
                .slots
                .header(from, group, slot, len, immediate)
            {
                Ok(done) => done.into_iter().for_each(|c| self.emit(c)),
                Err(NoSlot) => {
                    tracing::warn!(peer = from.0, slot, "a block header for no posted receive");
                    self.emit(Completion::TransferFailed {
                        group,
                        peer: from,
                        error: "block without a posted receive",
                    });
                }
            },
            ControlMessage::Heartbeat => {}
        }
    }

    /// Send heartbeats to peers not written to lately; declare peers silent
    /// for the failure timeout down.
    fn check_liveness(&mut self) {
        let now = Instant::now();
        let core = self.core_mut();
        core.next_liveness_check = now + core.liveness.check_interval();
        let live = core.peers.iter().filter(|(_, p)| !p.down);
        let check = core
            .liveness
            .check(now, live.map(|(&id, p)| (id, &p.clock)));
        if self.core().flushing.is_none() {
            for id in check.heartbeats {
                self.send_ctrl(id, ControlMessage::Heartbeat);
            }
        }
        for id in check.silent {
            let why = self.core().liveness.silence_reason();
            self.peer_failed(id, &why);
        }
    }

    /// `peer` is gone: close its link, drop what was posted for it, and
    /// tell the runtime — once.
    fn peer_failed(&mut self, peer: NodeId, why: &str) {
        let flushing = self.core().flushing.is_some();
        let Some(p) = self.core_mut().peers.get_mut(&peer) else {
            return;
        };
        if p.down {
            return;
        }
        if !flushing {
            tracing::warn!(peer = peer.0, reason = why, "peer down");
        }
        p.down = true;
        p.ctrl_backlog.clear();
        p.write_backlog.clear();
        self.close_link(peer);
        self.core_mut().slots.drop_peer(peer);
        self.emit(Completion::PeerDown { node: peer });
    }

    /// Whether a flush is complete (or timed out); answers it if so.
    fn flush_done(&mut self) -> bool {
        let Some(deadline) = self.core().flush_deadline() else {
            return false;
        };
        let idle = self.core().peers.values().all(Peer::idle);
        if !idle && Instant::now() < deadline {
            return false;
        }
        if !idle {
            tracing::warn!("gave up flushing the {}", Self::QUEUES);
        }
        if let Some((done, _)) = self.core_mut().flushing.take() {
            let _ = done.send(());
        }
        true
    }
}
