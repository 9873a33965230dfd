//! Node and group configuration: one file per configuration type, all of
//! them re-exported here (and from the crate root).

mod cluster;
mod group;
mod node;
#[cfg(feature = "ofi")]
mod ofi;
#[cfg(feature = "rdma")]
mod rdma;
mod tcp;

pub use self::group::{
    BATCH_HEADER_BYTES, DEFAULT_BLOCK_SIZE, DEFAULT_CREATE_TIMEOUT, DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_RECEIVE_WINDOW, Durability, GroupConfig, MAX_BLOCK_SIZE,
};
pub use self::node::{CompletionMode, NodeConfig};
#[cfg(feature = "ofi")]
pub use self::ofi::OfiConfig;
#[cfg(feature = "rdma")]
pub use self::rdma::RdmaConfig;
pub use self::tcp::{Connections, EarlyAnnounce, TcpConfig};
pub use crate::transport::frame::protect::WireSecurity;
pub use crate::transport::mesh::{
    ClusterConfigError, ClusterKey, ClusterKeyError, IdentityError, MAX_IDENTITY_FILE_LEN,
    MAX_KEY_FILE_LEN, MAX_TIMEOUT, NodeIdentity,
};
