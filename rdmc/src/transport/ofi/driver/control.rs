//! The registered slots control messages are sent from and received into:
//! libfabric's registration of them. (Posting them is [`ops`](super::ops)'s;
//! queueing them in order per peer, and acting on what arrives, are
//! [`FabricDriver`]'s.)

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use super::CTRL_RECVS;
use crate::transport::fabric_driver::ControlSlots;
#[cfg(doc)]
use crate::transport::fabric_driver::FabricDriver;
use crate::transport::ofi::fabric::{Access, Domain, Mr, OfiError};

/// Registered memory for control messages: per peer, `CTRL_RECVS` receive
/// slots then `CTRL_SENDS` send slots, `MSG_LEN` bytes each.
pub(crate) type ControlPool = ControlSlots<Mr>;

impl ControlPool {
    /// A pool for peers with ids `0..nodes`, registered with `domain`.
    pub(crate) fn new(domain: &Arc<Domain>, nodes: usize, key: u64) -> Result<Self, OfiError> {
        ControlSlots::registered(nodes, CTRL_RECVS, |ptr, len| {
            // SAFETY: the memory lives until the pool is dropped, which
            // drops the MR first.
            unsafe { Mr::register(domain, ptr, len, Access::Local, key) }
        })
    }

    pub(crate) fn desc(&self) -> *mut c_void {
        self.registration().map_or(ptr::null_mut(), Mr::desc)
    }
}
