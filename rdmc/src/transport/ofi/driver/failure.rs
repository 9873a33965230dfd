//! Peers going down: endpoint events (shutdown, error), and the endpoints
//! of a peer that is down closed. (Silence past the failure timeout, and
//! what else is dropped when a peer is down, are [`FabricDriver`]'s.)

use super::{Driver, token_peer};
use crate::transport::ofi::fabric::strerror;
use crate::transport::ofi::ffi;

use crate::ids::NodeId;
use crate::transport::fabric_driver::state::FabricDriver;

impl Driver {
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

    /// `peer` is down: shut down and close its endpoints, so the provider
    /// touches none of the memory posted for it any more.
    pub(super) fn close_endpoints(&mut self, peer: NodeId) {
        let p = self.core.peer_mut(peer);
        for ep in [p.link.data.take(), p.link.ctrl.take()]
            .into_iter()
            .flatten()
        {
            // SAFETY: an open endpoint; shutting it down before closing it.
            unsafe { ffi::rdmc_shutdown(ep.0) };
            drop(ep);
        }
    }
}
