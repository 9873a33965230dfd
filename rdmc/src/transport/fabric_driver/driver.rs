//! What a fabric driver does whatever its fabric, as the provided methods
//! of [`FabricDriver`]: the runtime's commands, the send path (a usable
//! peer, a credit taken, the header sent, the write posted or queued for
//! room), the receive path (a slot kept, its credit sent), control
//! messages sent in order and acted on, landed writes, failure detection,
//! peers going down and the flush. A driver implements the trait's
//! required methods with its fabric's primitives.

use std::fmt::Display;
use std::future::Future;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::endpoint::Cmd;
use super::slots::NoSlot;
use super::state::{BATCH, Core, Peer, PeerLink, Posted, WRITES_IN_FLIGHT, WriteOp};
use super::wire::{ControlMessage, Credit, MSG_LEN};
use crate::ids::{GroupId, NodeId};
use crate::transport::{BlockRef, Completion, RecvRegion};

/// A driver task of a transport over an RDMA-style fabric: its fabric's
/// primitives, and the logic the drivers share as provided methods.
pub(crate) trait FabricDriver: Sized {
    /// The fabric's connection to a peer.
    type Link: PeerLink;
    /// The driver's own commands.
    type Extra;
    /// The fabric's registration of memory.
    type Registration;
    /// What a failed post says.
    type Error: Display;
    /// What woke a sleeping driver, besides a command or a timer.
    type Wake;
    /// What a flush waits to be idle, for the logs.
    const QUEUES: &'static str;
    /// The longest block one write can carry.
    const MAX_WRITE: u64;

    /// The shared state.
    fn core(&self) -> &Core<Self::Link, Self::Extra, Self::Registration>;
    /// The shared state, to change.
    fn core_mut(&mut self) -> &mut Core<Self::Link, Self::Extra, Self::Registration>;

    /// Post the control message in send slot `slot` of `to` (a usable
    /// peer), which is at `at` and written; `Posted::Again` if there is no
    /// room now.
    fn post_ctrl_send(
        &mut self,
        to: NodeId,
        slot: usize,
        at: *mut u8,
    ) -> Result<Posted, Self::Error>;

    /// Post receive slot `slot` of `peer` (an up peer) again.
    fn post_recv_slot(&mut self, peer: NodeId, slot: usize) -> Result<(), Self::Error>;

    /// Post one block write to `to` (a usable peer); `Ok(Some(op))` if
    /// there is no room now.
    fn post_write(&mut self, to: NodeId, op: WriteOp) -> Result<Option<WriteOp>, Self::Error>;

    /// Register the memory of `region` (not empty) for the peer's write:
    /// the (address, key) its credit carries.
    fn register_recv(&mut self, region: &RecvRegion) -> Result<(u64, u64), String>;

    /// `peer` is down: close its link, so the fabric touches none of the
    /// memory posted for it any more, and drop what its operations held.
    fn close_link(&mut self, peer: NodeId);

    /// Act on one of the driver's own commands.
    fn on_extra(&mut self, extra: Self::Extra);

    /// Read the fabric's completions (and events) there are, a batch at
    /// most: how many.
    fn poll(&mut self) -> usize;

    /// About to sleep: ask the fabric to wake the driver when a completion
    /// comes; `false` if one came meanwhile (read it first).
    fn arm(&mut self) -> bool;

    /// The commands, and what wakes the driver from the fabric's side: a
    /// completion (or an event) to read, or what else the fabric watches.
    fn wake_sources(
        &mut self,
    ) -> (
        &mut mpsc::UnboundedReceiver<Cmd<Self::Extra>>,
        impl Future<Output = Self::Wake> + Send + '_,
    );

    /// Act on what woke the driver from the fabric's side.
    fn on_wake(&mut self, wake: Self::Wake);

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
                let core = self.core_mut();
                let released = core.slots.release(group);
                core.root_registrations.remove(group);
                for peer in released.revoke {
                    self.send_ctrl_if_usable(peer, ControlMessage::Revoke { group });
                }
                for (peer, slot) in released.give_back {
                    self.send_ctrl_if_usable(peer, ControlMessage::Returned { group, slot });
                }
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

    /// Queue a control message to `to` if it is usable (else nothing: a
    /// peer gone needs it no more).
    fn send_ctrl_if_usable(&mut self, to: NodeId, msg: ControlMessage) {
        if self.core().usable(to) {
            self.send_ctrl(to, msg);
        }
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

    /// Post `bytes` to `to` (a usable peer) from a free control send slot;
    /// `Posted::Again` if there is none, or no room.
    fn try_send_ctrl(&mut self, to: NodeId, bytes: &[u8; MSG_LEN]) -> Result<Posted, Self::Error> {
        let core = self.core_mut();
        let Some(slot) = core.peer_mut(to).free_sends.pop() else {
            return Ok(Posted::Again);
        };
        let slots = core.control_slots();
        let (index, at) = slots.send_slot(to, slot);
        slots.write(index, bytes);
        let posted = self.post_ctrl_send(to, slot, at);
        let peer = self.core_mut().peer_mut(to);
        match posted {
            Ok(Posted::Yes) => peer.clock.sent(Instant::now()),
            Ok(Posted::Again) | Err(_) => peer.free_sends.push(slot),
        }
        posted
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

    /// Post one block write to `to` (a usable peer); `Ok(Some(op))` if
    /// there is no room now.
    fn try_write(&mut self, to: NodeId, op: WriteOp) -> Result<Option<WriteOp>, Self::Error> {
        let (group, slot, len) = (op.group, op.credit.slot, op.block.len());
        let unposted = self.post_write(to, op)?;
        if unposted.is_none() {
            tracing::trace!(group = group.0, to = to.0, slot, len, "block write posted");
        }
        Ok(unposted)
    }

    /// A block write to `peer` completed.
    fn write_done(&self, group: GroupId, peer: NodeId) {
        tracing::trace!(group = group.0, to = peer.0, "block write complete");
        self.emit(Completion::Sent { group, to: peer });
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

    /// A block write landed in receive slot `slot` — from `from` and of
    /// `len` bytes, if the fabric says — completing its block if its header
    /// is in too. A write into no posted receive fails its peer, if known.
    fn written(&mut self, slot: u32, from: Option<NodeId>, len: Option<u64>) {
        match self.core_mut().slots.written(slot, from, len) {
            Ok((from, done)) => {
                self.core_mut().heard(from);
                done.into_iter().for_each(|c| self.emit(c));
            }
            Err(NoSlot) => match from {
                Some(from) => {
                    tracing::warn!(peer = from.0, slot, "a write landed in no posted receive");
                    self.peer_failed(from, "a block write into no posted receive");
                }
                None => tracing::warn!(slot, "a write landed in no posted receive"),
            },
        }
    }

    /// A control message from `peer` arrived in its receive slot `slot`:
    /// post the slot again and act on the message.
    fn ctrl_received(&mut self, peer: NodeId, slot: usize) {
        self.core_mut().heard(peer);
        let slots = self.core().control_slots();
        let bytes = slots.read(slots.recv_slot(peer, slot).0);
        self.repost_recv_slot(peer, slot);
        self.on_ctrl_message(peer, &bytes);
    }

    /// Post receive slot `slot` of `peer` again, if the peer is up (a
    /// failure fails the peer).
    fn repost_recv_slot(&mut self, peer: NodeId, slot: usize) {
        if self.core_mut().up(peer).is_none() {
            return;
        }
        if let Err(e) = self.post_recv_slot(peer, slot) {
            self.peer_failed(peer, &e.to_string());
        }
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
            self.retry_ctrl_backlog(id);
            self.retry_write_backlog(id);
        }
    }

    /// Post the control messages waiting for `id`, in order, while there is
    /// room.
    fn retry_ctrl_backlog(&mut self, id: NodeId) {
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
    }

    /// Post the block writes waiting for `id`, in order, while there is
    /// room.
    fn retry_write_backlog(&mut self, id: NodeId) {
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
            ControlMessage::Revoke { group } => {
                for slot in self.core_mut().slots.revoke(from, group) {
                    self.send_ctrl_if_usable(from, ControlMessage::Returned { group, slot });
                }
            }
            ControlMessage::Returned { group, slot } => {
                self.core_mut().slots.returned(from, group, slot);
            }
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
        let incarnation = p.link.incarnation();
        self.close_link(peer);
        self.core_mut().slots.drop_peer(peer);
        self.emit(Completion::peer_down(peer, incarnation, why));
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
