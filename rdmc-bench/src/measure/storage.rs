//! The storage workloads of a run: the Cosmos-like trace (papers' Fig. 9)
//! and overlapping senders (Fig. 10), each a [`Workload`] every member runs
//! on its own (`rdmc member --bench --workload FILE`), and MPI_Ibcast on a
//! communicator per root beside the overlapping senders.
//!
//! From the members' events the driver checks that every replica delivered
//! every write (each byte was checked by the replica against the payload)
//! and computes the run's span, from the first write's send to the last
//! replica's delivery, and each write's latency, from its send to the
//! root's acknowledgement that every member of its group has it.
//!
//! Beside the trace's bound, each rdmc run of the Cosmos-like trace is
//! compared with the trace's fair-share ideal ([`trace::fair_share`]): the
//! same closed loop as a fluid on ideal links shared max-min fairly, with
//! the algorithm's use of its group's links.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Run, merge, numbers, rate_bytes_per_second};
use crate::lab::CpuTimes;
use crate::mpi::{mpi_cosmos, mpi_overlap};
use crate::trace;
use rdmc_cli::report::{median, percentile};
use rdmc_cli::workload::Workload;

/// What one run of a workload measured.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct WorkloadRun {
    /// From the first write's send to the last replica's delivery.
    pub(super) seconds: f64,
    /// Each write's latency (send to acknowledgement), in write order.
    pub(super) latencies: Vec<f64>,
    /// CPU seconds all members used, in total.
    pub(super) member_cpu: f64,
    /// From the first write's send to the last root's first send: how
    /// staggered the roots started.
    pub(super) start_spread: f64,
    /// From the first group's last delivery to the run's last: how unevenly
    /// the groups finished.
    pub(super) end_spread: f64,
    /// Each group's span: from the first write's send to its own last
    /// delivery, by group (0 for a group without writes).
    pub(super) group_seconds: Vec<f64>,
}

/// One replica's delivery of a message: its rank, the size, the time.
type Delivery = (usize, u64, u64);

/// Check the events of one run of `workload` and measure it: an error if a
/// write was not acknowledged once by its root or not delivered once, at
/// its size, by each of its group's other members.
pub(super) fn analyse(
    workload: &Workload,
    events: &[(usize, Value)],
) -> Result<WorkloadRun, String> {
    let n = workload.writes.len();
    let mut written: Vec<Option<(u64, u64)>> = vec![None; n];
    let mut seq_of: HashMap<(usize, u64), usize> = HashMap::new();
    let mut delivered: HashMap<(usize, u64), Vec<Delivery>> = HashMap::new();
    let mut cpu: HashMap<usize, f64> = HashMap::new();
    let field = |e: &Value, k: &str| {
        e[k].as_u64()
            .ok_or_else(|| format!("an event without {k}: {e}"))
    };
    for (rank, event) in events {
        if let Some(c) = event["cpu"].as_f64() {
            let seen = cpu.entry(*rank).or_insert(0.0);
            *seen = seen.max(c);
        }
        match event["event"].as_str() {
            Some("written") => {
                let i = field(event, "write")? as usize;
                let write = workload
                    .writes
                    .get(i)
                    .ok_or_else(|| format!("rank {rank} wrote write {i}, not in the workload"))?;
                if workload.root_of(write) as usize != *rank
                    || field(event, "group")? as usize != write.group
                    || field(event, "size")? != write.size
                {
                    return Err(format!(
                        "rank {rank}'s write {i} is not the workload's: {event}"
                    ));
                }
                if written[i].is_some() {
                    return Err(format!("write {i} acknowledged twice"));
                }
                written[i] = Some((field(event, "t")?, field(event, "acked_t")?));
                seq_of.insert((write.group, field(event, "seq")?), i);
            }
            Some("delivered") => {
                let key = (field(event, "group")? as usize, field(event, "seq")?);
                delivered.entry(key).or_default().push((
                    *rank,
                    field(event, "size")?,
                    field(event, "t")?,
                ));
            }
            _ => {}
        }
    }
    let mut latencies = Vec::with_capacity(n);
    let mut first_send = u64::MAX;
    let mut last_delivery = 0u64;
    // Each root's first send, each group's last delivery.
    let mut root_first: HashMap<u32, u64> = HashMap::new();
    let mut group_last: HashMap<usize, u64> = HashMap::new();
    for (i, slot) in written.iter().enumerate() {
        let (t, acked) = slot.ok_or_else(|| format!("write {i} was not acknowledged"))?;
        first_send = first_send.min(t);
        let root = root_first
            .entry(workload.root_of(&workload.writes[i]))
            .or_insert(t);
        *root = (*root).min(t);
        latencies.push(acked.saturating_sub(t) as f64 / 1e9);
    }
    for (&(group, seq), &i) in &seq_of {
        let write = workload.writes[i];
        let got = delivered.remove(&(group, seq)).unwrap_or_default();
        for &member in &workload.groups[group][1..] {
            let mine: Vec<_> = got.iter().filter(|d| d.0 == member as usize).collect();
            match mine.as_slice() {
                [(_, size, t)] if *size == write.size => {
                    last_delivery = last_delivery.max(*t);
                    let last = group_last.entry(group).or_insert(*t);
                    *last = (*last).max(*t);
                }
                [] => return Err(format!("write {i}: replica {member} did not deliver it")),
                _ => {
                    return Err(format!(
                        "write {i}: replica {member} delivered {} message(s) of sizes {:?} \
                         for its {} bytes",
                        mine.len(),
                        mine.iter().map(|d| d.1).collect::<Vec<_>>(),
                        write.size
                    ));
                }
            }
        }
        if got.len() != workload.groups[group].len() - 1 {
            return Err(format!("write {i}: delivered by a host not of its group"));
        }
    }
    if let Some(((group, seq), _)) = delivered.into_iter().next() {
        return Err(format!(
            "group {group} delivered message {seq}, which no root wrote"
        ));
    }
    let seconds = |from: u64, to: u64| to.saturating_sub(from) as f64 / 1e9;
    let last_start = root_first.values().copied().max().unwrap_or(first_send);
    let first_end = group_last.values().copied().min().unwrap_or(last_delivery);
    Ok(WorkloadRun {
        seconds: seconds(first_send, last_delivery),
        latencies,
        member_cpu: cpu.values().sum(),
        start_spread: seconds(first_send, last_start),
        end_spread: seconds(first_end, last_delivery),
        group_seconds: (0..workload.groups.len())
            .map(|g| group_last.get(&g).map_or(0.0, |&t| seconds(first_send, t)))
            .collect(),
    })
}

/// `record` (what ran) with what one run of the Cosmos-like `workload`
/// measured: its span in `seconds` and every write's latency, as goodput,
/// objects/s and latency percentiles, against `bounds` (the lab's, the
/// trace's own; bytes per second).
fn cosmos_record(
    mut record: Value,
    workload: &Workload,
    seconds: f64,
    latencies: Vec<f64>,
    (bound, trace_bound): (f64, f64),
) -> Value {
    let bytes = workload.replica_bytes() as f64;
    let mut sorted = latencies.clone();
    sorted.sort_by(f64::total_cmp);
    let p = |q: f64| percentile(&sorted, q);
    let measured = json!({
        "size": workload.writes.iter().map(|w| w.size).sum::<u64>()
            / workload.writes.len().max(1) as u64,
        "seconds": seconds, "runs": 1,
        "writes": workload.writes.len(), "groups": workload.groups.len(),
        "window": workload.window,
        "replica_bytes": workload.replica_bytes(),
        "gbps": bytes * 8.0 / seconds / 1e9,
        "objects_per_second": workload.writes.len() as f64 / seconds,
        "bound_gbps": bound * 8.0 / 1e9,
        "fraction_of_bound": bytes / seconds / bound,
        "trace_bound_gbps": trace_bound * 8.0 / 1e9,
        "fraction_of_trace_bound": bytes / seconds / trace_bound,
        "latency_p50": p(0.5), "latency_p90": p(0.9), "latency_p99": p(0.99),
        "latency_max": p(1.0), "latencies": latencies,
    });
    if let (Some(record), Value::Object(measured)) = (record.as_object_mut(), measured) {
        record.extend(measured);
    }
    record
}

/// The fair-share ideal's fields of a record whose run took `seconds`:
/// the ideal's span and latency percentiles, and its span over `seconds`.
fn fair_share_fields(ideal: &trace::FairShare, seconds: f64) -> Value {
    let mut sorted = ideal.latencies.clone();
    sorted.sort_by(f64::total_cmp);
    json!({
        "fair_share_seconds": ideal.seconds,
        "fraction_of_fair_share": ideal.seconds / seconds,
        "fair_share_p50": percentile(&sorted, 0.5),
        "fair_share_p99": percentile(&sorted, 0.99),
    })
}

impl Run<'_> {
    /// The Cosmos-like trace, once per algorithm of the plan, on `n` hosts.
    pub(super) fn cosmos(&mut self, n: usize) -> Result<(), String> {
        let spec = &self.plan.cosmos;
        let workload = trace::cosmos(n, spec.writes, spec.window, spec.sizes, spec.seed);
        let (seed, sizes) = (spec.seed, spec.sizes);
        let rate = rate_bytes_per_second(&self.args.rate);
        // Every byte a replica receives crosses one host's incoming link.
        let bound = n as f64 * rate;
        // This trace's own bound: its busiest link at full rate all along.
        let trace_bound = workload.replica_bytes() as f64
            / (trace::busiest_link_bytes(&workload, n) as f64 / rate);
        for algorithm in self.plan.cosmos.algorithms.clone() {
            // The fair-share ideal of this algorithm (a fraction of a second).
            let ideal = trace::fair_share(&workload, trace::Shape::of_algorithm(algorithm), rate);
            let before = CpuTimes::now();
            let run = self.run_workload(&workload, "cosmos", algorithm)?;
            let record = json!({
                "experiment": "cosmos", "system": "rdmc", "algorithm": algorithm,
                "nodes": n, "block_size": self.args.block_size.0, "mode": self.args.completion,
                "seed": seed,
                "size_median": sizes.median, "size_sigma": sizes.sigma,
                "size_mean_uncut": sizes.mean(),
                "size_min": sizes.min, "size_max": sizes.max,
                "member_cpu_seconds": run.member_cpu, "member_options": self.args.member_option,
                "start_spread": run.start_spread, "end_spread": run.end_spread,
                "cpu_idle": CpuTimes::now().idle_since(&before), "rate": self.args.rate,
            });
            let record = merge(record, fair_share_fields(&ideal, run.seconds));
            let bounds = (bound, trace_bound);
            self.emit(cosmos_record(
                record,
                &workload,
                run.seconds,
                run.latencies,
                bounds,
            ));
        }
        if !self.args.no_mpi {
            // The same workload file the members ran, under MPI.
            let before = CpuTimes::now();
            let script = self.args.scripts.join("mpi_netlab.sh");
            let file = self.args.out.join(format!("workload-cosmos-n{n}.txt"));
            let result = mpi_cosmos(&script, n, &self.args.rate, &file)?;
            let seconds = result["seconds"].as_f64().unwrap_or(f64::NAN);
            let latencies = numbers(&result["latencies"]);
            if latencies.len() != workload.writes.len() {
                return Err(format!(
                    "mpi_bcast --cosmos reported {} writes of {}",
                    latencies.len(),
                    workload.writes.len()
                ));
            }
            let record = json!({
                "experiment": "cosmos", "system": "mpi", "algorithm": "ibcast",
                "nodes": n, "block_size": null, "seed": seed,
                "cpu_idle": CpuTimes::now().idle_since(&before), "rate": self.args.rate,
            });
            let bounds = (bound, trace_bound);
            self.emit(cosmos_record(record, &workload, seconds, latencies, bounds));
        }
        Ok(())
    }

    /// Overlapping senders on `n` hosts: rdmc's binomial pipeline, then
    /// MPI_Ibcast on a communicator per root.
    pub(super) fn overlap(&mut self, n: usize) -> Result<(), String> {
        let spec = &self.plan.overlap;
        let (size, messages, runs) = (spec.size, spec.messages, spec.runs);
        let workload = trace::overlap(n, messages, size);
        let rate = self.args.rate.clone();
        let emit_overlap = |run: &mut Self, record: Value, all: &[f64]| {
            run.emit(overlap_record(record, n, size, messages, all, &rate));
        };
        for algorithm in self.plan.overlap.algorithms.clone() {
            let before = CpuTimes::now();
            let mut all = Vec::with_capacity(runs);
            let mut cpu = Vec::with_capacity(runs);
            let (mut starts, mut ends) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
            let mut groups = Vec::with_capacity(runs);
            for _ in 0..runs {
                let run = self.run_workload(&workload, "overlap", algorithm)?;
                all.push(run.seconds);
                cpu.push(run.member_cpu);
                starts.push(run.start_spread);
                ends.push(run.end_spread);
                groups.push(run.group_seconds);
            }
            let record = json!({
                "experiment": "overlap", "system": "rdmc", "algorithm": algorithm,
                "block_size": self.args.block_size.0, "mode": self.args.completion,
                "member_cpu_seconds": median(&cpu),
                "start_spread": median(&starts), "end_spread": median(&ends),
                "group_seconds": groups,
                "cpu_idle": CpuTimes::now().idle_since(&before),
            });
            emit_overlap(self, record, &all);
        }
        if !self.args.no_mpi {
            let before = CpuTimes::now();
            let script = self.args.scripts.join("mpi_netlab.sh");
            let result = mpi_overlap(&script, &self.args.rate, (n, size, runs, 1), messages)?;
            let all = numbers(&result["all"]);
            let record = json!({
                "experiment": "overlap", "system": "mpi", "algorithm": "ibcast",
                "block_size": null,
                "cpu_idle": CpuTimes::now().idle_since(&before),
            });
            emit_overlap(self, record, &all);
        }
        Ok(())
    }

    /// Run `workload` once on fresh `rdmc member` processes, one per host,
    /// with `algorithm`; check and measure it.
    fn run_workload(
        &mut self,
        workload: &Workload,
        name: &str,
        algorithm: &str,
    ) -> Result<WorkloadRun, String> {
        let n = workload
            .groups
            .iter()
            .flatten()
            .map(|&r| r as usize + 1)
            .max()
            .unwrap_or(0);
        let file = self.args.out.join(format!("workload-{name}-n{n}.txt"));
        std::fs::write(&file, workload.to_text())
            .map_err(|e| format!("writing {}: {e}", file.display()))?;
        let block = self
            .args
            .block_size
            .0
            .map_or_else(|| "auto".to_owned(), |b| b.to_string());
        let options = [
            "--json",
            "--bench",
            "--workload",
            &file.display().to_string(),
            "--algorithm",
            algorithm,
            "--block-size",
            &block,
            "--completion",
            &self.args.completion,
            "--failure-timeout",
            "10",
        ]
        .map(str::to_owned);
        let what = format!("{name}-{algorithm}-n{n}");
        let cluster = self.start_cluster(n, &what, "member", &options)?;
        // Generous: a tenth of the lab's bound, plus start and close.
        let bound = n as f64 * rate_bytes_per_second(&self.args.rate);
        let timeout =
            Duration::from_secs_f64(120.0 + 10.0 * workload.replica_bytes() as f64 / bound);
        let events = cluster.run_to_close(timeout)?;
        analyse(workload, &events).map_err(|e| format!("{what}: {e}"))
    }
}

/// An overlap record: `record`'s fields and the run's, from the seconds of
/// each run (`all`).
fn overlap_record(
    mut record: Value,
    n: usize,
    size: u64,
    messages: usize,
    all: &[f64],
    rate: &str,
) -> Value {
    let seconds = median(all);
    let sent = (n * messages) as f64 * size as f64;
    let bound = n as f64 * rate_bytes_per_second(rate);
    let fields = json!({
        "nodes": n, "size": size, "messages": messages, "senders": n,
        "seconds": seconds, "runs": all.len(), "all": all,
        "min": all.iter().copied().fold(f64::INFINITY, f64::min),
        "max": all.iter().copied().fold(0.0, f64::max),
        // Every sender's messages reach the n - 1 other hosts.
        "gbps": sent * (n - 1) as f64 * 8.0 / seconds / 1e9,
        // The papers' measure: bytes sent (message size x messages x groups)
        // per second.
        "sent_gbps": sent * 8.0 / seconds / 1e9,
        // Each host receives at most `rate`.
        "bound_gbps": bound * 8.0 / 1e9,
        "fraction_of_bound": sent * (n - 1) as f64 / seconds / bound,
        "rate": rate,
    });
    if let (Some(r), Value::Object(f)) = (record.as_object_mut(), fields) {
        r.extend(f);
    }
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload() -> Workload {
        trace::workload_of(&[&[0, 1, 2], &[1, 2, 0]], &[(0, 10), (1, 20), (0, 30)], 2)
    }

    fn written(
        rank: usize,
        write: u64,
        group: u64,
        seq: u64,
        size: u64,
        t: u64,
        acked: u64,
    ) -> (usize, Value) {
        (
            rank,
            json!({"event": "written", "write": write, "group": group, "seq": seq,
                      "size": size, "t": t, "acked_t": acked, "cpu": 1.0}),
        )
    }

    fn delivered(rank: usize, group: u64, seq: u64, size: u64, t: u64) -> (usize, Value) {
        (
            rank,
            json!({"event": "delivered", "group": group, "seq": seq, "size": size, "t": t,
                      "cpu": 2.0}),
        )
    }

    fn events() -> Vec<(usize, Value)> {
        vec![
            written(0, 0, 0, 0, 10, 1_000_000_000, 1_500_000_000),
            delivered(1, 0, 0, 10, 1_400_000_000),
            delivered(2, 0, 0, 10, 1_450_000_000),
            written(1, 1, 1, 0, 20, 1_100_000_000, 2_100_000_000),
            delivered(2, 1, 0, 20, 2_000_000_000),
            delivered(0, 1, 0, 20, 2_050_000_000),
            delivered(1, 0, 1, 30, 2_900_000_000),
            delivered(2, 0, 1, 30, 3_000_000_000),
            written(0, 2, 0, 1, 30, 1_500_000_000, 2_950_000_000),
        ]
    }

    #[test]
    fn a_complete_run_is_measured() {
        let run = analyse(&workload(), &events()).unwrap();
        // From the first send (1.0 s) to the last delivery (3.0 s).
        assert!((run.seconds - 2.0).abs() < 1e-9);
        let expected = [0.5, 1.0, 1.45];
        for (got, want) in run.latencies.iter().zip(expected) {
            assert!((got - want).abs() < 1e-9, "{got} {want}");
        }
        // Each rank's largest CPU reading: 2.0 for every rank.
        assert!((run.member_cpu - 6.0).abs() < 1e-9);
        // Root 1 first sent at 1.1 s, 0.1 s after root 0; group 1's last
        // delivery (2.05 s) came 0.95 s before group 0's (3.0 s).
        assert!(
            (run.start_spread - 0.1).abs() < 1e-9,
            "{}",
            run.start_spread
        );
        assert!((run.end_spread - 0.95).abs() < 1e-9, "{}", run.end_spread);
        let spans: Vec<f64> = run
            .group_seconds
            .iter()
            .map(|s| (s * 100.0).round())
            .collect();
        assert_eq!(spans, [200.0, 105.0]);
    }

    #[test]
    fn a_missing_or_wrong_replica_is_named() {
        let mut e = events();
        e.remove(7);
        assert_eq!(
            analyse(&workload(), &e),
            Err("write 2: replica 2 did not deliver it".into())
        );
        let mut e = events();
        e[2] = delivered(2, 0, 0, 11, 1_450_000_000);
        assert!(
            analyse(&workload(), &e)
                .unwrap_err()
                .starts_with("write 0: replica 2 delivered 1 message(s) of sizes [11]")
        );
        let mut e = events();
        e.remove(3);
        assert_eq!(
            analyse(&workload(), &e),
            Err("write 1 was not acknowledged".into())
        );
        let mut e = events();
        e.push(delivered(1, 0, 7, 5, 1));
        assert_eq!(
            analyse(&workload(), &e),
            Err("group 0 delivered message 7, which no root wrote".into())
        );
        let mut e = events();
        e[0].0 = 1;
        assert!(
            analyse(&workload(), &e)
                .unwrap_err()
                .starts_with("rank 1's write 0 is not the workload's")
        );
    }

    #[test]
    fn cosmos_records_compare_with_the_fair_share_ideal() {
        // Four writes of 2 B each at 1 B/s, two at a time through root
        // 0's uplink: 4 s each, 8 s in all.
        let w = trace::workload_of(&[&[0, 1, 2]], &[(0, 2); 4], 2);
        let ideal = trace::fair_share(&w, trace::Shape::Binomial, 1.0);
        assert_eq!(ideal.latencies, [4.0; 4]);
        let record = merge(json!({"system": "rdmc"}), fair_share_fields(&ideal, 10.0));
        let r = cosmos_record(record, &w, 10.0, vec![5.0; 4], (1.0, 1.0));
        assert_eq!(r["fair_share_seconds"], 8.0);
        assert_eq!(r["fraction_of_fair_share"], 0.8);
        assert_eq!(r["fair_share_p50"], 4.0);
        assert_eq!(r["fair_share_p99"], 4.0);
        // The measured fields are still there.
        assert_eq!(r["seconds"], 10.0);
        assert_eq!(r["latency_p50"], 5.0);
        assert_eq!(r["system"], "rdmc");
    }

    #[test]
    fn overlap_records_compare_with_the_bound() {
        // 4 hosts x 2 messages x 1 MB in 1 s: each message reaches 3 hosts.
        let r = overlap_record(
            json!({"system": "rdmc"}),
            4,
            1_000_000,
            2,
            &[1.0, 2.0, 0.5],
            "250mbit",
        );
        assert_eq!(r["seconds"], 1.0);
        assert_eq!(r["min"], 0.5);
        assert!((r["gbps"].as_f64().unwrap() - 0.192).abs() < 1e-9);
        assert!((r["sent_gbps"].as_f64().unwrap() - 0.064).abs() < 1e-9);
        assert!((r["bound_gbps"].as_f64().unwrap() - 1.0).abs() < 1e-9);
        assert!((r["fraction_of_bound"].as_f64().unwrap() - 0.192).abs() < 1e-9);
        assert_eq!(r["system"], "rdmc");
    }
}
