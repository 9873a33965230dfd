//! `rdmc demo`: N members in one process multicast random bytes (or a file),
//! every copy is verified, and the time and throughput are reported.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use bytes::Bytes;
use clap::{Args, ValueEnum};
use futures::StreamExt;
use rand::{Rng, SeedableRng, rngs::StdRng};
use rdmc::{
    Algorithm, ClusterKey, GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId, TcpConfig,
};
use serde::Serialize;

use rdmc_cli::clocks::cpu_seconds;
use rdmc_cli::cluster::{ModeChoice, SecurityChoice};
use rdmc_cli::size::parse_size;

use crate::topology::TopologyArgs;

mod baseline;

/// Arguments of `rdmc demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Number of members (the root included).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    nodes: u32,
    /// Size of each message (random bytes), e.g. 4096, 64KiB, 256MiB.
    #[arg(long, default_value = "256MiB", value_parser = parse_size, conflicts_with = "file")]
    size: u64,
    /// Send this file's bytes instead of random bytes.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Block size, e.g. 64KiB, 1MiB.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    block_size: u64,
    /// Algorithm, or `all` to run each in turn.
    #[arg(long, default_value = "binomial-pipeline")]
    algorithm: AlgorithmChoice,
    /// Transport connecting the members (`ofi` and `rdma` need a build
    /// with the feature of the same name).
    #[arg(long, value_enum, default_value_t = TransportChoice::Mem)]
    transport: TransportChoice,
    /// With `--transport ofi`: the libfabric provider (as `fi_info -l`
    /// names it).
    #[arg(long, default_value = "tcp", value_name = "NAME")]
    ofi_provider: String,
    /// With `--transport ofi`: the local IP the fabric endpoints bind to,
    /// the address of the provider's device (say a RoCE NIC's; default
    /// 127.0.0.1). The members still meet over loopback TCP first.
    #[arg(long, value_name = "IP")]
    ofi_addr: Option<std::net::IpAddr>,
    /// Number of messages to multicast, one after another.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    messages: u64,
    /// Write what rank r received to DIR/r.bin (messages concatenated in
    /// order); DIR/0.bin holds what the root sent.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Run this many overlapping groups at once over the same nodes, group g
    /// rooted at node g mod N, to see how they share the nodes' bandwidth
    /// (`--out` then writes group 0's copies).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    groups: u32,
    /// How each node waits for completions.
    #[arg(long, value_enum, default_value_t = ModeChoice::Adaptive)]
    completion: ModeChoice,
    /// With `--transport tcp`: how frames are protected on the wire
    /// (`none` is for trusted fabrics only).
    #[arg(long, value_enum, default_value_t = SecurityChoice::Authenticated)]
    wire_security: SecurityChoice,
    /// End-to-end message digests, `on` or `off` (the default: off on
    /// every transport; see `GroupConfig::with_message_digest`).
    #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
    message_digest: Option<bool>,
    /// Also time a baseline moving the same bytes without rdmc (and warm rdmc
    /// up the same way first, unless `--warmup` says otherwise: an untimed
    /// round of the messages fills the nodes' buffer pools, sized for it): with `mem`,
    /// plain memcpys into buffers allocated and touched beforehand (one per
    /// receiver, on as many threads as there are cores); with `tcp`, plain
    /// TCP copies over loopback (sender, receiver and checker threads, two
    /// touched buffers taking turns) and TLS 1.3 copies (rustls,
    /// AES-256-GCM, into a reused, touched buffer), one per receiver, one
    /// after another, as unicasts would. Every baseline checks each copy
    /// as the multicast's receivers check theirs.
    #[arg(long)]
    baseline: bool,
    /// Multicast this many copies of the first message before the timed
    /// ones (untimed), so the receivers' buffer pools hold warm memory as
    /// the baselines' touched buffers are; 0 measures cold memory. Default:
    /// with `--baseline`, as many as `--messages`; else 0.
    #[arg(long)]
    warmup: Option<u64>,
    /// Each node's buffer pool budget, e.g. 1GiB (default: with a warm-up,
    /// enough for the run; else the transport's, 512 MiB on `mem` and `tcp`).
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    buffer_pool: Option<u64>,
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
    /// Racks and slow members by node (with `--groups`, each group's
    /// ranks get their nodes' racks).
    #[command(flatten)]
    topology: TopologyArgs,
}

/// `--algorithm`: every algorithm in turn, or one.
#[derive(Debug, Clone)]
pub(crate) enum AlgorithmChoice {
    /// `all`: each algorithm in turn.
    All,
    /// One algorithm by name.
    One(Algorithm),
}

// Parsed by clap through `FromStr`: its error is one message,
// which clap prints after naming the option and the value given; nothing
// chains below it, so it stays a `String` (as in clap's own examples)
// rather than an `anyhow::Error`.
impl std::str::FromStr for AlgorithmChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "all" {
            Ok(AlgorithmChoice::All)
        } else {
            s.parse()
                .map(AlgorithmChoice::One)
                .map_err(|e| e.to_string())
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum TransportChoice {
    /// In-process transport.
    Mem,
    /// TCP over loopback, one authenticated connection per pair of members.
    Tcp,
    /// libfabric (RDMA-style: registered memory, writes with immediate
    /// data, one completion queue per node) on loopback; needs the `ofi`
    /// feature.
    Ofi,
    /// RDMA verbs on the machine's first RDMA device (rendezvous on
    /// loopback); needs the `rdma` feature.
    Rdma,
}

impl TransportChoice {
    fn name(self) -> &'static str {
        match self {
            TransportChoice::Mem => "mem",
            TransportChoice::Tcp => "tcp",
            TransportChoice::Ofi => "ofi",
            TransportChoice::Rdma => "rdma",
        }
    }
}

/// One result line.
#[derive(Debug, Serialize)]
struct Report {
    algorithm: String,
    transport: &'static str,
    nodes: u32,
    size: u64,
    block_size: u64,
    messages: u64,
    seconds: f64,
    gbps: f64,
    verified: bool,
    groups: u32,
    /// With several groups: each group's time from start to closed.
    #[serde(skip_serializing_if = "Option::is_none")]
    group_seconds: Option<Vec<f64>>,
    /// With several groups: fastest group's time over slowest group's (1 = perfectly fair).
    #[serde(skip_serializing_if = "Option::is_none")]
    fairness: Option<f64>,
    /// Process CPU seconds (user + system) during the multicast.
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_seconds: Option<f64>,
    /// Those CPU seconds per GiB delivered (summed over receivers).
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_seconds_per_gib: Option<f64>,
    /// What the baseline did: `memcpy` or `tcp-copy`.
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline_seconds: Option<f64>,
    /// Process CPU seconds the baseline used.
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline_cpu_seconds: Option<f64>,
    /// With `tcp`: the same bytes over TLS 1.3 (rustls), in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_baseline_seconds: Option<f64>,
    /// Process CPU seconds the TLS baseline used.
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_baseline_cpu_seconds: Option<f64>,
    /// With `tcp`: the wire security of the multicast.
    #[serde(skip_serializing_if = "Option::is_none")]
    wire_security: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Run `rdmc demo`: one report line per algorithm; failure if any copy
/// differs or any run failed.
pub(crate) fn run(args: DemoArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rdmc demo: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let messages = match load_messages(&args) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("rdmc demo: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let Ok(block_size) = usize::try_from(args.block_size)
        .map_err(|_| ())
        .and_then(|b| if b == 0 { Err(()) } else { Ok(b) })
    else {
        eprintln!("rdmc demo: the block size must be between 1 byte and the address space");
        return ExitCode::FAILURE;
    };
    if let Err(e) = args.topology.topology(args.nodes as usize) {
        eprintln!("rdmc demo: {e:#}");
        return ExitCode::FAILURE;
    }
    let algorithms: Vec<Algorithm> = match args.algorithm {
        AlgorithmChoice::All => Algorithm::ALL.to_vec(),
        AlgorithmChoice::One(a) => vec![a],
    };
    let mut baseline_cpu = None;
    let baseline = match (args.baseline, args.transport) {
        (false, _) => None,
        (true, TransportChoice::Mem) => {
            Some(("memcpy", baseline::memcpy_baseline(&messages, args.nodes)))
        }
        (true, TransportChoice::Tcp | TransportChoice::Ofi | TransportChoice::Rdma) => {
            match baseline::plain_copy_seconds(&messages, args.nodes) {
                Ok((seconds, cpu)) => {
                    baseline_cpu = Some(cpu);
                    Some(("tcp-copy", seconds))
                }
                Err(e) => {
                    eprintln!("rdmc demo: the tcp baseline failed: {e:#}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };
    let tls_baseline = match (args.baseline, args.transport) {
        (true, TransportChoice::Tcp) => match baseline::tls_copy_seconds(&messages, args.nodes) {
            Ok(seconds) => Some(seconds),
            Err(e) => {
                eprintln!("rdmc demo: the TLS baseline failed: {e:#}");
                return ExitCode::FAILURE;
            }
        },
        _ => None,
    };
    let mut ok = true;
    for (i, &algorithm) in algorithms.iter().enumerate() {
        let mut config = GroupConfig::new()
            .with_algorithm(algorithm)
            .with_block_size(block_size);
        if let Some(on) = args.message_digest {
            config = config.with_message_digest(on);
        }
        let outcome = runtime.block_on(run_group(&args, config, &messages, i as u64));
        let mut report = report_of(&args, algorithm, &messages, baseline, outcome);
        report.baseline_cpu_seconds = baseline_cpu;
        report.tls_baseline_seconds = tls_baseline.map(|(seconds, _)| seconds);
        report.tls_baseline_cpu_seconds = tls_baseline.map(|(_, cpu)| cpu);
        ok &= report.verified && report.error.is_none();
        print_report(&report, args.json);
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The report of one algorithm's run (or of its failure).
fn report_of(
    args: &DemoArgs,
    algorithm: Algorithm,
    messages: &[Bytes],
    baseline: Option<(&'static str, f64)>,
    outcome: anyhow::Result<Run>,
) -> Report {
    let size = messages.first().map_or(0, |m| m.len() as u64);
    let mut report = Report {
        algorithm: algorithm.name().to_owned(),
        transport: args.transport.name(),
        nodes: args.nodes,
        size,
        block_size: args.block_size,
        messages: args.messages,
        seconds: 0.0,
        gbps: 0.0,
        verified: false,
        groups: args.groups,
        group_seconds: None,
        fairness: None,
        cpu_seconds: None,
        cpu_seconds_per_gib: None,
        baseline: baseline.map(|(kind, _)| kind),
        baseline_seconds: baseline.map(|(_, seconds)| seconds),
        baseline_cpu_seconds: None,
        tls_baseline_seconds: None,
        tls_baseline_cpu_seconds: None,
        wire_security: matches!(args.transport, TransportChoice::Tcp)
            .then(|| args.wire_security.name()),
        error: None,
    };
    match outcome {
        Ok(run) => {
            report.seconds = run.elapsed.as_secs_f64();
            let payload = size * args.messages * u64::from(args.groups);
            report.cpu_seconds = run.cpu_seconds;
            let delivered_gib = (payload * u64::from(args.nodes - 1)) as f64 / (1u64 << 30) as f64;
            report.cpu_seconds_per_gib = run
                .cpu_seconds
                .filter(|_| delivered_gib > 0.0)
                .map(|cpu| cpu / delivered_gib);
            report.gbps = (payload * 8) as f64 / report.seconds / 1e9;
            report.verified = run.verified;
            if args.groups > 1 {
                let times: Vec<f64> = run
                    .group_elapsed
                    .iter()
                    .map(Duration::as_secs_f64)
                    .collect();
                let (min, max) = times.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &t| {
                    (lo.min(t), hi.max(t))
                });
                report.fairness = Some(if max > 0.0 { min / max } else { 1.0 });
                report.group_seconds = Some(times);
            }
            if let Some(dir) = &args.out
                && let Err(e) = write_out(dir, messages, &run.received[0])
            {
                report.error = Some(format!("writing {}: {e}", dir.display()));
            }
        }
        Err(e) => report.error = Some(format!("{e:#}")),
    }
    report
}

fn load_messages(args: &DemoArgs) -> anyhow::Result<Vec<Bytes>> {
    if let Some(path) = &args.file {
        let data = std::fs::read(path).map_err(|e| anyhow!("reading {}: {e}", path.display()))?;
        let data = Bytes::from(data);
        return Ok((0..args.messages).map(|_| data.clone()).collect());
    }
    let len = usize::try_from(args.size).map_err(|_| anyhow!("the size does not fit in memory"))?;
    Ok((0..args.messages)
        .map(|i| {
            let mut data = vec![0u8; len];
            StdRng::seed_from_u64(0x5eed ^ i).fill_bytes(&mut data);
            Bytes::from(data)
        })
        .collect())
}

/// What one run produced.
struct Run {
    /// From the first send until every group closed.
    elapsed: Duration,
    /// Per group, from the first send until that group closed.
    group_elapsed: Vec<Duration>,
    /// Whether every receiver got every message intact (each checked on
    /// arrival, then dropped unless `--out` keeps it).
    verified: bool,
    /// With `--out`, per group, per rank (index 0, the root, unused): the
    /// messages received in order.
    received: Vec<Vec<Vec<Bytes>>>,
    /// Process CPU seconds over the same span as `elapsed`.
    cpu_seconds: Option<f64>,
}

/// Run `args.groups` overlapping groups over one in-process cluster, each
/// multicasting `messages`; group g is rooted at node g mod N.
async fn run_group(
    args: &DemoArgs,
    config: GroupConfig,
    messages: &[Bytes],
    run: u64,
) -> anyhow::Result<Run> {
    let n = args.nodes;
    let node_config = node_config(args, messages.first().map_or(0, Bytes::len))?;
    let nodes = start_nodes(args, n, node_config).await?;
    let mut creates = Vec::new();
    for g in 0..args.groups {
        let members: Vec<NodeId> = (0..n).map(|i| NodeId((i + g) % n)).collect();
        let id = GroupId(run * u64::from(args.groups) + u64::from(g));
        let nodes = &nodes;
        let order: Vec<usize> = members.iter().map(|m| m.index()).collect();
        let config = args.topology.apply_to_nodes(config.clone(), &order)?;
        creates.push(async move {
            futures::future::try_join_all(
                members
                    .iter()
                    .map(|m| nodes[m.index()].create_group(id, &members, config.clone())),
            )
            .await
        });
    }
    let groups = futures::future::try_join_all(creates)
        .await
        .map_err(|e| anyhow!("{e}"))?;
    // Everyone (the roots, the receivers and this task) meets here once
    // the warm-up messages are through; the clock starts after it.
    let warmup: Vec<Bytes> = (0..warmup_messages(args))
        .filter_map(|_| messages.first().cloned())
        .collect();
    let warm = Arc::new(tokio::sync::Barrier::new(
        args.groups as usize * n as usize + 1,
    ));
    let mut roots = Vec::new();
    let mut receivers = Vec::new();
    for group in groups {
        let mut group = group.into_iter();
        let mut root = group
            .next()
            .expect("a group has a root")
            .into_sender()
            .expect("the first member is the root");
        let to_send = messages.to_vec();
        let (root_warmup, root_warm) = (warmup.clone(), Arc::clone(&warm));
        roots.push(tokio::spawn(async move {
            for message in root_warmup {
                root.send(message).await?;
            }
            root_warm.wait().await;
            let start = Instant::now();
            for message in to_send {
                // Queued in order; only the close matters here.
                root.send(message).await?;
            }
            root.close().await?;
            Ok::<_, rdmc::Error>(start.elapsed())
        }));
        let keep = args.out.is_some();
        receivers.push(
            group
                .map(|group| {
                    let mut group = group
                        .into_receiver()
                        .expect("every member but the first receives");
                    let expected = messages.to_vec();
                    let (warmup, warm) = (warmup.len(), Arc::clone(&warm));
                    tokio::spawn(async move {
                        // Warm-up messages are checked too, so they hold
                        // their buffers as long as the timed ones will
                        // and the pool ends up with as many.
                        let mut intact = true;
                        for _ in 0..warmup {
                            if let (Some(message), Some(want)) =
                                (group.next().await.transpose()?, expected.first().cloned())
                            {
                                let data = message.data;
                                intact &= tokio::task::spawn_blocking(move || data == want)
                                    .await
                                    .unwrap_or(false);
                            }
                        }
                        warm.wait().await;
                        // Check each message as it arrives and let it go,
                        // so its buffer returns to the node's pool for the
                        // next one (as a real consumer would).
                        let mut got = Vec::new();
                        let mut count = 0;
                        while let Some(message) = group.next().await {
                            let data = message?.data;
                            if keep {
                                got.push(data.clone());
                            }
                            intact &= match expected.get(count).cloned() {
                                Some(want) => tokio::task::spawn_blocking(move || data == want)
                                    .await
                                    .unwrap_or(false),
                                None => false,
                            };
                            count += 1;
                        }
                        group.close().await?;
                        Ok::<_, rdmc::Error>((intact && count == expected.len(), got))
                    })
                })
                .collect::<Vec<_>>(),
        );
    }
    warm.wait().await;
    let cpu_start = process_cpu_seconds();
    let start = Instant::now();
    let mut group_elapsed = Vec::new();
    for (g, root) in roots.into_iter().enumerate() {
        let took = root
            .await
            .map_err(|e| anyhow!("group {g} root: {e}"))?
            .map_err(|e| anyhow!("group {g} root: {e}"))?;
        group_elapsed.push(took);
    }
    let elapsed = start.elapsed();
    let cpu_seconds = cpu_start
        .zip(process_cpu_seconds())
        .map(|(before, after)| after - before);
    let mut received = Vec::new();
    let mut verified = true;
    for (g, tasks) in receivers.into_iter().enumerate() {
        let mut ranks = vec![Vec::new()];
        for (rank, task) in tasks.into_iter().enumerate() {
            let (intact, got) = task
                .await
                .map_err(|e| anyhow!("group {g} rank {}: {e}", rank + 1))?
                .map_err(|e| anyhow!("group {g} rank {}: {e}", rank + 1))?;
            verified &= intact;
            ranks.push(got);
        }
        received.push(ranks);
    }
    Ok(Run {
        elapsed,
        group_elapsed,
        verified,
        received,
        cpu_seconds,
    })
}

/// How many untimed messages precede the timed ones: `--warmup`, or with
/// `--baseline` one round of the messages.
fn warmup_messages(args: &DemoArgs) -> u64 {
    args.warmup
        .unwrap_or(if args.baseline { args.messages } else { 0 })
}

/// The nodes' configuration: `--buffer-pool`, or with a warm-up a buffer
/// pool large enough for every message a node holds in the run.
fn node_config(args: &DemoArgs, message_len: usize) -> anyhow::Result<NodeConfig> {
    let config = NodeConfig::new().with_completion_mode(args.completion.into());
    if let Some(bytes) = args.buffer_pool {
        let bytes = usize::try_from(bytes).map_err(|_| anyhow!("--buffer-pool is too large"))?;
        return Ok(config.with_buffer_pool(bytes));
    }
    if warmup_messages(args) == 0 {
        return Ok(config);
    }
    // Pools round sizes up to a class, at most to the next 2 MiB.
    let run = message_len
        .checked_next_multiple_of(2 << 20)
        .unwrap_or(usize::MAX)
        .saturating_mul(args.messages as usize)
        .saturating_mul(args.groups as usize);
    Ok(config.with_buffer_pool(run.max(DEFAULT_POOL)))
}

/// The transports' default buffer pool budget (what `NodeConfig` documents).
const DEFAULT_POOL: usize = 512 << 20;

/// Start `n` nodes in this process on the chosen transport.
async fn start_nodes(args: &DemoArgs, n: u32, config: NodeConfig) -> anyhow::Result<Vec<Node>> {
    match args.transport {
        TransportChoice::Mem => {
            Node::in_memory_all(&MemCluster::new(n as usize), config).map_err(|e| anyhow!("{e}"))
        }
        TransportChoice::Tcp => {
            let (listeners, members, key) = loopback_cluster(n)?;
            futures::future::try_join_all(listeners.into_iter().enumerate().map(
                |(id, listener)| {
                    let tcp = TcpConfig::new(members.clone(), NodeId(id as u32), key.clone())
                        .with_listener(listener)
                        .with_wire_security(args.wire_security.into());
                    Node::tcp(tcp, config.clone())
                },
            ))
            .await
            .map_err(|e| anyhow!("{e}"))
        }
        TransportChoice::Ofi => start_ofi_nodes(args, n, config).await,
        TransportChoice::Rdma => start_rdma_nodes(n, config).await,
    }
}

/// A cluster of `n` members on loopback: a bound listener per member (so no
/// port is taken between choosing and listening), the members' addresses,
/// and the demo's key.
fn loopback_cluster(
    n: u32,
) -> anyhow::Result<(
    Vec<std::net::TcpListener>,
    Vec<std::net::SocketAddr>,
    ClusterKey,
)> {
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| anyhow!("binding loopback ports: {e}"))?;
    let members = listeners
        .iter()
        .map(std::net::TcpListener::local_addr)
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| anyhow!("{e}"))?;
    let key = ClusterKey::from_bytes(DEMO_KEY.to_vec()).map_err(|e| anyhow!("{e}"))?;
    Ok((listeners, members, key))
}

/// Start `n` nodes on the `ofi` transport, rendezvous on loopback, the
/// fabric at `--ofi-addr` (default: loopback too).
#[cfg(feature = "ofi")]
async fn start_ofi_nodes(args: &DemoArgs, n: u32, config: NodeConfig) -> anyhow::Result<Vec<Node>> {
    let (listeners, members, key) = loopback_cluster(n)?;
    futures::future::try_join_all(listeners.into_iter().enumerate().map(|(id, listener)| {
        let mut ofi = rdmc::OfiConfig::new(members.clone(), NodeId(id as u32), key.clone())
            .with_listener(listener)
            .with_provider(args.ofi_provider.clone());
        if let Some(addr) = args.ofi_addr {
            ofi = ofi.with_fabric_addr(addr);
        }
        Node::ofi(ofi, config.clone())
    }))
    .await
    .map_err(|e| anyhow!("{e}"))
}

#[cfg(not(feature = "ofi"))]
async fn start_ofi_nodes(_: &DemoArgs, _: u32, _: NodeConfig) -> anyhow::Result<Vec<Node>> {
    Err(anyhow!(rdmc_cli::cluster::NO_OFI))
}

/// Start `n` nodes on the `rdma` transport, rendezvous on loopback.
#[cfg(feature = "rdma")]
async fn start_rdma_nodes(n: u32, config: NodeConfig) -> anyhow::Result<Vec<Node>> {
    let (listeners, members, key) = loopback_cluster(n)?;
    futures::future::try_join_all(listeners.into_iter().enumerate().map(|(id, listener)| {
        let rdma = rdmc::RdmaConfig::new(members.clone(), NodeId(id as u32), key.clone())
            .with_listener(listener);
        Node::rdma(rdma, config.clone())
    }))
    .await
    .map_err(|e| anyhow!("{e}"))
}

#[cfg(not(feature = "rdma"))]
async fn start_rdma_nodes(_: u32, _: NodeConfig) -> anyhow::Result<Vec<Node>> {
    Err(anyhow!(rdmc_cli::cluster::NO_RDMA))
}

/// The demo's cluster key: its members are all in this process.
const DEMO_KEY: &[u8] = b"rdmc demo: every member is in this process";

fn write_out(dir: &PathBuf, messages: &[Bytes], received: &[Vec<Bytes>]) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let write = |rank: usize, parts: &[Bytes]| -> std::io::Result<()> {
        let mut file =
            std::io::BufWriter::new(std::fs::File::create(dir.join(format!("{rank}.bin")))?);
        for part in parts {
            file.write_all(part)?;
        }
        file.into_inner()?.sync_all()
    };
    write(0, messages)?;
    for (rank, got) in received.iter().enumerate().skip(1) {
        write(rank, got)?;
    }
    Ok(())
}

/// CPU seconds (user + system) this process has used (`getrusage`).
fn process_cpu_seconds() -> Option<f64> {
    Some(cpu_seconds())
}

fn print_report(report: &Report, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string(report).expect("reports serialize")
        );
        return;
    }
    let mut line = format!(
        "{:<18} {} nodes={} size={} block={} messages={}  {:.4} s  {:.2} Gbit/s  {}",
        report.algorithm,
        report.transport,
        report.nodes,
        report.size,
        report.block_size,
        report.messages,
        report.seconds,
        report.gbps,
        if report.verified {
            "verified"
        } else {
            "NOT VERIFIED"
        },
    );
    if let Some(fairness) = report.fairness {
        line += &format!("  groups={} fairness={fairness:.2}", report.groups);
    }
    if let Some(cpu) = report.cpu_seconds {
        line += &format!("  cpu {cpu:.2} s");
    }
    if let Some(security) = report.wire_security {
        line += &format!("  wire {security}");
    }
    if let (Some(kind), Some(b)) = (report.baseline, report.baseline_seconds) {
        line += &format!("  ({kind} baseline {b:.4} s");
        if let Some(tls) = report.tls_baseline_seconds {
            line += &format!(", tls-copy {tls:.4} s");
        }
        line += ")";
    }
    if let Some(e) = &report.error {
        line += &format!("  error: {e}");
    }
    println!("{line}");
}
