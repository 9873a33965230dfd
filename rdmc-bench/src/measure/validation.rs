//! `--only validate`: the lab against `rdmc simulate`. On labs of 2, 4, 8
//! and 16 hosts: the one-way latency (ping), a unicast, the chain and the
//! binomial pipeline at 8 MiB and 256 MiB; then the simulator's prediction
//! of the same cases on the lab's parameters (its rate, the measured
//! latency, the library's automatic block size) in both send-completion
//! models, each next to what the lab measured.

use std::process::Command;

use serde_json::{Value, json};

use super::{Run, merge};
use crate::lab::Lab;
use crate::plan::{VALIDATION_LARGEST as LARGEST, VALIDATION_NODES as NODES};
use rdmc_cli::report::median;

/// Message sizes with (runs, warm-ups): a point of 8 MiB takes ~0.3 s, one
/// of 256 MiB ([`LARGEST`]) ~9 s.
const SIZES: [(u64, usize, usize); 2] = [(8 << 20, 5, 1), (LARGEST, 1, 1)];
/// The algorithms compared.
const ALGORITHMS: [&str; 2] = ["chain", "binomial-pipeline"];
/// The send-completion models: name and `rdmc simulate --send-buffer`.
const MODELS: [(&str, &str); 2] = [("sent", "0"), ("send-buffer-4MiB", "4MiB")];

/// ping's summary line `rtt min/avg/max/mdev = a/b/c/d ms`: (min, avg) in
/// seconds.
pub(super) fn parse_ping_rtt(output: &str) -> Option<(f64, f64)> {
    let line = output.lines().find(|l| l.contains("min/avg/max"))?;
    let values = line.split('=').nth(1)?.trim();
    let mut fields = values.split_whitespace().next()?.split('/');
    let min: f64 = fields.next()?.parse().ok()?;
    let avg: f64 = fields.next()?.parse().ok()?;
    Some((min / 1e3, avg / 1e3))
}

impl Run<'_> {
    /// The lab's side with `n` hosts.
    pub(super) fn validation_on(&mut self, n: usize) -> Result<(), String> {
        let ping = Command::new("ip")
            .args([
                "netns", "exec", "rdmc-h0", "ping", "-q", "-c", "50", "-i", "0.01",
            ])
            .arg(Lab::addr(1))
            .output()
            .map_err(|e| format!("running ping in the lab: {e}"))?;
        let text = String::from_utf8_lossy(&ping.stdout);
        let (min, avg) = parse_ping_rtt(&text).ok_or_else(|| {
            format!(
                "ping in the lab printed no round-trip times (is iputils-ping installed?): {} {}",
                text.trim(),
                String::from_utf8_lossy(&ping.stderr).trim()
            )
        })?;
        self.emit(
            json!({"experiment": "validation", "system": "ping", "algorithm": "icmp",
                         "nodes": n, "rtt_min_s": min, "rtt_avg_s": avg,
                         "one_way_s": avg / 2.0}),
        );
        let workloads: Vec<(u64, usize, usize)> = SIZES
            .iter()
            .map(|&(size, runs, warmup)| {
                (
                    size,
                    self.args.runs.unwrap_or(runs).max(1),
                    self.args.warmup.unwrap_or(warmup),
                )
            })
            .collect();
        let mut cluster = self.start_unicast()?;
        for &(size, runs, warmup) in &workloads {
            let (record, _) = self.series(&mut cluster, size, 1, runs, warmup)?;
            self.emit(merge(
                json!({"experiment": "validation", "system": "lab", "algorithm": "unicast",
                       "nodes": n, "size": size}),
                record,
            ));
        }
        cluster.close()?;
        for algorithm in ALGORITHMS {
            let mode = self.args.completion.clone();
            let mut cluster = self.start_rdmc(n, algorithm, None, &mode)?;
            for &(size, runs, warmup) in &workloads {
                let (record, _) = self.series(&mut cluster, size, 1, runs, warmup)?;
                self.emit(merge(
                    json!({"experiment": "validation", "system": "lab", "algorithm": algorithm,
                           "nodes": n, "size": size, "mode": mode}),
                    record,
                ));
            }
            cluster.close()?;
        }
        Ok(())
    }

    /// The simulator's side: every lab point predicted in both models, with
    /// the lab's median one-way latency, each next to the lab's measurement.
    pub(super) fn validation_predictions(&mut self) -> Result<(), String> {
        let lab: Vec<Value> = self
            .records
            .iter()
            .filter(|r| r["experiment"] == "validation")
            .cloned()
            .collect();
        let one_way: Vec<f64> = lab.iter().filter_map(|r| r["one_way_s"].as_f64()).collect();
        if one_way.is_empty() {
            return Err("validation: no latency was measured".into());
        }
        let latency_us = (median(&one_way) * 1e6).round().max(1.0) as u64;
        let nodes: Vec<String> = NODES.iter().map(usize::to_string).collect();
        for (size, _, _) in SIZES {
            for (model, buffer) in MODELS {
                let out = Command::new(&self.rdmc)
                    .args([
                        "simulate",
                        "--json",
                        "--algorithm",
                        "chain,binomial-pipeline",
                    ])
                    .args(["--nodes", &nodes.join(","), "--size", &size.to_string()])
                    .args(["--rate", &self.args.rate, "--latency"])
                    .arg(format!("{latency_us}us"))
                    .args(["--send-buffer", buffer])
                    .output()
                    .map_err(|e| format!("running rdmc simulate: {e}"))?;
                if !out.status.success() {
                    return Err(format!(
                        "rdmc simulate failed ({}): {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
                let text = String::from_utf8_lossy(&out.stdout);
                let predictions: Vec<Value> = text
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .filter(|v| v["experiment"] == "simulate")
                    .collect();
                for p in predictions {
                    for record in compare(&p, &lab, model, size, latency_us) {
                        self.emit(record);
                    }
                }
            }
        }
        Ok(())
    }
}

/// The comparison records of one prediction `p` (one algorithm, one group
/// size) with the lab's records: the algorithm and, once per model and
/// size, the unicast.
pub(super) fn compare(
    p: &Value,
    lab: &[Value],
    model: &str,
    size: u64,
    latency_us: u64,
) -> Vec<Value> {
    let n = p["nodes"].as_u64().unwrap_or(0);
    let measured = |algorithm: &str, nodes: Option<u64>| {
        lab.iter().find(|r| {
            r["system"] == "lab"
                && r["algorithm"] == algorithm
                && r["size"] == size
                && nodes.is_none_or(|k| r["nodes"] == k)
        })
    };
    let record = |algorithm: &str, predicted: f64, found: Option<&Value>, unicast: Option<f64>| {
        let seconds = found.and_then(|r| r["seconds"].as_f64());
        let lab_unicast = measured("unicast", Some(n)).and_then(|r| r["seconds"].as_f64());
        let predicted_ratio = unicast.map(|u| predicted / u);
        let measured_ratio = seconds.zip(lab_unicast).map(|(s, u)| s / u);
        json!({
            "experiment": "validation", "system": "sim", "algorithm": algorithm,
            "model": model, "nodes": n, "size": size, "latency_us": latency_us,
            "block_size": p["block_size"], "seconds": predicted,
            "measured_seconds": seconds,
            "error": seconds.map(|s| predicted / s - 1.0),
            "predicted_ratio": predicted_ratio, "measured_ratio": measured_ratio,
            "ratio_error": predicted_ratio.zip(measured_ratio).map(|(p, m)| p / m - 1.0),
            "measured_cpu_idle": found.and_then(|r| r["cpu_idle"].as_f64()),
        })
    };
    let unicast = p["unicast"].as_f64();
    let mut records = Vec::new();
    if let (Some(algorithm), Some(seconds)) = (p["algorithm"].as_str(), p["seconds"].as_f64()) {
        records.push(record(
            algorithm,
            seconds,
            measured(algorithm, Some(n)),
            unicast,
        ));
    }
    if let Some(u) = unicast
        && p["algorithm"] == "chain"
    {
        records.push(record("unicast", u, measured("unicast", Some(n)), Some(u)));
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_summaries_parse() {
        let text = "--- 10.77.0.2 ping statistics ---\n50 packets transmitted, 50 received, 0% packet loss, time 530ms\nrtt min/avg/max/mdev = 0.040/0.081/0.300/0.030 ms\n";
        let (min, avg) = parse_ping_rtt(text).unwrap();
        assert!((min - 40e-6).abs() < 1e-12);
        assert!((avg - 81e-6).abs() < 1e-12);
        assert_eq!(parse_ping_rtt("100% packet loss"), None);
        assert_eq!(parse_ping_rtt("rtt min/avg/max/mdev = x/y ms"), None);
    }

    #[test]
    fn predictions_meet_the_lab_point_of_the_same_case() {
        let lab = vec![
            json!({"experiment": "validation", "system": "lab", "algorithm": "chain",
                   "nodes": 4, "size": 8, "seconds": 2.0, "cpu_idle": 0.5}),
            json!({"experiment": "validation", "system": "lab", "algorithm": "chain",
                   "nodes": 8, "size": 8, "seconds": 9.0}),
            json!({"experiment": "validation", "system": "lab", "algorithm": "unicast",
                   "nodes": 4, "size": 8, "seconds": 1.6}),
        ];
        let p = json!({"algorithm": "chain", "nodes": 4, "seconds": 2.2, "unicast": 2.0});
        let r = compare(&p, &lab, "sent", 8, 40);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0]["measured_seconds"], 2.0);
        assert!((r[0]["error"].as_f64().unwrap() - 0.1).abs() < 1e-12);
        assert_eq!(r[0]["measured_cpu_idle"], 0.5);
        // Ratios: predicted 2.2 / 2.0, measured 2.0 / 1.6.
        let ratio_error = r[0]["ratio_error"].as_f64().unwrap();
        assert!((ratio_error - (1.1 / 1.25 - 1.0)).abs() < 1e-12);
        assert_eq!(r[1]["algorithm"], "unicast");
        assert!((r[1]["error"].as_f64().unwrap() - 0.25).abs() < 1e-12);
        // No lab point: the prediction stays, unmatched.
        let p = json!({"algorithm": "binomial-pipeline", "nodes": 4, "seconds": 3.0});
        let r = compare(&p, &lab, "sent", 8, 40);
        assert_eq!(r.len(), 1);
        assert!(r[0]["error"].is_null());
    }
}
