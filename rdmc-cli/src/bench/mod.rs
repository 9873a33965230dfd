//! `rdmc bench`: the papers' experiments on an emulated cluster, side by
//! side with a plain TCP unicast and MPI_Bcast, as JSON lines, CSV, tables
//! and plots (see BENCHMARKS.md).
//!
//! Every measurement runs on `benches/netlab.sh`'s lab: one network
//! namespace per host, each link capped at `--rate` in both directions. The
//! members are `rdmc member --bench` processes, one per host, paced by this
//! driver: it sends one command to the root, waits until every receiver
//! reports the message, and only then sends the next, so measurements never
//! overlap. Latency is the last receiver's delivery time minus the root's
//! send time, both on the machine's one monotonic clock.

mod lab;
mod report;

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use lab::{Cluster, CpuTimes, Lab, Sample, install_interrupt_handler, median, mpi_bcast};

/// Arguments of `rdmc bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// The small run: latency vs group size at 64 MiB for 2, 4 and 8 nodes
    /// (every algorithm, unicast, MPI_Bcast default and forced pipeline),
    /// in under 3 minutes.
    #[arg(long)]
    quick: bool,
    /// Directory for results.jsonl, results.csv, summary.md, the plots and
    /// the members' logs.
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// Bandwidth of every host's link, each direction (a tc rate).
    #[arg(long, default_value = "250mbit")]
    rate: String,
    /// Directory holding netlab.sh and mpi_netlab.sh.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/benches"))]
    scripts: PathBuf,
    /// Only these experiments (default: all of the run's).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Experiment>,
    /// Completion mode of the members outside the CPU experiment. The
    /// lab runs up to 16 members on this machine's few cores, where
    /// spinning members (hybrid, polling) take the CPU the others need.
    #[arg(long, default_value = "interrupt", value_parser = ["interrupt", "hybrid", "polling"])]
    completion: String,
    /// Latency experiment only at these group sizes (e.g. `4,8`).
    #[arg(long, value_delimiter = ',')]
    nodes: Vec<usize>,
    /// Block size of the latency, small-message and CPU experiments. The
    /// default is the best of the block-size sweep for large messages on
    /// this lab at 250 Mbit/s (the papers used 1 MiB on RDMA).
    #[arg(long, default_value = "256KiB", value_parser = crate::size::parse_size)]
    block_size: u64,
    /// Latency and small-message experiments: only these rdmc algorithms.
    #[arg(long, value_delimiter = ',', value_parser = ALGORITHMS)]
    algorithms: Vec<String>,
    /// Latency experiment: measured runs per point (overrides the plan's).
    #[arg(long)]
    runs: Option<usize>,
    /// Latency experiment: unmeasured warm-up runs per point (overrides the
    /// plan's).
    #[arg(long)]
    warmup: Option<usize>,
    /// Leave MPI_Bcast out.
    #[arg(long)]
    no_mpi: bool,
    /// Measure nothing: rebuild the CSV, summary and plots from
    /// DIR/results.jsonl.
    #[arg(long)]
    replot: bool,
}

/// The experiments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Experiment {
    /// Latency vs group size per algorithm, with unicast and MPI_Bcast
    /// (papers' Fig. 4), and the per-step breakdown (Table 1).
    Latency,
    /// Bandwidth vs block size for 4-node groups (Fig. 6).
    BlockSize,
    /// 1-byte messages per second vs group size (Fig. 7).
    SmallMessages,
    /// CPU use per completion mode (Fig. 11).
    Cpu,
}

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

const ALGORITHMS: [&str; 4] = ["sequential", "chain", "tree", "binomial-pipeline"];

/// One latency workload: a message size, the group sizes, runs and warm-ups.
struct LatencySpec {
    size: u64,
    nodes: Vec<usize>,
    runs: usize,
    warmup: usize,
}

/// Everything one run measures.
struct Plan {
    latency: Vec<LatencySpec>,
    /// MPI_Bcast variants: name, and the forced (algorithm, segment size).
    mpi: Vec<(&'static str, Option<(u32, u64)>)>,
    /// Size whose N = 4 runs give the breakdown records.
    breakdown_size: u64,
    /// Group sizes and burst length for 1-byte messages.
    small: (Vec<usize>, u64, usize),
    /// Block sizes and (message size, runs, warm-up) for Fig. 6.
    block_sizes: Vec<u64>,
    block_messages: Vec<(u64, usize, usize)>,
    /// Message sizes with (runs, warm-up) for the CPU experiment.
    cpu: Vec<(u64, usize, usize)>,
    experiments: Vec<Experiment>,
}

impl Plan {
    fn new(args: &BenchArgs) -> Plan {
        let mpi_pipeline = ("pipeline", Some((3, 32 * KIB)));
        let mut plan = if args.quick {
            Plan {
                latency: vec![LatencySpec {
                    size: 64 * MIB,
                    nodes: vec![2, 4, 8],
                    runs: 1,
                    warmup: 0,
                }],
                mpi: vec![("default", None), mpi_pipeline],
                breakdown_size: 64 * MIB,
                small: (vec![], 0, 0),
                block_sizes: vec![],
                block_messages: vec![],
                cpu: vec![],
                experiments: vec![Experiment::Latency],
            }
        } else {
            Plan {
                latency: vec![
                    LatencySpec {
                        size: 8 * MIB,
                        nodes: vec![2, 3, 4, 6, 8, 12, 16],
                        runs: 5,
                        warmup: 1,
                    },
                    LatencySpec {
                        size: 256 * MIB,
                        nodes: vec![2, 4, 8, 16],
                        runs: 1,
                        warmup: 0,
                    },
                ],
                mpi: vec![
                    ("default", None),
                    mpi_pipeline,
                    ("scatter_allgather_ring", Some((9, 0))),
                ],
                breakdown_size: 256 * MIB,
                small: (vec![2, 4, 8, 16], 1000, 3),
                block_sizes: (14..=24).map(|p| 1u64 << p).collect(),
                block_messages: vec![
                    (16 * KIB, 5, 1),
                    (128 * KIB, 5, 1),
                    (MIB, 5, 1),
                    (8 * MIB, 3, 1),
                    (32 * MIB, 1, 0),
                    (128 * MIB, 1, 0),
                ],
                cpu: vec![(MIB, 20, 2), (100 * MIB, 2, 0)],
                experiments: vec![
                    Experiment::Latency,
                    Experiment::SmallMessages,
                    Experiment::BlockSize,
                    Experiment::Cpu,
                ],
            }
        };
        if !args.only.is_empty() {
            plan.experiments.retain(|e| args.only.contains(e));
        }
        for l in &mut plan.latency {
            l.runs = args.runs.unwrap_or(l.runs).max(1);
            l.warmup = args.warmup.unwrap_or(l.warmup);
        }
        if !args.nodes.is_empty() {
            for l in &mut plan.latency {
                l.nodes = args.nodes.clone();
            }
            plan.small.0.retain(|n| args.nodes.contains(n));
        }
        if args.no_mpi {
            plan.mpi.clear();
        }
        plan
    }

    fn has(&self, e: Experiment) -> bool {
        self.experiments.contains(&e)
    }

    /// Every group size a lab is needed for, ascending.
    fn lab_sizes(&self) -> Vec<usize> {
        let mut sizes: Vec<usize> = Vec::new();
        if self.has(Experiment::Latency) {
            sizes.extend(self.latency.iter().flat_map(|l| l.nodes.iter().copied()));
        }
        if self.has(Experiment::SmallMessages) {
            sizes.extend(&self.small.0);
        }
        if self.has(Experiment::BlockSize) || self.has(Experiment::Cpu) {
            sizes.push(4);
        }
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }

    fn largest_message(&self) -> u64 {
        let latency = self.latency.iter().map(|l| l.size);
        let block = self.block_messages.iter().map(|m| m.0);
        let cpu = self.cpu.iter().map(|m| m.0);
        latency.chain(block).chain(cpu).max().unwrap_or(MIB)
    }
}

/// Where the run writes, and what it knows while it runs.
struct Run<'a> {
    args: &'a BenchArgs,
    plan: Plan,
    out: File,
    logs: PathBuf,
    members_file: PathBuf,
    records: Vec<Value>,
    clusters: usize,
    started: Instant,
}

pub(crate) fn run(args: BenchArgs) -> ExitCode {
    match bench(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdmc bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bench(args: &BenchArgs) -> Result<(), String> {
    std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("creating {}: {e}", args.out.display()))?;
    let jsonl = args.out.join("results.jsonl");
    if args.replot {
        let records = report::read_records(&jsonl)?;
        let machine = std::fs::read_to_string(args.out.join("machine.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null);
        return report(args, &records, &machine);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("must run as root (it creates network namespaces)".into());
    }
    if cfg!(debug_assertions) {
        eprintln!(
            "rdmc bench: warning: this is a debug build; measure with `cargo run --release --bin rdmc -- bench`"
        );
    }
    let netlab = args.scripts.join("netlab.sh");
    if !netlab.exists() {
        return Err(format!(
            "{} not found (pass --scripts DIR)",
            netlab.display()
        ));
    }
    install_interrupt_handler(&netlab);
    let logs = args.out.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("creating {}: {e}", logs.display()))?;
    let machine = machine_facts(args);
    std::fs::write(
        args.out.join("machine.json"),
        serde_json::to_string_pretty(&machine).unwrap_or_default(),
    )
    .map_err(|e| format!("writing machine.json: {e}"))?;
    let mut run = Run {
        args,
        plan: Plan::new(args),
        out: File::create(&jsonl).map_err(|e| format!("creating {}: {e}", jsonl.display()))?,
        members_file: args.out.join("members.txt"),
        logs,
        records: Vec::new(),
        clusters: 0,
        started: Instant::now(),
    };
    for n in run.plan.lab_sizes() {
        let lab = Lab::up(&netlab, n, &args.rate)?;
        run.on_lab(&lab)?;
        drop(lab);
    }
    eprintln!(
        "rdmc bench: {} measurements in {:.0} s",
        run.records.len(),
        run.started.elapsed().as_secs_f64()
    );
    report(args, &run.records, &machine)
}

fn report(args: &BenchArgs, records: &[Value], machine: &Value) -> Result<(), String> {
    let files = report::write_report(&args.out, records, machine)?;
    println!("{}", files.summary_markdown);
    for path in files.paths() {
        eprintln!("rdmc bench: wrote {}", path.display());
    }
    Ok(())
}

impl Run<'_> {
    /// Everything measured on a lab of `lab.hosts` hosts.
    fn on_lab(&mut self, lab: &Lab) -> Result<(), String> {
        let n = lab.hosts;
        if self.plan.has(Experiment::Latency) || self.plan.has(Experiment::SmallMessages) {
            self.latency_and_small(n)?;
        }
        if n == 4 && self.plan.has(Experiment::BlockSize) {
            self.block_size()?;
        }
        if n == 4 && self.plan.has(Experiment::Cpu) {
            self.cpu()?;
        }
        Ok(())
    }

    /// The latency workloads with `n` nodes, unicast first, then every
    /// algorithm (with the 1-byte bursts on the same processes), then MPI.
    fn latency_and_small(&mut self, n: usize) -> Result<(), String> {
        let latency: Vec<(u64, usize, usize)> = if self.plan.has(Experiment::Latency) {
            self.plan
                .latency
                .iter()
                .filter(|l| l.nodes.contains(&n))
                .map(|l| (l.size, l.runs, l.warmup))
                .collect()
        } else {
            Vec::new()
        };
        let small = self.plan.has(Experiment::SmallMessages) && self.plan.small.0.contains(&n);
        let mut unicast = std::collections::HashMap::new();
        if !latency.is_empty() {
            let mut cluster = self.start_unicast()?;
            for &(size, runs, warmup) in &latency {
                let (record, samples) = self.series(&mut cluster, size, 1, runs, warmup)?;
                let seconds = median(&samples.iter().map(|s| s.seconds).collect::<Vec<_>>());
                unicast.insert(size, seconds);
                self.emit(merge(
                    json!({"experiment": "latency", "system": "unicast", "algorithm": "tcp-copy",
                           "nodes": n, "size": size, "block_size": null, "ratio_to_unicast": 1.0}),
                    record,
                ));
            }
            cluster.close()?;
        }
        for algorithm in ALGORITHMS {
            if latency.is_empty() && !small {
                break;
            }
            if !self.args.algorithms.is_empty()
                && !self.args.algorithms.iter().any(|a| a == algorithm)
            {
                continue;
            }
            let mode = self.args.completion.clone();
            let block = self.args.block_size;
            let mut cluster = self.start_rdmc(n, algorithm, block, &mode)?;
            for &(size, runs, warmup) in &latency {
                let (record, samples) = self.series(&mut cluster, size, 1, runs, warmup)?;
                let ratio = record["seconds"].as_f64().unwrap_or(f64::NAN) / unicast[&size];
                self.emit(merge(
                    json!({"experiment": "latency", "system": "rdmc", "algorithm": algorithm,
                           "nodes": n, "size": size, "block_size": block, "mode": mode,
                           "ratio_to_unicast": ratio}),
                    record,
                ));
                if n == 4 && size == self.plan.breakdown_size {
                    self.breakdown(algorithm, size, &samples);
                }
            }
            if small {
                let (_, burst, runs) = self.plan.small;
                let (record, samples) = self.series(&mut cluster, 1, burst, runs, 1)?;
                let rates: Vec<f64> = samples.iter().map(|s| burst as f64 / s.seconds).collect();
                self.emit(merge(
                    json!({"experiment": "small_messages", "system": "rdmc",
                           "algorithm": algorithm, "nodes": n, "size": 1, "block_size": block,
                           "mode": mode, "burst": burst,
                           "messages_per_second": median(&rates)}),
                    record,
                ));
            }
            cluster.close()?;
        }
        for (size, runs, warmup) in latency {
            for &(name, forced) in &self.plan.mpi.clone() {
                let before = CpuTimes::now();
                let script = self.args.scripts.join("mpi_netlab.sh");
                let result = mpi_bcast(&script, n, &self.args.rate, size, runs, warmup, forced)?;
                let all: Vec<f64> = result["all"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_f64).collect())
                    .unwrap_or_default();
                let seconds = median(&all);
                self.emit(json!({
                    "experiment": "latency", "system": "mpi", "algorithm": name, "nodes": n,
                    "size": size, "block_size": forced.map(|f| f.1).filter(|&s| s > 0),
                    "seconds": seconds, "runs": all.len(), "all": all,
                    "min": all.iter().copied().fold(f64::INFINITY, f64::min),
                    "max": all.iter().copied().fold(0.0, f64::max),
                    "ratio_to_unicast": seconds / unicast[&size],
                    "gbps": size as f64 * 8.0 / seconds / 1e9,
                    "cpu_idle": CpuTimes::now().idle_since(&before),
                    "rate": self.args.rate,
                }));
            }
        }
        Ok(())
    }

    /// Bandwidth vs block size, 4 nodes, binomial pipeline.
    fn block_size(&mut self) -> Result<(), String> {
        for block in self.plan.block_sizes.clone() {
            let messages: Vec<_> = self
                .plan
                .block_messages
                .iter()
                .copied()
                .filter(|&(size, _, _)| size >= block)
                .collect();
            if messages.is_empty() {
                continue;
            }
            let mode = self.args.completion.clone();
            let mut cluster = self.start_rdmc(4, "binomial-pipeline", block, &mode)?;
            for (size, runs, warmup) in messages {
                let (record, _) = self.series(&mut cluster, size, 1, runs, warmup)?;
                self.emit(merge(
                    json!({"experiment": "block_size", "system": "rdmc",
                           "algorithm": "binomial-pipeline", "nodes": 4, "size": size,
                           "block_size": block, "mode": mode}),
                    record,
                ));
            }
            cluster.close()?;
        }
        Ok(())
    }

    /// CPU per completion mode, 4 nodes, binomial pipeline.
    fn cpu(&mut self) -> Result<(), String> {
        for mode in ["interrupt", "hybrid", "polling"] {
            let block = self.args.block_size;
            let mut cluster = self.start_rdmc(4, "binomial-pipeline", block, mode)?;
            for (size, runs, warmup) in self.plan.cpu.clone() {
                let (record, samples) = self.series(&mut cluster, size, 1, runs, warmup)?;
                // Per member and message: the CPU each process used from its
                // previous event to this message's event, averaged.
                let per_message: Vec<f64> = samples
                    .iter()
                    .map(|s| s.cpu.iter().sum::<f64>() / s.cpu.len() as f64)
                    .collect();
                let cpu = median(&per_message);
                self.emit(merge(
                    json!({"experiment": "cpu", "system": "rdmc",
                           "algorithm": "binomial-pipeline", "nodes": 4, "size": size,
                           "block_size": block, "mode": mode,
                           "cpu_seconds_per_message": cpu,
                           "cpu_seconds_per_gib": cpu * (1u64 << 30) as f64 / size as f64}),
                    record,
                ));
            }
            cluster.close()?;
        }
        Ok(())
    }

    /// Table 1 from one N = 4 latency run: the member farthest from the
    /// root (the last rank) and the root's own setup.
    fn breakdown(&mut self, algorithm: &str, size: u64, samples: &[Sample]) {
        let Some(sample) = samples.last() else { return };
        let far = sample.delivered.len() - 1;
        let d = &sample.delivered[far];
        let s = &sample.sent;
        let (Some(submit), Some(first_block)) = (s["t"].as_u64(), d["started_t"].as_u64()) else {
            return;
        };
        let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        let remote_setup = f(s, "setup_us");
        let before_first = first_block.saturating_sub(submit) as f64 / 1e3;
        self.emit(json!({
            "experiment": "breakdown", "system": "rdmc", "algorithm": algorithm, "nodes": 4,
            "size": size, "block_size": self.args.block_size, "mode": self.args.completion,
            "rank": far,
            "seconds": sample.seconds, "runs": 1,
            "remote_setup_us": remote_setup,
            "remote_transfers_us": (before_first - remote_setup).max(0.0),
            "local_setup_us": f(d, "setup_us"),
            "copy_us": f(d, "copy_us"),
            "transferring_us": f(d, "transferring_us"),
            "waiting_us": f(d, "waiting_us"),
            "total_us": before_first + f(d, "total_us"),
            "rate": self.args.rate,
        }));
    }

    /// Measure `runs` (after `warmup`) bursts of `count` messages of `size`.
    fn series(
        &mut self,
        cluster: &mut Cluster,
        size: u64,
        count: u64,
        runs: usize,
        warmup: usize,
    ) -> Result<(Value, Vec<Sample>), String> {
        let rate = rate_bytes_per_second(&self.args.rate);
        // Generous: sequential to 16 nodes moves 15 copies through one link.
        let timeout = Duration::from_secs_f64(60.0 + 40.0 * (size * count) as f64 / rate);
        for _ in 0..warmup {
            cluster.measure(size, count, timeout)?;
        }
        let before = CpuTimes::now();
        let mut samples = Vec::with_capacity(runs);
        for _ in 0..runs {
            samples.push(cluster.measure(size, count, timeout)?);
        }
        let idle = CpuTimes::now().idle_since(&before);
        let all: Vec<f64> = samples.iter().map(|s| s.seconds).collect();
        // CPU per member per message (from each process's previous event).
        let member_cpu = median(
            &samples
                .iter()
                .map(|s| s.cpu.iter().sum::<f64>() / s.cpu.len() as f64 / count as f64)
                .collect::<Vec<_>>(),
        );
        let seconds = median(&all);
        let record = json!({
            "seconds": seconds, "runs": runs, "all": all,
            "min": all.iter().copied().fold(f64::INFINITY, f64::min),
            "max": all.iter().copied().fold(0.0, f64::max),
            "gbps": (size * count) as f64 * 8.0 / seconds / 1e9,
            "cpu_idle": idle, "rate": self.args.rate,
            "member_cpu_seconds": member_cpu,
        });
        Ok((record, samples))
    }

    fn start_rdmc(
        &mut self,
        n: usize,
        algorithm: &str,
        block: u64,
        mode: &str,
    ) -> Result<Cluster, String> {
        let port = self.next_port();
        self.write_members(n, port)?;
        let members = self.members_file.display().to_string();
        let max = self.plan.largest_message().to_string();
        let label = format!("{:03}-rdmc-{algorithm}-n{n}-b{block}-{mode}", self.clusters);
        eprintln!(
            "rdmc bench: [{:>5.0} s] {label}",
            self.started.elapsed().as_secs_f64()
        );
        let args = move |rank: usize| -> Vec<String> {
            [
                "member",
                "--members",
                &members,
                "--rank",
                &rank.to_string(),
                "--json",
                "--bench",
                "--max-size",
                &max,
                "--algorithm",
                algorithm,
                "--block-size",
                &block.to_string(),
                "--completion",
                mode,
                "--failure-timeout",
                "10",
            ]
            .map(str::to_owned)
            .to_vec()
        };
        Cluster::start(n, &label, &self.logs, args, Duration::from_secs(120))
    }

    fn start_unicast(&mut self) -> Result<Cluster, String> {
        let port = self.next_port();
        self.write_members(2, port)?;
        let members = self.members_file.display().to_string();
        let max = self.plan.largest_message().to_string();
        let label = format!("{:03}-unicast", self.clusters);
        eprintln!(
            "rdmc bench: [{:>5.0} s] {label}",
            self.started.elapsed().as_secs_f64()
        );
        let args = move |rank: usize| -> Vec<String> {
            [
                "tcp-copy",
                "--members",
                &members,
                "--rank",
                &rank.to_string(),
                "--max-size",
                &max,
            ]
            .map(str::to_owned)
            .to_vec()
        };
        Cluster::start(2, &label, &self.logs, args, Duration::from_secs(120))
    }

    /// A fresh port per cluster, so no process meets a predecessor's
    /// connections in TIME_WAIT.
    fn next_port(&mut self) -> u16 {
        self.clusters += 1;
        7100 + (self.clusters % 2000) as u16
    }

    fn write_members(&self, n: usize, port: u16) -> Result<(), String> {
        let text: String = (0..n)
            .map(|i| format!("{}:{port}\n", Lab::addr(i)))
            .collect();
        std::fs::write(&self.members_file, text).map_err(|e| format!("writing members: {e}"))
    }

    /// Keep and print one record.
    fn emit(&mut self, record: Value) {
        let line = record.to_string();
        let _ = writeln!(self.out, "{line}");
        let _ = self.out.flush();
        eprintln!(
            "rdmc bench: {} {} {} n={} size={} -> {:.4} s",
            record["experiment"].as_str().unwrap_or("?"),
            record["system"].as_str().unwrap_or("?"),
            record["algorithm"].as_str().unwrap_or("?"),
            record["nodes"],
            record["size"],
            record["seconds"].as_f64().unwrap_or(f64::NAN)
        );
        self.records.push(record);
    }
}

/// `a` with `b`'s fields added.
fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// Bytes per second of a tc rate such as `250mbit`, `1gbit`, `500kbit`.
fn rate_bytes_per_second(rate: &str) -> f64 {
    let rate = rate.to_ascii_lowercase();
    let digits: String = rate
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let value: f64 = digits.parse().unwrap_or(1.0);
    let unit = match &rate[digits.len()..] {
        "kbit" => 1e3 / 8.0,
        "mbit" => 1e6 / 8.0,
        "gbit" => 1e9 / 8.0,
        "kbps" => 1e3,
        "mbps" => 1e6,
        "gbps" => 1e9,
        _ => 1.0 / 8.0,
    };
    (value * unit).max(1.0)
}

/// What the report says about the machine and the run.
fn machine_facts(args: &BenchArgs) -> Value {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(str::trim)
        .unwrap_or("unknown");
    let mem_kib: u64 = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let first_line = |cmd: &str, arg: &str| {
        std::process::Command::new(cmd)
            .arg(arg)
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .map(str::to_owned)
            })
            .unwrap_or_default()
    };
    json!({
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": model,
        "memory_gib": mem_kib / (1 << 20),
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "rate": args.rate,
        "date": first_line("date", "-u"),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "rdmc_version": env!("CARGO_PKG_VERSION"),
        "mpi": first_line("mpirun", "--version"),
        "quick": args.quick,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tc_rates_in_bytes_per_second() {
        assert_eq!(rate_bytes_per_second("250mbit"), 31_250_000.0);
        assert_eq!(rate_bytes_per_second("1gbit"), 125_000_000.0);
        assert_eq!(rate_bytes_per_second("8kbit"), 1000.0);
    }

    #[test]
    fn merged_records_keep_both_sides() {
        let m = merge(json!({"a": 1}), json!({"b": 2}));
        assert_eq!(m, json!({"a": 1, "b": 2}));
    }
}
