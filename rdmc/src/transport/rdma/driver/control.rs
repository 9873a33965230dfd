//! Control messages: the registered slots they are sent from and received
//! into (the verbs registration of them), posting them and reading them (queueing them in order per peer,
//! and acting on what arrives, are [`FabricDriver`]'s).

use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::queue_pair::{
    PostSendGuard, QueuePair, SetScatterGatherEntry, WorkRequestFlags,
};
use tokio::time::Instant;

use super::{CTRL_RECVS, Driver, Posted, WrKind, wr_id};
use crate::ids::NodeId;
use crate::transport::fabric_driver::control_slots::ControlSlots;
use crate::transport::fabric_driver::state::FabricDriver;
use crate::transport::rdma::verbs::{Device, Mr, Qp, RdmaError, error_chain, verbs_err};
use crate::transport::rdma::wire::MSG_LEN;

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
        let (slot, at) = pool.send_slot(to, i);
        pool.write(slot, bytes);
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
        let pool = self.control_slots();
        let bytes = pool.read(pool.recv_slot(peer, i).0);
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
