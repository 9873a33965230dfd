//! Reading the completion queue — each completion matched to its work
//! request by the id it carries — peers going down (error completions,
//! silence), and the end of the driver.

use sideway::ibverbs::completion::{WorkCompletionOperationType, WorkCompletionStatus};
use tokio::time::Instant;

use super::{BATCH, Driver, Peer, WrKind, parse_wr_id};
use crate::ids::NodeId;
use crate::transport::Completion;
use crate::transport::rdma::wire::ControlMessage;

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
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        if p.down {
            // Flushed from a QP already torn down: nothing to do but let go
            // of what the request held.
            if kind == WrKind::Write {
                p.writes.remove(&wc.wr_id);
            }
            return;
        }
        if wc.status != WorkCompletionStatus::Success as u32 {
            if kind == WrKind::Write
                && let Some(op) = p.writes.remove(&wc.wr_id)
            {
                self.emit(Completion::TransferFailed {
                    group: op.group,
                    peer,
                    error: "block write failed",
                });
            }
            let status = WorkCompletionStatus::from(wc.status);
            return self.peer_failed(peer, &format!("{kind:?} completed with {status:?}"));
        }
        match kind {
            WrKind::Recv => {
                p.clock.heard(Instant::now());
                if wc.opcode == WorkCompletionOperationType::ReceiveWithImmediate as u32 {
                    // A block write consumed this receive; its memory was
                    // not touched.
                    self.repost_recv(peer, index as usize);
                    self.written(peer, u32::from_be(wc.imm), u64::from(wc.byte_len));
                } else {
                    self.on_ctrl_recv(peer, index as usize);
                }
            }
            WrKind::Send => p.free_sends.push(index as usize),
            WrKind::Write => {
                let Some(op) = p.writes.remove(&wc.wr_id) else {
                    return;
                };
                tracing::trace!(group = op.group.0, to = peer.0, "block write complete");
                self.emit(Completion::Sent {
                    group: op.group,
                    to: peer,
                });
            }
        }
    }

    /// Send heartbeats to peers not written to lately; declare peers silent
    /// for the failure timeout down.
    pub(super) fn check_liveness(&mut self) {
        let now = Instant::now();
        self.next_liveness_check = now + self.liveness.check_interval();
        let live = self.peers.iter().filter(|(_, p)| !p.down);
        let check = self
            .liveness
            .check(now, live.map(|(&id, p)| (id, &p.clock)));
        if self.flushing.is_none() {
            for id in check.heartbeats {
                self.send_ctrl(id, ControlMessage::Heartbeat);
            }
        }
        for id in check.silent {
            let why = self.liveness.silence_reason();
            self.peer_failed(id, &why);
        }
    }

    /// `peer` is gone: move its QP to the error state and destroy it (so
    /// the device touches none of the memory posted for it any more), drop
    /// what was posted for it, and tell the runtime — once.
    pub(super) fn peer_failed(&mut self, peer: NodeId, why: &str) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        if p.down {
            return;
        }
        if self.flushing.is_none() {
            tracing::warn!(peer = peer.0, reason = why, "peer down");
        }
        p.down = true;
        p.ctrl_backlog.clear();
        p.write_backlog.clear();
        if let Some(mut qp) = p.qp.take() {
            if let Err(e) = qp.move_to_error() {
                tracing::debug!(peer = peer.0, error = %e, "moving a failed QP to ERR");
            }
            drop(qp); // ibv_destroy_qp: no request of it is touched after this
        }
        // Every request of the QP is gone with it: what they held can go.
        p.writes.clear();
        // Close the rendezvous connection: the peer learns at once.
        if let Some(watcher) = self.watchers.remove(&peer) {
            watcher.abort();
        }
        self.slots.drop_peer(peer);
        self.emit(Completion::PeerDown { node: peer });
    }

    /// Whether a flush is complete (or timed out); answers it if so.
    pub(super) fn flush_done(&mut self) -> bool {
        let Some((_, deadline)) = &self.flushing else {
            return false;
        };
        let idle = self.peers.values().all(Peer::idle);
        if !idle && Instant::now() < *deadline {
            return false;
        }
        if !idle {
            tracing::warn!("gave up flushing the queue pairs");
        }
        if let Some((done, _)) = self.flushing.take() {
            let _ = done.send(());
        }
        true
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Destroy the QPs first: peers' requests to them fail, and the
        // device is done with every buffer posted on them.
        for p in self.peers.values_mut() {
            drop(p.qp.take());
            p.writes.clear();
        }
        // Close the rendezvous connections: peers learn at once.
        for (_, watcher) in self.watchers.drain() {
            watcher.abort();
        }
        self.slots.clear();
        // Read (and acknowledge) any pending channel event, then drop the
        // reactor's registration of the fd before the channel closes it.
        if let Some(notifier) = self.notifier.take() {
            notifier.get_ref().take_events();
            drop(notifier);
        }
        drop(self.control_slots.take());
    }
}
