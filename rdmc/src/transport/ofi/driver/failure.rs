//! Peers going down: endpoint events (shutdown, error). (Silence past the
//! failure timeout, and what is closed and dropped when a peer is down, are
//! [`FabricDriver`]'s.)

use super::{Driver, token_peer};
use crate::transport::fabric_driver::FabricDriver;
use crate::transport::ofi::fabric::strerror;
use crate::transport::ofi::ffi;

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
}
