//! `rdma`: RDMC over RDMA verbs (cargo feature `rdma`), on the `sideway`
//! crate — InfiniBand, RoCE and iWARP devices, and Soft-RoCE (`rxe`).
//!
//! # Shape
//!
//! * Each pair of nodes shares one reliable-connected (RC) **queue pair**.
//!   Control messages — the 64-byte messages of the fabric drivers' wire
//!   format ([`wire`](super::fabric_driver::wire)): signals, credits, block
//!   headers, heartbeats — are two-sided SENDs into small registered
//!   receive buffers, of which every QP keeps [`driver::CTRL_RECVS`]
//!   posted.
//! * A **block** is one RDMA write-with-immediate into the offset a credit
//!   names in a registered receive buffer; the 32-bit immediate (network
//!   byte order) is the receive slot. The write consumes one of the posted
//!   receives without touching its memory (the completion's opcode says it
//!   was a write), so control and data share the QP and its ordering: the
//!   credit is on the QP before the ready-for-block that follows it, and
//!   the block header (exact length and the 64-bit immediate the protocol
//!   wants, which no verbs immediate could carry beside the slot) arrives
//!   before the write it describes.
//! * **Receives are posted before credit is given**: a credit names memory
//!   registered for remote writes and kept in a slot until the write lands,
//!   and a peer only writes where a credit points. Control sends are
//!   bounded per peer, and the receive queue is deeper than what a peer
//!   can have in flight; `rnr_retry` is 7 (retry forever) with a short
//!   `min_rnr_timer`, so a receiver slow to re-post delays, never fails.
//! * **Completions**: every QP of a node reports to **one CQ**, with a
//!   completion channel, read by one driver task per node ([`driver`]) as
//!   the node's [`CompletionMode`](crate::CompletionMode) says. Interrupt
//!   mode: drain the CQ, arm it (`ibv_req_notify_cq`), drain again (closing
//!   the race with a completion that came between), await the channel's
//!   non-blocking fd in tokio's reactor, read every event
//!   (`ibv_get_cq_event` until `EAGAIN`) and acknowledge them in one batch
//!   (`ibv_ack_cq_events`) — [`ffi`] holds these calls, which `sideway`
//!   does not wrap yet.
//! * **Memory**: receive buffers come from the node's
//!   [`BufferPool`](super::pool::BufferPool), registered once
//!   (`ibv_reg_mr`, local and remote write) and recycled with their
//!   registration; a root's message is registered once for all
//!   its block writes; the control buffers are one registered region.
//! * **Set-up** runs over the authenticated TCP mesh the `tcp` transport
//!   uses (the cluster key's HMAC handshake, and its admission rules): each
//!   pair swaps QP number, LID, GID and first packet sequence number there,
//!   moves its QP through INIT (receives posted) → RTR → RTS, and meets at a
//!   barrier, so nobody sends to a QP not yet ready to receive. The mesh's
//!   listener then closes; its connections stay open (see below).
//!
//! # Failures
//!
//! An error completion (a flushed request of a QP in the error state, a
//! retry count exceeded because the peer's QP is gone, a remote access
//! error), the peer's rendezvous connection closing (the authenticated TCP
//! connection stays open, unused, after set-up: the kernel closes it the
//! moment the peer's process dies, which RC queue pairs would only learn
//! after their retries — the part `rdma_cm`'s disconnect plays elsewhere),
//! or a peer silent for the failure timeout (heartbeats go out on idle
//! QPs) makes the peer down: its QP is moved to the error state and
//! destroyed — after which the device touches none of the memory posted
//! for it — its rendezvous connection is closed, so the peer learns too,
//! and the runtime gets one [`Completion::PeerDown`](super::Completion), as
//! on the other transports.
//!
//! # Known limits
//!
//! * Trust: as on `ofi`, a receive buffer stays registered for remote writes
//!   while it lives (in the pool too), under an rkey the peer has seen;
//!   only members that proved the cluster key get a QP.
//! * One QP per pair: a node of `n` members has `n - 1` QPs, each with
//!   [`driver::CTRL_RECVS`] receives of 64 bytes posted.
//! * The path MTU is the port's active MTU. The port is configuration
//!   ([`RdmaConfig`](crate::RdmaConfig)); the GID index is too, or else the
//!   first RoCE v2 GID holding an IPv4 address, else the first RoCE v2 GID,
//!   else index 0 (InfiniBand).

#![deny(clippy::undocumented_unsafe_blocks)]

mod driver;
mod ffi;
mod setup;
#[cfg(test)]
mod tests;
mod verbs;

pub(crate) use self::setup::establish;
pub use self::verbs::RdmaError;
pub(crate) use self::verbs::device_names;

/// What a node on the `rdma` transport is configured with beyond what every
/// network transport is (the cluster, in the mesh's `ClusterConfig`) and
/// what every fabric driver is (its `DriverOptions`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DeviceOptions {
    /// The device, as `ibv_devices` names it (default: the first one).
    pub(crate) device: Option<String>,
    /// The device's port (default 1).
    pub(crate) port: u8,
    /// The GID index (default: chosen, see `verbs::choose_gid`).
    pub(crate) gid_index: Option<u8>,
}

impl Default for DeviceOptions {
    fn default() -> Self {
        DeviceOptions {
            device: None,
            port: 1,
            gid_index: None,
        }
    }
}

/// One node's queue pairs, as the runtime sees them: every call is handed,
/// in order, to the node's verbs driver task.
pub(crate) type RdmaEndpoint = super::fabric_driver::DrivenEndpoint<driver::Extra>;
