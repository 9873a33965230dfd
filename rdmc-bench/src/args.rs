//! The command line of a run: what `rdmc-bench` measures and how.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// Arguments of `rdmc-bench` (a run of experiments).
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// The small run: latency vs group size at 64 MiB for 2, 4 and 8 nodes
    /// (every algorithm, unicast, MPI_Bcast default and forced pipeline),
    /// each after one warm-up, in about 5 minutes. With `--only
    /// cosmos,overlap`: the storage workloads made small (object sizes / 16,
    /// 64 writes; 1 MiB x 2 per sender on 4 and 8 hosts).
    #[arg(long)]
    pub(crate) quick: bool,
    /// Directory for results.jsonl, results.csv, summary.md, the plots and
    /// the members' logs (by default under `target/`, outside the source
    /// tree when run from the workspace root).
    #[arg(long, default_value = "target/bench-results")]
    pub(crate) out: PathBuf,
    /// Bandwidth of every host's link, each direction (a tc rate).
    #[arg(long, default_value = "250mbit")]
    pub(crate) rate: String,
    /// Directory holding netlab.sh and mpi_netlab.sh.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts"))]
    pub(crate) scripts: PathBuf,
    /// The `rdmc` binary whose members the run measures (`rdmc member`,
    /// `rdmc simulate`); default: `$RDMC`, else the `rdmc` beside this
    /// program (`cargo build --release -p rdmcast-cli -p rdmc-bench` puts
    /// both in target/release).
    #[arg(long, value_name = "PATH")]
    pub(crate) rdmc: Option<PathBuf>,
    /// Only these experiments (default: all of the run's; the quick run
    /// has latency, cosmos and overlap, and runs only latency unless told).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub(crate) only: Vec<Experiment>,
    /// Completion mode of the members outside the CPU experiment. The
    /// lab runs up to 16 members on this machine's few cores, where
    /// spinning members (hybrid, polling) take the CPU the others need.
    #[arg(long, default_value = "interrupt", value_parser = ["interrupt", "adaptive", "hybrid", "polling"])]
    pub(crate) completion: String,
    /// How rdmc's members protect their frames on the wire: authenticated
    /// (the default), encrypted too, or `none`, the mode for trusted
    /// fabrics, as MPI's TCP transport (which protects nothing). The
    /// summary's machine table says which.
    #[arg(long, default_value = "authenticated", value_parser = ["authenticated", "encrypted", "none"])]
    pub(crate) wire_security: String,
    /// The lab hosts' TCP congestion control (rdmc's, MPI's and the
    /// unicast's sockets alike): Linux's default, `cubic`, unless told
    /// (`bbr`, `reno`, ...: one the kernel has). Without it a lab would take
    /// the machine's default, and the binomial pipeline over TCP is
    /// sensitive to it (BENCHMARKS.md).
    #[arg(long, default_value = "cubic", value_name = "NAME")]
    pub(crate) congestion_control: String,
    /// Latency, small-message, overlap and allreduce experiments only at
    /// these group sizes (e.g. `4,8`).
    #[arg(long, value_delimiter = ',')]
    pub(crate) nodes: Vec<usize>,
    /// Small-message experiment: only these message sizes (e.g. `1KiB`;
    /// default 1 B, 1 KiB, 16 KiB and 64 KiB).
    #[arg(long, value_delimiter = ',', value_parser = rdmc_cli::size::parse_size)]
    pub(crate) small_sizes: Vec<u64>,
    /// Small-message experiment: messages per burst of the rate measure
    /// (default 1000; 0 measures one message's latency only).
    #[arg(long, value_name = "MESSAGES")]
    pub(crate) small_burst: Option<u64>,
    /// Block size of the latency, small-message and CPU experiments, or
    /// `auto` (the default, the library's): each message's block size
    /// chosen from its size and the group's (48–256 KiB; the papers used
    /// 1 MiB on RDMA).
    #[arg(long, default_value = "auto", value_parser = parse_block_size)]
    pub(crate) block_size: BlockSizeArg,
    /// Only these rdmc algorithms, in every experiment that runs several:
    /// latency and small messages (sequential, chain, tree,
    /// binomial-pipeline), Cosmos (binomial-pipeline, tree, sequential),
    /// overlap (binomial-pipeline, chain), slow-host (chain,
    /// binomial-pipeline, hybrid) and racks (hybrid,
    /// binomial-pipeline, chain). `hybrid` runs only in slow-host and
    /// racks: on a lab of one rack it is the binomial pipeline. An
    /// algorithm none of the run's experiments runs is an error.
    #[arg(long, value_delimiter = ',', value_parser = ALGORITHMS)]
    pub(crate) algorithms: Vec<String>,
    /// Latency (and allreduce) experiment: measured runs per point
    /// (overrides the plan's; allreduce: 5).
    #[arg(long)]
    pub(crate) runs: Option<usize>,
    /// Latency (and allreduce) experiment: unmeasured warm-up runs per
    /// point (overrides the plan's; allreduce: 1).
    #[arg(long)]
    pub(crate) warmup: Option<usize>,
    /// Leave MPI_Bcast out.
    #[arg(long)]
    pub(crate) no_mpi: bool,
    /// Push experiment: leave out `pdcp` and the 15 `scp` at once (about
    /// 150 s each a run), keeping the single copy every ratio is taken to.
    #[arg(long)]
    pub(crate) skip_slow_baselines: bool,
    /// Segment sizes of MPI's forced pipeline in the latency experiment,
    /// each measured as a variant of its own, so the peer is MPI at the
    /// best of them. By default 32 KiB and 48 KiB: on this project's
    /// emulated lab 32 KiB was MPI's best at 8 and 256 MiB on 16 hosts,
    /// and 48 KiB, whose segment with its 22-byte header fills 34 whole
    /// 1448-byte TCP segments, its best at 64 MiB on 4 and 8 hosts
    /// (BENCHMARKS.md). `0` is MPI's unsegmented pipeline.
    #[arg(long, value_delimiter = ',', value_parser = rdmc_cli::size::parse_size, default_value = "32KiB,48KiB", value_name = "SIZES")]
    pub(crate) mpi_segments: Vec<u64>,
    /// An extra argument for every `rdmc member` (and `rdmc push`) the run
    /// starts (repeatable, in order: `--member-option=--early-announce
    /// --member-option=off`), to compare a member setting in one run.
    #[arg(long, allow_hyphen_values = true, value_name = "ARG")]
    pub(crate) member_option: Vec<String>,
    /// Slow-host experiment: the rank (and lab host) whose link runs at
    /// half the rate both ways (not 0, the root).
    #[arg(long, default_value_t = 5, value_name = "RANK")]
    pub(crate) slow_host: usize,
    /// Measure nothing: rebuild the CSV, summary and plots from
    /// DIR/results.jsonl.
    #[arg(long)]
    pub(crate) replot: bool,
}

/// `--block-size`: bytes, or `auto` (`None`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockSizeArg(pub(crate) Option<u64>);

fn parse_block_size(text: &str) -> Result<BlockSizeArg, String> {
    if text.eq_ignore_ascii_case("auto") {
        Ok(BlockSizeArg(None))
    } else {
        rdmc_cli::size::parse_size(text).map(|size| BlockSizeArg(Some(size)))
    }
}

/// The experiments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Experiment {
    /// Latency vs group size per algorithm, with unicast and MPI_Bcast
    /// (papers' Fig. 4), and the per-step breakdown (Table 1).
    Latency,
    /// Bandwidth vs block size for 4-node groups (Fig. 6).
    BlockSize,
    /// Small messages, 1 B to 64 KiB, vs group size (Fig. 7): the rate of a
    /// burst of 1000 and one message's latency, beside MPI_Bcast (default
    /// and binomial) in the same run.
    SmallMessages,
    /// CPU use per completion mode (Fig. 11).
    Cpu,
    /// The Cosmos-like storage trace: 3-replica writes over many
    /// overlapping groups of a 16-host lab, roots rotating (Fig. 9):
    /// aggregate goodput and per-write latency percentiles.
    Cosmos,
    /// Overlapping senders: every host the root of its own group of all
    /// hosts at once, beside MPI_Ibcast on one communicator per root
    /// (Fig. 10): aggregate bandwidth against the lab's limit.
    Overlap,
    /// 16 hosts, one at half rate both ways (`--slow-host`), 64 MiB: every
    /// receiver's time per algorithm, the slow host unnamed and named, and
    /// MPI_Bcast's per rank (only with `--only`).
    SlowHost,
    /// Two racks of 8 behind an uplink at a quarter of a host link, the
    /// members listed interleaved across the racks, 64 MiB: the hybrid,
    /// the flat algorithms and MPI_Bcast in the same order (only with
    /// `--only`).
    Racks,
    /// The lab against `rdmc simulate`: 2–16 hosts, 8 MiB and 256 MiB,
    /// chain and binomial pipeline, predicted with the lab's measured
    /// latency in both send-completion models (only with `--only`).
    Validate,
    /// Allreduce of 1 MiB of f32 at 8 and 16 members (`--nodes`), rdmc's
    /// pipelined tree and ring against every Open MPI MPI_Allreduce
    /// algorithm forced in turn and its default rules, each group size on
    /// a lab of its own (only with `--only`; `--runs`, `--warmup`).
    Allreduce,
    /// The path users run: one 64 MiB file from the root's disk to every
    /// receiver's disk with plain `rdmc member` (its defaults, fresh
    /// processes per run, a delivery reported once the file is flushed),
    /// 16 hosts, then one at half rate named (`--slow-host`), each beside
    /// a unicast, with the disk's own bound (only with `--only`; `--runs`,
    /// default 5).
    FileToFile,
    /// `rdmc push --hosts` to 15 hosts over real sshd (the harness's own,
    /// one per lab host): one 256 MiB file and 1,000 small files, beside
    /// `pdcp -r -p` (pdsh's ssh module, fanout 15), 15 `scp -r -p` at once
    /// from the root and one `scp -r -p` to one host; every copy compared
    /// with the source, modes and mtimes included (only with `--only`;
    /// `--runs`, default 5, `--warmup`, default 1).
    Push,
}

/// The experiments a run makes only when `--only` names them.
pub(crate) const OPT_IN: [Experiment; 6] = [
    Experiment::SlowHost,
    Experiment::Racks,
    Experiment::Validate,
    Experiment::Allreduce,
    Experiment::FileToFile,
    Experiment::Push,
];

/// The rdmc algorithms `--algorithms` accepts, in the order the
/// experiments run them.
const ALGORITHMS: [&str; 5] = ["sequential", "chain", "tree", "binomial-pipeline", "hybrid"];
