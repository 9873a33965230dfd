//! Control messages: the registered slots they are sent from and received
//! into, and posting them (queueing them in order per peer, and acting on
//! what arrives, are [`FabricDriver`]'s).

use super::{CTRL_RECVS, CTRL_SENDS, Driver, Op, OpCtx, Posted, post_ctrl_recv};
use crate::transport::ofi::fabric::Domain;
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use crate::transport::ofi::fabric::{Access, Mr, OfiError, check};
use crate::transport::ofi::ffi;
use crate::transport::ofi::wire::MSG_LEN;

use crate::ids::NodeId;
use crate::transport::driver_core::FabricDriver;
use tokio::time::Instant;

/// Registered memory for control messages: per peer, `CTRL_RECVS` receive
/// slots then `CTRL_SENDS` send slots, `MSG_LEN` bytes each.
pub(crate) struct ControlPool {
    ptr: *mut u8,
    len: usize,
    mr: Option<Mr>,
}

// SAFETY: the pool owns its allocation; slots are handed to the provider and
// read or written by the driver only between the completions that order them.
unsafe impl Send for ControlPool {}
// SAFETY: a shared pool is only used by the one task that owns it (start-up,
// then the driver); `&self` methods touch disjoint slots, each only while
// no operation on it is outstanding.
unsafe impl Sync for ControlPool {}

impl std::fmt::Debug for ControlPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPool")
            .field("len", &self.len)
            .finish()
    }
}

impl ControlPool {
    pub(crate) const PER_PEER: usize = CTRL_RECVS + CTRL_SENDS;

    /// A pool for peers with ids `0..nodes`, registered with `domain`.
    pub(crate) fn new(domain: &Arc<Domain>, nodes: usize, key: u64) -> Result<Self, OfiError> {
        let len = nodes.max(1) * Self::PER_PEER * MSG_LEN;
        let ptr = Box::into_raw(vec![0u8; len].into_boxed_slice()).cast::<u8>();
        let mut pool = ControlPool { ptr, len, mr: None };
        // SAFETY: the allocation lives until `drop`, which drops the MR first.
        pool.mr = Some(unsafe { Mr::register(domain, ptr, len, Access::Local, key) }?);
        Ok(pool)
    }

    pub(super) fn slot(&self, index: usize) -> *mut u8 {
        assert!((index + 1) * MSG_LEN <= self.len);
        // SAFETY: in bounds (checked above).
        unsafe { self.ptr.add(index * MSG_LEN) }
    }

    pub(crate) fn recv_slot(&self, peer: NodeId, i: usize) -> (usize, *mut u8) {
        let index = peer.index() * Self::PER_PEER + i;
        (index, self.slot(index))
    }

    pub(super) fn send_slot(&self, peer: NodeId, i: usize) -> (usize, *mut u8) {
        let index = peer.index() * Self::PER_PEER + CTRL_RECVS + i;
        (index, self.slot(index))
    }

    pub(crate) fn desc(&self) -> *mut c_void {
        self.mr.as_ref().map_or(ptr::null_mut(), Mr::desc)
    }

    /// The message in slot `index`, which a completed receive filled.
    pub(super) fn read(&self, index: usize) -> [u8; MSG_LEN] {
        let mut out = [0u8; MSG_LEN];
        // SAFETY: in bounds; the receive into this slot has completed, so the
        // provider no longer writes it, and nothing else does.
        unsafe { ptr::copy_nonoverlapping(self.slot(index), out.as_mut_ptr(), MSG_LEN) };
        out
    }

    /// Fill send slot `index` (not in flight) with `msg`.
    pub(super) fn write(&self, index: usize, msg: &[u8; MSG_LEN]) {
        // SAFETY: in bounds; the slot is free (not posted), so nobody reads it.
        unsafe { ptr::copy_nonoverlapping(msg.as_ptr(), self.slot(index), MSG_LEN) };
    }
}

impl Drop for ControlPool {
    fn drop(&mut self) {
        drop(self.mr.take());
        let slice = ptr::slice_from_raw_parts_mut(self.ptr, self.len);
        // SAFETY: from Box::into_raw in `new` with this length, freed only
        // here, after the registration is gone and every endpoint is closed.
        drop(unsafe { Box::from_raw(slice) });
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
        let i = index - peer.index() * ControlPool::PER_PEER;
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
