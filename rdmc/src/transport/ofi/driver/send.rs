//! The sender's half of a block transfer: block writes posted, with the
//! slot (and the length) as remote CQ data. (Credits taken, headers sent,
//! writes queued for room and retried are [`FabricDriver`]'s.)

use std::ptr;

use super::{Driver, Op, OpCtx, WriteOp};
use crate::ids::NodeId;
#[cfg(doc)]
use crate::transport::fabric_driver::FabricDriver;
use crate::transport::ofi::fabric::{OfiError, check};
use crate::transport::ofi::ffi;

impl Driver {
    /// Post one block write; `Ok(Some(op))` if there is no room now.
    pub(super) fn post_block_write(
        &mut self,
        to: NodeId,
        op: WriteOp,
    ) -> Result<Option<WriteOp>, OfiError> {
        let (desc, mr) = match op.block.buffer() {
            Some(buf) => match self.buffer_mr(buf) {
                Ok((desc, _)) => (desc, None),
                Err(message) => {
                    return Err(OfiError {
                        call: "fi_mr_reg",
                        code: 0,
                        message,
                    });
                }
            },
            None if self.modes.mr_local => {
                let reg = self.root_registration(op.group, &op.block)?;
                (reg.mr.desc(), Some(reg))
            }
            None => (ptr::null_mut(), None),
        };
        let src = op.block.as_slice();
        let (src_ptr, len) = (src.as_ptr(), src.len());
        let credit = op.credit;
        let generation = self.core.peers[&to].link.generation;
        let ctx = OpCtx::boxed(Op::Write {
            peer: to,
            generation,
            group: op.group,
            _block: op.block.clone(),
            _mr: mr,
        });
        let ep = self.core.peers[&to]
            .link
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
        self.core.peer_mut(to).link.writes_in_flight += 1;
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
}
