//! `rdmc member`: one member of a cluster of processes. The root (rank 0)
//! multicasts files; every other member writes what it receives.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context as _, anyhow, bail};
use bytes::Bytes;
use clap::Args;
use futures::StreamExt;
use rdmc::{
    Algorithm, CompletionMode, DEFAULT_MAX_MESSAGE_SIZE, Group, GroupConfig, GroupId,
    MAX_BLOCK_SIZE, Node, NodeConfig, NodeId,
};
use serde_json::json;

use rdmc_cli::clocks::{cpu_seconds, mono_ns};
use rdmc_cli::cluster::{
    ClusterSetup, ConnectionsChoice, ModeChoice, SecurityChoice, Transport, kind_of, without_path,
};
use rdmc_cli::members::{MembersArgs, Want};
use rdmc_cli::size::{human, parse_size};
use rdmc_cli::workload::Workload;

use crate::member_bench;
use crate::member_workload;
use crate::topology::TopologyArgs;

/// `--block-size`: a size, or `auto` (`None`).
#[derive(Clone, Copy, Debug)]
struct BlockSizeArg(Option<u64>);

// A clap value parser (`value_parser = ...`): its error is one message,
// which clap prints after naming the option and the value given; nothing
// chains below it, so it stays a `String` (as in clap's own examples)
// rather than an `anyhow::Error`. So do the other parsers in this file.
fn parse_block_size(text: &str) -> Result<BlockSizeArg, String> {
    if text.eq_ignore_ascii_case("auto") {
        Ok(BlockSizeArg(None))
    } else {
        parse_size(text).map(|size| BlockSizeArg(Some(size)))
    }
}

/// Arguments of `rdmc member`.
#[derive(Debug, Args)]
pub(crate) struct MemberArgs {
    /// This process's rank in the member list: needed with --members;
    /// launchers give it (a given one must agree); with etcd, without it,
    /// the root (given files) is rank 0 and any other member claims the
    /// lowest free rank from 1.
    #[arg(long)]
    rank: Option<u32>,
    /// After its work, keep the node and the membership watch (etcd) for
    /// this many seconds before exiting: members that leave and come back
    /// meanwhile are reported, and a restarted member finds its peers.
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS")]
    linger: f64,
    /// Multicast algorithm.
    #[arg(long, default_value = "binomial-pipeline", value_parser = parse_algorithm)]
    algorithm: Algorithm,
    /// Block size, e.g. 64KiB, 1MiB (at most 1GiB), or `auto`: each
    /// message's block size chosen from its size and the group's (48 KiB
    /// to 256 KiB; the library's default).
    #[arg(long, default_value = "auto", value_parser = parse_block_size)]
    block_size: BlockSizeArg,
    /// The largest message (file) the group carries; every member must give
    /// the same. A receiver without --out holds a whole message in memory;
    /// with it, a message goes straight to its file.
    #[arg(long, default_value_t = DEFAULT_MAX_MESSAGE_SIZE, value_parser = parse_size,
          value_name = "SIZE")]
    max_message_size: u64,
    /// Receivers write message i to DIR/i.bin once it is delivered (through
    /// a temporary file, flushed to disk and renamed). DIR is created if
    /// need be; it must be writable and hold no outputs of an earlier run.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    #[command(flatten)]
    credentials: rdmc_cli::cluster::Credentials,
    /// Worker threads of the member's tokio runtime, or 0 (the default):
    /// one thread runs everything (reading, the protocol, writing and the
    /// application), so a block is read, handled and forwarded without
    /// waking another thread: the lowest latency, above all on a machine
    /// that many members share (see BENCHMARKS.md).
    #[arg(long, default_value_t = 0, value_name = "N")]
    worker_threads: usize,
    /// Seconds to wait for the members to be connected and the group to
    /// form.
    #[arg(long, default_value_t = 30.0)]
    connect_timeout: f64,
    /// Seconds of silence after which a peer is considered failed (a peer
    /// whose connections break is noticed sooner).
    #[arg(long, default_value_t = 3.0)]
    failure_timeout: f64,
    /// How this member waits for completions. A file's messages are large:
    /// the default, `interrupt`, sleeps until each completion, where
    /// `adaptive` (the library's default) also polls after small messages
    /// and through streams while a core is idle, which on a host shared with
    /// other work (or other members) takes CPU they need and buys a file
    /// copy nothing (16 members on 2 cores, 64 MiB from disk to disk: 2.28 s
    /// against 2.27 s).
    #[arg(long, value_enum, default_value_t = ModeChoice::Interrupt)]
    completion: ModeChoice,
    /// How frames are protected on the wire with `--transport tcp`:
    /// authenticated (the default), encrypted too, or `none`, for trusted
    /// fabrics only (as MPI's TCP transport). Every member must give the
    /// same.
    #[arg(long, value_enum, default_value_t = SecurityChoice::Authenticated)]
    wire_security: SecurityChoice,
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    topology: TopologyArgs,
    /// Transport between the members: `tcp`, `ofi` (libfabric) or `rdma`
    /// (RDMA verbs on the first RDMA device); `ofi` and `rdma` need a build
    /// with the feature of the same name. The members file lists rendezvous
    /// addresses either way; with `ofi` the fabric endpoints bind to the
    /// same IP.
    #[arg(long, value_enum, default_value_t = Transport::Tcp)]
    transport: Transport,
    /// With `--transport ofi`: the libfabric provider (`tcp`, `verbs`, ...).
    #[arg(long, default_value = "tcp", value_name = "NAME")]
    ofi_provider: String,
    /// With `--transport tcp`: early announcement (`16KiB`, or `off`): a
    /// receiver takes blocks from one sender at a time and announces the
    /// next sender once the current block has at most this many bytes
    /// left to arrive; senders keep at most `--unsent-limit` bytes unsent.
    /// `off`: sends complete once buffered, receivers announce to any
    /// sender. Every member should choose the same.
    #[arg(long, default_value = DEFAULT_EARLY_ANNOUNCE, value_parser = parse_early, value_name = "BYTES|off")]
    early_announce: Early,
    /// With `--early-announce`: most bytes a socket holds unsent.
    #[arg(long, default_value = "64KiB", value_parser = parse_size, value_name = "BYTES")]
    unsent_limit: u64,
    /// With `--transport tcp`: which members this one connects to.
    /// `on-demand`: only those its group exchanges blocks with and its
    /// neighbours in the group's relay tree (about log2 N, so that hundreds
    /// of members can share a machine), when the group is created; signals
    /// to the others travel through them. `all`: every member, before the
    /// group is created. Every member should choose the same.
    #[arg(long, value_enum, default_value_t = ConnectionsChoice::OnDemand)]
    connections: ConnectionsChoice,
    /// With `--transport tcp`: a member restarted at another address (a
    /// rescheduled pod, a moved host) is let back in there, the others
    /// learning its new address from it; without, the members must all
    /// give the same list. Every member should choose the same.
    #[arg(long)]
    open_membership: bool,
    /// With `--transport tcp`: the connections' TCP congestion control
    /// (`cubic`, `bbr`, `reno`, ...: one the kernel has; default: the
    /// machine's). Every member should choose the same.
    #[arg(long, value_name = "NAME")]
    tcp_congestion_control: Option<String>,
    /// Benchmark mode, driven by the benchmark harness (`rdmc-bench`): the
    /// root reads `send SIZE COUNT` and `close` commands from stdin and
    /// sends prefixes of a pseudo-random payload every member generates
    /// alike; receivers check every message against it. Events are JSON lines with monotonic-clock
    /// times in nanoseconds.
    #[arg(long, requires = "json", conflicts_with_all = ["files", "out"])]
    bench: bool,
    /// Benchmark mode: instead of commands on stdin, run this workload of
    /// many groups at once (written by `rdmc-bench`: its groups, writes and
    /// writes in flight per root), each member on its own.
    #[arg(long, value_name = "FILE", requires = "bench")]
    workload: Option<PathBuf>,
    /// Benchmark mode with --workload: receivers keep every message in a
    /// file under DIR (a directory per rank), synced, and a root counts a
    /// write done once every replica acknowledged it as persisted.
    #[arg(long, value_name = "DIR", requires = "workload")]
    persist_in: Option<PathBuf>,
    /// Benchmark mode: the payload's size (the largest message).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    max_size: u64,
    /// Root only: the files to multicast, one message each, in order. Every
    /// one is opened and checked (a readable regular file, within
    /// --max-message-size) before the member contacts anyone.
    files: Vec<PathBuf>,
    // Last: its help heading holds for the options after it.
    #[command(flatten)]
    source: MembersArgs,
}

fn parse_algorithm(s: &str) -> Result<Algorithm, String> {
    s.parse().map_err(|e| format!("{e}"))
}

/// Run `rdmc member`: check every input, join the cluster, send or
/// receive, report.
pub(crate) fn run(args: MemberArgs) -> ExitCode {
    // Everything that can be wrong with the command line, the inputs or the
    // output directory is found here, before this member contacts anyone.
    let prepared = match prepare(&args) {
        Ok(p) => p,
        Err(e) => return fail(&args, args.rank, e),
    };
    let known = prepared
        .cluster
        .rank_known()
        .then_some(prepared.cluster.rank);
    let mut builder = if args.worker_threads == 0 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(args.worker_threads);
        builder
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(&args, known, anyhow!("cannot start the runtime: {e}")),
    };
    // The member runs as a task, not as `block_on`'s own future: with one
    // thread, a task the node wakes (a message delivered, a send complete)
    // runs in the same pass of the scheduler, where `block_on`'s future is
    // polled only once every queued task has run, after a wake-up through
    // the I/O driver (an eventfd write and an epoll round).
    let (args, (rank, outcome)) = runtime
        .block_on(async move {
            let task = tokio::spawn(async move {
                let outcome = member(&args, prepared).await;
                (args, outcome)
            });
            task.await
        })
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&args, rank, e),
    }
}

/// Report `error` of the member of rank `rank` (`None`: not known yet).
fn fail(args: &MemberArgs, rank: Option<u32>, error: anyhow::Error) -> ExitCode {
    // The error with its context, on one line.
    let error = format!("{error:#}");
    if args.json {
        println!(
            "{}",
            json!({"event": "error", "rank": rank, "error": error})
        );
    }
    match rank {
        Some(rank) => eprintln!("rdmc member {rank}: {error}"),
        None => eprintln!("rdmc member: {error}"),
    }
    ExitCode::FAILURE
}

/// What a member starts with once every check passed.
struct Prepared {
    cluster: ClusterSetup,
    group: GroupConfig,
    /// Root: the files to send, opened.
    inputs: Vec<Input>,
    /// Receivers: the output directory, checked writable and free of an
    /// earlier run's outputs.
    out: Option<PathBuf>,
    /// `--workload`, read and checked.
    workload: Option<Workload>,
}

/// An input file, opened and checked: a regular file within the size limit.
struct Input {
    path: PathBuf,
    file: File,
    len: u64,
}

/// Check the command line, the members file, the key, every input (root)
/// and the output directory (receivers), and say what is wrong in one line.
fn prepare(args: &MemberArgs) -> anyhow::Result<Prepared> {
    let want = match args.rank {
        Some(rank) => Want::Rank(rank),
        None if !args.files.is_empty() => Want::Root,
        None => Want::Receiver,
    };
    let mut cluster = ClusterSetup::from_args(
        &args.source,
        (want, "--rank"),
        args.credentials.key_file.as_deref(),
        (args.connect_timeout, args.failure_timeout),
        args.transport,
        &args.ofi_provider,
    )?;
    cluster.report.json = args.json;
    args.credentials.apply(&mut cluster)?;
    if args.linger != 0.0 {
        rdmc_cli::cluster::seconds(args.linger, "--linger")?;
    }
    // The root is rank 0; until an etcd claim, a member without a rank is
    // not the root.
    let root = cluster.rank_known() && cluster.rank == 0;
    cluster.early_announce = early_announce(args)?;
    cluster.wire_security = args.wire_security.into();
    if args.tcp_congestion_control.is_some() && !matches!(args.transport, Transport::Tcp) {
        bail!("--tcp-congestion-control needs --transport tcp");
    }
    cluster.congestion_control = args.tcp_congestion_control.clone();
    cluster.connections = args.connections.into();
    if args.open_membership && !matches!(args.transport, Transport::Tcp) {
        bail!("--open-membership needs --transport tcp");
    }
    cluster.open_membership = args.open_membership;
    // A launcher runs one command line for every rank: the files are the
    // root's, the others ignore them.
    let files: &[PathBuf] = if root || cluster.launched() {
        if root { &args.files } else { &[] }
    } else if !args.files.is_empty() {
        bail!("only the root (rank 0) sends files");
    } else {
        &[]
    };
    let block_size = args
        .block_size
        .0
        .map(|given| {
            usize::try_from(given)
                .ok()
                .filter(|b| (1..=MAX_BLOCK_SIZE).contains(b))
                .ok_or_else(|| {
                    anyhow!(
                        "--block-size must be at least 1 byte and at most 1 GiB ({given} bytes given)"
                    )
                })
        })
        .transpose()?;
    if args.max_message_size == 0 {
        bail!("--max-message-size must be at least 1 byte");
    }
    let inputs = files
        .iter()
        .map(|path| open_input(path, args.max_message_size))
        .collect::<Result<Vec<_>, _>>()?;
    let out = match &args.out {
        Some(dir) if !root && !args.bench => Some(check_output_dir(dir)?),
        _ => None,
    };
    // Connected on demand, members are connected as the group forms: the
    // connect timeout bounds that.
    let group = GroupConfig::new()
        .with_algorithm(args.algorithm)
        .with_max_message_size(args.max_message_size)
        .with_create_timeout(cluster.connect_timeout);
    // Receivers with an output directory receive straight into their files:
    // memory stays bounded whatever the size, and the bytes are written as
    // they arrive.
    let group = match &out {
        Some(dir) => group.with_receive_targets(file_targets(dir.clone())),
        None => group,
    };
    let group = match block_size {
        Some(size) => group.with_block_size(size),
        None => group.with_automatic_block_size(),
    };
    let group = args
        .topology
        .apply(group, cluster.size)
        .with_context(|| cluster.origin.to_string())?;
    let workload = args
        .workload
        .as_deref()
        .map(|path| {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow!("reading {}: {e}", path.display()))?;
            rdmc_cli::workload::parse(&text, cluster.size)
                .map_err(|e| anyhow!("{} {e:#}", path.display()))
        })
        .transpose()?;
    Ok(Prepared {
        cluster,
        group,
        inputs,
        out,
        workload,
    })
}

/// Open an input: a readable regular file of at most `max` bytes. Opened
/// without blocking (a FIFO would block until a writer came) and checked
/// on the open handle, so that what is checked is what is read.
fn open_input(path: &Path, max: u64) -> anyhow::Result<Input> {
    use std::os::unix::fs::OpenOptionsExt;
    let named = |e: std::io::Error| anyhow!("{}: {e}", path.display());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(named)?;
    let meta = file.metadata().map_err(named)?;
    if !meta.is_file() {
        bail!(
            "{}: is {}; only regular files can be sent",
            path.display(),
            kind_of(meta.file_type())
        );
    }
    if meta.len() > max {
        bail!(
            "{}: {} is more than the largest message, {} (see --max-message-size)",
            path.display(),
            human(meta.len()),
            human(max)
        );
    }
    Ok(Input {
        path: path.to_owned(),
        file,
        len: meta.len(),
    })
}

/// Multicast an opened input from its mapping (memory stays bounded
/// whatever the file's size), then check that it did not change meanwhile:
/// the same size, modification and change times before the send and once
/// it is sent (a file truncated under the mapping ends the process with
/// SIGBUS instead: the receivers then fail too, delivering nothing).
async fn send_input(root: &rdmc::Sender, input: Input) -> anyhow::Result<usize> {
    let Input { path, file, len } = input;
    let named = |e: std::io::Error| anyhow!("reading {}: {e}", path.display());
    let stamp = |file: &File| -> std::io::Result<(u64, i64, i64, i64, i64)> {
        use std::os::unix::fs::MetadataExt;
        let m = file.metadata()?;
        Ok((
            m.len(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
        ))
    };
    let changed = |now: u64| {
        anyhow!(
            "{}: changed while being sent (was {len} bytes, now {now}); the receivers \
             may hold a copy of neither version",
            path.display()
        )
    };
    let before = stamp(&file).map_err(named)?;
    if before.0 != len {
        return Err(changed(before.0));
    }
    let check = file.try_clone().map_err(named)?;
    let receipt = root.send_file(file).await.map_err(|e| anyhow!("{e}"))?;
    receipt.sent().await.map_err(|e| anyhow!("{e}"))?;
    let after = stamp(&check).map_err(named)?;
    if after != before {
        return Err(changed(after.0));
    }
    Ok(len as usize)
}

/// Whether `name` is one of the names this command writes in an output
/// directory: `SEQ.bin`, or a temporary `SEQ.bin.*.part`.
fn is_output_name(name: &str) -> bool {
    let Some((seq, rest)) = name.split_once(".bin") else {
        return false;
    };
    !seq.is_empty()
        && seq.bytes().all(|b| b.is_ascii_digit())
        && (rest.is_empty() || (rest.starts_with('.') && rest.ends_with(".part")))
}

/// Create the output directory if need be, and check that it is a
/// directory this process can write, holding no outputs of an earlier run
/// (which would mix with this run's).
fn check_output_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    rdmc_cli::cluster::check_output_dir(dir)?;
    let named = |e: std::io::Error| anyhow!("output directory {}: {e}", dir.display());
    for entry in std::fs::read_dir(dir).map_err(named)? {
        let name = entry.map_err(named)?.file_name();
        let name = name.to_string_lossy();
        if is_output_name(&name) {
            bail!(
                "output directory {} holds {name} from an earlier run: remove it or choose \
                 another --out",
                dir.display()
            );
        }
    }
    Ok(dir.to_owned())
}

/// Join, do the work, linger if asked: this member's rank (once known)
/// and the outcome.
async fn member(args: &MemberArgs, prepared: Prepared) -> (Option<u32>, anyhow::Result<()>) {
    let Prepared {
        mut cluster,
        group,
        inputs,
        out,
        workload,
    } = prepared;
    let node_config = NodeConfig::new().with_completion_mode(CompletionMode::from(args.completion));
    let joined = match cluster.join().await {
        Ok(()) => cluster.start(node_config).await,
        Err(e) => Err(e),
    };
    let node = match joined {
        Ok(node) => node,
        Err(e) => return (cluster.rank_known().then_some(cluster.rank), Err(e)),
    };
    let (rank, ids) = (cluster.rank, cluster.ids());
    let work = async {
        match &workload {
            Some(workload) => {
                let start = Instant::now();
                let persist = args.persist_in.as_deref();
                member_workload::run(rank, (&node, &ids[..]), group, workload, persist)
                    .await
                    .map(|()| start.elapsed().as_secs_f64())
            }
            None => multicast(args, rank, &node, &ids, group, (inputs, out.clone())).await,
        }
    };
    // A membership source that is lost (etcd gone) ends the member, and so
    // does SIGINT or SIGTERM: it leaves (its peers are told) and removes
    // its part files.
    let mut outcome = tokio::select! {
        outcome = work => outcome,
        reason = cluster.lost() => Err(anyhow!(reason)),
        reason = rdmc_cli::signals::interrupted() => Err(anyhow!(reason)),
    };
    let mut said_closed = false;
    if args.linger > 0.0 {
        // The group is closed now, though the node lingers.
        if let Ok(seconds) = outcome {
            say_closed(args, rank, seconds);
            said_closed = true;
        }
        tokio::select! {
            () = tokio::time::sleep(std::time::Duration::from_secs_f64(args.linger)) => {}
            reason = cluster.lost() => outcome = outcome.and(Err(anyhow!(reason))),
            // Lingering after its work, the member just stops.
            _ = rdmc_cli::signals::interrupted() => {}
        }
    }
    // Put the last signals on the wire before the process exits: the root's
    // "closed" to every member, or this member's report of a failure, which
    // must reach the others before they see its connection close.
    node.shutdown().await;
    // A receive target still being opened when the group failed may have
    // made its part file after the receiver removed the others.
    if let (Err(_), Some(dir)) = (&outcome, &out) {
        remove_parts(dir);
    }
    match outcome {
        Ok(seconds) if !said_closed => say_closed(args, rank, seconds),
        Ok(_) => {}
        Err(e) => return (Some(rank), Err(e)),
    }
    (Some(rank), Ok(()))
}

/// With `--json`: the group closed, `seconds` after its creation.
fn say_closed(args: &MemberArgs, rank: u32, seconds: f64) {
    if args.json {
        println!(
            "{}",
            json!({"event": "closed", "rank": rank, "seconds": seconds,
                   "cpu": cpu_seconds()})
        );
    }
}

/// The group's part: send the inputs (root) or write the messages to `out`
/// (others), then close. Returns the seconds from group creation to
/// closed. A receiver closes only once every message is on disk, so a
/// receiver that cannot persist one fails the group instead.
async fn multicast(
    args: &MemberArgs,
    rank: u32,
    node: &Node,
    ids: &[NodeId],
    config: GroupConfig,
    (inputs, out): (Vec<Input>, Option<PathBuf>),
) -> anyhow::Result<f64> {
    let mut group = node
        .create_group(GroupId(1), ids, config)
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let start = Instant::now();
    if args.bench {
        member_bench::run(rank, args.max_size, &mut group).await?;
    } else {
        if args.json {
            println!(
                "{}",
                json!({"event": "ready", "rank": rank, "t": mono_ns(start), "cpu": cpu_seconds()})
            );
        }
        match &mut group {
            Group::Root(root) => {
                for (i, input) in inputs.into_iter().enumerate() {
                    report(args, rank, (i as u64, input.len as usize), start, "sending");
                    let size = send_input(root, input).await?;
                    report(args, rank, (i as u64, size), start, "sent");
                }
            }
            Group::Receiver(receiver) => {
                let received = receive_all(args, rank, receiver, out.as_deref(), start).await;
                if let (Err(_), Some(dir)) = (&received, &out) {
                    remove_parts(dir);
                }
                received?;
            }
        }
    }
    group.close().await.map_err(|e| anyhow!("{e}"))?;
    Ok(start.elapsed().as_secs_f64())
}

/// Report `event` of message `seq`: with `--json` one object with the
/// seconds since the group's creation and `t`, the machine's
/// `CLOCK_MONOTONIC` in nanoseconds (one clock for every process of a
/// machine, so that a harness can subtract one member's times from
/// another's).
fn report(args: &MemberArgs, rank: u32, (seq, size): (u64, usize), start: Instant, event: &str) {
    let now = Instant::now();
    let seconds = now.duration_since(start).as_secs_f64();
    if args.json {
        println!(
            "{}",
            json!({"event": event, "rank": rank, "seq": seq, "size": size, "seconds": seconds,
                   "t": mono_ns(now)})
        );
    } else {
        println!(
            "rank {rank} {event} message {seq} ({}) at {seconds:.3} s",
            human(size as u64)
        );
    }
}

/// Take every message, putting each in `out` (if given) as `SEQ.bin`.
async fn receive_all(
    args: &MemberArgs,
    rank: u32,
    receiver: &mut rdmc::Receiver,
    out: Option<&Path>,
    start: Instant,
) -> anyhow::Result<()> {
    while let Some(message) = receiver.next().await {
        let message = message.map_err(|e| anyhow!("{e}"))?;
        let seq = message.seq;
        let len = message
            .file
            .as_ref()
            .map_or(message.data.len() as u64, |f| f.len());
        match (out, message.file) {
            (Some(dir), Some(file)) => persist_received(dir.to_owned(), seq, file).await?,
            (Some(dir), None) => persist(dir.to_owned(), seq, message.data).await?,
            (None, _) => {}
        }
        report(args, rank, (seq, len as usize), start, "delivered");
    }
    Ok(())
}

/// Where a receiver's message `seq` lands while it arrives:
/// `DIR/SEQ.bin.PID.part`.
fn part_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq}.bin.{}.part", std::process::id()))
}

/// The receive targets of an output directory: each message straight into
/// its part file, its blocks reserved first, so that a full disk is an
/// error naming the file before any byte lands.
fn file_targets(dir: PathBuf) -> rdmc::ReceiveTargets {
    rdmc::ReceiveTargets::new(move |incoming| {
        let path = part_path(&dir, incoming.seq);
        let done = dir.join(format!("{}.bin", incoming.seq));
        let open = move || -> std::io::Result<rdmc::ReceiveTarget> {
            let named = |e: std::io::Error| {
                std::io::Error::new(e.kind(), format!("writing {}: {e}", done.display()))
            };
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(named)?;
            reserve(&file, incoming.size).map_err(named)?;
            Ok(rdmc::ReceiveTarget::File(file))
        };
        async move {
            tokio::task::spawn_blocking(open)
                .await
                .map_err(std::io::Error::other)?
        }
    })
}

/// Reserve `len` bytes of disk for `file` (`posix_fallocate`).
fn reserve(file: &File, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    if len == 0 {
        return Ok(());
    }
    let len = libc::off_t::try_from(len).map_err(std::io::Error::other)?;
    // SAFETY: the descriptor is `file`'s, open for writing for the call.
    #[allow(unsafe_code)]
    let errno = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    match errno {
        0 => Ok(()),
        errno => Err(std::io::Error::from_raw_os_error(errno)),
    }
}

/// Message `seq`, delivered into its part file: flush it to disk, give it
/// its name `DIR/SEQ.bin` (never over an existing file), flush the
/// directory; off the async threads.
async fn persist_received(dir: PathBuf, seq: u64, file: rdmc::ReceivedFile) -> anyhow::Result<()> {
    let place = move || {
        let (part, done) = (part_path(&dir, seq), dir.join(format!("{seq}.bin")));
        let write = || -> std::io::Result<()> {
            file.file().sync_all()?;
            std::fs::hard_link(&part, &done)?;
            std::fs::remove_file(&part)?;
            File::open(&dir)?.sync_all()
        };
        write().map_err(|e| anyhow!("writing {}: {e}", done.display()))
    };
    tokio::task::spawn_blocking(place)
        .await
        .map_err(|e| anyhow!("writing message {seq}: {e}"))?
}

/// Remove this process's part files from `dir` (a receive that failed).
fn remove_parts(dir: &Path) {
    let suffix = format!(".{}.part", std::process::id());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if is_output_name(&name) && name.ends_with(&suffix) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Write `DIR/seq.bin` so that it only ever exists complete, off the
/// async threads: write a uniquely named temporary file, flush it to disk,
/// rename it into place (never over an existing file), and flush the
/// directory. On failure the temporary file is removed.
async fn persist(dir: PathBuf, seq: u64, data: Bytes) -> anyhow::Result<()> {
    tokio::task::spawn_blocking(move || write_atomically(&dir, seq, &data))
        .await
        .map_err(|e| anyhow!("writing message {seq}: {e}"))?
}

fn write_atomically(dir: &Path, seq: u64, data: &[u8]) -> anyhow::Result<()> {
    let done = dir.join(format!("{seq}.bin"));
    let write = || -> std::io::Result<()> {
        let mut part = tempfile::Builder::new()
            .prefix(&format!("{seq}.bin."))
            .suffix(".part")
            .tempfile_in(dir)?;
        // The file itself, not the wrapper, whose errors name the
        // temporary path.
        part.as_file_mut().write_all(data)?;
        part.as_file().sync_all()?;
        part.persist_noclobber(&done).map_err(|e| e.error)?;
        File::open(dir)?.sync_all()
    };
    write().map_err(|e| anyhow!("writing {}: {}", done.display(), without_path(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_names_are_recognized() {
        for name in ["0.bin", "17.bin", "3.bin.Ab12Cd.part", "0.bin.x.part"] {
            assert!(is_output_name(name), "{name}");
        }
        for name in [
            "notes.txt",
            "a.bin",
            ".bin",
            "1.binary",
            "1.bin.part.old",
            "1.bin.tmp",
        ] {
            assert!(!is_output_name(name), "{name}");
        }
    }

    #[test]
    fn write_errors_name_the_final_file_not_the_temporary_one() {
        let missing = std::env::temp_dir().join("rdmc: no such directory");
        let err = write_atomically(&missing, 4, b"data")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "writing {}: No such file or directory (os error 2)",
                missing.join("4.bin").display()
            )
        );
    }
}

/// `rdmc member --early-announce`'s default.
const DEFAULT_EARLY_ANNOUNCE: &str = "off";

/// An `--early-announce` value: a threshold in bytes, or off.
#[derive(Clone, Copy, Debug)]
struct Early(Option<u64>);

fn parse_early(text: &str) -> Result<Early, String> {
    if text == "off" {
        return Ok(Early(None));
    }
    parse_size(text).map(|b| Early(Some(b)))
}

/// The library's early-announce setting from the command line.
fn early_announce(args: &MemberArgs) -> anyhow::Result<Option<rdmc::EarlyAnnounce>> {
    let Early(Some(threshold)) = args.early_announce else {
        return Ok(None);
    };
    let bytes = |value: u64, what: &str| {
        u32::try_from(value).map_err(|_| anyhow!("{what} must be below 4 GiB, not {value}"))
    };
    Ok(Some(rdmc::EarlyAnnounce {
        threshold: bytes(threshold, "--early-announce")?,
        unsent_limit: bytes(args.unsent_limit, "--unsent-limit")?,
    }))
}
