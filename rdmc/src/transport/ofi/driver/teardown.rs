//! The end of the driver: the order in which the fabric objects are
//! closed. (The flush that waits for queued work first is
//! [`FabricDriver`]'s.)

use super::{Driver, OpCtx};
#[cfg(doc)]
use crate::transport::fabric_driver::FabricDriver;
use crate::transport::ofi::ffi;

impl Drop for Driver {
    fn drop(&mut self) {
        // Close the endpoints first: peers see them shut down, and the
        // provider is done with every buffer posted on them.
        for p in self.core.peers.values_mut() {
            p.link.close();
        }
        self.close_joins();
        // No more connection requests.
        drop(self.pep.take());
        // Take back the contexts of operations flushed from them.
        loop {
            // SAFETY: all-zero is a valid value of these plain C structs.
            let mut entries: [ffi::Cqe; 32] = unsafe { std::mem::zeroed() };
            // SAFETY: the CQ is still open.
            let n = unsafe { ffi::rdmc_cq_read(self.cq.0, entries.as_mut_ptr(), entries.len()) };
            if n == -(ffi::FI_EAVAIL as isize) {
                // SAFETY: as above.
                let mut err: ffi::CqErr = unsafe { std::mem::zeroed() };
                // SAFETY: the CQ is open; `err` is a live local.
                if unsafe { ffi::rdmc_cq_readerr(self.cq.0, &mut err) } < 0 {
                    break;
                }
                if !err.op_context.is_null() {
                    // SAFETY: our context, handed back once.
                    drop(unsafe { OpCtx::take(err.op_context) });
                }
                continue;
            }
            if n <= 0 {
                break;
            }
            for e in &entries[..n as usize] {
                if !e.op_context.is_null() {
                    // SAFETY: our context, handed back once.
                    drop(unsafe { OpCtx::take(e.op_context) });
                }
            }
        }
        self.core.slots.clear();
        // Deregister the fds from the reactor before the queues close them.
        drop(self.cq_fd.take());
        drop(self.eq_fd.take());
        self.core.free_control_slots();
    }
}
