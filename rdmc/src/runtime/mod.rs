//! The runtime: one actor task per node that drives the sans-IO state
//! machines of [`proto`](crate::proto) — the node's group-creation
//! rendezvous and one protocol member per group — over its transport.

mod actor;
mod group_state;
mod message;
mod timing;

#[cfg(all(test, target_os = "linux"))]
mod announce_tests;
#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod failure_tests;
#[cfg(test)]
mod tests;

pub(crate) use actor::{Actor, Command};
pub(crate) use group_state::{Acks, Deliveries, Joined};
pub use message::Message;
pub use timing::MessageTimings;
