//! The runtime: one actor task per node that executes the schedules of all
//! the node's groups over its transport (DESIGN.md §3.4).

mod actor;
mod rendezvous;
mod timing;

pub use actor::Message;
pub(crate) use actor::{Actor, Command, Deliveries};
pub use timing::MessageTimings;
