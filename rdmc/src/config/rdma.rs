//! The configuration of a node on the `rdma` transport (cargo feature `rdma`).

use super::cluster::driver_builders;
use crate::transport::fabric_driver::DriverOptions;
use crate::transport::mesh::ClusterConfig;
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
#[derive(Debug)]
pub struct RdmaConfig {
    pub(crate) cluster: ClusterConfig,
    pub(crate) driver: DriverOptions,
    pub(crate) device: DeviceOptions,
}

impl RdmaConfig {
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
}

driver_builders!(
    RdmaConfig,
    device,
    /// After how long without a message from a peer (heartbeats included)
    /// it is considered failed (default 3 s). A peer whose process dies is
    /// usually noticed sooner, when a send to its vanished QP runs out of
    /// retries (about half a second); this bound is for one that hangs.
);

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::cluster::tests::{check_cluster_builders, check_driver_builders, cluster};
    use crate::ids::NodeId;
    use crate::transport::mesh::ClusterConfigError;

    #[test]
    fn rdma_config_defaults_and_builders() {
        let (members, key) = cluster();
        let config = RdmaConfig::new(members.clone(), NodeId(1), key.clone());
        assert_eq!(config.device.device, None);
        assert_eq!(config.device.port, 1);
        assert_eq!(config.device.gid_index, None);
        let config = check_cluster_builders!(RdmaConfig::new(members, NodeId(1), key))
            .with_device("rxe0")
            .with_port(2)
            .with_gid_index(1);
        assert_eq!(config.device.device.as_deref(), Some("rxe0"));
        assert_eq!(config.device.port, 2);
        assert_eq!(config.device.gid_index, Some(1));
        check_driver_builders!(RdmaConfig);
    }
}
