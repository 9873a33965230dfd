//! rdmc: reliable multicast of large objects for tokio, after "RDMC: A
//! Reliable RDMA Multicast for Large Objects" (Behrens, Jha, Birman, Tremel)
//! and "Pushing Bytes: Cloud-Scale Data Replication with RDMC".
//!
//! One member of a [`Group`] — the root, its first member — sends messages
//! through its [`Sender`]; every other member receives each one intact, in
//! order, exactly once, from its [`Receiver`] (a stream). A
//! message is cut into blocks that the members relay among themselves along
//! a deterministic [`schedule`], so every member uses its link in both
//! directions at once.
//!
//! ```
//! use bytes::Bytes;
//! use futures::StreamExt;
//! use rdmc::{GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), rdmc::Error> {
//! // Three members in this process, over the in-memory transport.
//! let cluster = MemCluster::new(3);
//! let nodes = Node::in_memory_all(&cluster, NodeConfig::new())?;
//! let members = [NodeId(0), NodeId(1), NodeId(2)];
//! let config = GroupConfig::new().with_block_size(4);
//!
//! // Every member creates the group, with the same membership and config.
//! let (root, a, b) = tokio::try_join!(
//!     nodes[0].create_group(GroupId(1), &members, config.clone()),
//!     nodes[1].create_group(GroupId(1), &members, config.clone()),
//!     nodes[2].create_group(GroupId(1), &members, config.clone()),
//! )?;
//! // The first member is the root: it gets the sending handle, every other
//! // member a stream of the root's messages.
//! let mut root = root.into_sender().expect("node 0 is the root");
//! let mut a = a.into_receiver().expect("node 1 receives");
//! let mut b = b.into_receiver().expect("node 2 receives");
//!
//! root.send(Bytes::from_static(b"hello, replicas")).await?; // queued
//! let (x, y) = tokio::join!(a.next(), b.next());
//! assert_eq!(&x.unwrap()?.data[..], b"hello, replicas");
//! assert_eq!(&y.unwrap()?.data[..], b"hello, replicas");
//!
//! // `close` succeeds once every member's application has every message.
//! tokio::try_join!(root.close(), a.close(), b.close())?;
//! # Ok(())
//! # }
//! ```
//!
//! # Runtimes
//!
//! A [`Node`] spawns its actor and its transport's tasks on the tokio
//! runtime it is created in; any runtime works. For the lowest latency per
//! message, as with many processes sharing few cores, use a one-thread
//! runtime (`current_thread`) and do the work that sends and receives in a
//! task of its own (`tokio::spawn`), not in `block_on`'s future (or
//! `#[tokio::main]`'s body) itself: on a one-thread runtime a spawned task
//! the node wakes runs in the same pass as the node's tasks, while
//! `block_on`'s future is polled only after every queued task has run, and
//! after a wake-up through the I/O driver (a system call on each side). On
//! a multi-thread runtime every message handed between the application and
//! the node may cross threads, a wake-up each way. `rdmc member` runs this
//! way.
//!
//! The layers, each in its own module: [`schedule`] (pure schedules),
//! [`proto`] (the sans-IO protocol state machine), the transports (how
//! blocks move: in process with [`MemCluster`], over TCP with
//! [`Node::tcp`], over libfabric with `Node::ofi`), the runtime (one actor
//! task per [`Node`]), and the API re-exported here.
//!
//! The [`guide`] has the rest: what a group promises
//! ([`guide::semantics`]), the transports and running on RDMA hardware,
//! completion modes, and the `rdmc` command.

#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]
#![deny(unsafe_code)]
// docs.rs builds with every feature and marks what each item needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod collective;
/// The crate's hash maps: std's, except in the whole-node simulator's build
/// (`--cfg rdmc_sim`), where they iterate in the same order in every run,
/// so that a simulated run replays exactly from its seed.
mod collections {
    #[cfg(not(rdmc_sim))]
    pub(crate) use std::collections::HashMap;
    #[cfg(rdmc_sim)]
    pub(crate) type HashMap<K, V> = std::collections::HashMap<
        K,
        V,
        std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>,
    >;
}
mod config;
mod error;
mod group;
pub mod guide;
mod in_flight;
mod node;
mod peer;
pub mod proto;
mod runtime;
pub mod stats;
mod target;
pub(crate) mod transport;
pub(crate) mod wait;

/// The ids under the library's own path (`crate::ids`), as before they
/// moved to the protocol crate.
mod ids {
    pub(crate) use rdmc_proto::{GroupId, NodeId};
}

#[cfg(feature = "ofi")]
pub use config::OfiConfig;
#[cfg(feature = "rdma")]
pub use config::RdmaConfig;
pub use config::{
    BATCH_HEADER_BYTES, ClusterConfigError, ClusterKey, ClusterKeyError, CompletionMode,
    Connections, DEFAULT_BLOCK_SIZE, DEFAULT_CREATE_TIMEOUT, DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_RECEIVE_WINDOW, Durability, EarlyAnnounce, GroupConfig,
    IdentityError, MAX_BLOCK_SIZE, MAX_IDENTITY_FILE_LEN, MAX_KEY_FILE_LEN, MAX_TIMEOUT,
    NodeConfig, NodeIdentity, TcpConfig, WireSecurity,
};
pub use error::{Error, MembershipError};
pub use group::{Delivered, Group, Permit, Persisted, Receipt, Receiver, Sender, Sent};
pub use node::Node;
pub use peer::{Peer, PeerEvent, PeerEvents};
pub use rdmc_proto::schedule;
pub use rdmc_proto::{FailureKind, GroupId, GroupSetting, Mismatch, NodeId};
pub use runtime::{Message, MessageTimings};
pub use schedule::{Algorithm, BlockSize};
pub use stats::{GroupStats, NodeStats, PeerStats};
pub use target::{Incoming, ReceiveTarget, ReceiveTargets, ReceivedFile};
pub use transport::mem::MemCluster;
#[cfg(feature = "rdma")]
pub use transport::rdma::RdmaError;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
