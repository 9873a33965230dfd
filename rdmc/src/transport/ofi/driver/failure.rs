//! Peers going down: endpoint events (shutdown, error), read with the
//! connection manager's other events (which [`join`](super::join) acts
//! on). (Silence past the failure timeout, and what is closed and dropped
//! when a peer is down, are [`FabricDriver`]'s.)

use super::Driver;
use super::cm::read_event;
#[cfg(doc)]
use crate::transport::fabric_driver::FabricDriver;

impl Driver {
    /// Read every EQ event there is: a peer whose endpoint shut down or
    /// failed is down; a restarted peer's connections are accepted.
    pub(super) fn poll_eq(&mut self) -> usize {
        let mut handled = 0;
        loop {
            match read_event(&self.eq) {
                Ok(Some(event)) => self.on_cm_event(event),
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the event queue");
                    break;
                }
            }
            handled += 1;
        }
        handled
    }
}
