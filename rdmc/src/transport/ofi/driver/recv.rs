//! The receiver's half of a block transfer: buffers registered, data
//! receives reposted, and landed writes' CQ data read. (Slots credited to
//! the sender, and landed writes matched to them, are [`FabricDriver`]'s;
//! a block is delivered once both its write and its header are in.)

use std::ffi::c_void;

use super::{Driver, post_data_recv};
use crate::ids::NodeId;
use crate::transport::MessageBuffer;
use crate::transport::fabric_driver::FabricDriver;
use crate::transport::fabric_driver::state::buffer_registration;
use crate::transport::ofi::fabric::{Access, Mr};

impl Driver {
    /// Register (once) the buffer a region belongs to: its descriptor and
    /// key.
    pub(super) fn buffer_mr(&mut self, buf: &MessageBuffer) -> Result<(*mut c_void, u64), String> {
        let (domain, next_key) = (&self.domain, &mut self.next_key);
        let mr = buffer_registration(
            buf,
            |mr: &Mr| mr.in_domain(domain),
            || "the buffer is registered with another domain".to_owned(),
            |buf| {
                let key = *next_key;
                *next_key += 1;
                // SAFETY: the registration (of the whole allocation) is
                // kept by the buffer itself, which drops it before freeing
                // its memory, or hands memory and registration over together
                // to the node's pool (`MessageBuffer::drop`).
                unsafe {
                    Mr::register(
                        domain,
                        buf.as_ptr(),
                        buf.capacity(),
                        Access::LocalAndRemoteWrite,
                        key,
                    )
                }
                .map_err(|e| e.to_string())
            },
        )?;
        Ok((mr.desc(), mr.key()))
    }

    pub(super) fn repost_data_recv(&mut self, peer: NodeId) {
        let Some(p) = self.core.up(peer) else {
            return;
        };
        let ep = p.link.data.as_ref().expect("up");
        if let Err(e) = post_data_recv(ep, (peer, p.link.generation)) {
            self.peer_failed(peer, &e.to_string());
        }
    }

    /// A block write with CQ data `data` landed: the slot, and — where the
    /// provider carries 8 bytes of CQ data — the length above it (0: not
    /// carried).
    pub(super) fn write_landed(&mut self, data: u64) {
        let slot = (data & 0xFFFF_FFFF) as u32;
        let len = data >> 32;
        self.written(slot, None, (len != 0).then_some(len));
    }
}
