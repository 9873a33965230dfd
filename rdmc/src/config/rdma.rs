//! The configuration of a node on the `rdma` transport (cargo feature `rdma`).

use std::net::SocketAddr;
use std::time::Duration;

use super::cluster::cluster_builders;
use crate::ids::NodeId;
use crate::transport::mesh::{ClusterConfig, ClusterKey};
use crate::transport::rdma::DeviceOptions;

/// Configuration of a node on the `rdma` transport (cargo feature `rdma`):
/// an RC queue pair to every other member on an RDMA device (InfiniBand,
/// RoCE, iWARP, or Soft-RoCE's `rxe`), set up through the same
/// authenticated TCP mesh the `tcp` transport uses.
///
/// `members` are the members' rendezvous addresses (one per node id, in id
/// order). The device is the first one `ibv_devices` lists unless
/// [`with_device`](Self::with_device) names another; port 1 unless set; the
/// GID index as [`with_gid_index`](Self::with_gid_index) says (`show_gids`
/// lists a device's GIDs).
///
/// [`Node::rdma`](crate::Node::rdma) has an example.
#[cfg(feature = "rdma")]
#[derive(Debug)]
pub struct RdmaConfig {
    pub(crate) cluster: ClusterConfig,
    pub(crate) device: DeviceOptions,
}

#[cfg(feature = "rdma")]
impl RdmaConfig {
    /// Node `id` of the cluster whose members rendezvous at `members`
    /// (indexed by node id), authenticating with `key`.
    pub fn new(members: Vec<SocketAddr>, id: NodeId, key: ClusterKey) -> Self {
        RdmaConfig {
            cluster: ClusterConfig::new(members, id, key),
            device: DeviceOptions::default(),
        }
    }

    /// The names of this machine's RDMA devices, as `ibv_devices` lists
    /// them — what [`with_device`](Self::with_device) takes.
    ///
    /// # Errors
    /// [`RdmaError::NoDevice`](crate::RdmaError::NoDevice) if there is
    /// none (or libibverbs is not installed).
    pub fn devices() -> Result<Vec<String>, crate::RdmaError> {
        crate::transport::rdma::device_names()
    }

    /// The RDMA device to use, as `ibv_devices` names it (for example
    /// `mlx5_0` or `rxe0`; default: the first device).
    pub fn with_device(mut self, name: impl Into<String>) -> Self {
        self.device.device = Some(name.into());
        self
    }

    /// The device's port (default 1).
    pub fn with_port(mut self, port: u8) -> Self {
        self.device.port = port;
        self
    }

    /// The GID index. Every member's GID at this index must be reachable
    /// from the others (on RoCE v2: an IPv4-mapped or global IPv6 GID on
    /// the network the members share). Default: the first RoCE v2 GID
    /// holding an IPv4 address, else the first RoCE v2 GID, else 0
    /// (InfiniBand).
    pub fn with_gid_index(mut self, index: u8) -> Self {
        self.device.gid_index = Some(index);
        self
    }

    /// The most bytes of spare registered receive buffers the node keeps
    /// for reuse (default 1 GiB; 0: none): a delivered message's buffer
    /// returns to the pool, registration included, when the application
    /// drops the message. [`NodeConfig::with_buffer_pool`], when set, takes
    /// precedence.
    pub fn with_buffer_pool(mut self, bytes: usize) -> Self {
        self.device.pool_budget = bytes;
        self
    }

    /// How long a shutdown waits for queued control messages to be sent
    /// (default 3 s; more than zero, at most [`MAX_TIMEOUT`](crate::MAX_TIMEOUT)).
    pub fn with_flush_timeout(mut self, timeout: Duration) -> Self {
        self.device.flush_timeout = timeout;
        self
    }
}

#[cfg(feature = "rdma")]
cluster_builders!(
    RdmaConfig,
    |config| vec![("flush timeout", config.device.flush_timeout)],
    /// After how long without a message from a peer (heartbeats included)
    /// it is considered failed (default 3 s). A peer whose process dies is
    /// usually noticed sooner, when a send to its vanished QP runs out of
    /// retries (about half a second); this bound is for one that hangs.
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::cluster::tests::{check_cluster_builders, cluster};
    use crate::transport::mesh::ClusterConfigError;

    #[cfg(feature = "rdma")]
    #[test]
    fn rdma_config_defaults_and_builders() {
        let (members, key) = cluster();
        let config = RdmaConfig::new(members.clone(), NodeId(1), key.clone());
        assert_eq!(config.device.device, None);
        assert_eq!(config.device.port, 1);
        assert_eq!(config.device.gid_index, None);
        assert_eq!(config.device.pool_budget, 1 << 30);
        assert_eq!(config.device.flush_timeout, Duration::from_secs(3));
        let config = check_cluster_builders!(RdmaConfig::new(members, NodeId(1), key))
            .with_device("rxe0")
            .with_port(2)
            .with_gid_index(1)
            .with_buffer_pool(0)
            .with_flush_timeout(Duration::from_secs(1));
        assert_eq!(config.device.device.as_deref(), Some("rxe0"));
        assert_eq!(config.device.port, 2);
        assert_eq!(config.device.gid_index, Some(1));
        assert_eq!(config.device.pool_budget, 0);
        assert_eq!(config.device.flush_timeout, Duration::from_secs(1));
        // The flush timeout is one of its limits.
        let members: Vec<SocketAddr> = vec!["127.0.0.1:7000".parse().unwrap()];
        let key = ClusterKey::from_bytes(*b"config unit test key").unwrap();
        let config = RdmaConfig::new(members, NodeId(0), key);
        assert_eq!(config.validate(), Ok(()));
        let zero = config.with_flush_timeout(Duration::ZERO).validate();
        assert_eq!(
            zero,
            Err(ClusterConfigError::ZeroTimeout {
                what: "flush timeout"
            })
        );
    }
}
