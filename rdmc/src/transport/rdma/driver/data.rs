//! Block transfers: the receiver's slots and credits, the sender's block
//! writes (posted, or queued for room), registrations of receive buffers
//! and of a root's messages, and delivery once a block's header and its
//! write are both in.

use std::sync::Arc;

use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::queue_pair::{
    PostSendGuard, QueuePair, SetScatterGatherEntry, WorkRequestFlags,
};

use super::control::Posted;
use super::{Driver, WRITES_IN_FLIGHT, WrKind, wr_id};
use crate::ids::{GroupId, NodeId};
use crate::transport::rdma::verbs::{Mr, RdmaError, error_chain, verbs_err};
use crate::transport::rdma::wire::{ControlMessage, Credit};
use crate::transport::slots::NoSlot;
use crate::transport::{BlockRef, Completion, MessageBuffer, RecvRegion};

/// A block write waiting for room, or in flight.
#[derive(Debug)]
pub(crate) struct WriteOp {
    pub(super) group: GroupId,
    /// The bytes, kept alive until the write completes.
    pub(super) block: BlockRef,
    pub(super) credit: Credit,
    /// The root message's registration, kept while the write is in flight.
    pub(super) _root: Option<Arc<RootRegistration>>,
}

/// A root's whole message, registered once for all its block writes.
/// Holds the bytes, so they outlive the registration.
#[derive(Debug)]
pub(crate) struct RootRegistration {
    pub(super) mr: Mr,
    pub(super) message: bytes::Bytes,
}

impl Driver {
    /// Register (once) the buffer a region belongs to; its (lkey, rkey).
    fn buffer_mr(&mut self, buf: &Arc<MessageBuffer>) -> Result<(u32, u32), RdmaError> {
        if let Some(reg) = buf.registration().get() {
            return match reg.downcast_ref::<Mr>() {
                Some(mr) if self.device.owns(mr) => Ok((mr.lkey(), mr.rkey())),
                _ => Err(verbs_err(
                    "ibv_reg_mr",
                    "the buffer is registered with another device",
                )),
            };
        }
        // SAFETY: the registration (of the whole allocation) is stored in
        // the buffer itself, which drops it before freeing its memory, or
        // hands memory and registration over together to the node's pool
        // (`MessageBuffer::drop`); a slot keeps the buffer alive while a
        // write into it may be outstanding.
        let mr = unsafe {
            self.device.register(
                buf.as_ptr(),
                buf.capacity(),
                AccessFlags::LocalWrite | AccessFlags::RemoteWrite,
            )
        }?;
        let keys = (mr.lkey(), mr.rkey());
        let _ = buf.registration().set(Box::new(mr));
        Ok(keys)
    }

    /// The registration of the root's message `block` is part of: cached per
    /// group, so a message is registered once, not per block.
    fn root_registration(
        &mut self,
        group: GroupId,
        block: &BlockRef,
    ) -> Result<Arc<RootRegistration>, RdmaError> {
        let message = block.message().expect("a root's block").clone();
        if let Some(reg) = self.root_registrations.get(&group)
            && reg.message.as_ptr() == message.as_ptr()
            && reg.message.len() == message.len()
        {
            return Ok(Arc::clone(reg));
        }
        // SAFETY: the registration holds a clone of the bytes, so they stay
        // allocated (and unchanged: `Bytes` are immutable) until it is
        // dropped; it is only read (no access flags: local read), as the
        // source of writes, so read-only memory can be registered too.
        let mr = unsafe {
            self.device
                .register(message.as_ptr(), message.len(), AccessFlags::none())
        }?;
        let reg = Arc::new(RootRegistration { mr, message });
        self.root_registrations.insert(group, Arc::clone(&reg));
        Ok(reg)
    }

    /// The receiver's half of a block transfer: register the memory, keep
    /// the region in a slot, and give the peer a credit for it.
    pub(super) fn post_recv(&mut self, group: GroupId, from: NodeId, region: RecvRegion) {
        if !self.usable(from) {
            return self.unreachable(group, from);
        }
        let (addr, key) = if region.len() == 0 {
            (0, 0)
        } else {
            let buf = Arc::clone(region.buffer());
            match self.buffer_mr(&buf) {
                Ok((_, rkey)) => (buf.as_ptr() as u64 + region.offset() as u64, rkey),
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
        let slot = self.slots.insert(group, from, region);
        let credit = Credit {
            group,
            slot,
            len,
            addr,
            key: u64::from(key),
        };
        tracing::trace!(group = group.0, from = from.0, slot, len, "receive posted");
        self.send_ctrl(from, ControlMessage::Credit(credit));
    }

    pub(super) fn release(&mut self, group: GroupId) {
        self.slots.release(group);
        self.root_registrations.remove(&group);
    }

    /// The sender's half: take the receiver's credit, send the block's
    /// header, and write the block there with the slot as immediate.
    pub(super) fn post_send(
        &mut self,
        group: GroupId,
        to: NodeId,
        block: BlockRef,
        immediate: u64,
    ) {
        if !self.usable(to) {
            return self.unreachable(group, to);
        }
        let Some(credit) = self.slots.take_credit(to, group) else {
            return self.emit(Completion::TransferFailed {
                group,
                peer: to,
                error: "the receiver posted no receive",
            });
        };
        let len = block.len() as u64;
        if len > credit.len || u32::try_from(len).is_err() {
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
            _root: None,
        };
        let peer = self.peers.get_mut(&to).expect("usable peers exist");
        if peer.write_backlog.is_empty() && peer.writes.len() < WRITES_IN_FLIGHT {
            match self.try_write(to, op) {
                Ok(None) => {}
                Ok(Some(op)) => self.peer_mut(to).write_backlog.push_back(op),
                Err(e) => self.peer_failed(to, &e.to_string()),
            }
        } else {
            peer.write_backlog.push_back(op);
        }
    }

    /// Post one block write; `Ok(Some(op))` if there is no room now.
    pub(super) fn try_write(
        &mut self,
        to: NodeId,
        mut op: WriteOp,
    ) -> Result<Option<WriteOp>, RdmaError> {
        let lkey = match op.block.buffer() {
            Some(buf) => {
                let buf = Arc::clone(buf);
                self.buffer_mr(&buf)?.0
            }
            None => {
                let reg = self.root_registration(op.group, &op.block)?;
                let lkey = reg.mr.lkey();
                op._root = Some(reg);
                lkey
            }
        };
        let src = op.block.as_slice();
        let (src_addr, len) = (src.as_ptr() as u64, src.len() as u32);
        let credit = op.credit;
        let n = self.next_write;
        self.next_write = self.next_write.wrapping_add(1);
        let id = wr_id(WrKind::Write, to, n);
        let peer = self.peers.get_mut(&to).expect("usable peers exist");
        let qp = peer.qp.as_mut().expect("usable peers have a QP");
        let mut guard = qp.0.start_post_send();
        let wr = guard
            .construct_wr(id, WorkRequestFlags::Signaled)
            .setup_write_imm(credit.key as u32, credit.addr, credit.slot.to_be());
        // SAFETY: the source bytes are registered (`lkey`) and kept alive,
        // with their registration, by `op` in the peer's in-flight writes
        // until the write's completion; the remote address and key come
        // from the receiver's credit, and the device checks them against
        // its registration.
        unsafe { wr.setup_sge(lkey, src_addr, len) };
        match guard.post() {
            Ok(()) => {}
            Err(sideway::ibverbs::queue_pair::PostSendError::NotEnoughResources(_)) => {
                return Ok(Some(op));
            }
            Err(e) => return Err(verbs_err("ibv_post_send", error_chain(&e))),
        }
        tracing::trace!(
            group = op.group.0,
            to = to.0,
            slot = credit.slot,
            len,
            "block write posted"
        );
        peer.writes.insert(id, op);
        Ok(None)
    }

    /// Post what waited for room, in order, per peer.
    pub(super) fn retry_backlogs(&mut self) {
        let ids: Vec<NodeId> = self
            .peers
            .iter()
            .filter(|(_, p)| !p.down && (!p.ctrl_backlog.is_empty() || !p.write_backlog.is_empty()))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            while let Some(bytes) = self.peers[&id].ctrl_backlog.front().copied() {
                match self.try_send_ctrl(id, &bytes) {
                    Ok(Posted::Yes) => {
                        self.peer_mut(id).ctrl_backlog.pop_front();
                    }
                    Ok(Posted::Again) => break,
                    Err(e) => {
                        self.peer_failed(id, &e.to_string());
                        break;
                    }
                }
            }
            while !self.peers[&id].down && self.peers[&id].writes.len() < WRITES_IN_FLIGHT {
                let Some(op) = self.peer_mut(id).write_backlog.pop_front() else {
                    break;
                };
                match self.try_write(id, op) {
                    Ok(None) => {}
                    Ok(Some(op)) => {
                        self.peer_mut(id).write_backlog.push_front(op);
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

    /// A block header arrived for `slot`.
    pub(super) fn on_block_header(
        &mut self,
        from: NodeId,
        group: GroupId,
        slot: u32,
        len: u64,
        immediate: u64,
    ) {
        match self.slots.header(from, group, slot, len, immediate) {
            Ok(done) => done.into_iter().for_each(|c| self.emit(c)),
            Err(NoSlot) => {
                tracing::warn!(peer = from.0, slot, "a block header for no posted receive");
                self.emit(Completion::TransferFailed {
                    group,
                    peer: from,
                    error: "block without a posted receive",
                });
            }
        }
    }

    /// A block write of `len` bytes with immediate `slot` (host order) landed.
    pub(super) fn written(&mut self, from: NodeId, slot: u32, len: u64) {
        match self.slots.written(slot, Some(from), Some(len)) {
            Ok((_, done)) => done.into_iter().for_each(|c| self.emit(c)),
            Err(NoSlot) => {
                tracing::warn!(peer = from.0, slot, "a write landed in no posted receive");
                self.peer_failed(from, "a block write into no posted receive");
            }
        }
    }
}
