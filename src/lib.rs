//! rdmc: reliable multicast of large objects, after RDMC (Behrens, Jha, Birman, Tremel).

#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]
#![deny(unsafe_code)]

mod config;
mod error;
mod group;
mod ids;
mod node;
pub mod proto;
pub mod runtime;
pub mod schedule;
pub mod transport;

pub use config::{
    CompletionMode, DEFAULT_BLOCK_SIZE, DEFAULT_MAX_MESSAGE_SIZE, GroupConfig, NodeConfig,
};
pub use error::{Error, FailureKind, MembershipError};
pub use group::{Group, SendFuture};
pub use ids::{GroupId, NodeId};
pub use node::Node;
pub use runtime::Message;
pub use schedule::Algorithm;
pub use transport::mem::MemCluster;
