//! The measurements of one run: each lab brought up in turn, the clusters of
//! processes started on it, every experiment's series measured and each
//! record written to `results.jsonl` as soon as it is known.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::args::{BenchArgs, Experiment};
use crate::lab::{Cluster, CpuTimes, Lab, Sample};
use crate::mpi::{mpi_bcast, mpi_burst};
use crate::plan::{MPI_SMALL, Plan, VALIDATION_NODES, Workload};
use rdmc_cli::report::median;

/// Measured runs of one small message's latency (medians of these).
const SMALL_LATENCY_RUNS: usize = 21;

/// A record's summary of its runs' seconds: the median as `seconds`, the
/// number of runs, every run, the smallest and the largest.
pub(super) fn seconds_of_runs(samples: &[f64]) -> Value {
    json!({
        "seconds": median(samples), "runs": samples.len(), "all": samples,
        "min": samples.iter().copied().fold(f64::INFINITY, f64::min),
        "max": samples.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    })
}

/// The numbers of a JSON array (none if it is not one).
pub(super) fn numbers(v: &Value) -> Vec<f64> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

mod allreduce;
mod push;
mod storage;
mod topologies;
mod validation;

/// Where the run writes, and what it knows while it runs.
struct Run<'a> {
    args: &'a BenchArgs,
    plan: Plan,
    out: File,
    logs: PathBuf,
    members_file: PathBuf,
    /// The cluster key every `rdmc member` of the run is given: new for
    /// each run (rdmc has no default key).
    key_file: PathBuf,
    /// The `rdmc` binary the members run (`--rdmc`).
    rdmc: PathBuf,
    records: Vec<Value>,
    clusters: usize,
    started: Instant,
}

/// Measure everything `plan` (the run's) asks for, one lab size after another,
/// writing each record to `jsonl` as it comes; the records.
pub(crate) fn measure(
    args: &BenchArgs,
    plan: Plan,
    (netlab, rdmc): (&Path, &Path),
    jsonl: &Path,
    logs: &Path,
) -> Result<Vec<Value>, String> {
    let mut run = Run {
        args,
        plan,
        out: File::create(jsonl).map_err(|e| format!("creating {}: {e}", jsonl.display()))?,
        members_file: args.out.join("members.txt"),
        key_file: new_key(&args.out.join("cluster.key"))?,
        rdmc: rdmc.to_owned(),
        logs: logs.to_path_buf(),
        records: Vec::new(),
        clusters: 0,
        started: Instant::now(),
    };
    for n in run.plan.lab_sizes() {
        let lab = Lab::up(netlab, n, &args.rate)?;
        run.on_lab(&lab)?;
        drop(lab);
    }
    run.on_own_labs(netlab)?;
    eprintln!(
        "rdmc-bench: {} measurements in {:.0} s",
        run.records.len(),
        run.started.elapsed().as_secs_f64()
    );
    Ok(run.records)
}

/// Write a new cluster key at `path`, replacing an earlier run's.
fn new_key(path: &Path) -> Result<PathBuf, String> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("removing {}: {e}", path.display()));
        }
        _ => {}
    }
    rdmc_cli::keygen::write_key(path).map_err(|e| format!("{e:#}"))?;
    Ok(path.to_owned())
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
        if n == self.plan.cosmos.hosts && self.plan.has(Experiment::Cosmos) {
            self.cosmos(n)?;
        }
        if self.plan.overlap.nodes.contains(&n) && self.plan.has(Experiment::Overlap) {
            self.overlap(n)?;
        }
        if self.plan.has(Experiment::Validate) && VALIDATION_NODES.contains(&n) {
            self.validation_on(n)?;
        }
        Ok(())
    }

    /// The latency workloads with `n` nodes, unicast first, then every
    /// algorithm of the plan (with the 1-byte bursts on the same processes), then MPI.
    fn latency_and_small(&mut self, n: usize) -> Result<(), String> {
        let latency: Vec<Workload> = if self.plan.has(Experiment::Latency) {
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
        let unicast = self.latency_unicast(n, &latency)?;
        for algorithm in self.plan.algorithms.clone() {
            if latency.is_empty() && !small {
                break;
            }
            self.latency_and_small_rdmc(n, algorithm, &latency, small, &unicast)?;
        }
        self.latency_mpi(n, &latency, &unicast)?;
        if small && !self.plan.mpi.is_empty() {
            self.small_mpi(n)?;
        }
        Ok(())
    }

    /// MPI_Bcast of the small messages with `n` nodes, as rdmc's: for each
    /// small size of the plan and each variant of [`MPI_SMALL`], a burst's
    /// rate (`mpi_bcast --burst`, unless the burst is 0) and one message's
    /// latency (a burst of one).
    fn small_mpi(&mut self, n: usize) -> Result<(), String> {
        let (_, burst, runs) = self.plan.small;
        let script = self.args.scripts.join("mpi_netlab.sh");
        for size in self.plan.small_sizes.clone() {
            for (name, forced) in MPI_SMALL {
                if burst == 0 {
                    self.small_mpi_latency(n, size, name, forced)?;
                    continue;
                }
                let result = mpi_burst(&script, &self.args.rate, (n, size, runs), burst, forced)?;
                let all = numbers(&result["all"]);
                let rates: Vec<f64> = all.iter().map(|s| burst as f64 / s).collect();
                self.emit(json!({
                    "experiment": "small_messages", "system": "mpi", "algorithm": name,
                    "nodes": n, "size": size, "burst": burst, "seconds": median(&all),
                    "runs": all.len(), "all": all, "messages_per_second": median(&rates),
                    "min": all.iter().copied().fold(f64::INFINITY, f64::min),
                    "max": all.iter().copied().fold(0.0, f64::max),
                    "rate": self.args.rate,
                }));
                self.small_mpi_latency(n, size, name, forced)?;
            }
        }
        Ok(())
    }

    /// One MPI_Bcast message's latency with `n` nodes: a burst of one, timed
    /// as rdmc's, first send call to last delivery on one clock.
    fn small_mpi_latency(
        &mut self,
        n: usize,
        size: u64,
        name: &str,
        forced: Option<(u32, u64)>,
    ) -> Result<(), String> {
        let script = self.args.scripts.join("mpi_netlab.sh");
        let shape = (n, size, SMALL_LATENCY_RUNS);
        let result = mpi_burst(&script, &self.args.rate, shape, 1, forced)?;
        let all = numbers(&result["all"]);
        self.emit(json!({
            "experiment": "small_latency", "system": "mpi", "algorithm": name,
            "nodes": n, "size": size, "seconds": median(&all), "runs": all.len(),
            "all": all,
            "min": all.iter().copied().fold(f64::INFINITY, f64::min),
            "max": all.iter().copied().fold(0.0, f64::max),
            "rate": self.args.rate,
        }));
        Ok(())
    }

    /// The unicast latency of each workload with `n` nodes; its seconds by
    /// message size.
    fn latency_unicast(
        &mut self,
        n: usize,
        latency: &[Workload],
    ) -> Result<HashMap<u64, f64>, String> {
        let mut unicast = HashMap::new();
        if latency.is_empty() {
            return Ok(unicast);
        }
        let mut cluster = self.start_unicast()?;
        for &(size, runs, warmup) in latency {
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
        Ok(unicast)
    }

    /// One rdmc algorithm with `n` nodes: the latency workloads (and the
    /// breakdown), then the 1-byte bursts if `small`, on the same processes.
    fn latency_and_small_rdmc(
        &mut self,
        n: usize,
        algorithm: &str,
        latency: &[Workload],
        small: bool,
        unicast: &HashMap<u64, f64>,
    ) -> Result<(), String> {
        let mode = self.args.completion.clone();
        let block = self.args.block_size.0;
        let mut cluster = self.start_rdmc(n, algorithm, block, &mode)?;
        for &(size, runs, warmup) in latency {
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
            for size in self.plan.small_sizes.clone() {
                if burst > 0 {
                    let (record, samples) = self.series(&mut cluster, size, burst, runs, 1)?;
                    let rates: Vec<f64> =
                        samples.iter().map(|s| burst as f64 / s.seconds).collect();
                    self.emit(merge(
                        json!({"experiment": "small_messages", "system": "rdmc",
                               "algorithm": algorithm, "nodes": n, "size": size,
                               "block_size": block, "mode": mode, "burst": burst,
                               "messages_per_second": median(&rates)}),
                        record,
                    ));
                }
                let (record, samples) =
                    self.series(&mut cluster, size, 1, SMALL_LATENCY_RUNS, 3)?;
                // Each receiver's median delivery time (µs after the root's
                // send; null for the root): where the hops' time goes.
                let per_rank: Vec<Vec<f64>> = samples.iter().map(Sample::per_receiver).collect();
                let receivers_us: Vec<Option<f64>> = (0..n)
                    .map(|rank| {
                        let times: Vec<f64> = per_rank
                            .iter()
                            .filter_map(|t| t.get(rank).copied())
                            .filter(|t| t.is_finite())
                            .collect();
                        (!times.is_empty()).then(|| (median(&times) * 1e7).round() / 10.0)
                    })
                    .collect();
                // Each rank's median CPU per message, µs (root included).
                let cpu_us: Vec<f64> = (0..n)
                    .map(|rank| {
                        let used: Vec<f64> = samples.iter().map(|s| s.cpu[rank]).collect();
                        (median(&used) * 1e7).round() / 10.0
                    })
                    .collect();
                self.emit(merge(
                    json!({"experiment": "small_latency", "system": "rdmc",
                           "algorithm": algorithm, "nodes": n, "size": size,
                           "block_size": block, "mode": mode,
                           "receivers_us": receivers_us, "cpu_us": cpu_us}),
                    record,
                ));
            }
        }
        cluster.close()
    }

    /// MPI_Bcast, every variant of the plan, on the latency workloads with
    /// `n` nodes.
    fn latency_mpi(
        &mut self,
        n: usize,
        latency: &[Workload],
        unicast: &HashMap<u64, f64>,
    ) -> Result<(), String> {
        for &(size, runs, warmup) in latency {
            for &(name, forced) in &self.plan.mpi.clone() {
                let before = CpuTimes::now();
                let script = self.args.scripts.join("mpi_netlab.sh");
                let shape = (n, size, runs, warmup);
                let result = mpi_bcast(&script, None, &self.args.rate, shape, forced)?;
                let all = numbers(&result["all"]);
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
            let mut cluster = self.start_rdmc(4, "binomial-pipeline", Some(block), &mode)?;
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
        for mode in ["interrupt", "adaptive", "hybrid", "polling"] {
            let block = self.args.block_size.0;
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
            "size": size, "block_size": self.args.block_size.0, "mode": self.args.completion,
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
        // Warm-ups and runs in one series: the runs follow the warm-ups
        // without a pause (the cores stay warm, as MPI's ranks keep theirs).
        let before = CpuTimes::now();
        let mut samples = cluster.measure_series(size, count, warmup + runs, timeout)?;
        samples.drain(..warmup);
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

    /// Start `rdmc member --bench` on `n` hosts with this algorithm, block
    /// size and completion mode.
    fn start_rdmc(
        &mut self,
        n: usize,
        algorithm: &str,
        block: Option<u64>,
        mode: &str,
    ) -> Result<Cluster, String> {
        let block_arg = block.map_or_else(|| "auto".to_owned(), |b| b.to_string());
        let options = [
            "--json",
            "--bench",
            "--algorithm",
            algorithm,
            "--block-size",
            &block_arg,
            "--completion",
            mode,
            "--wire-security",
            &self.args.wire_security,
            "--failure-timeout",
            "10",
        ]
        .map(str::to_owned);
        let what = format!("rdmc-{algorithm}-n{n}-b{block_arg}-{mode}");
        self.start_cluster(n, &what, "member", &options)
    }

    /// Start the unicast baseline, `rdmc-bench tcp-copy`, on two hosts.
    fn start_unicast(&mut self) -> Result<Cluster, String> {
        self.start_cluster(2, "unicast", "tcp-copy", &[])
    }

    /// Start the next cluster: `rdmc COMMAND --members FILE --rank R
    /// --max-size MAX OPTIONS...` on each of `n` hosts, on a fresh port,
    /// its logs named `NNN-what`.
    fn start_cluster(
        &mut self,
        n: usize,
        what: &str,
        command: &str,
        options: &[String],
    ) -> Result<Cluster, String> {
        let hosts: Vec<usize> = (0..n).collect();
        self.start_cluster_on(&hosts, what, command, options)
    }

    /// [`Run::start_cluster`] with rank `r` on lab host `hosts[r]` (the
    /// members file lists the hosts in that order).
    fn start_cluster_on(
        &mut self,
        hosts: &[usize],
        what: &str,
        command: &str,
        options: &[String],
    ) -> Result<Cluster, String> {
        self.start_cluster_with(hosts, what, command, &|_| options.to_vec())
    }

    /// [`Run::start_cluster_on`] with options of each rank's own (last).
    fn start_cluster_with(
        &mut self,
        hosts: &[usize],
        what: &str,
        command: &str,
        options: &dyn Fn(usize) -> Vec<String>,
    ) -> Result<Cluster, String> {
        let port = self.next_port();
        self.write_members_on(hosts, port)?;
        let members = self.members_file.display().to_string();
        let max = self.plan.largest_message().to_string();
        let key = self.key_file.display().to_string();
        let label = format!("{:03}-{what}", self.clusters);
        eprintln!(
            "rdmc-bench: [{:>5.0} s] {label}",
            self.started.elapsed().as_secs_f64()
        );
        let member_options = &self.args.member_option;
        // `rdmc member`, or a process of this program (`tcp-copy`).
        let program = if command == "member" {
            self.rdmc.clone()
        } else {
            std::env::current_exe().map_err(|e| format!("finding rdmc-bench itself: {e}"))?
        };
        let args = |rank: usize| -> Vec<String> {
            let mut args = [command, "--members", &members, "--rank", &rank.to_string()]
                .map(str::to_owned)
                .to_vec();
            args.extend(["--max-size".to_owned(), max.clone()]);
            if command == "member" {
                args.extend(["--key-file".to_owned(), key.clone()]);
                args.extend(member_options.iter().cloned());
            }
            args.extend(options(rank));
            args
        };
        Cluster::start_on(
            hosts,
            &label,
            &self.logs,
            (&program, args),
            Duration::from_secs(120),
        )
    }

    /// A fresh port per cluster, so no process meets a predecessor's
    /// connections in TIME_WAIT.
    fn next_port(&mut self) -> u16 {
        self.clusters += 1;
        7100 + (self.clusters % 2000) as u16
    }

    /// Write the members file: lab hosts `hosts` in rank order, on `port`.
    fn write_members_on(&self, hosts: &[usize], port: u16) -> Result<(), String> {
        let text: String = hosts
            .iter()
            .map(|&i| format!("{}:{port}\n", Lab::addr(i)))
            .collect();
        std::fs::write(&self.members_file, text).map_err(|e| format!("writing members: {e}"))
    }

    /// Keep and print one record.
    fn emit(&mut self, record: Value) {
        let line = record.to_string();
        let _ = writeln!(self.out, "{line}");
        let _ = self.out.flush();
        eprintln!(
            "rdmc-bench: {} {} {} n={} size={} -> {:.4} s",
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
