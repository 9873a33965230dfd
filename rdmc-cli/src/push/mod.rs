//! `rdmc push` and `rdmc receive`: copy files and directories from one
//! host to many, checked end to end.
//!
//! The root (rank 0 of the members file) runs `rdmc push PATHS...`; every
//! other member runs `rdmc receive --me RANK --out DIR`. The root hashes
//! every file first (an unreadable file fails before anything is sent),
//! sends a manifest (relative paths, sizes, BLAKE3 digests, modes and times;
//! directories and links), then the files'
//! bytes: small files batched into one message, large ones cut into
//! messages of at most `--max-message-size`. Each receiver writes into a
//! staging directory inside DIR, checks every file's BLAKE3, flushes
//! everything to disk, moves the files into place (never over existing
//! ones unless `--force`, leaving those it holds identical untouched), and
//! only then closes the group; so the root's success means every
//! receiver holds every file, checked.
//!
//! A receiver that fails or dies mid-push is left out and the push goes on
//! without it (see [`epochs`]): the others still end with every file,
//! checked, from where they were. The root then exits with status 3
//! ("partial"), naming the receivers that failed; it exits 0 only when
//! every receiver has everything, and 2 when the push could not complete
//! at any (every receiver failed, or the root's own group failed). A
//! receiver exits 0 once it has everything, checked and on disk.
//!
//! The manifest goes first to every receiver on its own: a receiver whose
//! DIR already holds every entry, identical, is sent nothing; every other
//! says which files DIR holds intact, and only the messages carrying a file
//! some receiver lacks are sent (see [`sync`]); so a push run again sends
//! only what is missing, and a receiver leaves the files it holds
//! untouched.

mod epochs;
mod inputs;
mod launch;
mod manifest;
mod output;
mod progress;
mod receive;
mod send;
mod survey;
mod sync;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail};
use clap::Args;
use rdmc::{Error, GroupConfig, NodeConfig};
use serde_json::json;

use rdmc_cli::cluster::{ClusterSetup, ConnectionsChoice, ModeChoice, SecurityChoice, Transport};
use rdmc_cli::members::{MembersArgs, Want};
use rdmc_cli::size::parse_size;

/// What the root and the receivers must give alike.
#[derive(Debug, Args)]
pub(crate) struct ClusterArgs {
    #[command(flatten)]
    credentials: rdmc_cli::cluster::Credentials,
    /// Transport between the members: `tcp`, `ofi` (libfabric) or `rdma`;
    /// `ofi` and `rdma` need a build with the feature of the same name.
    #[arg(long, value_enum, default_value_t = Transport::Tcp)]
    transport: Transport,
    /// With `--transport ofi`: the libfabric provider (`tcp`, `verbs`, ...).
    #[arg(long, default_value = "tcp", value_name = "NAME")]
    ofi_provider: String,
    /// How frames are protected on the wire with `--transport tcp`:
    /// authenticated (the default), encrypted too, or `none`, for trusted
    /// fabrics only. Every member must give the same.
    #[arg(long, value_enum, default_value_t = SecurityChoice::Authenticated)]
    wire_security: SecurityChoice,
    /// The largest message: files are cut into messages of at most this
    /// size. Memory use grows with it (about 9 messages resident at a
    /// receiver, 5 at the pushing host), and so does the memory each
    /// receiver touches first at the start. Every member must give the same.
    #[arg(long, default_value = "8MiB", value_parser = parse_size, value_name = "SIZE")]
    max_message_size: u64,
    /// How this member waits for completions (see `rdmc member --help`:
    /// `interrupt` by default, as there); `rdmc push --hosts` gives its
    /// receivers its own.
    #[arg(long, value_enum, default_value_t = ModeChoice::Interrupt)]
    completion: ModeChoice,
    /// Which members each member connects to: `all`, every member at
    /// start; `on-demand`, only those its groups exchange blocks with (the
    /// pushing host and about log2 N others), when they need them. Every
    /// member must give the same; `rdmc push --hosts` hands its receivers
    /// its own.
    #[arg(long, value_enum, default_value_t = ConnectionsChoice::All)]
    connections: ConnectionsChoice,
    /// Seconds to wait for every member to be connected.
    #[arg(long, default_value_t = 60.0)]
    connect_timeout: f64,
    /// Seconds of silence after which a member is considered failed (one
    /// whose connections break is noticed sooner).
    #[arg(long, default_value_t = 3.0)]
    failure_timeout: f64,
    /// One JSON object per line on stdout instead of progress bars and text.
    #[arg(long)]
    json: bool,
    /// The members (`--members FILE`, one `host:port` per line in rank
    /// order: the pushing host, rank 0, first), or where to find them.
    /// Last: its help heading holds for the options after it.
    #[command(flatten)]
    source: MembersArgs,
}

/// Arguments of `rdmc push`.
#[derive(Debug, Args)]
pub(crate) struct PushArgs {
    /// Files and directories to push (directories recursively). Each
    /// lands under its own name in every receiver's --out directory.
    #[arg(required = true, value_name = "PATHS")]
    paths: Vec<PathBuf>,
    /// The most bytes a second the push sends (e.g. `100MB`, `1GiB`),
    /// so that it leaves room on the network for other traffic; every
    /// receiver gets them at that rate. Default: as fast as the slowest
    /// receiver takes them.
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    rate: Option<u64>,
    /// Replace entries that exist in a receiver's --out directory and
    /// differ: each file (or link) by an atomic rename over the old one,
    /// once every file of the push is there and checked. Nothing is
    /// deleted: entries the push does not name stay, and those a receiver
    /// holds identical are left untouched. Without it, a receiver whose
    /// directory holds a differing entry refuses the push, naming it.
    #[arg(long)]
    force: bool,
    /// Check and hash the inputs and say what the push would send (files,
    /// directories, links, bytes, messages), without contacting anyone.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    hosts: launch::HostsArgs,
    // Last: the members' help heading holds for the options after them.
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// Arguments of `rdmc receive`.
#[derive(Debug, Args)]
pub(crate) struct ReceiveArgs {
    /// This receiver's rank in the members file (1 or more: rank 0
    /// pushes). Launchers give it; with etcd, without it, the receiver
    /// claims the lowest free rank from 1.
    #[arg(long, visible_alias = "rank", value_name = "I")]
    me: Option<u32>,
    /// Read the cluster (every member's address, this receiver's rank and
    /// the cluster key) from one JSON line on standard input, as `rdmc push
    /// --hosts` hands it over ssh, instead of --members and --key-file.
    #[arg(long, conflicts_with_all = ["me", "members", "members_from", "key_file"])]
    cluster_from_stdin: bool,
    /// Directory the pushed files and directories land in, created if need
    /// be. Files it holds identical already (by BLAKE3) are not sent again
    /// and left untouched; nothing in it is overwritten: a push naming an
    /// entry that exists and differs fails here, unless it says --force.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    // Last: the members' help heading holds for the options after them.
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// Why a push or a receive failed.
#[derive(Debug)]
pub(crate) struct Failure {
    message: String,
    /// The other members that failed, when known, named by address and
    /// rank.
    hosts: Vec<String>,
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure {
            message,
            hosts: Vec::new(),
        }
    }
}

/// An error of this command: its message with its context, on one line.
impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Self {
        format!("{error:#}").into()
    }
}

impl Failure {
    /// A failure of the group, naming the member it suspects (unless that
    /// is this member).
    fn of_group(cluster: &ClusterSetup, error: &Error) -> Self {
        match error {
            Error::GroupFailed {
                suspect: Some(node),
                kind,
                reported_by,
                detail,
                ..
            } => {
                let hosts = if node.0 == cluster.rank {
                    Vec::new()
                } else {
                    vec![cluster.describe(*node)]
                };
                let mut message = format!("{} failed: {kind}", cluster.describe(*node));
                if let Some(detail) = detail {
                    message.push_str(&format!(": {detail}"));
                }
                if let Some(by) = reported_by {
                    message.push_str(&format!(" (reported by {})", cluster.describe(*by)));
                }
                Failure { message, hosts }
            }
            Error::MembershipMismatch { peer, .. } => Failure {
                message: format!(
                    "{error}; do all members give the same members file and --max-message-size?"
                ),
                hosts: vec![cluster.describe(*peer)],
            },
            other => other.to_string().into(),
        }
    }
}

/// Most messages a receiver holds delivered and not yet written: a disk
/// slower than the network holds the push back instead of filling memory.
const RECEIVE_WINDOW: u64 = 4;

/// The group's configuration: as every member must give it.
fn group_config(args: &ClusterArgs) -> GroupConfig {
    GroupConfig::new()
        .with_max_message_size(args.max_message_size)
        .with_automatic_block_size()
        .with_receive_window(Some(RECEIVE_WINDOW))
}

/// The node of every push member: its buffer pool keeps at most two
/// messages' memory for reuse (the library's default, 512 MiB, would keep
/// many messages' worth resident after they were written).
fn node_config(args: &ClusterArgs) -> NodeConfig {
    let pool = args.max_message_size.saturating_mul(2);
    NodeConfig::new()
        .with_buffer_pool(usize::try_from(pool).unwrap_or(usize::MAX))
        .with_completion_mode(args.completion.into())
}

/// The cluster, for the rank `want` (named `flag` in errors).
fn prepare_cluster(args: &ClusterArgs, want: (Want, &str)) -> anyhow::Result<ClusterSetup> {
    if args.max_message_size == 0 {
        bail!("--max-message-size must be at least 1 byte");
    }
    let cluster = ClusterSetup::from_args(
        &args.source,
        want,
        args.credentials.key_file.as_deref(),
        (args.connect_timeout, args.failure_timeout),
        args.transport,
        &args.ofi_provider,
    )?;
    with_settings(args, cluster)
}

/// A cluster handed over whole (`rdmc push --hosts`, `rdmc receive
/// --cluster-from-stdin`).
fn listed_cluster(
    args: &ClusterArgs,
    (members, rank, key): launch::Listed,
    origin: &str,
) -> anyhow::Result<ClusterSetup> {
    if args.max_message_size == 0 {
        bail!("--max-message-size must be at least 1 byte");
    }
    let cluster = ClusterSetup::from_list(
        members,
        rank,
        key,
        origin,
        (args.connect_timeout, args.failure_timeout),
        args.transport,
        &args.ofi_provider,
    )?;
    with_settings(args, cluster)
}

/// The settings of `args` every member applies to its cluster.
fn with_settings(args: &ClusterArgs, mut cluster: ClusterSetup) -> anyhow::Result<ClusterSetup> {
    cluster.report.json = args.json;
    cluster.wire_security = args.wire_security.into();
    cluster.connections = args.connections.into();
    args.credentials.apply(&mut cluster)?;
    Ok(cluster)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow!("cannot start the runtime: {e}"))
}

/// Run `rdmc push`.
pub(crate) fn run_push(args: PushArgs) -> ExitCode {
    let outcome = send::run(&args);
    finish("rdmc push", &args.cluster, Some(0), outcome)
}

/// Run `rdmc receive`.
pub(crate) fn run_receive(args: ReceiveArgs) -> ExitCode {
    let (rank, outcome) = receive::run(&args);
    let who = match rank {
        Some(rank) => format!("rdmc receive {rank}"),
        None => "rdmc receive".to_owned(),
    };
    finish(&who, &args.cluster, rank, outcome.map(|()| Vec::new()))
}

/// The exit status of a push that reached some receivers but not all
/// (those that failed are named).
const PARTIAL: u8 = 3;

/// Report the outcome: exit status 0 when every member has everything;
/// [`PARTIAL`] when the push went on without receivers that failed (named
/// in `outcome`); 1 for an error here; 2 when other members failed and the
/// push did not complete (each named on stderr, and in the JSON error
/// event).
fn finish(
    who: &str,
    args: &ClusterArgs,
    rank: Option<u32>,
    outcome: Result<Vec<String>, Failure>,
) -> ExitCode {
    let failure = match outcome {
        Ok(failed) if failed.is_empty() => return ExitCode::SUCCESS,
        Ok(failed) => {
            // The summary said how many have everything.
            eprintln!(
                "{who}: failed hosts (without the push): {}",
                failed.join(", ")
            );
            return ExitCode::from(PARTIAL);
        }
        Err(failure) => failure,
    };
    let hosts = failure.hosts;
    if args.json {
        println!(
            "{}",
            json!({"event": "error", "rank": rank, "error": failure.message,
                   "failed_hosts": hosts})
        );
    }
    eprintln!("{who}: error: {}", failure.message);
    if hosts.is_empty() {
        return ExitCode::FAILURE;
    }
    eprintln!("{who}: failed hosts: {}", hosts.join(", "));
    ExitCode::from(2)
}
