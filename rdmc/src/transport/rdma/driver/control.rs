//! Control messages: the registered slots they are sent from and received
//! into (the verbs registration of them), and posting them on a QP
//! (queueing them in order per peer, and acting on what arrives, are
//! [`FabricDriver`]'s).

use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::queue_pair::{
    PostSendGuard, QueuePair, SetScatterGatherEntry, WorkRequestFlags,
};

use super::{CTRL_RECVS, WrKind, wr_id};
use crate::ids::NodeId;
use crate::transport::fabric_driver::ControlSlots;
#[cfg(doc)]
use crate::transport::fabric_driver::FabricDriver;
use crate::transport::fabric_driver::wire::MSG_LEN;
use crate::transport::rdma::verbs::{Device, Mr, Qp, RdmaError, error_chain, verbs_err};

/// Registered memory for control messages: per peer, `CTRL_RECVS` receive
/// slots then `CTRL_SENDS` send slots, `MSG_LEN` bytes each.
pub(crate) type ControlPool = ControlSlots<Mr>;

impl ControlPool {
    /// A pool for peers with ids `0..nodes`, registered with `device`.
    pub(crate) fn new(device: &Device, nodes: usize) -> Result<Self, RdmaError> {
        ControlSlots::registered(nodes, CTRL_RECVS, |ptr, len| {
            // SAFETY: the memory lives until the pool is dropped, which
            // drops the registration first; the driver drops the pool only
            // after every QP is destroyed.
            unsafe { device.register(ptr, len, AccessFlags::LocalWrite) }
        })
    }

    fn lkey(&self) -> u32 {
        self.registration().expect("registered").lkey()
    }

    /// Post the control message in send slot `slot` of `peer`, at `at`, on
    /// the peer's QP.
    pub(crate) fn post_send(
        &self,
        qp: &mut Qp,
        peer: NodeId,
        slot: usize,
        at: *mut u8,
    ) -> Result<(), RdmaError> {
        let mut guard = qp.0.start_post_send();
        let id = wr_id(WrKind::Send, peer, slot as u32);
        let wr = guard
            .construct_wr(id, WorkRequestFlags::Signaled)
            .setup_send();
        // SAFETY: the slot is registered pool memory, not reused until this
        // send's completion returns it.
        unsafe { wr.setup_sge(self.lkey(), at as u64, MSG_LEN as u32) };
        guard
            .post()
            .map_err(|e| verbs_err("ibv_post_send", error_chain(&e)))
    }

    /// Post receive `i` of `peer`'s QP into its slot.
    pub(crate) fn post_recv(&self, qp: &mut Qp, peer: NodeId, i: usize) -> Result<(), RdmaError> {
        let (_, at) = self.recv_slot(peer, i);
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
}
