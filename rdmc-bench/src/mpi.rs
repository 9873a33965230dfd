//! MPI's side of a run: `mpi_netlab.sh --existing` (MPI_Bcast through
//! `mpi_bcast.c`, one rank per host of the lab that is up) in each of its
//! modes, and its JSON line.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

/// `bash mpi_netlab.sh --existing --timeout 900`, forced to MPI_Bcast
/// algorithm and segment size `forced` if given: what every mode starts with.
fn mpi_netlab(script: &Path, forced: Option<(u32, u64)>) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(script).arg("--existing").args(["--timeout", "900"]);
    if let Some((algorithm, segsize)) = forced {
        cmd.args(["--algorithm", &algorithm.to_string()]);
        cmd.args(["--segsize", &segsize.to_string()]);
    }
    cmd
}

/// What one MPI measurement runs: group size, message size in bytes,
/// measured runs, warm-up runs.
pub(crate) type Shape = (usize, u64, usize, usize);

/// Run `mpi_netlab.sh --existing` (MPI_Bcast from rank 0, `shape`'s runs)
/// with rank `r` on lab host `hosts[r]` if given (`--order`), forced to an
/// algorithm if given; mpi_bcast's JSON line.
pub(crate) fn mpi_bcast(
    script: &Path,
    hosts: Option<&[usize]>,
    rate: &str,
    shape: Shape,
    forced: Option<(u32, u64)>,
) -> Result<Value, String> {
    let mut cmd = mpi_netlab(script, forced);
    if let Some(hosts) = hosts {
        let order: Vec<String> = hosts.iter().map(usize::to_string).collect();
        cmd.args(["--order", &order.join(" ")]);
    }
    run_mpi(cmd, script, rate, shape)
}

/// Run `mpi_netlab.sh --existing --overlap MESSAGES`: every rank the root
/// of its own communicator, `messages` rounds of MPI_Ibcast on all of them
/// at once; mpi_bcast's JSON line.
pub(crate) fn mpi_overlap(
    script: &Path,
    rate: &str,
    shape: Shape,
    messages: usize,
) -> Result<Value, String> {
    let mut cmd = mpi_netlab(script, None);
    cmd.args(["--overlap", &messages.to_string()]);
    run_mpi(cmd, script, rate, shape)
}

/// Run `mpi_netlab.sh --existing --burst BURST`: `shape`'s runs, each a
/// burst of `burst` MPI_Bcast from rank 0 back to back, after one warm-up,
/// forced to an algorithm if given; mpi_bcast's JSON line (each run's
/// seconds).
pub(crate) fn mpi_burst(
    script: &Path,
    rate: &str,
    (nodes, size, runs): (usize, u64, usize),
    burst: u64,
    forced: Option<(u32, u64)>,
) -> Result<Value, String> {
    let mut cmd = mpi_netlab(script, forced);
    cmd.args(["--burst", &burst.to_string()]);
    run_mpi(cmd, script, rate, (nodes, size, runs, 1))
}

/// The Cosmos-like trace's `workload` file under MPI (`mpi_bcast --cosmos`)
/// on the lab that is up: its JSON line (span and every write's latency).
pub(crate) fn mpi_cosmos(
    script: &Path,
    nodes: usize,
    rate: &str,
    workload: &Path,
) -> Result<Value, String> {
    let mut cmd = mpi_netlab(script, None);
    cmd.arg("--cosmos").arg(workload);
    run_mpi(cmd, script, rate, (nodes, 0, 1, 0))
}

/// Finish `cmd` (mpi_netlab.sh and its options) with the positional
/// arguments, run it and parse its JSON line.
fn run_mpi(mut cmd: Command, script: &Path, rate: &str, shape: Shape) -> Result<Value, String> {
    let (nodes, size, runs, warmup) = shape;
    cmd.args([
        nodes.to_string(),
        rate.to_owned(),
        size.to_string(),
        runs.to_string(),
        warmup.to_string(),
    ]);
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().rev().find(|l| l.starts_with('{'));
    match (out.status.success(), line) {
        (true, Some(line)) => {
            serde_json::from_str(line).map_err(|e| format!("mpi_bcast printed {line:?}: {e}"))
        }
        _ => Err(format!(
            "mpi_netlab.sh failed ({}) for {nodes} nodes, {size} bytes",
            out.status
        )),
    }
}
