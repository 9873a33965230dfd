//! The two experiments on a lab of their own: one slow host among 16
//! (`--only slow-host`) and two racks behind a quarter-rate uplink with the
//! members listed interleaved (`--only racks`), each with a unicast between
//! two fast hosts of the same rack and MPI_Bcast in the same run.

use std::path::Path;

use serde_json::{Value, json};

use super::{Run, merge, numbers, rate_bytes_per_second};
use crate::args::Experiment;
use crate::lab::{CpuTimes, Lab, Sample};
use crate::mpi::mpi_bcast;
use crate::plan::TOPOLOGY_SIZE as SIZE;
use rdmc_cli::report::median;

/// Hosts of both experiments.
const HOSTS: usize = 16;
/// MPI_Bcast variants of both experiments: name, forced (algorithm, segment).
const MPI_VARIANTS: [(&str, Option<(u32, u64)>); 5] = [
    ("default", None),
    ("pipeline", Some((3, 32 << 10))),
    ("chain", Some((2, 32 << 10))),
    ("binomial", Some((6, 32 << 10))),
    ("scatter_allgather_ring", Some((9, 0))),
];

/// MPI_Bcast variants of the racks experiment (its chain left out: each
/// point takes over a minute there).
const RACKS_MPI_VARIANTS: [(&str, Option<(u32, u64)>); 4] = [
    ("default", None),
    ("binomial", Some((6, 32 << 10))),
    ("scatter_allgather_ring", Some((9, 0))),
    ("pipeline", Some((3, 32 << 10))),
];

/// A tc rate that is `rate` × `num` / `den`, in kbit (`250mbit` × 1/4 =
/// `62500kbit`).
pub(super) fn scaled_rate(rate: &str, num: u64, den: u64) -> String {
    let kbit = rate_bytes_per_second(rate) * 8.0 / 1e3;
    format!("{}kbit", (kbit * num as f64 / den as f64).round() as u64)
}

/// Ranks dealt across `racks` racks of consecutive lab hosts: rank `r` on
/// the `r / racks`-th host of rack `r mod racks` (h0, h8, h1, h9, ... for
/// 16 hosts in 2 racks), as a placement service hands hosts out.
pub(super) fn interleaved_hosts(hosts: usize, racks: usize) -> Vec<usize> {
    let per_rack = hosts / racks;
    (0..hosts)
        .map(|r| (r % racks) * per_rack + r / racks)
        .collect()
}

/// Per run, the latest fast receiver's time and the slow one's, from each
/// receiver's time (index = rank, rank 0 the root, left out).
pub(super) fn fast_and_slow(per_rank: &[f64], slow: usize) -> (f64, f64) {
    let fast = per_rank
        .iter()
        .enumerate()
        .filter(|&(r, _)| r != 0 && r != slow)
        .map(|(_, &t)| t)
        .fold(f64::NAN, f64::max);
    (fast, per_rank.get(slow).copied().unwrap_or(f64::NAN))
}

/// Median, smallest and largest.
fn spread(samples: &[f64]) -> Value {
    json!({
        "median": median(samples),
        "min": samples.iter().copied().fold(f64::INFINITY, f64::min),
        "max": samples.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        "all": samples,
    })
}

impl Run<'_> {
    /// The experiments that bring up labs of their own, after the others.
    pub(super) fn on_own_labs(&mut self, netlab: &Path) -> Result<(), String> {
        if self.plan.has(Experiment::SlowHost) {
            self.slow_host(netlab)?;
        }
        if self.plan.has(Experiment::Racks) {
            self.racks(netlab)?;
        }
        if self.plan.has(Experiment::Validate) {
            self.validation_predictions()?;
        }
        if self.plan.has(Experiment::Allreduce) {
            self.allreduce()?;
        }
        if self.plan.has(Experiment::FileToFile) {
            self.file_to_file(netlab)?;
        }
        if self.plan.has(Experiment::Push) {
            self.push(netlab)?;
        }
        Ok(())
    }

    pub(super) fn own_runs(&self) -> (usize, usize) {
        (
            self.args.runs.unwrap_or(3).max(1),
            self.args.warmup.unwrap_or(1),
        )
    }

    /// A unicast between lab hosts `hosts` (two fast hosts of one rack);
    /// its median seconds, emitted as a record of `experiment`.
    pub(super) fn own_unicast(
        &mut self,
        experiment: &str,
        hosts: [usize; 2],
    ) -> Result<f64, String> {
        let (runs, warmup) = self.own_runs();
        let mut cluster = self.start_cluster_on(&hosts, "unicast", "tcp-copy", &[])?;
        let (record, _) = self.series(&mut cluster, SIZE, 1, runs, warmup)?;
        cluster.close()?;
        let seconds = record["seconds"].as_f64().unwrap_or(f64::NAN);
        self.emit(merge(
            json!({"experiment": experiment, "system": "unicast", "algorithm": "tcp-copy",
                   "nodes": HOSTS, "size": SIZE, "hosts": hosts, "ratio_to_unicast": 1.0}),
            record,
        ));
        Ok(seconds)
    }

    /// One rdmc algorithm with extra member options on lab hosts `hosts`:
    /// its series record and samples.
    fn own_rdmc(
        &mut self,
        hosts: &[usize],
        algorithm: &str,
        extra: &[String],
        what: &str,
        (runs, warmup): (usize, usize),
    ) -> Result<(Value, Vec<Sample>), String> {
        let mode = self.args.completion.clone();
        let mut options: Vec<String> = [
            "--json",
            "--bench",
            "--algorithm",
            algorithm,
            "--block-size",
            "auto",
            "--completion",
            &mode,
            "--failure-timeout",
            "10",
        ]
        .map(str::to_owned)
        .to_vec();
        options.extend_from_slice(extra);
        let label = format!("rdmc-{algorithm}-n{}-{what}", hosts.len());
        let mut cluster = self.start_cluster_on(hosts, &label, "member", &options)?;
        let measured = self.series(&mut cluster, SIZE, 1, runs, warmup)?;
        cluster.close()?;
        Ok(measured)
    }

    /// MPI_Bcast of [`SIZE`] with rank `r` on host `hosts[r]`: the record's
    /// fields and each run's per-rank times.
    fn own_mpi(
        &mut self,
        hosts: &[usize],
        forced: Option<(u32, u64)>,
        (runs, warmup): (usize, usize),
    ) -> Result<(Value, Vec<Vec<f64>>), String> {
        let script = self.args.scripts.join("mpi_netlab.sh");
        let before = CpuTimes::now();
        let shape = (hosts.len(), SIZE, runs, warmup);
        let result = mpi_bcast(&script, Some(hosts), &self.args.rate, shape, forced)?;
        let all = numbers(&result["all"]);
        let ranks: Vec<Vec<f64>> = result["ranks"]
            .as_array()
            .map(|a| a.iter().map(numbers).collect())
            .unwrap_or_default();
        let record = json!({
            "seconds": median(&all), "runs": all.len(), "all": all,
            "min": all.iter().copied().fold(f64::INFINITY, f64::min),
            "max": all.iter().copied().fold(0.0, f64::max),
            "block_size": forced.map(|f| f.1).filter(|&s| s > 0),
            "cpu_idle": CpuTimes::now().idle_since(&before),
            "rate": self.args.rate,
        });
        Ok((record, ranks))
    }

    /// 16 hosts, one at half rate both ways: every receiver's time per
    /// algorithm, the slow host unnamed and named, and MPI_Bcast's.
    fn slow_host(&mut self, netlab: &Path) -> Result<(), String> {
        let slow = self.args.slow_host;
        if slow == 0 || slow >= HOSTS {
            return Err(format!(
                "--slow-host must be a receiver, 1..{}, got {slow}",
                HOSTS - 1
            ));
        }
        let slow_rate = scaled_rate(&self.args.rate, 1, 2);
        let options = ["--slow".to_owned(), slow.to_string(), slow_rate.clone()];
        let lab = Lab::up_with(netlab, HOSTS, &self.args.rate, &options)?;
        let hosts: Vec<usize> = (0..HOSTS).collect();
        let fast_peer = if slow == 1 { 2 } else { 1 };
        let unicast = self.own_unicast("slow_host", [0, fast_peer])?;
        let facts = json!({"experiment": "slow_host", "nodes": HOSTS, "size": SIZE,
                           "slow_host": slow, "slow_rate": slow_rate});
        for algorithm in self.plan.slow_host_algorithms.clone() {
            for named in [false, true] {
                let extra = if named {
                    vec!["--slow".to_owned(), slow.to_string()]
                } else {
                    Vec::new()
                };
                let what = if named { "slow-named" } else { "slow-unnamed" };
                let runs = self.own_runs();
                let (record, samples) = self.own_rdmc(&hosts, algorithm, &extra, what, runs)?;
                let per_run: Vec<Vec<f64>> = samples.iter().map(Sample::per_receiver).collect();
                let fields = slow_fields(&per_run, slow, unicast);
                self.emit(merge(
                    merge(
                        merge(
                            facts.clone(),
                            json!({"system": "rdmc", "algorithm": algorithm,
                                   "slow_named": named, "unicast_seconds": unicast}),
                        ),
                        record,
                    ),
                    fields,
                ));
            }
        }
        if !self.args.no_mpi {
            for (name, forced) in MPI_VARIANTS {
                let runs = self.own_runs();
                let (record, per_run) = self.own_mpi(&hosts, forced, runs)?;
                let fields = slow_fields(&per_run, slow, unicast);
                self.emit(merge(
                    merge(
                        merge(
                            facts.clone(),
                            json!({"system": "mpi", "algorithm": name, "slow_named": false,
                                   "unicast_seconds": unicast}),
                        ),
                        record,
                    ),
                    fields,
                ));
            }
        }
        drop(lab);
        Ok(())
    }

    /// Two racks of 8 behind an uplink at a quarter of a host link, members
    /// listed interleaved: the hybrid (told the racks), the flat binomial
    /// pipeline and chain (those of the plan), MPI_Bcast with the same rank
    /// order.
    fn racks(&mut self, netlab: &Path) -> Result<(), String> {
        let uplink = scaled_rate(&self.args.rate, 1, 4);
        let options = [
            "--racks".to_owned(),
            "2".to_owned(),
            "--uplink".to_owned(),
            uplink.clone(),
        ];
        let lab = Lab::up_with(netlab, HOSTS, &self.args.rate, &options)?;
        let hosts = interleaved_hosts(HOSTS, 2);
        // Two hosts of rack 0: a unicast at the host rate.
        let unicast = self.own_unicast("racks", [0, 1])?;
        let bound = 4.0 * unicast;
        let facts = json!({"experiment": "racks", "nodes": HOSTS, "size": SIZE, "racks": 2,
                           "uplink": uplink, "order": "interleaved", "hosts": hosts,
                           "unicast_seconds": unicast, "uplink_bound_seconds": bound});
        let ratios = |seconds: f64| json!({"ratio_to_unicast": seconds / unicast, "ratio_to_bound": seconds / bound});
        // Points expected to take over a minute (about 32 x unicast: the
        // interleaved chain, and MPI's algorithms, whose neighbours in rank
        // order sit in different racks) are measured once without a
        // warm-up, to keep the lab's turn under 15 minutes.
        let long = (1, 0);
        for algorithm in self.plan.racks_algorithms.clone() {
            let (extra, runs) = match algorithm {
                "hybrid" => (vec!["--racks".to_owned(), "2".to_owned()], self.own_runs()),
                "chain" => (Vec::new(), long),
                _ => (Vec::new(), self.own_runs()),
            };
            let what = "racks2-interleaved";
            let (record, _) = self.own_rdmc(&hosts, algorithm, &extra, what, runs)?;
            let seconds = record["seconds"].as_f64().unwrap_or(f64::NAN);
            let told = !extra.is_empty();
            self.emit(merge(
                merge(
                    merge(
                        facts.clone(),
                        json!({"system": "rdmc", "algorithm": algorithm, "told_racks": told}),
                    ),
                    record,
                ),
                ratios(seconds),
            ));
        }
        if !self.args.no_mpi {
            for (name, forced) in RACKS_MPI_VARIANTS {
                let (record, _) = self.own_mpi(&hosts, forced, long)?;
                let seconds = record["seconds"].as_f64().unwrap_or(f64::NAN);
                self.emit(merge(
                    merge(
                        merge(facts.clone(), json!({"system": "mpi", "algorithm": name})),
                        record,
                    ),
                    ratios(seconds),
                ));
            }
        }
        drop(lab);
        Ok(())
    }
}

/// The slow-host fields of a record from each run's per-rank times: the
/// latest fast receiver and the slow one, medians with range, and their
/// ratios to `unicast`; every rank's median too.
pub(super) fn slow_fields(per_run: &[Vec<f64>], slow: usize, unicast: f64) -> Value {
    let (fast, slow_times): (Vec<f64>, Vec<f64>) =
        per_run.iter().map(|r| fast_and_slow(r, slow)).unzip();
    let ranks = per_run.iter().map(Vec::len).max().unwrap_or(0);
    let per_rank: Vec<f64> = (0..ranks)
        .map(|k| {
            median(
                &per_run
                    .iter()
                    .filter_map(|r| r.get(k).copied())
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    json!({
        "fast": spread(&fast),
        "slow": spread(&slow_times),
        "fast_ratio": median(&fast) / unicast,
        "slow_ratio": median(&slow_times) / unicast,
        "per_rank_seconds": per_rank,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_hosts_alternate_racks() {
        assert_eq!(interleaved_hosts(4, 2), vec![0, 2, 1, 3]);
        let hosts = interleaved_hosts(16, 2);
        assert_eq!(&hosts[..4], &[0, 8, 1, 9]);
        let mut sorted = hosts.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..16).collect::<Vec<_>>());
        // Rank r is in rack r mod 2 (what `rdmc member --racks 2` assumes).
        for (r, h) in hosts.iter().enumerate() {
            assert_eq!(h / 8, r % 2);
        }
    }

    #[test]
    fn rates_scale_in_kbit() {
        assert_eq!(scaled_rate("250mbit", 1, 4), "62500kbit");
        assert_eq!(scaled_rate("250mbit", 1, 2), "125000kbit");
        assert_eq!(scaled_rate("1gbit", 1, 4), "250000kbit");
    }

    #[test]
    fn fast_and_slow_leave_out_the_root() {
        let (fast, slow) = fast_and_slow(&[9.0, 1.0, 3.0, 2.0], 2);
        assert_eq!((fast, slow), (2.0, 3.0));
        let (fast, slow) = fast_and_slow(&[f64::NAN, 1.5, 4.0], 2);
        assert_eq!((fast, slow), (1.5, 4.0));
    }

    #[test]
    fn slow_fields_take_medians_over_runs() {
        let runs = vec![
            vec![0.0, 1.0, 4.0, 1.2],
            vec![0.0, 1.1, 4.4, 1.0],
            vec![0.0, 1.3, 5.0, 1.0],
        ];
        let f = slow_fields(&runs, 2, 1.0);
        assert_eq!(f["fast"]["median"], 1.2);
        assert_eq!(f["fast"]["min"], 1.1);
        assert_eq!(f["fast"]["max"], 1.3);
        assert_eq!(f["slow"]["median"], 4.4);
        assert_eq!(f["slow_ratio"], 4.4);
        assert_eq!(f["per_rank_seconds"][1], 1.1);
    }
}
