//! The configuration of a node on the `ofi` transport (cargo feature `ofi`).

use std::net::SocketAddr;
use std::time::Duration;

use super::cluster::cluster_builders;
use crate::ids::NodeId;
use crate::transport::mesh::{ClusterConfig, ClusterKey};
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
#[cfg(feature = "ofi")]
#[derive(Debug)]
pub struct OfiConfig {
    pub(crate) cluster: ClusterConfig,
    pub(crate) fabric: FabricOptions,
}

#[cfg(feature = "ofi")]
impl OfiConfig {
    /// Node `id` of the cluster whose members rendezvous at `members`
    /// (indexed by node id), authenticating with `key`.
    pub fn new(members: Vec<SocketAddr>, id: NodeId, key: ClusterKey) -> Self {
        OfiConfig {
            cluster: ClusterConfig::new(members, id, key),
            fabric: FabricOptions::default(),
        }
    }

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

    /// The most bytes of spare registered receive buffers the node keeps
    /// for reuse (default 1 GiB; 0: none). A delivered message's buffer
    /// returns to the pool, registration included, when the application
    /// drops the message; the next message of a similar size reuses it
    /// instead of registering (on hardware: pinning) fresh memory.
    /// [`NodeConfig::with_buffer_pool`], when set, takes precedence.
    pub fn with_buffer_pool(mut self, bytes: usize) -> Self {
        self.fabric.pool_budget = bytes;
        self
    }

    /// How long a shutdown waits for queued control messages to be sent
    /// (default 3 s; more than zero, at most [`MAX_TIMEOUT`](crate::MAX_TIMEOUT)).
    pub fn with_flush_timeout(mut self, timeout: Duration) -> Self {
        self.fabric.flush_timeout = timeout;
        self
    }
}

#[cfg(feature = "ofi")]
cluster_builders!(
    OfiConfig,
    |config| vec![("flush timeout", config.fabric.flush_timeout)],
    /// After how long without a message from a peer (heartbeats included)
    /// it is considered failed (default 3 s). A peer whose process dies is
    /// noticed sooner, when its endpoints shut down; this bound is for one
    /// that hangs, or a path that drops everything.
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::cluster::tests::{check_cluster_builders, cluster};
    use crate::transport::mesh::ClusterConfigError;

    #[test]
    fn ofi_config_defaults_and_builders() {
        let (members, key) = cluster();
        let config = OfiConfig::new(members.clone(), NodeId(1), key.clone());
        assert_eq!(config.fabric.provider, "tcp");
        assert_eq!(config.fabric.pool_budget, 1 << 30);
        assert_eq!(config.fabric.flush_timeout, Duration::from_secs(3));
        assert_eq!(config.cluster.connect_timeout, Duration::from_secs(30));
        assert_eq!(config.cluster.failure_timeout, Duration::from_secs(3));
        let config = check_cluster_builders!(OfiConfig::new(members, NodeId(1), key))
            .with_provider("verbs")
            .with_fabric_addr("10.1.0.1".parse().unwrap())
            .with_buffer_pool(0)
            .with_flush_timeout(Duration::from_secs(1));
        assert_eq!(config.fabric.provider, "verbs");
        assert_eq!(config.fabric.fabric_addr, Some("10.1.0.1".parse().unwrap()));
        assert_eq!(config.fabric.pool_budget, 0);
        assert_eq!(config.fabric.flush_timeout, Duration::from_secs(1));
        assert!(!config.fabric.strict_modes);
        // The flush timeout is one of its limits.
        let members: Vec<SocketAddr> = vec!["127.0.0.1:7000".parse().unwrap()];
        let key = ClusterKey::from_bytes(*b"config unit test key").unwrap();
        let config = OfiConfig::new(members, NodeId(0), key);
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
