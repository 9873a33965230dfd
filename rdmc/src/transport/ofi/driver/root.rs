//! Registrations of a root's messages, made once per message for all of
//! its block writes (with `FI_MR_LOCAL`).

use std::sync::Arc;

use super::Driver;
use crate::ids::GroupId;
use crate::transport::BlockRef;
use crate::transport::fabric_driver;
use crate::transport::ofi::fabric::{Access, Mr, OfiError};

/// A root's whole message, registered once for all its block writes (with
/// `FI_MR_LOCAL`).
pub(super) type RootRegistration = fabric_driver::RootRegistration<Mr>;

impl Driver {
    /// The registration of the root's message `block` is part of: cached per
    /// group, so a message is registered once, not per block (the root sends
    /// a group's messages one after another).
    pub(super) fn root_registration(
        &mut self,
        group: GroupId,
        block: &BlockRef,
    ) -> Result<Arc<RootRegistration>, OfiError> {
        let (domain, next_key) = (&self.domain, &mut self.next_key);
        self.core
            .root_registrations
            .get_or_register(group, block, |message| {
                let key = *next_key;
                *next_key += 1;
                // SAFETY: the registration holds a clone of the bytes, so
                // they stay allocated (and unchanged: `Bytes` are immutable)
                // until it is dropped; it is only read, as the source of
                // writes.
                unsafe {
                    Mr::register(
                        domain,
                        message.as_ptr().cast_mut(),
                        message.len(),
                        Access::Source,
                        key,
                    )
                }
            })
    }
}
