//! The sender's half of a block transfer: credits taken, block writes
//! posted (or queued for room), and what waited retried.

use super::{Driver, Op, OpCtx, Posted, WRITES_IN_FLIGHT};
use std::ptr;
use std::sync::Arc;

use crate::transport::ofi::fabric::{OfiError, check};
use crate::transport::ofi::ffi;
use crate::transport::ofi::wire::{ControlMessage, Credit};

use crate::ids::{GroupId, NodeId};
use crate::transport::{BlockRef, Completion};

/// A block write waiting for room on its endpoint.
#[derive(Debug)]
pub(super) struct WriteOp {
    pub(super) group: GroupId,
    pub(super) block: BlockRef,
    pub(super) credit: Credit,
}

impl Driver {
    /// The sender's half: take the receiver's credit, write the block there
    /// with the slot as remote CQ data, and send the block's header.
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
        if len > credit.len {
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
        let peer = self.peers.get_mut(&to).expect("usable peers exist");
        if peer.write_backlog.is_empty() && peer.writes_in_flight < WRITES_IN_FLIGHT {
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
        op: WriteOp,
    ) -> Result<Option<WriteOp>, OfiError> {
        let (desc, mr) = match op.block.buffer() {
            Some(buf) => {
                let buf = Arc::clone(buf);
                match self.buffer_mr(&buf) {
                    Ok((desc, _)) => (desc, None),
                    Err(e) => {
                        return Err(OfiError {
                            call: "fi_mr_reg",
                            code: 0,
                            message: e,
                        });
                    }
                }
            }
            None if self.modes.mr_local => {
                let reg = self.root_registration(op.group, &op.block)?;
                (reg.mr.desc(), Some(reg))
            }
            None => (ptr::null_mut(), None),
        };
        let src = op.block.as_slice();
        let (src_ptr, len) = (src.as_ptr(), src.len());
        let credit = op.credit;
        let ctx = OpCtx::boxed(Op::Write {
            peer: to,
            group: op.group,
            _block: op.block.clone(),
            _mr: mr,
        });
        let ep = self.peers[&to]
            .data
            .as_ref()
            .expect("usable peers have endpoints");
        // SAFETY: the endpoint is open; the source bytes are kept alive (and
        // registered, where that is needed) by the context until the write
        // completes; the remote address and key come from the receiver's
        // credit, so the provider checks them against its registration.
        let ret = unsafe {
            ffi::rdmc_writedata(
                ep.0,
                src_ptr.cast(),
                len,
                desc,
                self.cq_data(credit.slot, len),
                credit.addr,
                credit.key,
                ctx,
            )
        };
        if ret < 0 {
            // SAFETY: the post failed, so the provider did not keep the context.
            drop(unsafe { OpCtx::take(ctx) });
            if ret == -(ffi::FI_EAGAIN as isize) {
                return Ok(Some(op));
            }
            check("fi_writedata", ret as i64)?;
        }
        self.peer_mut(to).writes_in_flight += 1;
        tracing::trace!(
            group = op.group.0,
            to = to.0,
            slot = credit.slot,
            len,
            "block write posted"
        );
        Ok(None)
    }

    /// The remote CQ data of a block write: the slot, and — where the
    /// provider carries 8 bytes — the length above it (0: not carried).
    pub(super) fn cq_data(&self, slot: u32, len: usize) -> u64 {
        let len = match u32::try_from(len) {
            Ok(len) if self.len_in_cq_data => u64::from(len),
            _ => 0,
        };
        len << 32 | u64::from(slot)
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
            while !self.peers[&id].down && self.peers[&id].writes_in_flight < WRITES_IN_FLIGHT {
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
}
