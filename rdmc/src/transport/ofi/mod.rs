//! `ofi`: RDMC over libfabric (cargo feature `ofi`) — the RDMA-style data
//! path, runnable without RDMA hardware on libfabric's `tcp` provider and
//! unchanged on `verbs` (see the known limits below for RDM-only
//! providers).
//!
//! # Shape
//!
//! * Each pair of nodes shares two reliable-connected (`FI_EP_MSG`)
//!   endpoints: a **data** endpoint that carries only block writes, and a
//!   **control** endpoint that carries fixed 64-byte control messages
//!   ([`wire`](super::fabric_driver::wire)) into small registered receive
//!   buffers. A control message can therefore never consume, or land in, a
//!   data buffer.
//! * Every endpoint of a node reports to **one completion queue**
//!   (`FI_CQ_FORMAT_DATA`, `FI_WAIT_FD`), read by one driver task per node
//!   ([`driver`]) as the node's [`CompletionMode`](crate::CompletionMode)
//!   says: interrupt-driven through the CQ's file descriptor and tokio's
//!   reactor (drain, `fi_trywait`, await readiness, drain — safe with
//!   edge-triggered epoll), spin-polling, or spinning for a window after
//!   activity (hybrid).
//! * A **receive** is posted by registering the message buffer once — the
//!   registration lives in the buffer, and buffers come from a per-node
//!   [`BufferPool`](super::pool::BufferPool) they return to, registration
//!   included, when the application drops the message, so a stream of
//!   messages reuses registered memory — reserving a slot, and sending the
//!   sender a **credit** — slot, address at the block's offset, length,
//!   key — on the control endpoint, *before* the ready-for-block that
//!   follows on the same ordered endpoint.
//! * A **block** is one `fi_writedata` into the credited address, carrying
//!   the slot as remote CQ data (and, where the provider carries 8 bytes of
//!   it, the block's exact length in the upper half, cross-checked), plus a
//!   block header on the control endpoint with the block's exact length and
//!   immediate value (the message size, up to 64 bits, which no CQ data
//!   could carry beside the slot); the receiver delivers the block once
//!   both are in. Writes are used
//!   rather than two-sided sends because all groups between two nodes share
//!   the endpoints: a send would consume whichever receive was posted first,
//!   possibly another group's, while a write lands exactly where its credit
//!   says. The slot needs 32 bits, so it fits verbs' 4-byte immediates.
//!
//! # Honest hardware semantics
//!
//! The hints request verbs-like modes — `FI_MR_LOCAL`, `FI_MR_VIRT_ADDR`,
//! `FI_MR_ALLOCATED`, `FI_MR_PROV_KEY`, `FI_CONTEXT`, `FI_RX_CQ_DATA` — and
//! the transport obeys what `fi_getinfo` returns: descriptors for local
//! buffers (control buffers are registered too; a root's message is
//! registered once for all its block writes), virtual addresses or offsets,
//! provider keys, zero-length receives on the data endpoint re-posted for
//! every write when writes consume receives; every operation carries an
//! `fi_context`. Providers asking for modes it does not implement
//! (`FI_MSG_PREFIX`, `FI_MR_ENDPOINT`, ...) are refused with a clear error.
//! A unit test forces the strict modes on the `tcp` provider, so those
//! branches run in CI too.
//!
//! # Failures
//!
//! An error completion, an endpoint shut down or in error (a crashed peer's
//! connection), or a peer silent for the failure timeout (heartbeats go out
//! on idle control endpoints, so only a hung peer or a dead path is silent)
//! makes the peer down: its endpoints are closed — after which the provider
//! touches none of the memory posted for it — and the runtime gets one
//! [`Completion::PeerDown`](super::Completion), what the `tcp` transport
//! reports, so every group with that peer fails once.
//!
//! A peer that restarts (a newer incarnation, at the same rendezvous
//! address) is let back in without any other node restarting ([`rejoin`]):
//! the rendezvous listener and the passive endpoint stay open after start,
//! the new run's endpoints replace the old ones in the driver (each peer's
//! endpoints have a generation, so what the provider still reports of the
//! closed ones is dropped), and the runtime gets
//! [`Completion::PeerUp`](super::Completion) for the new run.
//!
//! # Known limits
//!
//! * A receive buffer is registered when its first receive is posted (then
//!   reused from the pool); with `FI_MR_LOCAL` a root's message is
//!   registered once, at its first block write. Registered send buffers
//!   handed out by the node (`node.alloc`-style) would save that too.
//! * `FI_EP_MSG` endpoints are what `verbs` (InfiniBand, RoCE, iWARP) and
//!   `tcp` offer; providers that only offer reliable-datagram endpoints
//!   (`efa`, `psm3`, `cxi`) would need an `FI_EP_RDM` variant of the
//!   connection setup (an address vector instead of the CM); the data path
//!   (credits, writes with CQ data) would carry over.
//! * Trust: a receive buffer stays registered for remote writes as long as
//!   it lives (in the pool too, and while the application holds a
//!   delivered message), under a key the writing peer has seen. Members
//!   only write where a credit points, but a buggy or hostile member could
//!   write into such memory later. Fabric endpoints are only given to
//!   nodes that proved the cluster key, so this trusts the members, as the
//!   `tcp` transport does; fresh keys per receive would close it, at the
//!   cost of a registration per block.
//! * Linking libfabric has a start-up cost on Debian: `libfabric1` pulls in
//!   `libpsm-infinipath1`, whose library constructor calibrates a clock with
//!   ~800 short sleeps, about 0.1 to 0.2 s at every process start of a
//!   binary built with `ofi` — whether or not it uses the transport. (Loading
//!   libfabric with `dlopen` on first use would avoid that; it needs
//!   `dlvsym` to the symbol versions the headers were compiled for.)
//! * The `tcp` provider's numbers say nothing about RDMA performance: the
//!   data is copied through sockets, and "one-sided" writes are carried out
//!   by the target's provider.

#![deny(clippy::undocumented_unsafe_blocks)]

mod driver;
mod fabric;
mod ffi;
mod rejoin;
mod setup;
#[cfg(test)]
mod tests;
pub(crate) use self::setup::establish;

/// Default fabric provider.
pub(crate) const DEFAULT_PROVIDER: &str = "tcp";

/// What a node on the `ofi` transport is configured with beyond what every
/// network transport is (the cluster, in the mesh's `ClusterConfig`) and
/// what every fabric driver is (its `DriverOptions`).
#[derive(Debug)]
pub(crate) struct FabricOptions {
    /// The libfabric provider, as `fi_info -l` names it.
    pub(crate) provider: String,
    /// The local address the fabric endpoints bind to (default: the IP of
    /// this node's member address).
    pub(crate) fabric_addr: Option<std::net::IpAddr>,
    /// Tests: behave as if the provider asked for every verbs-like mode.
    pub(crate) strict_modes: bool,
}

impl Default for FabricOptions {
    fn default() -> Self {
        FabricOptions {
            provider: DEFAULT_PROVIDER.to_owned(),
            fabric_addr: None,
            strict_modes: false,
        }
    }
}

/// One node's fabric endpoints, as the runtime sees them: every call is
/// handed, in order, to the node's fabric driver task.
pub(crate) type OfiEndpoint = super::fabric_driver::DrivenEndpoint<driver::OfiCmd>;
