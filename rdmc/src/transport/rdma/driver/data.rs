//! Block transfers: the sender's block writes posted, and registrations of
//! receive buffers and of a root's messages. (The receiver's slots and
//! credits, landed writes, writes queued for room, and block headers are
//! [`FabricDriver`]'s; a block is delivered once its header and its write
//! are both in.)

use std::sync::Arc;

use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::queue_pair::{
    PostSendGuard, QueuePair, SetScatterGatherEntry, WorkRequestFlags,
};

use super::{Driver, WrKind, wr_id};
use crate::ids::{GroupId, NodeId};
#[cfg(doc)]
use crate::transport::fabric_driver::FabricDriver;
use crate::transport::fabric_driver::state::buffer_registration;
use crate::transport::fabric_driver::{self, WriteOp};
use crate::transport::rdma::verbs::{Mr, RdmaError, error_chain, verbs_err};
use crate::transport::{BlockRef, MessageBuffer};

/// A block write in flight.
#[derive(Debug)]
pub(crate) struct PostedWrite {
    pub(super) op: WriteOp,
    /// The root message's registration, kept while the write is in flight.
    pub(super) _root: Option<Arc<RootRegistration>>,
}

/// A root's whole message, registered once for all its block writes.
pub(crate) type RootRegistration = fabric_driver::RootRegistration<Mr>;

impl Driver {
    /// Register (once) the buffer a region belongs to; its (lkey, rkey).
    pub(super) fn buffer_mr(&mut self, buf: &MessageBuffer) -> Result<(u32, u32), RdmaError> {
        let device = &self.device;
        let mr = buffer_registration(
            buf,
            |mr: &Mr| device.owns(mr),
            || verbs_err("ibv_reg_mr", "the buffer is registered with another device"),
            |buf| {
                // SAFETY: the registration (of the whole allocation) is
                // kept by the buffer itself, which drops it before freeing
                // its memory, or hands memory and registration over together
                // to the node's pool (`MessageBuffer::drop`); a slot keeps
                // the buffer alive while a write into it may be outstanding.
                unsafe {
                    device.register(
                        buf.as_ptr(),
                        buf.capacity(),
                        AccessFlags::LocalWrite | AccessFlags::RemoteWrite,
                    )
                }
            },
        )?;
        Ok((mr.lkey(), mr.rkey()))
    }

    /// The registration of the root's message `block` is part of: cached per
    /// group, so a message is registered once, not per block.
    fn root_registration(
        &mut self,
        group: GroupId,
        block: &BlockRef,
    ) -> Result<Arc<RootRegistration>, RdmaError> {
        let device = &self.device;
        self.core
            .root_registrations
            .get_or_register(group, block, |message| {
                // SAFETY: the registration holds a clone of the bytes, so
                // they stay allocated (and unchanged: `Bytes` are immutable)
                // until it is dropped; it is only read (no access flags:
                // local read), as the source of writes, so read-only memory
                // can be registered too.
                unsafe { device.register(message.as_ptr(), message.len(), AccessFlags::none()) }
            })
    }

    /// Post one block write; `Ok(Some(op))` if there is no room now.
    pub(super) fn post_block_write(
        &mut self,
        to: NodeId,
        op: WriteOp,
    ) -> Result<Option<WriteOp>, RdmaError> {
        let (lkey, root) = match op.block.buffer() {
            Some(buf) => (self.buffer_mr(buf)?.0, None),
            None => {
                let reg = self.root_registration(op.group, &op.block)?;
                (reg.mr.lkey(), Some(reg))
            }
        };
        let src = op.block.as_slice();
        let (src_addr, len) = (src.as_ptr() as u64, src.len() as u32);
        let credit = op.credit;
        let n = self.next_write;
        self.next_write = self.next_write.wrapping_add(1);
        let id = wr_id(WrKind::Write, to, n);
        let peer = self.core.peers.get_mut(&to).expect("usable peers exist");
        let qp = peer.link.qp.as_mut().expect("usable peers have a QP");
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
        peer.link.writes.insert(id, PostedWrite { op, _root: root });
        Ok(None)
    }
}
