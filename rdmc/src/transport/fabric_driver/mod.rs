//! The fabric driver: what the transports over an RDMA-style fabric share —
//! `ofi` over libfabric and `rdma` over verbs. Both post their sends and
//! receives on queues they own and read their completions from a
//! completion queue, so both run one driver task per node that owns every
//! fabric object of the node; the runtime's calls reach it in order, as
//! commands. A transport brings its fabric's primitives (implementing
//! [`FabricDriver`]) and how it sets the fabric up; everything else is
//! here:
//!
//! - [`endpoint`]: the runtime's side, a [`Transport`](super::Transport)
//!   whose every call becomes a command to the driver task;
//! - [`run`]: the driver task, started with its endpoint, and its loop;
//! - [`driver`]: what the driver does whatever its fabric — the send and
//!   receive paths, control messages, failure detection, the flush;
//! - [`state`]: the state it keeps — peers and their backlogs, credits,
//!   liveness, the registered control slots ([`control_slots`]) and the
//!   receive slots ([`slots`]);
//! - [`wire`]: the control messages' 64-byte wire format.

#[allow(unsafe_code)]
pub(crate) mod control_slots;
pub(crate) mod driver;
pub(crate) mod endpoint;
pub(crate) mod run;
pub(crate) mod slots;
pub(crate) mod state;
pub(crate) mod wire;

use std::time::Duration;

pub(crate) use self::control_slots::ControlSlots;
pub(crate) use self::driver::FabricDriver;
pub(crate) use self::endpoint::{Cmd, DrivenEndpoint};
pub(crate) use self::run::spawn;
pub(crate) use self::state::{Core, Peer, PeerLink, Posted, RootRegistration, WriteOp};

/// Default most bytes of spare registered receive buffers a node keeps.
pub(crate) const DEFAULT_POOL_BUDGET: usize = 1 << 30;
/// Default time a shutdown waits for queued control messages to go out.
pub(crate) const DEFAULT_FLUSH_TIMEOUT: Duration = Duration::from_secs(3);

/// What a node on `ofi` or `rdma` is configured with for its driver,
/// whatever the fabric (`OfiConfig` and `RdmaConfig` each hold one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DriverOptions {
    /// The most bytes of spare registered receive buffers kept for reuse.
    pub(crate) pool_budget: usize,
    /// How long a shutdown waits for queued control messages to go out.
    pub(crate) flush_timeout: Duration,
}

impl Default for DriverOptions {
    fn default() -> Self {
        DriverOptions {
            pool_budget: DEFAULT_POOL_BUDGET,
            flush_timeout: DEFAULT_FLUSH_TIMEOUT,
        }
    }
}
