//! What the network transports' configurations share: the cluster they
//! join (a `ClusterConfig` in their `cluster` field), its builders written
//! once for all of them.

/// The builders of what both network transports' configurations hold in
/// their `cluster` field (a `ClusterConfig`), written once for both: the
/// closure lists the configuration's own time limits for `validate`, the
/// attributes given document the transport's failure timeout.
macro_rules! cluster_builders {
    ($config:ident, $own_limits:expr, $(#[$failure_timeout_doc:meta])*) => {
        impl $config {
            /// Check the configuration without opening anything: the member
            /// addresses are distinct and dialable (no port 0, no
            /// unspecified address), this node is one of the members, and
            /// every time limit is above zero and at most [`MAX_TIMEOUT`]($crate::MAX_TIMEOUT).
            /// The node's start runs the same check first.
            ///
            /// # Errors
            /// The first problem found, as a one-line
            /// [`ClusterConfigError`]($crate::ClusterConfigError).
            pub fn validate(&self) -> Result<(), $crate::ClusterConfigError> {
                self.cluster.validate()?;
                let own_limits: fn(&Self) -> Vec<(&'static str, std::time::Duration)> = $own_limits;
                for (what, value) in own_limits(self) {
                    $crate::transport::mesh::check_limit(what, value)?;
                }
                Ok(())
            }

            /// Accept the mesh's connections on this already bound listener
            /// instead of binding this node's member address (useful with
            /// port 0).
            pub fn with_listener(mut self, listener: std::net::TcpListener) -> Self {
                self.cluster.listener = Some(listener);
                self
            }

            /// How long to wait for every other member to be connected
            /// (default 30 s; more than zero, at most [`MAX_TIMEOUT`]($crate::MAX_TIMEOUT)).
            pub fn with_connect_timeout(mut self, timeout: std::time::Duration) -> Self {
                self.cluster.connect_timeout = timeout;
                self
            }

            /// Prove which node this is, and ask every peer which it is,
            /// with per-node certificates: each connection's handshake
            /// starts with TLS 1.3 in which both ends present a
            /// certificate the cluster's authority issued for their node id
            /// (see [`NodeIdentity`]($crate::NodeIdentity)); its frame keys
            /// come from the TLS session. Every member must be configured
            /// with an identity (a member without one cannot connect to one
            /// with one). The configuration's check refuses an identity
            /// whose certificate names another node.
            pub fn with_identity(mut self, identity: $crate::NodeIdentity) -> Self {
                self.cluster.identity = Some(identity);
                self
            }

            $(#[$failure_timeout_doc])*
            pub fn with_failure_timeout(mut self, timeout: std::time::Duration) -> Self {
                self.cluster.failure_timeout = timeout;
                self
            }
        }
    };
}

pub(super) use cluster_builders;

/// The builders of what the configurations of the transports over an
/// RDMA-style fabric (`OfiConfig`, `RdmaConfig`) share, written once for
/// both: `new`, the driver's options (a `DriverOptions` in their `driver`
/// field) and the cluster's builders, the flush timeout among its limits.
/// `$backend` is the field of the transport's own options (their `Default`
/// is its defaults); the attributes given document the transport's failure
/// timeout.
#[cfg(any(feature = "ofi", feature = "rdma"))]
macro_rules! driver_builders {
    ($config:ident, $backend:ident, $(#[$failure_timeout_doc:meta])*) => {
        impl $config {
            /// Node `id` of the cluster whose members rendezvous at `members`
            /// (indexed by node id), authenticating with `key`.
            pub fn new(
                members: Vec<std::net::SocketAddr>,
                id: $crate::NodeId,
                key: $crate::ClusterKey,
            ) -> Self {
                $config {
                    cluster: $crate::transport::mesh::ClusterConfig::new(members, id, key),
                    driver: Default::default(),
                    $backend: Default::default(),
                }
            }

            /// The most bytes of spare registered receive buffers the node
            /// keeps for reuse (default 1 GiB; 0: none). A delivered
            /// message's buffer returns to the pool, registration included,
            /// when the application drops the message; the next message of
            /// a similar size reuses it instead of registering (on hardware:
            /// pinning) fresh memory.
            /// [`NodeConfig::with_buffer_pool`]($crate::NodeConfig::with_buffer_pool),
            /// when set, takes precedence.
            pub fn with_buffer_pool(mut self, bytes: usize) -> Self {
                self.driver.pool_budget = bytes;
                self
            }

            /// How long a shutdown waits for queued control messages to be
            /// sent (default 3 s; more than zero, at most
            /// [`MAX_TIMEOUT`]($crate::MAX_TIMEOUT)).
            pub fn with_flush_timeout(mut self, timeout: std::time::Duration) -> Self {
                self.driver.flush_timeout = timeout;
                self
            }
        }

        $crate::config::cluster::cluster_builders!(
            $config,
            |config| vec![("flush timeout", config.driver.flush_timeout)],
            $(#[$failure_timeout_doc])*
        );
    };
}

#[cfg(any(feature = "ofi", feature = "rdma"))]
pub(super) use driver_builders;

/// The shared builders' test, and the cluster the configurations' tests use.
#[cfg(test)]
pub(super) mod tests {
    use std::net::SocketAddr;

    use crate::transport::mesh::ClusterKey;

    /// Two members' addresses, and a key.
    pub(in crate::config) fn cluster() -> (Vec<SocketAddr>, ClusterKey) {
        let members = vec!["127.0.0.1:7000".parse().unwrap(); 2];
        let key = ClusterKey::from_bytes(*b"config unit test key").unwrap();
        (members, key)
    }

    /// The shared builders set the shared fields, and nothing else, on `$config`.
    macro_rules! check_cluster_builders {
        ($config:expr) => {{
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let config = $config
                .with_listener(listener)
                .with_connect_timeout(Duration::from_millis(1234))
                .with_failure_timeout(Duration::from_millis(567));
            let cluster = &config.cluster;
            assert_eq!(cluster.id, NodeId(1));
            assert_eq!(cluster.members.len(), 2);
            let bound = cluster.listener.as_ref().unwrap().local_addr().unwrap();
            assert_eq!(bound.port(), port);
            assert_eq!(cluster.connect_timeout, Duration::from_millis(1234));
            assert_eq!(cluster.failure_timeout, Duration::from_millis(567));
            assert_eq!(cluster.handshake_timeout, Duration::from_secs(5));
            config
        }};
    }
    pub(in crate::config) use check_cluster_builders;

    /// The driver's defaults and builders of `$config` (`OfiConfig`,
    /// `RdmaConfig`), and its flush timeout among its limits.
    #[cfg(any(feature = "ofi", feature = "rdma"))]
    macro_rules! check_driver_builders {
        ($config:ident) => {{
            let (members, key) = cluster();
            let config = $config::new(members, NodeId(1), key.clone());
            assert_eq!(config.driver.pool_budget, 1 << 30);
            assert_eq!(config.driver.flush_timeout, Duration::from_secs(3));
            let config = config
                .with_buffer_pool(0)
                .with_flush_timeout(Duration::from_secs(1));
            assert_eq!(config.driver.pool_budget, 0);
            assert_eq!(config.driver.flush_timeout, Duration::from_secs(1));
            // The flush timeout is one of its limits.
            let members = vec!["127.0.0.1:7000".parse().unwrap()];
            let config = $config::new(members, NodeId(0), key);
            assert_eq!(config.validate(), Ok(()));
            let zero = config.with_flush_timeout(Duration::ZERO).validate();
            let what = "flush timeout";
            assert_eq!(zero, Err(ClusterConfigError::ZeroTimeout { what }));
        }};
    }
    #[cfg(any(feature = "ofi", feature = "rdma"))]
    pub(in crate::config) use check_driver_builders;
}
