//! The configuration of a node, whatever its transport.

pub use crate::wait::CompletionMode;

/// Configuration of a [`Node`](crate::Node).
#[derive(Clone, Debug, Default)]
pub struct NodeConfig {
    completion_mode: CompletionMode,
    buffer_pool: Option<usize>,
}

impl NodeConfig {
    /// The defaults: [`CompletionMode::Adaptive`] (interrupt-driven, spinning
    /// only while completions stream in and a core is free for it; see
    /// [`CompletionMode`] for the modes and what each costs).
    pub fn new() -> Self {
        Self::default()
    }

    /// Set how the node waits for completions.
    pub fn with_completion_mode(mut self, mode: CompletionMode) -> Self {
        self.completion_mode = mode;
        self
    }

    /// How the node waits for completions.
    pub fn completion_mode(&self) -> CompletionMode {
        self.completion_mode
    }

    /// The most bytes of spare message buffers the node keeps for reuse
    /// (0: none). A delivered message's buffer returns to the node's pool
    /// when the application drops the [`Message`](crate::Message); the next
    /// message of a similar size reuses it instead of mapping (and, on
    /// registered-memory transports, registering) fresh memory.
    ///
    /// Default: 512 MiB on the `mem` and `tcp` transports; on `ofi`, what
    /// `OfiConfig::with_buffer_pool` says (feature `ofi`; 1 GiB unless set).
    /// Set here, it applies to every transport.
    pub fn with_buffer_pool(mut self, bytes: usize) -> Self {
        self.buffer_pool = Some(bytes);
        self
    }

    /// The buffer pool budget set with [`with_buffer_pool`](Self::with_buffer_pool), if any.
    pub fn buffer_pool(&self) -> Option<usize> {
        self.buffer_pool
    }
}

#[cfg(any(feature = "ofi", feature = "rdma"))]
impl NodeConfig {
    /// A fabric driver's options with this node's buffer pool budget, when
    /// one is set here, in place of the transport configuration's.
    pub(crate) fn driver_options(
        &self,
        mut driver: crate::transport::fabric_driver::DriverOptions,
    ) -> crate::transport::fabric_driver::DriverOptions {
        if let Some(budget) = self.buffer_pool {
            driver.pool_budget = budget;
        }
        driver
    }
}
