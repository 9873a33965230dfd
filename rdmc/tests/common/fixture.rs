//! One [`Fixture`] per transport: how to start a member of a test cluster,
//! how to crash one, and what the transport can be tested for. Adding a
//! transport to the whole-group suite is a fixture here and one line in
//! `tests/whole_group.rs`.

use std::net::SocketAddr;
use std::time::Duration;

use futures::future::BoxFuture;
use rdmc::{ClusterKey, Error, MemCluster, Node, NodeId, TcpConfig};

use super::{LONG, bounded, key, loopback, node_config};

/// Transport-neutral knobs a scenario may turn; a transport without the
/// knob ignores it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tuning {
    /// A peer silent this long is down.
    pub failure_timeout: Option<Duration>,
    /// How long a node waits for every member to connect (default 20 s).
    pub connect_timeout: Option<Duration>,
    /// The largest piece of a block written at once (the `tcp` transport
    /// interleaves groups at this grain).
    pub chunk_size: Option<u32>,
    /// Connected on demand: how long a connection no group needs stays
    /// open.
    pub idle_timeout: Option<Duration>,
}

/// A test cluster before it starts: where each member is reached, the
/// listener each member will accept on, the cluster key, and the in-process
/// fabric (used by the `mem` transport only; the others ignore it, as `mem`
/// ignores the addresses).
pub struct Layout {
    /// Where member `i` is reached; a test may put a relay in between.
    pub addrs: Vec<SocketAddr>,
    listeners: Vec<Option<std::net::TcpListener>>,
    /// The key members prove to each other.
    pub key: ClusterKey,
    /// The in-process fabric of the `mem` transport.
    pub mem: MemCluster,
}

impl Layout {
    /// `n` members on free loopback ports, with the test key.
    pub fn new(n: usize) -> Self {
        let listeners: Vec<_> = (0..n).map(|_| loopback()).collect();
        let addrs = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
        Layout {
            addrs,
            listeners: listeners.into_iter().map(Some).collect(),
            key: key(),
            mem: MemCluster::new(n),
        }
    }

    /// Strangers to this cluster: the same addresses, fresh listeners, and
    /// `key` instead of the cluster's.
    pub fn impostors(&self, key: ClusterKey) -> Self {
        Layout {
            addrs: self.addrs.clone(),
            listeners: self.addrs.iter().map(|_| Some(loopback())).collect(),
            key,
            mem: MemCluster::new(self.addrs.len()),
        }
    }

    /// Member `i`'s listener (once).
    pub fn take_listener(&mut self, i: usize) -> std::net::TcpListener {
        self.listeners[i].take().expect("a member starts once")
    }

    /// Start member `id` on transport `F`, tuned by `tuning`: a future to
    /// run on the runtime the member should live on.
    pub fn start<F: Fixture>(
        &mut self,
        id: NodeId,
        tuning: Tuning,
    ) -> BoxFuture<'static, Result<Node, Error>> {
        let listener = self.take_listener(id.index());
        F::start(Member {
            layout: self,
            id,
            listener,
            tuning,
        })
    }

    /// Start every member on transport `F` and wait until all are connected.
    pub async fn start_all<F: Fixture>(&mut self, tuning: Tuning) -> Vec<Node> {
        let starts: Vec<_> = (0..self.addrs.len() as u32)
            .map(|id| self.start::<F>(NodeId(id), tuning))
            .collect();
        bounded(LONG, "connecting the cluster", async {
            futures::future::try_join_all(starts).await.unwrap()
        })
        .await
    }
}

/// `n` connected members on transport `F`, and their layout (for the
/// addresses, or to kill a `mem` member).
pub async fn cluster<F: Fixture>(n: usize, tuning: Tuning) -> (Vec<Node>, Layout) {
    let mut layout = Layout::new(n);
    let nodes = layout.start_all::<F>(tuning).await;
    (nodes, layout)
}

/// One member of a [`Layout`] to start.
pub struct Member<'a> {
    /// The cluster it belongs to.
    pub layout: &'a Layout,
    /// Its id.
    pub id: NodeId,
    /// The listener it accepts on.
    pub listener: std::net::TcpListener,
    /// The knobs the scenario turns.
    pub tuning: Tuning,
}

/// A transport under test: how its members start and crash, and what the
/// suite can test it for. The capability constants declare that; the
/// transport's `whole_group_suite!` line lists the same capabilities, and
/// only their scenarios are expanded for it (its test
/// `the_suite_runs_what_the_fixture_can` checks the two agree).
pub trait Fixture: 'static {
    /// The transport's name.
    const NAME: &'static str;
    /// Members accept TCP connections at their listed addresses, and check
    /// the cluster key there, for as long as they run: strangers and
    /// garbage can reach them (capability `listens`).
    const LISTENS: bool;
    /// Every byte between two members crosses TCP connections to the listed
    /// addresses, so a relay in front of a member can slow its links or
    /// freeze them (capability `relayable`; its silent-link scenario needs
    /// `heartbeats` too).
    const RELAYABLE: bool;
    /// Members exchange heartbeats: one gone silent is found within the
    /// failure timeout (capability `heartbeats`).
    const HEARTBEATS: bool;
    /// Members connect to each other as their groups need, not all at
    /// start: a node's start succeeds without its peers.
    const ON_DEMAND: bool = false;

    /// Whether the transport can run on this machine, or why not (no
    /// device): a scenario of a transport that cannot run here is skipped,
    /// with the reason printed.
    fn available() -> Result<(), String> {
        Ok(())
    }

    /// Start `member`: a future to run on the runtime it should live on.
    fn start(member: Member<'_>) -> BoxFuture<'static, Result<Node, Error>>;

    /// Crash member `id` the transport's way, before the runtime it runs on
    /// is shut down. By default the runtime's shutdown is the crash: its
    /// tasks vanish, its connections close without a word.
    fn crash(_layout: &Layout, _id: NodeId) {}

    /// Which capabilities the constants claim, by their suite names.
    fn capabilities() -> Vec<&'static str> {
        [
            (Self::LISTENS, "listens"),
            (Self::RELAYABLE, "relayable"),
            (Self::HEARTBEATS, "heartbeats"),
        ]
        .into_iter()
        .filter_map(|(has, name)| has.then_some(name))
        .collect()
    }
}

/// The configuration of a network transport, `$config` (`TcpConfig`,
/// `OfiConfig`: the same constructor and `with_*` methods), for `$member`.
macro_rules! tuned {
    ($config:ty, $member:expr) => {{
        let Member {
            layout,
            id,
            listener,
            tuning,
        } = $member;
        let config = <$config>::new(layout.addrs.clone(), id, layout.key.clone())
            .with_listener(listener)
            .with_connect_timeout(tuning.connect_timeout.unwrap_or(Duration::from_secs(20)));
        match tuning.failure_timeout {
            Some(timeout) => config.with_failure_timeout(timeout),
            None => config,
        }
    }};
}

/// The in-process transport: no wire, no heartbeats; a crash is
/// [`MemCluster::kill`].
pub struct MemFixture;

impl Fixture for MemFixture {
    const NAME: &'static str = "mem";
    const LISTENS: bool = false;
    const RELAYABLE: bool = false;
    const HEARTBEATS: bool = false;

    fn start(member: Member<'_>) -> BoxFuture<'static, Result<Node, Error>> {
        let (cluster, id) = (member.layout.mem.clone(), member.id);
        // The node's actor is spawned where the future runs.
        Box::pin(async move { Node::in_memory(&cluster, id, node_config()) })
    }

    fn crash(layout: &Layout, id: NodeId) {
        layout.mem.kill(id);
    }
}

/// The `tcp` transport on loopback.
pub struct TcpFixture;

impl Fixture for TcpFixture {
    const NAME: &'static str = "tcp";
    const LISTENS: bool = true;
    const RELAYABLE: bool = true;
    const HEARTBEATS: bool = true;

    fn start(member: Member<'_>) -> BoxFuture<'static, Result<Node, Error>> {
        let mut config = tuned!(TcpConfig, member);
        if let Some(bytes) = member.tuning.chunk_size {
            config = config.with_chunk_size(bytes);
        }
        Box::pin(Node::tcp(config, node_config()))
    }
}

/// The `tcp` transport on loopback, connected on demand
/// ([`Connections::OnDemand`](rdmc::Connections::OnDemand)): a member
/// starts once it listens, connects to the peers its groups need as they
/// are created, and relays the rest of their signals.
pub struct TcpOnDemandFixture;

impl Fixture for TcpOnDemandFixture {
    const NAME: &'static str = "tcp-on-demand";
    const LISTENS: bool = true;
    const RELAYABLE: bool = true;
    const HEARTBEATS: bool = true;
    const ON_DEMAND: bool = true;

    fn start(member: Member<'_>) -> BoxFuture<'static, Result<Node, Error>> {
        let mut config = tuned!(TcpConfig, member).with_connections(rdmc::Connections::OnDemand);
        if let Some(timeout) = member.tuning.idle_timeout {
            config = config.with_idle_timeout(Some(timeout));
        }
        if let Some(bytes) = member.tuning.chunk_size {
            config = config.with_chunk_size(bytes);
        }
        Box::pin(Node::tcp(config, node_config()))
    }
}

/// The `ofi` transport (libfabric): by default the `tcp` provider on
/// loopback; `RDMC_OFI_PROVIDER` and `RDMC_OFI_FABRIC_ADDR` (the local
/// address of the provider's device) pick another, say `verbs` over
/// Soft-RoCE in a VM. Its rendezvous listener stays open (for members that
/// restart), and the data path does not cross the listed addresses.
#[cfg(feature = "ofi")]
pub struct OfiFixture;

#[cfg(feature = "ofi")]
impl Fixture for OfiFixture {
    const NAME: &'static str = "ofi";
    const LISTENS: bool = true;
    const RELAYABLE: bool = false;
    const HEARTBEATS: bool = true;

    fn start(member: Member<'_>) -> BoxFuture<'static, Result<Node, Error>> {
        let mut config = tuned!(rdmc::OfiConfig, member);
        if let Ok(provider) = std::env::var("RDMC_OFI_PROVIDER")
            && !provider.is_empty()
        {
            config = config.with_provider(provider);
        }
        if let Ok(addr) = std::env::var("RDMC_OFI_FABRIC_ADDR")
            && !addr.is_empty()
        {
            config = config.with_fabric_addr(addr.parse().expect("an IP address"));
        }
        Box::pin(Node::ofi(config, node_config()))
    }
}

/// The `rdma` transport (RDMA verbs): the device `RDMC_RDMA_DEVICE` names,
/// or the first; GID index `RDMC_RDMA_GID_INDEX`, or 0. Its scenarios skip
/// where there is no device, and run in the Soft-RoCE VM tier. As on `ofi`,
/// the rendezvous listener closes once the cluster is connected, and the
/// data path does not cross the listed addresses.
#[cfg(feature = "rdma")]
pub struct RdmaFixture;

#[cfg(feature = "rdma")]
impl Fixture for RdmaFixture {
    const NAME: &'static str = "rdma";
    const LISTENS: bool = false;
    const RELAYABLE: bool = false;
    const HEARTBEATS: bool = true;

    fn available() -> Result<(), String> {
        rdmc::RdmaConfig::devices()
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn start(member: Member<'_>) -> BoxFuture<'static, Result<Node, Error>> {
        let mut config = tuned!(rdmc::RdmaConfig, member);
        if let Ok(device) = std::env::var("RDMC_RDMA_DEVICE")
            && !device.is_empty()
        {
            config = config.with_device(device);
        }
        if let Ok(index) = std::env::var("RDMC_RDMA_GID_INDEX")
            && !index.is_empty()
        {
            config = config.with_gid_index(index.parse().expect("a GID index"));
        }
        Box::pin(Node::rdma(config, node_config()))
    }
}
