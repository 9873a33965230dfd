//! `--only file-to-file`: the path users run. One file from the root's disk
//! to every receiver's disk with plain `rdmc member FILE` / `rdmc member
//! --out DIR` (the members' defaults: the binomial pipeline, automatic
//! block size, adaptive completions), a fresh set of processes per run as an
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

use super::topologies::{scaled_rate, slow_fields};
use super::{Run, merge};
use crate::lab::{Cluster, CpuTimes, Lab};
use crate::plan::TOPOLOGY_SIZE as SIZE;
use rdmc_cli::report::median;

/// Hosts of the experiment.
const HOSTS: usize = 16;
/// Runs of the disk's bound (medians of these).
const DISK_RUNS: usize = 3;

impl Run<'_> {
    /// The file-to-file experiment on two labs of its own.
    pub(super) fn file_to_file(&mut self, netlab: &Path) -> Result<(), String> {
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
                "seconds": median(&all), "runs": all.len(), "all": all,
                "min": all.iter().copied().fold(f64::INFINITY, f64::min),
                "max": all.iter().copied().fold(0.0, f64::max),
                "cpu_idle": CpuTimes::now().idle_since(&before), "rate": self.args.rate,
            });
            record = merge(record, fields);
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
        drop_cached(source).map_err(|e| format!("dropping {}'s cache: {e}", source.display()))?;
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
    let errno = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
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
