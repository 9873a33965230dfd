//! `rdmc member`: one member of a cluster of processes. The root (rank 0)
//! multicasts files; every other member writes what it receives.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use futures::StreamExt;
use rdmc::{
    Algorithm, ClusterKey, CompletionMode, GroupConfig, GroupId, Node, NodeConfig, NodeId,
    TcpConfig,
};
use serde_json::json;

use crate::demo::ModeChoice;
use crate::member_bench;
use crate::size::parse_size;

/// Arguments of `rdmc member`.
#[derive(Debug, Args)]
pub(crate) struct MemberArgs {
    /// File listing the members, one `host:port` per line in rank order
    /// (rank 0, the root, first; blank lines and `#` comments are skipped).
    #[arg(long, value_name = "FILE")]
    members: PathBuf,
    /// This process's rank in the member list.
    #[arg(long)]
    pub(crate) rank: u32,
    /// Multicast algorithm.
    #[arg(long, default_value = "binomial-pipeline", value_parser = parse_algorithm)]
    algorithm: Algorithm,
    /// Block size, e.g. 64KiB, 1MiB.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    block_size: u64,
    /// Receivers write message i to DIR/i.bin as soon as it is delivered.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// File holding the cluster key (at least 16 bytes) every member shares.
    /// Without it a well-known key is used, which keeps strangers out of
    /// nothing.
    #[arg(long, value_name = "F")]
    key_file: Option<PathBuf>,
    /// Seconds to wait for every member to be connected.
    #[arg(long, default_value_t = 30.0)]
    connect_timeout: f64,
    /// Seconds of silence after which a peer is considered failed (a peer
    /// whose connections break is noticed sooner).
    #[arg(long, default_value_t = 3.0)]
    failure_timeout: f64,
    /// How this member waits for completions.
    #[arg(long, value_enum, default_value_t = ModeChoice::Hybrid)]
    completion: ModeChoice,
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
    /// Transport between the members: `tcp`, or `ofi` (libfabric; needs a
    /// build with the `ofi` feature). The members file lists rendezvous
    /// addresses either way; with `ofi` the fabric endpoints bind to the
    /// same IP.
    #[arg(long, value_enum, default_value_t = Transport::Tcp)]
    transport: Transport,
    /// With `--transport ofi`: the libfabric provider (`tcp`, `verbs`, ...).
    #[arg(long, default_value = "tcp", value_name = "NAME")]
    ofi_provider: String,
    /// Benchmark mode, driven by `rdmc bench`: the root reads `send SIZE
    /// COUNT` and `close` commands from stdin and sends prefixes of a
    /// pseudo-random payload every member generates alike; receivers check
    /// every message against it. Events are JSON lines with monotonic-clock
    /// times in nanoseconds.
    #[arg(long, requires = "json", conflicts_with_all = ["files", "out"])]
    bench: bool,
    /// Benchmark mode: the payload's size (the largest message).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    pub(crate) max_size: u64,
    /// Root only: the files to multicast, one message each, in order.
    files: Vec<PathBuf>,
}

/// The transports a member can use.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Transport {
    /// TCP: one authenticated connection per pair of members.
    Tcp,
    /// libfabric: RDMA-style endpoints (the `ofi` feature).
    Ofi,
}

fn parse_algorithm(s: &str) -> Result<Algorithm, String> {
    s.parse().map_err(|e| format!("{e}"))
}

/// The key used without `--key-file`.
const DEFAULT_KEY: &[u8] = b"rdmc default cluster key: not a secret";

/// Run `rdmc member`: join the cluster, send or receive, report.
pub(crate) fn run(args: MemberArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&args, format!("cannot start the runtime: {e}")),
    };
    match runtime.block_on(member(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&args, e),
    }
}

fn fail(args: &MemberArgs, error: String) -> ExitCode {
    if args.json {
        println!(
            "{}",
            json!({"event": "error", "rank": args.rank, "error": error})
        );
    }
    eprintln!("rdmc member {}: {error}", args.rank);
    ExitCode::FAILURE
}

async fn member(args: &MemberArgs) -> Result<(), String> {
    let members = read_members(&args.members)?;
    if args.rank as usize >= members.len() {
        return Err(format!(
            "rank {} is not in a cluster of {}",
            args.rank,
            members.len()
        ));
    }
    if args.rank != 0 && !args.files.is_empty() {
        return Err("only the root (rank 0) sends files".into());
    }
    let block_size = usize::try_from(args.block_size)
        .ok()
        .filter(|&b| b > 0)
        .ok_or("the block size must be at least 1 byte")?;
    let key = match &args.key_file {
        Some(path) => ClusterKey::from_file(path).map_err(|e| e.to_string())?,
        None => {
            tracing::warn!("no --key-file: using the well-known default key");
            ClusterKey::from_bytes(DEFAULT_KEY.to_vec()).map_err(|e| e.to_string())?
        }
    };
    let seconds = |s: f64, what: &str| {
        Duration::try_from_secs_f64(s)
            .map_err(|_| format!("{what} must be a positive number of seconds"))
    };
    let connect_timeout = seconds(args.connect_timeout, "--connect-timeout")?;
    let failure_timeout = seconds(args.failure_timeout, "--failure-timeout")?;
    let node_config = NodeConfig::new().with_completion_mode(CompletionMode::from(args.completion));
    let node = match args.transport {
        Transport::Tcp => {
            let config = TcpConfig::new(members.clone(), NodeId(args.rank), key)
                .with_connect_timeout(connect_timeout)
                .with_failure_timeout(failure_timeout);
            Node::tcp(config, node_config).await
        }
        Transport::Ofi => {
            let timeouts = (connect_timeout, failure_timeout);
            start_ofi(args, members.clone(), key, timeouts, node_config).await?
        }
    }
    .map_err(|e| e.to_string())?;
    let ids: Vec<NodeId> = (0..members.len() as u32).map(NodeId).collect();
    let group_config = GroupConfig::new()
        .with_algorithm(args.algorithm)
        .with_block_size(block_size);
    let outcome = multicast(args, &node, &ids, group_config).await;
    // Put the last signals on the wire before the process exits: the root's
    // "closed" to every member, or this member's report of a failure, which
    // must reach the others before they see its connection close.
    node.shutdown().await;
    let seconds = outcome?;
    if args.json {
        println!(
            "{}",
            json!({"event": "closed", "rank": args.rank, "seconds": seconds,
                   "cpu": member_bench::cpu_seconds()})
        );
    }
    Ok(())
}

#[cfg(feature = "ofi")]
async fn start_ofi(
    args: &MemberArgs,
    members: Vec<SocketAddr>,
    key: ClusterKey,
    (connect_timeout, failure_timeout): (Duration, Duration),
    node_config: NodeConfig,
) -> Result<Result<Node, rdmc::Error>, String> {
    let config = rdmc::OfiConfig::new(members, NodeId(args.rank), key)
        .with_connect_timeout(connect_timeout)
        .with_failure_timeout(failure_timeout)
        .with_provider(args.ofi_provider.clone());
    Ok(Node::ofi(config, node_config).await)
}

#[cfg(not(feature = "ofi"))]
async fn start_ofi(
    _: &MemberArgs,
    _: Vec<SocketAddr>,
    _: ClusterKey,
    _: (Duration, Duration),
    _: NodeConfig,
) -> Result<Result<Node, rdmc::Error>, String> {
    Err(crate::NO_OFI.to_owned())
}

/// The group's part: send the files (root) or write the messages (others),
/// then close. Returns the seconds from group creation to closed.
async fn multicast(
    args: &MemberArgs,
    node: &Node,
    ids: &[NodeId],
    config: GroupConfig,
) -> Result<f64, String> {
    let mut group = node
        .create_group(GroupId(1), ids, config)
        .await
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    if args.bench {
        member_bench::run(args, &mut group).await?;
    } else if args.rank == 0 {
        for (i, path) in args.files.iter().enumerate() {
            let data = Bytes::from(
                std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?,
            );
            let size = data.len();
            group.send(data).await.map_err(|e| e.to_string())?;
            report(args, i as u64, size, start, "sent");
        }
    } else {
        if let Some(dir) = &args.out {
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        while let Some(message) = group.next().await {
            let message = message.map_err(|e| e.to_string())?;
            if let Some(dir) = &args.out {
                write_atomically(dir, message.seq, &message.data)?;
            }
            report(args, message.seq, message.data.len(), start, "delivered");
        }
    }
    group.close().await.map_err(|e| e.to_string())?;
    Ok(start.elapsed().as_secs_f64())
}

fn report(args: &MemberArgs, seq: u64, size: usize, start: Instant, event: &str) {
    let seconds = start.elapsed().as_secs_f64();
    if args.json {
        println!(
            "{}",
            json!({"event": event, "rank": args.rank, "seq": seq, "size": size, "seconds": seconds})
        );
    } else {
        println!(
            "rank {} {event} message {seq} ({size} bytes) at {seconds:.3} s",
            args.rank
        );
    }
}

/// Write `DIR/seq.bin` so that it only ever exists complete: write a
/// temporary file, flush it to disk, then rename it into place.
fn write_atomically(dir: &Path, seq: u64, data: &[u8]) -> Result<(), String> {
    let part = dir.join(format!("{seq}.bin.part"));
    let done = dir.join(format!("{seq}.bin"));
    let write = || -> std::io::Result<()> {
        std::fs::write(&part, data)?;
        std::fs::File::open(&part)?.sync_all()?;
        std::fs::rename(&part, &done)
    };
    write().map_err(|e| format!("writing {}: {e}", done.display()))
}

/// Read the members file: one `host:port` per line, in rank order.
pub(crate) fn read_members(path: &Path) -> Result<Vec<SocketAddr>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let members: Vec<SocketAddr> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .map(|(line, l)| {
            l.to_socket_addrs()
                .ok()
                .and_then(|mut addrs| addrs.next())
                .ok_or_else(|| format!("{}:{}: {l:?} is not a host:port", path.display(), line + 1))
        })
        .collect::<Result<_, _>>()?;
    if members.is_empty() {
        return Err(format!("{} lists no members", path.display()));
    }
    Ok(members)
}
