//! `--only allreduce`: rdmc's allreduce (its pipelined tree, its ring and
//! its recursive halving and doubling)
//! against every one of Open MPI's MPI_Allreduce algorithms, forced in
//! turn, and its default rules, in the same lab, at each group size. Each
//! group size runs `scripts/allreduce_netlab.sh` (which brings up a lab of
//! its own, runs one `rdmc-bench allreduce-member` per host, then
//! `mpi_allreduce` through `mpi_netlab.sh`) and takes its JSON lines.

use std::path::Path;

use serde_json::{Value, json};

use super::{Run, numbers};
use crate::lab::lab_script;
use rdmc_cli::report::median;

/// Group sizes measured unless `--nodes` says otherwise.
pub(super) const NODES: [usize; 2] = [8, 16];
/// Bytes of f32 reduced: 1 MiB, the size the papers' comparison uses.
pub(super) const SIZE: u64 = 1 << 20;

/// Open MPI's `coll_tuned_allreduce_algorithm` numbers and their names.
pub(super) const MPI_ALGORITHMS: [(u32, &str); 7] = [
    (0, "default"),
    (1, "basic_linear"),
    (2, "nonoverlapping"),
    (3, "recursive_doubling"),
    (4, "ring"),
    (5, "segmented_ring"),
    (6, "rabenseifner"),
];

/// Open MPI's name for allreduce algorithm `number`.
fn mpi_name(number: u64) -> &'static str {
    MPI_ALGORITHMS
        .iter()
        .find(|(n, _)| u64::from(*n) == number)
        .map_or("unknown", |(_, name)| name)
}

/// The records of one group size, as the script printed them, made
/// uniform: MPI's algorithm number becomes its name (the number kept as
/// `mpi_algorithm`), each record gets its range and its ratio to the best
/// MPI algorithm of the same run (`ratio_to_best_mpi`). Lines that are not
/// JSON objects are left out.
pub(super) fn normalize(lines: &str) -> Vec<Value> {
    let mut records: Vec<Value> = lines
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
        .collect();
    for r in &mut records {
        if let Some(number) = r["algorithm"].as_u64() {
            r["mpi_algorithm"] = json!(number);
            r["algorithm"] = json!(mpi_name(number));
        }
        let all = numbers(&r["all"]);
        if !all.is_empty() {
            r["seconds"] = json!(median(&all));
            r["min"] = json!(all.iter().copied().fold(f64::INFINITY, f64::min));
            r["max"] = json!(all.iter().copied().fold(f64::NEG_INFINITY, f64::max));
        }
    }
    let best_mpi = records
        .iter()
        .filter(|r| r["system"] == "mpi" && r["exact"] != false)
        .filter_map(|r| r["seconds"].as_f64())
        .filter(|s| *s > 0.0)
        .fold(f64::INFINITY, f64::min);
    if best_mpi.is_finite() {
        for r in &mut records {
            if let Some(s) = r["seconds"].as_f64() {
                r["ratio_to_best_mpi"] = json!(s / best_mpi);
            }
        }
    }
    records
}

impl Run<'_> {
    /// Allreduce of [`SIZE`] bytes of f32 at each group size, rdmc's tree,
    /// ring and halving, then MPI's algorithms, each group size on a lab of its own.
    pub(super) fn allreduce(&mut self) -> Result<(), String> {
        let script = self.args.scripts.join("allreduce_netlab.sh");
        let exe = std::env::current_exe().map_err(|e| format!("finding rdmc-bench itself: {e}"))?;
        let runs = self.args.runs.unwrap_or(5).max(1);
        let warmup = self.args.warmup.unwrap_or(1);
        let nodes: Vec<usize> = if self.args.nodes.is_empty() {
            NODES.to_vec()
        } else {
            self.args.nodes.clone()
        };
        for n in nodes {
            let out = self.logs.join(format!("allreduce-n{n}.jsonl"));
            let _ = std::fs::remove_file(&out);
            let log = self.logs.join(format!("allreduce-n{n}.log"));
            let stderr = std::fs::File::create(&log)
                .map_err(|e| format!("creating {}: {e}", log.display()))?;
            eprintln!("rdmc-bench: allreduce, {n} members, {SIZE} bytes of f32");
            let status = lab_script(&script)
                .args([
                    n.to_string(),
                    self.args.rate.clone(),
                    SIZE.to_string(),
                    runs.to_string(),
                    warmup.to_string(),
                ])
                .arg(&out)
                // rdmc's members wait for completions as the run's other
                // members do (`--completion`; MPI's ranks poll, yielding).
                .args(["--completion", self.args.completion.as_str()])
                .args(["--wire-security", self.args.wire_security.as_str()])
                .env("RDMC_BENCH", &exe)
                .env("RDMC", &self.rdmc)
                .stdout(std::process::Stdio::null())
                .stderr(stderr)
                .status()
                .map_err(|e| format!("running {}: {e}", script.display()))?;
            if !status.success() {
                return Err(format!(
                    "allreduce at {n} members failed ({status}); see {}",
                    log.display()
                ));
            }
            let lines = read(&out)?;
            let records = normalize(&lines);
            if !records.iter().any(|r| r["system"] == "rdmc") {
                return Err(format!(
                    "allreduce at {n} members: no rdmc record in {}",
                    out.display()
                ));
            }
            if let Some(bad) = records.iter().find(|r| r["exact"] == false) {
                return Err(format!("allreduce at {n} members: inexact result: {bad}"));
            }
            for record in records {
                self.emit(record);
            }
        }
        Ok(())
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn mpi_numbers_become_names_and_ratios_use_the_best_exact_mpi() {
        let lines = r#"{"system":"rdmc","experiment":"allreduce","nodes":8,"algorithm":"ring","all":[0.07,0.066,0.068],"seconds":0.068,"exact":true}
not json
{"system":"mpi","experiment":"allreduce","nodes":8,"algorithm":5,"all":[0.061,0.060,0.08],"seconds":0.061,"exact":true}
{"system":"mpi","experiment":"allreduce","nodes":8,"algorithm":3,"all":[0.02],"seconds":0.02,"exact":false}
{"system":"mpi","experiment":"allreduce","nodes":8,"algorithm":0,"all":[0.1,0.12,0.09],"seconds":0.1,"exact":true}"#;
        let records = normalize(lines);
        assert_eq!(records.len(), 4);
        assert_eq!(records[1]["algorithm"], "segmented_ring");
        assert_eq!(records[1]["mpi_algorithm"], 5);
        assert_eq!(records[3]["algorithm"], "default");
        assert_eq!(records[0]["min"], 0.066);
        assert_eq!(records[0]["max"], 0.07);
        let ratio = records[0]["ratio_to_best_mpi"].as_f64().unwrap();
        assert!((ratio - 0.068 / 0.061).abs() < 1e-12, "{ratio}");
        // The inexact MPI run is no baseline.
        let own = records[1]["ratio_to_best_mpi"].as_f64().unwrap();
        assert!((own - 1.0).abs() < 1e-12, "{own}");
    }
}
