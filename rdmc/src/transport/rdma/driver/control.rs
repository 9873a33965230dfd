//! Control messages: the registered slots they are sent from and received
//! into, posting them and reading them (queueing them in order per peer,
//! and acting on what arrives, are [`FabricDriver`]'s).

use std::ptr;

use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::queue_pair::{
    PostSendGuard, QueuePair, SetScatterGatherEntry, WorkRequestFlags,
};
use tokio::time::Instant;

use super::{CTRL_RECVS, CTRL_SENDS, Driver, Posted, WrKind, wr_id};
use crate::ids::NodeId;
use crate::transport::driver_core::FabricDriver;
use crate::transport::rdma::verbs::{Device, Mr, Qp, RdmaError, error_chain, verbs_err};
use crate::transport::rdma::wire::MSG_LEN;

/// Registered memory for control messages: per peer, `CTRL_RECVS` receive
/// slots then `CTRL_SENDS` send slots, `MSG_LEN` bytes each.
pub(crate) struct ControlPool {
    ptr: *mut u8,
    len: usize,
    mr: Option<Mr>,
}

// SAFETY: the pool owns its allocation; slots are handed to the device and
// read or written by the driver only between the completions that order
// them.
unsafe impl Send for ControlPool {}

impl std::fmt::Debug for ControlPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPool")
            .field("len", &self.len)
            .finish()
    }
}

impl ControlPool {
    pub(crate) const PER_PEER: usize = CTRL_RECVS + CTRL_SENDS;

    /// A pool for peers with ids `0..nodes`, registered with `device`.
    pub(crate) fn new(device: &Device, nodes: usize) -> Result<Self, RdmaError> {
        let len = nodes.max(1) * Self::PER_PEER * MSG_LEN;
        let ptr = Box::into_raw(vec![0u8; len].into_boxed_slice()).cast::<u8>();
        let mut pool = ControlPool { ptr, len, mr: None };
        // SAFETY: the allocation lives until `drop`, which drops the
        // registration first; the driver drops the pool only after every QP
        // is destroyed.
        pool.mr = Some(unsafe { device.register(ptr, len, AccessFlags::LocalWrite) }?);
        Ok(pool)
    }

    fn slot(&self, index: usize) -> *mut u8 {
        assert!((index + 1) * MSG_LEN <= self.len);
        // SAFETY: in bounds (checked above).
        unsafe { self.ptr.add(index * MSG_LEN) }
    }

    fn recv_index(peer: NodeId, i: usize) -> usize {
        peer.index() * Self::PER_PEER + i
    }

    fn send_index(peer: NodeId, i: usize) -> usize {
        peer.index() * Self::PER_PEER + CTRL_RECVS + i
    }

    fn lkey(&self) -> u32 {
        self.mr.as_ref().expect("registered").lkey()
    }

    /// Post receive `i` of `peer`'s QP into its slot.
    pub(crate) fn post_recv(&self, qp: &mut Qp, peer: NodeId, i: usize) -> Result<(), RdmaError> {
        let at = self.slot(Self::recv_index(peer, i));
        let mut guard = qp.0.start_post_recv();
        let wr = guard.construct_wr(wr_id(WrKind::Recv, peer, i as u32));
        // SAFETY: the slot is registered pool memory, which outlives every
        // QP (the driver destroys the QPs first); the driver reads it only
        // after this receive's completion.
        unsafe { wr.setup_sge(self.lkey(), at as u64, MSG_LEN as u32) };
        guard
            .post()
            .map_err(|e| verbs_err("ibv_post_recv", error_chain(&e)))
    }

    /// The message in receive slot `i` of `peer`, which a completed
    /// receive filled.
    fn read(&self, peer: NodeId, i: usize) -> [u8; MSG_LEN] {
        let mut out = [0u8; MSG_LEN];
        // SAFETY: in bounds; the receive into this slot has completed, so
        // the device no longer writes it, and nothing else does.
        unsafe {
            ptr::copy_nonoverlapping(
                self.slot(Self::recv_index(peer, i)),
                out.as_mut_ptr(),
                MSG_LEN,
            );
        };
        out
    }
}

impl Drop for ControlPool {
    fn drop(&mut self) {
        drop(self.mr.take());
        let slice = ptr::slice_from_raw_parts_mut(self.ptr, self.len);
        // SAFETY: from Box::into_raw in `new` with this length, freed only
        // here, after the registration is gone.
        drop(unsafe { Box::from_raw(slice) });
    }
}

impl Driver {
    /// Post `bytes` to `to` from a free control send slot.
    pub(super) fn post_ctrl_send(
        &mut self,
        to: NodeId,
        bytes: &[u8; MSG_LEN],
    ) -> Result<Posted, RdmaError> {
        let pool = self.control_slots.as_ref().expect("open");
        let peer = self.core.peer_mut(to);
        let Some(i) = peer.free_sends.pop() else {
            return Ok(Posted::Again);
        };
        let at = pool.slot(ControlPool::send_index(to, i));
        // SAFETY: in bounds; the slot is free (no send from it in flight),
        // so the device does not read it.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), at, MSG_LEN) };
        let qp = peer.link.qp.as_mut().expect("usable peers have a QP");
        let mut guard = qp.0.start_post_send();
        let wr = guard
            .construct_wr(
                wr_id(WrKind::Send, to, i as u32),
                WorkRequestFlags::Signaled,
            )
            .setup_send();
        // SAFETY: the slot is registered pool memory, not reused until this
        // send's completion returns it.
        unsafe { wr.setup_sge(pool.lkey(), at as u64, MSG_LEN as u32) };
        if let Err(e) = guard.post() {
            peer.free_sends.push(i);
            return Err(verbs_err("ibv_post_send", error_chain(&e)));
        }
        peer.clock.sent(Instant::now());
        Ok(Posted::Yes)
    }

    /// A control receive of `peer` completed: read it, post the slot again,
    /// act on the message.
    pub(super) fn on_ctrl_recv(&mut self, peer: NodeId, i: usize) {
        let bytes = self.control_slots().read(peer, i);
        self.repost_recv(peer, i);
        self.on_ctrl_message(peer, &bytes);
    }

    /// Post receive `i` of `peer` again (a message or a write consumed it).
    pub(super) fn repost_recv(&mut self, peer: NodeId, i: usize) {
        let pool = self.control_slots.as_ref().expect("open");
        let Some(qp) = self
            .core
            .peers
            .get_mut(&peer)
            .filter(|p| !p.down)
            .and_then(|p| p.link.qp.as_mut())
        else {
            return;
        };
        if let Err(e) = pool.post_recv(qp, peer, i) {
            self.peer_failed(peer, &e.to_string());
        }
    }
}
