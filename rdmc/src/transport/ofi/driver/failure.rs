//! Peers going down: silence past the failure timeout, endpoint events
//! (shutdown, error), and what is dropped when a peer is down.

use tokio::time::Instant;

use super::{Driver, token_peer};
use crate::transport::ofi::fabric::strerror;
use crate::transport::ofi::ffi;
use crate::transport::ofi::wire::ControlMessage;

use crate::ids::NodeId;
use crate::transport::Completion;

impl Driver {
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

    /// Read every EQ event there is: a peer whose endpoint shut down or
    /// failed is down.
    pub(super) fn poll_eq(&mut self) -> usize {
        let mut handled = 0;
        loop {
            // SAFETY: all-zero is a valid value of this plain C struct.
            let mut ev: ffi::Eqe = unsafe { std::mem::zeroed() };
            let mut data = [0u8; 64];
            // SAFETY: the EQ is open; `ev` and `data` are live locals of the
            // sizes given.
            let n = unsafe {
                ffi::rdmc_eq_read(self.eq.0, &mut ev, data.as_mut_ptr().cast(), data.len())
            };
            if n < 0 {
                break;
            }
            handled += 1;
            match ev.event {
                ffi::EV_SHUTDOWN | ffi::EV_ERROR => {
                    if let Some((peer, _)) = token_peer(ev.fid_context) {
                        let why = if ev.event == ffi::EV_SHUTDOWN {
                            "endpoint shut down".to_owned()
                        } else {
                            format!("endpoint error: {}", strerror(ev.err))
                        };
                        self.peer_failed(peer, &why);
                    }
                }
                ffi::EV_CONNREQ => {
                    // Connections are only accepted while the node starts.
                    // SAFETY: the connreq's info is ours to free.
                    unsafe { ffi::rdmc_freeinfo(ev.info) };
                }
                _ => {}
            }
        }
        handled
    }

    /// `peer` is gone: close its endpoints (so the provider touches none of
    /// the memory posted for it any more), drop what was posted for it, and
    /// tell the runtime — once.
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
        for ep in [p.data.take(), p.ctrl.take()].into_iter().flatten() {
            // SAFETY: an open endpoint; shutting it down before closing it.
            unsafe { ffi::rdmc_shutdown(ep.0) };
            drop(ep);
        }
        self.slots.drop_peer(peer);
        self.emit(Completion::PeerDown { node: peer });
    }
}
