//! Reading the completion queue: each completion (or error completion)
//! is matched to its operation by the context handed back.

use super::{Driver, Op, OpCtx};
use crate::ids::NodeId;
use crate::transport::Completion;
use crate::transport::fabric_driver::FabricDriver;
use crate::transport::fabric_driver::state::BATCH;
use crate::transport::ofi::fabric::strerror;
use crate::transport::ofi::ffi;

impl Driver {
    /// Read every completion there is (a batch at most); how many.
    pub(super) fn poll_cq(&mut self) -> usize {
        let mut handled = 0;
        // SAFETY: all-zero is a valid value of these plain C structs.
        let mut entries: [ffi::Cqe; 32] = unsafe { std::mem::zeroed() };
        while handled < BATCH {
            // SAFETY: the CQ is open; `entries` has room for 32 entries.
            let n = unsafe { ffi::rdmc_cq_read(self.cq.0, entries.as_mut_ptr(), entries.len()) };
            if n == -(ffi::FI_EAGAIN as isize) {
                break;
            }
            if n == -(ffi::FI_EAVAIL as isize) {
                self.read_cq_error();
                handled += 1;
                continue;
            }
            if n < 0 {
                tracing::warn!(error = %strerror((-n) as i32), "fi_cq_read failed");
                break;
            }
            for e in &entries[..n as usize] {
                self.on_cqe(*e);
            }
            handled += n as usize;
        }
        handled
    }

    pub(super) fn on_cqe(&mut self, e: ffi::Cqe) {
        let remote_data = e.flags & ffi::FI_REMOTE_CQ_DATA != 0;
        if e.op_context.is_null() {
            // A peer's block write landed in one of our slots (remote
            // completions carry no context unless they consumed a receive).
            if remote_data {
                self.write_landed(e.data);
            }
            return;
        }
        // Classify by our own context, not by the flags: some providers
        // (sockets) also flag the initiator's completion of a write with
        // immediate data as FI_REMOTE_CQ_DATA.
        // SAFETY: every operation we post carries a context from
        // `OpCtx::boxed`, handed back exactly once, here.
        let op = unsafe { OpCtx::take(e.op_context) };
        if self.stale(&op) {
            return;
        }
        match op {
            Op::DataRecv { peer, .. } => {
                // With FI_RX_CQ_DATA, a peer's write consumed this receive.
                self.repost_data_recv(peer);
                if remote_data {
                    self.write_landed(e.data);
                }
            }
            Op::CtrlRecv { peer, slot, .. } => self.ctrl_received(peer, slot),
            Op::CtrlSend { peer, slot, .. } => self.core.ctrl_sent(peer, slot),
            Op::Write { peer, group, .. } => {
                self.write_ended(peer);
                self.write_done(group, peer);
            }
        }
    }

    pub(super) fn read_cq_error(&mut self) {
        // SAFETY: all-zero is a valid value of this plain C struct.
        let mut err: ffi::CqErr = unsafe { std::mem::zeroed() };
        // SAFETY: the CQ is open; `err` is a live local.
        let n = unsafe { ffi::rdmc_cq_readerr(self.cq.0, &mut err) };
        if n < 0 {
            return;
        }
        let message: String = err
            .message
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8 as char)
            .collect();
        if err.op_context.is_null() {
            tracing::warn!(error = %message, "error completion without a context");
            return;
        }
        // SAFETY: as in `on_cqe`: our context, handed back once.
        let op = unsafe { OpCtx::take(err.op_context) };
        if self.stale(&op) {
            return;
        }
        let cancelled = err.err == ffi::FI_ECANCELED;
        let peer = match op {
            Op::CtrlRecv { peer, .. } | Op::DataRecv { peer, .. } => peer,
            Op::CtrlSend { peer, slot, .. } => {
                self.core.ctrl_sent(peer, slot);
                peer
            }
            Op::Write { peer, group, .. } => {
                self.write_ended(peer);
                if !cancelled {
                    self.emit(Completion::TransferFailed {
                        group,
                        peer,
                        error: "block write failed",
                    });
                }
                peer
            }
        };
        if !cancelled {
            self.peer_failed(peer, &message);
        }
    }

    /// Whether `op` was posted on endpoints since replaced (a restarted
    /// peer's older run's): what it held is dropped, nothing else.
    fn stale(&self, op: &Op) -> bool {
        let (peer, generation) = op.peer_gen();
        self.core
            .peers
            .get(&peer)
            .is_some_and(|p| p.link.generation != generation)
    }

    /// A block write to `peer` completed, or failed.
    fn write_ended(&mut self, peer: NodeId) {
        if let Some(p) = self.core.peers.get_mut(&peer) {
            p.link.writes_in_flight -= 1;
        }
    }
}
