//! Control messages: the registered slots they are sent from and received
//! into (libfabric's registration of them), and posting them (queueing them in order per peer, and acting on
//! what arrives, are [`FabricDriver`]'s).

use super::{CTRL_RECVS, Driver, Op, OpCtx, Posted, post_ctrl_recv};
use crate::transport::ofi::fabric::Domain;
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use crate::transport::ofi::fabric::{Access, Mr, OfiError, check};
use crate::transport::ofi::ffi;
use crate::transport::ofi::wire::MSG_LEN;

use crate::ids::NodeId;
use crate::transport::fabric_driver::control_slots::ControlSlots;
use crate::transport::fabric_driver::state::FabricDriver;
use tokio::time::Instant;

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

impl Driver {
    /// Post `bytes` to `to` from a free control send slot.
    pub(super) fn post_ctrl_send(
        &mut self,
        to: NodeId,
        bytes: &[u8; MSG_LEN],
    ) -> Result<Posted, OfiError> {
        let pool = self.control_slots.as_ref().expect("open");
        let peer = self.core.peer_mut(to);
        let Some(i) = peer.free_sends.pop() else {
            return Ok(Posted::Again);
        };
        let (slot, at) = pool.send_slot(to, i);
        pool.write(slot, bytes);
        let ctx = OpCtx::boxed(Op::CtrlSend { peer: to, slot: i });
        let ep = peer
            .link
            .ctrl
            .as_ref()
            .expect("usable peers have endpoints");
        // SAFETY: the endpoint is open; the slot is registered pool memory,
        // not reused until this send's completion returns it; the context
        // lives until then.
        let ret = unsafe { ffi::rdmc_send(ep.0, at.cast(), MSG_LEN, pool.desc(), ctx) };
        if ret < 0 {
            // SAFETY: the post failed, so the provider did not keep the context.
            drop(unsafe { OpCtx::take(ctx) });
            peer.free_sends.push(i);
            if ret == -(ffi::FI_EAGAIN as isize) {
                return Ok(Posted::Again);
            }
            check("fi_send", ret as i64)?;
        }
        peer.clock.sent(Instant::now());
        Ok(Posted::Yes)
    }

    pub(super) fn repost_ctrl_recv(&mut self, peer: NodeId, index: usize) {
        let Some(p) = self.core.peers.get(&peer).filter(|p| !p.down) else {
            return;
        };
        let i = index - peer.index() * self.control_slots().per_peer();
        let result = post_ctrl_recv(
            p.link.ctrl.as_ref().expect("up"),
            self.control_slots(),
            peer,
            i,
        );
        if let Err(e) = result {
            self.peer_failed(peer, &e.to_string());
        }
    }
}
