//! What every command that joins a cluster of processes shares (`rdmc
//! member`, `rdmc push`, `rdmc receive`, and the benchmark harness's
//! members): the members file, the cluster key, time limits, the transport,
//! wire security and completion mode as the command line names them, and
//! starting this process's node.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};

use crate::members::exchange::ExchangeKey;
pub use crate::members::file::read_members;
use crate::members::{self, How, MembersArgs, Want};
use clap::ValueEnum;
use rdmc::{
    ClusterKey, CompletionMode, MAX_TIMEOUT, Node, NodeConfig, NodeId, TcpConfig, WireSecurity,
};

/// The transports a member can use.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Transport {
    /// TCP: one authenticated connection per pair of members.
    Tcp,
    /// libfabric: RDMA-style endpoints (the `ofi` feature).
    Ofi,
    /// RDMA verbs: an RC queue pair per pair of members (the `rdma` feature).
    Rdma,
}

/// The error for `--transport ofi` in a build without the `ofi` feature.
pub const NO_OFI: &str = "this rdmc was built without the `ofi` transport; \
                          rebuild with `cargo build --features ofi` (needs libfabric-dev)";

/// The error for `--transport rdma` in a build without the `rdma` feature.
pub const NO_RDMA: &str = "this rdmc was built without the `rdma` transport; \
                           rebuild with `cargo build --features rdma` (needs cmake, libclang-dev)";

/// `--wire-security`: how frames are protected on the wire.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SecurityChoice {
    /// Every frame authenticated (the default).
    Authenticated,
    /// Every frame authenticated, payloads encrypted.
    Encrypted,
    /// No protection after the handshake (trusted fabrics).
    None,
}

impl SecurityChoice {
    /// The name the command line gives it.
    pub fn name(self) -> &'static str {
        match self {
            SecurityChoice::Authenticated => "authenticated",
            SecurityChoice::Encrypted => "encrypted",
            SecurityChoice::None => "none",
        }
    }
}

impl From<SecurityChoice> for WireSecurity {
    fn from(s: SecurityChoice) -> Self {
        match s {
            SecurityChoice::Authenticated => WireSecurity::Authenticated,
            SecurityChoice::Encrypted => WireSecurity::Encrypted,
            SecurityChoice::None => WireSecurity::None,
        }
    }
}

/// `--connections`: which members a member connects to, and when.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ConnectionsChoice {
    /// Only the members its groups exchange blocks with and its
    /// neighbours in their relay trees (about log2 N), as the groups
    /// need them; signals to the others are relayed.
    OnDemand,
    /// Every member, at start (N - 1 connections each).
    All,
}

impl From<ConnectionsChoice> for rdmc::Connections {
    fn from(c: ConnectionsChoice) -> Self {
        match c {
            ConnectionsChoice::OnDemand => rdmc::Connections::OnDemand,
            ConnectionsChoice::All => rdmc::Connections::All,
        }
    }
}

/// `--completion`: the completion modes, as the command line names them.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeChoice {
    // (No doc comments on the variants: clap would make them help text.)
    #[allow(missing_docs)]
    Interrupt,
    #[allow(missing_docs)]
    Polling,
    #[allow(missing_docs)]
    Hybrid,
    #[allow(missing_docs)]
    Adaptive,
}

impl From<ModeChoice> for CompletionMode {
    fn from(m: ModeChoice) -> Self {
        match m {
            ModeChoice::Interrupt => CompletionMode::Interrupt,
            ModeChoice::Polling => CompletionMode::Polling,
            ModeChoice::Hybrid => CompletionMode::Hybrid {
                window: CompletionMode::PAPER_HYBRID_WINDOW,
            },
            ModeChoice::Adaptive => CompletionMode::default(),
        }
    }
}

/// What proves a member and what it shows: the options `rdmc member`,
/// `push` and `receive` share.
#[derive(Debug, clap::Args)]
pub struct Credentials {
    /// File holding the cluster key (at least 16 bytes) every member shares
    /// (`rdmc keygen FILE` makes one). Required: there is no default key.
    #[arg(long, value_name = "F")]
    pub key_file: Option<PathBuf>,
    /// This member's identity (a directory made by `rdmc keygen --node`):
    /// every member then proves which member it is with its certificate,
    /// besides holding the key. Give every member its own, or none.
    #[arg(long, value_name = "DIR")]
    pub identity: Option<PathBuf>,
    /// Serve this member's metrics (bytes per peer, message latencies,
    /// failures, ...) as Prometheus text at http://ADDR/metrics while it
    /// runs.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
}

impl Credentials {
    /// Load the identity into `cluster` and start serving the metrics, if
    /// asked.
    pub fn apply(&self, cluster: &mut ClusterSetup) -> anyhow::Result<()> {
        cluster.set_identity(self.identity.as_deref())?;
        if let Some(addr) = self.metrics_addr {
            crate::metrics_addr::serve(addr)?;
        }
        Ok(())
    }
}

/// Everything needed to start this process's node: the cluster (the
/// members' addresses, this member's rank, the key), the time limits and
/// the transport.
pub struct ClusterSetup {
    /// The members' addresses, in rank order (empty until
    /// [`join`](Self::join) where the source needs the network).
    pub members: Vec<SocketAddr>,
    /// How many members the cluster has.
    pub size: usize,
    /// This member's rank (until [`join`](Self::join) with an etcd claim:
    /// the lowest it can get, 1; see [`rank_known`](Self::rank_known)).
    pub rank: u32,
    /// Where the members come from.
    pub source: members::Source,
    /// Where the members come from, for error messages: the file, or
    /// `--members-from SOURCE`.
    pub origin: String,
    /// The cluster key every member shares.
    pub key: ClusterKey,
    /// This member's identity (`--identity`), when nodes prove which node
    /// they are.
    pub identity: Option<rdmc::NodeIdentity>,
    /// How long to wait for every member to be connected.
    pub connect_timeout: Duration,
    /// Silence after which a peer is considered failed.
    pub failure_timeout: Duration,
    /// The transport between the members.
    pub transport: Transport,
    /// With `Transport::Ofi`: the libfabric provider.
    pub ofi_provider: String,
    /// With `Transport::Tcp`: early announcement, if on.
    pub early_announce: Option<rdmc::EarlyAnnounce>,
    /// With `Transport::Tcp`: how frames are protected (default:
    /// authenticated).
    pub wire_security: rdmc::WireSecurity,
    /// With `Transport::Tcp`: the connections' TCP congestion control
    /// (default: the machine's).
    pub congestion_control: Option<String>,
    /// With `Transport::Tcp`: which members to connect to, and when
    /// (default: all, at start).
    pub connections: rdmc::Connections,
    /// With `Transport::Tcp`: whether nodes beyond the member list may join
    /// and members come back at other addresses
    /// ([`rdmc::TcpConfig::with_open_membership`]).
    pub open_membership: bool,
    /// How membership changes seen while running (etcd) are written.
    pub report: members::Report,
    /// What [`join`](Self::join) still has to do.
    pending: Option<members::Plan>,
    /// Whether the rank is still to be claimed (etcd) by
    /// [`join`](Self::join).
    claiming: bool,
    /// The bootstrap exchange's key, derived from the cluster key.
    exchange_key: ExchangeKey,
    /// The membership source's watch, once joined (etcd).
    watch: Option<members::Watch>,
}

impl ClusterSetup {
    /// Read the members file and the key, check the time limits and the
    /// cluster (through the library's own check: duplicate addresses, port
    /// 0, unspecified addresses), before anything listens.
    pub fn prepare(
        members_file: &Path,
        rank: u32,
        key_file: Option<&Path>,
        timeouts: (f64, f64),
        transport: Transport,
        ofi_provider: &str,
    ) -> anyhow::Result<Self> {
        let plan = members::file::plan(members_file, Want::Rank(rank), "--rank")?;
        Self::from_plan(plan, key_file, timeouts, transport, ofi_provider)
    }

    /// Like [`prepare`](Self::prepare), the members from wherever `args`
    /// say: everything that needs no network is read and checked here;
    /// the rest happens in [`join`](Self::join). `flag` names the rank's
    /// option in errors.
    pub fn from_args(
        args: &MembersArgs,
        (want, flag): (Want, &str),
        key_file: Option<&Path>,
        timeouts: (f64, f64),
        transport: Transport,
        ofi_provider: &str,
    ) -> anyhow::Result<Self> {
        let plan = members::plan(args, want, flag, members::process_env())?;
        Self::from_plan(plan, key_file, timeouts, transport, ofi_provider)
    }

    /// A cluster handed over whole, as `rdmc push --hosts` hands it to the
    /// receivers it starts: every member's address, this member's rank and
    /// the key; `origin` names where it came from in errors.
    pub fn from_list(
        members: Vec<SocketAddr>,
        rank: u32,
        key: ClusterKey,
        origin: &str,
        timeouts: (f64, f64),
        transport: Transport,
        ofi_provider: &str,
    ) -> anyhow::Result<Self> {
        let plan = members::Plan {
            source: members::Source::File,
            size: members.len(),
            rank: Some(rank),
            origin: origin.to_owned(),
            how: How::Ready(members),
        };
        Self::with_key(plan, key, timeouts, transport, ofi_provider)
    }

    fn from_plan(
        plan: members::Plan,
        key_file: Option<&Path>,
        timeouts: (f64, f64),
        transport: Transport,
        ofi_provider: &str,
    ) -> anyhow::Result<Self> {
        let key = load_key(key_file)?;
        Self::with_key(plan, key, timeouts, transport, ofi_provider)
    }

    fn with_key(
        plan: members::Plan,
        key: ClusterKey,
        (connect_timeout, failure_timeout): (f64, f64),
        transport: Transport,
        ofi_provider: &str,
    ) -> anyhow::Result<Self> {
        let connect_timeout = seconds(connect_timeout, "--connect-timeout")?;
        let failure_timeout = seconds(failure_timeout, "--failure-timeout")?;
        let exchange_key = ExchangeKey::derive(&key);
        let mut setup = ClusterSetup {
            members: Vec::new(),
            size: plan.size,
            rank: plan.rank.unwrap_or(1),
            source: plan.source,
            origin: plan.origin.clone(),
            key,
            identity: None,
            connect_timeout,
            failure_timeout,
            transport,
            ofi_provider: ofi_provider.to_owned(),
            early_announce: None,
            wire_security: rdmc::WireSecurity::default(),
            congestion_control: None,
            connections: rdmc::Connections::All,
            open_membership: false,
            report: members::Report::default(),
            pending: None,
            claiming: plan.rank.is_none(),
            exchange_key,
            watch: None,
        };
        match plan.how {
            How::Ready(members) => {
                setup.members = members;
                setup.validate()?;
            }
            _ => setup.pending = Some(plan),
        }
        Ok(setup)
    }

    /// Check the cluster through the library's own check.
    fn validate(&self) -> anyhow::Result<()> {
        let config = TcpConfig::new(self.members.clone(), NodeId(self.rank), self.key.clone())
            .with_connect_timeout(self.connect_timeout)
            .with_failure_timeout(self.failure_timeout);
        let config = match &self.identity {
            Some(identity) => config.with_identity(identity.clone()),
            None => config,
        };
        // The library's message only: it names its cause already.
        config
            .validate()
            .map_err(|e| anyhow!("{}: {e}", self.origin))
    }

    /// Prove which member this is with the identity in `dir` (made by
    /// `rdmc keygen --node`), if given; checked against the rank when it
    /// is known.
    pub fn set_identity(&mut self, dir: Option<&Path>) -> anyhow::Result<()> {
        if let Some(dir) = dir {
            self.identity = Some(crate::identity::load(dir)?);
            if self.pending.is_none() {
                self.validate()?;
            }
        }
        Ok(())
    }

    /// Whether this member's rank is known (it is, except while an etcd
    /// claim waits for [`join`](Self::join)).
    pub fn rank_known(&self) -> bool {
        !self.claiming
    }

    /// Whether the members come from a launcher (Slurm, MPI, Kubernetes),
    /// which runs one command line for every rank.
    pub fn launched(&self) -> bool {
        use members::Source::{K8s, Mpi, Slurm};
        matches!(self.source, Slurm | Mpi | K8s)
    }

    /// Find the members where the source needs the network (resolve
    /// names, exchange addresses, register in etcd), within the connect
    /// timeout; nothing to do for a members file, or once joined.
    pub async fn join(&mut self) -> anyhow::Result<()> {
        let Some(plan) = self.pending.take() else {
            return Ok(());
        };
        let deadline = std::time::Instant::now() + self.connect_timeout;
        let joined = members::join(plan, &self.exchange_key, deadline, self.report).await?;
        self.members = joined.members;
        self.rank = joined.rank;
        self.claiming = false;
        self.watch = joined.watch;
        self.validate()
    }

    /// Resolves with the reason once the membership source that watches
    /// the cluster while it runs (etcd) is lost; never otherwise.
    pub async fn lost(&self) -> String {
        match &self.watch {
            Some(watch) => watch.lost().await,
            None => std::future::pending().await,
        }
    }

    /// The ids of every member, in rank order.
    pub fn ids(&self) -> Vec<NodeId> {
        (0..self.size as u32).map(NodeId).collect()
    }

    /// How to name member `node` to a user: its rank and address.
    pub fn describe(&self, node: NodeId) -> String {
        match self.members.get(node.0 as usize) {
            Some(addr) => format!("{addr} (rank {})", node.0),
            None => format!("rank {}", node.0),
        }
    }

    /// Start this member's node, once [joined](Self::join) where the
    /// source needs it: connecting every member at start, it waits (up to
    /// the connect timeout) for every member to be connected; on demand,
    /// only until it listens.
    pub async fn start(&self, node_config: NodeConfig) -> anyhow::Result<Node> {
        if self.pending.is_some() {
            bail!("the members from {} are not known yet", self.origin);
        }
        let (members, me, key) = (self.members.clone(), NodeId(self.rank), self.key.clone());
        let node = match self.transport {
            Transport::Tcp => {
                let config = TcpConfig::new(members, me, key)
                    .with_connect_timeout(self.connect_timeout)
                    .with_failure_timeout(self.failure_timeout)
                    .with_early_announce(self.early_announce)
                    .with_wire_security(self.wire_security)
                    .with_connections(self.connections)
                    .with_open_membership(self.open_membership);
                let config = match &self.identity {
                    Some(identity) => config.with_identity(identity.clone()),
                    None => config,
                };
                let config = match &self.congestion_control {
                    Some(name) => config.with_congestion_control(name.clone()),
                    None => config,
                };
                Node::tcp(config, node_config).await
            }
            Transport::Ofi => self.start_ofi(node_config).await?,
            Transport::Rdma => self.start_rdma(node_config).await?,
        };
        node.map_err(|e| anyhow!("{e}"))
    }

    #[cfg(feature = "ofi")]
    async fn start_ofi(
        &self,
        node_config: NodeConfig,
    ) -> anyhow::Result<Result<Node, rdmc::Error>> {
        let config =
            rdmc::OfiConfig::new(self.members.clone(), NodeId(self.rank), self.key.clone())
                .with_connect_timeout(self.connect_timeout)
                .with_failure_timeout(self.failure_timeout)
                .with_provider(self.ofi_provider.clone());
        let config = match &self.identity {
            Some(identity) => config.with_identity(identity.clone()),
            None => config,
        };
        Ok(Node::ofi(config, node_config).await)
    }

    #[cfg(not(feature = "ofi"))]
    async fn start_ofi(&self, _: NodeConfig) -> anyhow::Result<Result<Node, rdmc::Error>> {
        Err(anyhow!(NO_OFI))
    }

    #[cfg(feature = "rdma")]
    async fn start_rdma(
        &self,
        node_config: NodeConfig,
    ) -> anyhow::Result<Result<Node, rdmc::Error>> {
        let config =
            rdmc::RdmaConfig::new(self.members.clone(), NodeId(self.rank), self.key.clone())
                .with_connect_timeout(self.connect_timeout)
                .with_failure_timeout(self.failure_timeout);
        let config = match &self.identity {
            Some(identity) => config.with_identity(identity.clone()),
            None => config,
        };
        Ok(Node::rdma(config, node_config).await)
    }

    #[cfg(not(feature = "rdma"))]
    async fn start_rdma(&self, _: NodeConfig) -> anyhow::Result<Result<Node, rdmc::Error>> {
        Err(anyhow!(NO_RDMA))
    }
}

/// The error without `--key-file`: there is no default key, since a key
/// everybody knows keeps nobody out.
pub const NO_KEY: &str = "no --key-file: every member needs the same secret cluster key. \
     Create one with `rdmc keygen KEYFILE`, copy KEYFILE to every host (it must stay secret), \
     and give --key-file KEYFILE to every member";

/// The cluster key in `key_file`; without one, the [`NO_KEY`] error.
pub fn load_key(key_file: Option<&Path>) -> anyhow::Result<ClusterKey> {
    use std::os::unix::fs::PermissionsExt;
    let path = key_file.ok_or_else(|| anyhow!(NO_KEY))?;
    let key = ClusterKey::from_file(path).map_err(|e| match e {
        // The errors about the key itself do not name its file.
        rdmc::ClusterKeyError::Empty | rdmc::ClusterKeyError::TooShort { .. } => {
            anyhow!("{}: {e}", path.display())
        }
        e => anyhow!("{e}"),
    })?;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        eprintln!(
            "rdmc: the cluster key file {} can be read by other users (mode {:o}): \
             `chmod 600 {}` (the key must stay secret)",
            path.display(),
            meta.permissions().mode() & 0o777,
            path.display()
        );
    }
    Ok(key)
}

/// A time limit in seconds: a number above zero, at most a year.
pub fn seconds(value: f64, what: &str) -> anyhow::Result<Duration> {
    match Duration::try_from_secs_f64(value) {
        Ok(d) if d.is_zero() => bail!("{what} must be more than 0 seconds"),
        Ok(d) if d > MAX_TIMEOUT => bail!(
            "{what} {value} is longer than the most accepted, {} seconds (a year)",
            MAX_TIMEOUT.as_secs()
        ),
        Ok(d) => Ok(d),
        Err(_) => bail!("{what} must be a positive number of seconds ({value} given)"),
    }
}

/// What kind of file `file_type` is, for an error message.
pub fn kind_of(file_type: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// `error`'s message without the temporary file's path that `tempfile`
/// appends (" at path ..."): the file is gone, and the caller names the
/// file it meant.
pub fn without_path(error: std::io::Error) -> String {
    let text = error.to_string();
    match text.find(" at path \"") {
        Some(end) if error.raw_os_error().is_none() => text[..end].to_owned(),
        _ => text,
    }
}

/// Create the output directory if need be and check it is a directory
/// this process can write. Done before the receiver contacts anyone.
pub fn check_output_dir(dir: &Path) -> anyhow::Result<()> {
    let named = || format!("output directory {}", dir.display());
    std::fs::create_dir_all(dir).with_context(named)?;
    let meta = std::fs::metadata(dir).with_context(named)?;
    if !meta.is_dir() {
        bail!(
            "output directory {}: is {}",
            dir.display(),
            kind_of(meta.file_type())
        );
    }
    tempfile::Builder::new()
        .prefix(".rdmc-probe.")
        .tempfile_in(dir)
        .with_context(|| format!("output directory {}: cannot write", dir.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_limits_are_checked() {
        let err = |value| format!("{:#}", seconds(value, "--x").unwrap_err());
        assert_eq!(seconds(2.5, "--x").unwrap(), Duration::from_millis(2500));
        assert!(err(0.0).contains("more than 0"));
        assert!(err(1e19).contains("longer than"));
        assert!(err(-1.0).contains("positive"));
        assert!(err(f64::NAN).contains("positive"));
        assert!(seconds(f64::INFINITY, "--x").is_err());
    }

    #[test]
    fn without_a_key_file_there_is_no_key_but_advice() {
        let err = format!("{:#}", load_key(None).unwrap_err());
        assert!(err.contains("rdmc keygen"), "{err}");
        assert!(err.contains("--key-file"), "{err}");
    }
}
