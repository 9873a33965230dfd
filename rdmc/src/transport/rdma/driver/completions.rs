//! Reading the completion queue — each completion matched to its work
//! request by the id it carries — a failed peer's QP destroyed, and the end
//! of the driver. (Silence, what else goes with a failed peer, and the
//! flush are [`FabricDriver`]'s.)

use sideway::ibverbs::completion::{WorkCompletionOperationType, WorkCompletionStatus};

use super::{Driver, WrKind, parse_wr_id};
use crate::ids::NodeId;
use crate::transport::Completion;
use crate::transport::fabric_driver::FabricDriver;
use crate::transport::fabric_driver::state::BATCH;

/// The parts of a work completion the driver reads.
#[derive(Clone, Copy, Debug)]
struct Wc {
    wr_id: u64,
    status: u32,
    opcode: u32,
    byte_len: u32,
    imm: u32,
}

impl Driver {
    /// Read every completion there is (a batch at most); how many.
    pub(super) fn poll_cq(&mut self) -> usize {
        let cq = std::sync::Arc::clone(&self.device.cq);
        let mut wcs = Vec::new();
        if let Ok(poller) = cq.start_poll() {
            for wc in poller.take(BATCH) {
                wcs.push(Wc {
                    wr_id: wc.wr_id(),
                    status: wc.status(),
                    opcode: wc.opcode(),
                    byte_len: wc.byte_len(),
                    imm: wc.imm_data(),
                });
            }
        }
        let n = wcs.len();
        for wc in wcs {
            self.on_wc(wc);
        }
        n
    }

    fn on_wc(&mut self, wc: Wc) {
        let Some((kind, peer, index)) = parse_wr_id(wc.wr_id) else {
            tracing::warn!(wr_id = wc.wr_id, "a completion of no work request of ours");
            return;
        };
        let Some(p) = self.core.peers.get_mut(&peer) else {
            return;
        };
        if p.down {
            // Flushed from a QP already torn down: nothing to do but let go
            // of what the request held.
            if kind == WrKind::Write {
                p.link.writes.remove(&wc.wr_id);
            }
            return;
        }
        if wc.status != WorkCompletionStatus::Success as u32 {
            if kind == WrKind::Write
                && let Some(write) = p.link.writes.remove(&wc.wr_id)
            {
                self.emit(Completion::TransferFailed {
                    group: write.op.group,
                    peer,
                    error: "block write failed",
                });
            }
            let status = WorkCompletionStatus::from(wc.status);
            return self.peer_failed(peer, &format!("{kind:?} completed with {status:?}"));
        }
        match kind {
            WrKind::Recv
                if wc.opcode == WorkCompletionOperationType::ReceiveWithImmediate as u32 =>
            {
                // A block write consumed this receive; its memory was not
                // touched.
                self.repost_recv_slot(peer, index as usize);
                let (slot, len) = (u32::from_be(wc.imm), u64::from(wc.byte_len));
                self.written(slot, Some(peer), Some(len));
            }
            WrKind::Recv => self.ctrl_received(peer, index as usize),
            WrKind::Send => self.core.ctrl_sent(peer, index as usize),
            WrKind::Write => {
                if let Some(write) = p.link.writes.remove(&wc.wr_id) {
                    self.write_done(write.op.group, peer);
                }
            }
        }
    }

    /// `peer` is down: move its QP to the error state and destroy it (so
    /// the device touches none of the memory posted for it any more), let
    /// go of what its requests held, and close its rendezvous connection.
    pub(super) fn destroy_qp(&mut self, peer: NodeId) {
        let p = self.core.peer_mut(peer);
        if let Some(mut qp) = p.link.qp.take() {
            if let Err(e) = qp.move_to_error() {
                tracing::debug!(peer = peer.0, error = %e, "moving a failed QP to ERR");
            }
            drop(qp); // ibv_destroy_qp: no request of it is touched after this
        }
        // Every request of the QP is gone with it: what they held can go.
        p.link.writes.clear();
        // Close the rendezvous connection: the peer learns at once.
        if let Some(watcher) = self.watchers.remove(&peer) {
            watcher.abort();
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Destroy the QPs first: peers' requests to them fail, and the
        // device is done with every buffer posted on them.
        for p in self.core.peers.values_mut() {
            drop(p.link.qp.take());
            p.link.writes.clear();
        }
        // Close the rendezvous connections: peers learn at once.
        for (_, watcher) in self.watchers.drain() {
            watcher.abort();
        }
        self.core.slots.clear();
        // Read (and acknowledge) any pending channel event, then drop the
        // reactor's registration of the fd before the channel closes it.
        if let Some(notifier) = self.notifier.take() {
            notifier.get_ref().take_events();
            drop(notifier);
        }
        self.core.free_control_slots();
    }
}
