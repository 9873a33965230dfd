//! The receiver's half of a block transfer: buffers registered, data
//! receives reposted, and landed writes matched to their slots. (Slots
//! credited to the sender are [`FabricDriver`]'s; a block is delivered once
//! both its write and its header are in.)

use super::{Driver, post_data_recv};
use std::ffi::c_void;
use std::sync::Arc;

use crate::transport::ofi::fabric::{Access, Mr};

use crate::ids::NodeId;
use crate::transport::MessageBuffer;
use crate::transport::fabric_driver::state::FabricDriver;
use tokio::time::Instant;

impl Driver {
    /// Register (once) the buffer a region belongs to.
    pub(super) fn buffer_mr(
        &mut self,
        buf: &Arc<MessageBuffer>,
    ) -> Result<(*mut c_void, u64), String> {
        if let Some(reg) = buf.registration().get() {
            return match reg.downcast_ref::<Mr>() {
                Some(mr) if mr.in_domain(&self.domain) => Ok((mr.desc(), mr.key())),
                _ => Err("the buffer is registered with another domain".into()),
            };
        }
        let key = self.next_key;
        self.next_key += 1;
        // SAFETY: the registration (of the whole allocation) is stored in the
        // buffer itself, which drops it before freeing its memory, or hands
        // memory and registration over together to the node's pool
        // (`MessageBuffer::drop`).
        let mr = unsafe {
            Mr::register(
                &self.domain,
                buf.as_ptr(),
                buf.capacity(),
                Access::LocalAndRemoteWrite,
                key,
            )
        }
        .map_err(|e| e.to_string())?;
        let (desc, key) = (mr.desc(), mr.key());
        let _ = buf.registration().set(Box::new(mr));
        Ok((desc, key))
    }

    pub(super) fn repost_data_recv(&mut self, peer: NodeId) {
        let Some(p) = self.core.peers.get(&peer).filter(|p| !p.down) else {
            return;
        };
        if let Err(e) = post_data_recv(p.link.data.as_ref().expect("up"), peer) {
            self.peer_failed(peer, &e.to_string());
        }
    }

    /// A block write with CQ data `data` landed: the slot, and — where the
    /// provider carries 8 bytes of CQ data — the length above it (0: not
    /// carried).
    pub(super) fn written(&mut self, data: u64) {
        let slot = (data & 0xFFFF_FFFF) as u32;
        let data_len = data >> 32;
        match self
            .core
            .slots
            .written(slot, None, (data_len != 0).then_some(data_len))
        {
            Ok((from, done)) => {
                if let Some(p) = self.core.peers.get_mut(&from) {
                    p.clock.heard(Instant::now());
                }
                done.into_iter().for_each(|c| self.emit(c));
            }
            Err(_) => tracing::warn!(slot, "a write landed in no posted receive"),
        }
    }
}
