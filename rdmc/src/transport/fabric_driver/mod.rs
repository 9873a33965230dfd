//! The fabric driver: what the transports that drive an RDMA-style fabric
//! share — `ofi` over libfabric and `rdma` over verbs. Both post their
//! sends and receives on queues they own and read completions from a
//! completion queue, so both run one driver task per node that owns every
//! fabric object of the node; the runtime's calls reach it in order as
//! commands.
//!
//! What the two share, whatever their fabric:
//!
//! - [`endpoint`]: the runtime's side, a [`Transport`](super::Transport)
//!   whose every call becomes a command to the driver task;
//! - [`state`]: the driver's state — peers, their backlogs, receive slots
//!   and credits, liveness, the flush — and the logic on it, as the
//!   provided methods of `FabricDriver`, which each transport implements
//!   with its fabric's primitives;
//! - [`slots`]: the receiver's bookkeeping of receive slots and credits;
//! - [`control_slots`]: the registered memory control messages travel in;
//! - [`wire`]: the control messages' 64-byte wire format.

#[allow(unsafe_code)]
pub(crate) mod control_slots;
pub(crate) mod endpoint;
pub(crate) mod slots;
pub(crate) mod state;
pub(crate) mod wire;
