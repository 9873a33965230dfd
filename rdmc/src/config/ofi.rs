//! The configuration of a node on the `ofi` transport (cargo feature `ofi`).

use super::cluster::driver_builders;
use crate::transport::fabric_driver::DriverOptions;
use crate::transport::mesh::ClusterConfig;
use crate::transport::ofi::FabricOptions;

/// Configuration of a node on the `ofi` transport (cargo feature `ofi`):
/// libfabric endpoints to every other member, found through a rendezvous
/// over the same authenticated TCP mesh the `tcp` transport uses.
///
/// `members` are the members' rendezvous addresses (one per node id, in id
/// order); the fabric endpoints bind to this node's rendezvous IP unless
/// [`with_fabric_addr`](Self::with_fabric_addr) says otherwise. The
/// provider is `tcp` unless [`with_provider`](Self::with_provider) names
/// another (`verbs` on RDMA fabrics).
///
/// [`Node::ofi`](crate::Node::ofi) has an example.
#[derive(Debug)]
pub struct OfiConfig {
    pub(crate) cluster: ClusterConfig,
    pub(crate) driver: DriverOptions,
    pub(crate) fabric: FabricOptions,
}

impl OfiConfig {
    /// The libfabric provider to use (default `tcp`), as `fi_info -l` names
    /// it.
    pub fn with_provider(mut self, provider: impl Into<String>) -> Self {
        self.fabric.provider = provider.into();
        self
    }

    /// The local address the fabric endpoints bind to (default: the IP of
    /// this node's member address) — for example the IPoIB address of the
    /// RDMA NIC while the rendezvous runs over another network.
    pub fn with_fabric_addr(mut self, addr: std::net::IpAddr) -> Self {
        self.fabric.fabric_addr = Some(addr);
        self
    }

    /// This run's *incarnation*: what tells a restarted node from its
    /// earlier run. Every run must have a higher one than the node's runs
    /// before it: a running member lets a restarted one back in (new
    /// fabric endpoints, reported up again) only from a newer run than the
    /// last it saw. Default: the wall clock's nanoseconds since the Unix
    /// epoch at the time the configuration is made, which grows from run
    /// to run unless the clock is set back; set it (from a counter the
    /// node keeps on disk, say) where that cannot be relied on.
    pub fn with_incarnation(mut self, incarnation: u64) -> Self {
        self.cluster.incarnation = incarnation;
        self
    }
}

driver_builders!(
    OfiConfig,
    fabric,
    /// After how long without a message from a peer (heartbeats included)
    /// it is considered failed (default 3 s). A peer whose process dies is
    /// noticed sooner, when its endpoints shut down; this bound is for one
    /// that hangs, or a path that drops everything.
);

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::cluster::tests::{check_cluster_builders, check_driver_builders, cluster};
    use crate::ids::NodeId;
    use crate::transport::mesh::ClusterConfigError;

    #[test]
    fn ofi_config_defaults_and_builders() {
        let (members, key) = cluster();
        let config = OfiConfig::new(members.clone(), NodeId(1), key.clone());
        assert_eq!(config.fabric.provider, "tcp");
        assert_eq!(config.fabric.fabric_addr, None);
        assert_eq!(config.cluster.connect_timeout, Duration::from_secs(30));
        assert_eq!(config.cluster.failure_timeout, Duration::from_secs(3));
        let config = check_cluster_builders!(OfiConfig::new(members, NodeId(1), key))
            .with_provider("verbs")
            .with_fabric_addr("10.1.0.1".parse().unwrap())
            .with_incarnation(7);
        assert_eq!(config.cluster.incarnation, 7);
        assert_eq!(config.fabric.provider, "verbs");
        assert_eq!(config.fabric.fabric_addr, Some("10.1.0.1".parse().unwrap()));
        assert!(!config.fabric.strict_modes);
        check_driver_builders!(OfiConfig);
    }
}
