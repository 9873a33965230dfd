//! The experiments on labs of their own: one slow host among 16
//! (`--only slow-host`) and two racks behind a quarter-rate uplink with the
//! members listed interleaved (`--only racks`), each with a unicast between
//! two fast hosts of the same rack and MPI_Bcast in the same run; and one
//! file from disk to disk (`--only file-to-file`, module `files`), on a lab
//! of all fast hosts and one with a slow host.

use std::path::Path;

use serde_json::{Value, json};

use super::{Run, merge, numbers, rate_bytes_per_second, seconds_of_runs};
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
        let record = merge(
            seconds_of_runs(&all),
            json!({
                "block_size": forced.map(|f| f.1).filter(|&s| s > 0),
                "cpu_idle": CpuTimes::now().idle_since(&before),
                "rate": self.args.rate,
            }),
        );
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

mod files {
    //! `--only file-to-file`: the path users run. One file from the root's disk
    //! to every receiver's disk with plain `rdmc member FILE` / `rdmc member
    //! --out DIR` (the members' defaults: the binomial pipeline, automatic
    //! block size, interrupt completions), a fresh set of processes per run as an
    //! operator starts them; a receiver's time ends when it reports the
    //! delivery, which it does only once the file is complete, flushed to disk
    //! (`fsync`) and renamed into place. 16 hosts, then 16 hosts with one at
    //! half rate named to the members (`--slow`), each beside a unicast between
    //! two fast hosts in the same lab; and the disk's own bound: the receivers'
    //! copies written and flushed at once, without a network.

    use std::io::Write as _;
    use std::os::fd::AsRawFd as _;
    use std::path::{Path, PathBuf};
    use std::time::{Duration, Instant};

    use serde_json::json;

    use super::super::{Run, merge, seconds_of_runs};
    use super::{scaled_rate, slow_fields};
    use crate::lab::{Cluster, CpuTimes, Lab};
    use crate::plan::TOPOLOGY_SIZE as SIZE;
    use rdmc_cli::report::median;

    /// Hosts of the experiment.
    const HOSTS: usize = 16;
    /// Runs of the disk's bound (medians of these).
    const DISK_RUNS: usize = 3;

    impl Run<'_> {
        /// The file-to-file experiment on two labs of its own.
        pub(in crate::measure) fn file_to_file(&mut self, netlab: &Path) -> Result<(), String> {
            let slow = self.args.slow_host;
            if slow == 0 || slow >= HOSTS {
                return Err(format!(
                    "--slow-host must be a receiver, 1..{}, got {slow}",
                    HOSTS - 1
                ));
            }
            let dir = self.args.out.join("file-to-file");
            let payload = rdmc_cli::bench_protocol::payload(SIZE as usize);
            let source = dir.join("source.bin");
            write_synced(&source, &payload)
                .map_err(|e| format!("writing {}: {e}", source.display()))?;
            let (disk, disk_cpu) = disk_bound(&dir, HOSTS - 1, &payload)?;
            let slow_rate = scaled_rate(&self.args.rate, 1, 2);
            for slow_host in [None, Some(slow)] {
                let options = match slow_host {
                    Some(s) => vec!["--slow".to_owned(), s.to_string(), slow_rate.clone()],
                    None => Vec::new(),
                };
                let lab = Lab::up_with(netlab, HOSTS, &self.args.rate, &options)?;
                let fast_peer = if slow == 1 { 2 } else { 1 };
                let unicast = self.own_unicast("file_to_file", [0, fast_peer])?;
                let runs = self.args.runs.unwrap_or(5).max(1);
                let warmup = self.args.warmup.unwrap_or(1);
                let mut per_run = Vec::with_capacity(runs);
                let before = CpuTimes::now();
                for run in 0..runs + warmup {
                    let times = self.one_file_run(&dir, (&source, &payload), slow_host)?;
                    if run >= warmup {
                        per_run.push(times);
                    }
                }
                let fields = slow_fields(&per_run, slow_host.unwrap_or(0), unicast);
                let all: Vec<f64> = per_run
                    .iter()
                    .map(|r| r.iter().copied().skip(1).fold(f64::NAN, f64::max))
                    .collect();
                let mut record = json!({
                    "experiment": "file_to_file", "system": "rdmc",
                    "algorithm": "binomial-pipeline", "nodes": HOSTS, "size": SIZE,
                    "slow_host": slow_host, "slow_named": slow_host.is_some(),
                    "slow_rate": slow_host.map(|_| slow_rate.clone()),
                    "unicast_seconds": unicast, "disk_seconds": disk, "disk_cpu_seconds": disk_cpu,
                    "cpu_idle": CpuTimes::now().idle_since(&before), "rate": self.args.rate,
                });
                record = merge(merge(record, seconds_of_runs(&all)), fields);
                if slow_host.is_none()
                    && let Some(fields) = record.as_object_mut()
                {
                    for key in ["slow", "slow_ratio"] {
                        fields.remove(key);
                    }
                }
                self.emit(record);
                drop(lab);
            }
            let _ = std::fs::remove_dir_all(&dir);
            Ok(())
        }

        /// One run: fresh members, the root sending `source` (its page cache
        /// dropped first, so the file comes from the disk), each receiver
        /// writing into a directory of its own; each rank's seconds from the
        /// root's start (before it reads the file) to its delivery (NaN for the
        /// root), every copy checked against `payload` and removed.
        fn one_file_run(
            &mut self,
            dir: &Path,
            (source, payload): (&Path, &[u8]),
            slow: Option<usize>,
        ) -> Result<Vec<f64>, String> {
            let outs: Vec<PathBuf> = (0..HOSTS).map(|r| dir.join(format!("r{r}"))).collect();
            for out in &outs {
                let _ = std::fs::remove_dir_all(out);
            }
            drop_cached(source)
                .map_err(|e| format!("dropping {}'s cache: {e}", source.display()))?;
            let mut common = vec![
                "--json".to_owned(),
                "--failure-timeout".to_owned(),
                "10".to_owned(),
            ];
            if let Some(s) = slow {
                common.extend(["--slow".to_owned(), s.to_string()]);
            }
            let per_rank = |rank: usize| -> Vec<String> {
                let mut args = common.clone();
                if rank == 0 {
                    args.push(source.display().to_string());
                } else {
                    args.extend(["--out".to_owned(), outs[rank].display().to_string()]);
                }
                args
            };
            let hosts: Vec<usize> = (0..HOSTS).collect();
            let what = format!(
                "file-to-file-n{HOSTS}{}",
                if slow.is_some() { "-slow" } else { "" }
            );
            let cluster: Cluster = self.start_cluster_with(&hosts, &what, "member", &per_rank)?;
            let events = cluster.run_to_close(Duration::from_secs(300))?;
            let t_of = |rank: usize, kind: &str| {
                events
                    .iter()
                    .find(|(r, e)| *r == rank && e["event"] == kind && e["seq"] == 0)
                    .and_then(|(_, e)| e["t"].as_u64())
            };
            let t0 = t_of(0, "sending").ok_or("the root did not report sending")?;
            let mut times = vec![f64::NAN; HOSTS];
            for (rank, time) in times.iter_mut().enumerate().skip(1) {
                let t1 = t_of(rank, "delivered").ok_or(format!("rank {rank} did not deliver"))?;
                *time = t1.saturating_sub(t0) as f64 / 1e9;
                let copy = outs[rank].join("0.bin");
                let got = std::fs::read(&copy).map_err(|e| format!("{}: {e}", copy.display()))?;
                if got != payload {
                    return Err(format!("{}: differs from the source", copy.display()));
                }
            }
            for out in &outs {
                let _ = std::fs::remove_dir_all(out);
            }
            Ok(times)
        }
    }

    /// Write `data` to a new file at `path` and flush it to disk.
    fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut file = std::fs::File::create(path)?;
        file.write_all(data)?;
        file.sync_all()
    }

    /// Drop `path`'s pages from the page cache (it is flushed already), so the
    /// next reader reads the disk.
    fn drop_cached(path: &Path) -> std::io::Result<()> {
        let file = std::fs::File::open(path)?;
        // SAFETY: the descriptor is `file`'s, open for the call.
        #[allow(unsafe_code)]
        let errno =
            unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        match errno {
            0 => Ok(()),
            errno => Err(std::io::Error::from_raw_os_error(errno)),
        }
    }

    /// The disk's bound: seconds for `copies` threads to each write `data` to a
    /// file of their own and flush it, all at once, and the machine's CPU
    /// seconds that took (the writers' and the kernel's writeback, which the
    /// lab's hosts share with the network); medians of [`DISK_RUNS`].
    fn disk_bound(dir: &Path, copies: usize, data: &[u8]) -> Result<(f64, f64), String> {
        let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
        let mut samples = Vec::with_capacity(DISK_RUNS);
        let mut cpu = Vec::with_capacity(DISK_RUNS);
        for _ in 0..DISK_RUNS {
            let before = CpuTimes::now();
            let paths: Vec<PathBuf> = (0..copies)
                .map(|i| dir.join(format!("disk-{i}.bin")))
                .collect();
            let start = Instant::now();
            std::thread::scope(|s| {
                let writers: Vec<_> = paths
                    .iter()
                    .map(|p| s.spawn(|| write_synced(p, data)))
                    .collect();
                writers.into_iter().try_for_each(|w| {
                    w.join()
                        .unwrap_or_else(|_| Err(std::io::Error::other("panicked")))
                })
            })
            .map_err(|e| format!("measuring the disk in {}: {e}", dir.display()))?;
            let seconds = start.elapsed().as_secs_f64();
            samples.push(seconds);
            let idle = CpuTimes::now().idle_since(&before).unwrap_or(f64::NAN);
            cpu.push((1.0 - idle) * cores * seconds);
            for path in &paths {
                let _ = std::fs::remove_file(path);
            }
        }
        Ok((median(&samples), median(&cpu)))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_dropped_cache_leaves_the_file_whole() {
            let dir = std::env::temp_dir().join(format!("rdmc-bench-files-{}", std::process::id()));
            let path = dir.join("f.bin");
            write_synced(&path, b"some bytes").unwrap();
            drop_cached(&path).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), b"some bytes");
            let (seconds, cpu) = disk_bound(&dir, 2, &[7u8; 4096]).unwrap();
            assert!(seconds > 0.0 && seconds.is_finite(), "{seconds}");
            // Too short for the CPU counters to tick: unknown (NaN), never negative.
            assert!(cpu.is_nan() || cpu >= 0.0, "{cpu}");
            assert_eq!(
                std::fs::read_dir(&dir).unwrap().count(),
                1,
                "the disk files are removed"
            );
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
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
