//! Registrations of a root's messages, made once per message for all of
//! its block writes (with `FI_MR_LOCAL`).

use super::Driver;
use std::sync::Arc;

use crate::transport::ofi::fabric::{Access, Mr, OfiError};

use crate::ids::GroupId;
use crate::transport::BlockRef;

/// A root's whole message, registered once for all its block writes (with
/// `FI_MR_LOCAL`). Holds the bytes, so they outlive the registration.
pub(super) struct RootRegistration {
    pub(super) mr: Mr,
    pub(super) message: bytes::Bytes,
}

impl Driver {
    /// The registration of the root's message `block` is part of: cached per
    /// group, so a message is registered once, not per block (the root sends
    /// a group's messages one after another).
    pub(super) fn root_registration(
        &mut self,
        group: GroupId,
        block: &BlockRef,
    ) -> Result<Arc<RootRegistration>, OfiError> {
        let message = block.message().expect("a root's block").clone();
        if let Some(reg) = self.root_registrations.get(&group)
            && reg.message.as_ptr() == message.as_ptr()
            && reg.message.len() == message.len()
        {
            return Ok(Arc::clone(reg));
        }
        let key = self.next_key;
        self.next_key += 1;
        // SAFETY: the registration holds a clone of the bytes, so they stay
        // allocated (and unchanged: `Bytes` are immutable) until it is
        // dropped; it is only read, as the source of writes.
        let mr = unsafe {
            Mr::register(
                &self.domain,
                message.as_ptr().cast_mut(),
                message.len(),
                Access::Source,
                key,
            )
        }?;
        let reg = Arc::new(RootRegistration { mr, message });
        self.root_registrations.insert(group, Arc::clone(&reg));
        Ok(reg)
    }
}
