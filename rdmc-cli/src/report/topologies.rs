//! The report of the opt-in lab experiments: one slow host, two racks, and
//! the lab against the simulator (tables in `summary.md`, and one plot per
//! message size of predicted against measured seconds).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::style::BLACK;
use serde_json::Value;

use super::charts::{BarChart, COLORS, Line, LineChart, Stroke, draw_bar_chart, draw_line_chart};
use super::datasets::sorted_distinct;
use super::format::{percent, ratio, sig, size_label};
use super::markdown::{cell, header, push_table, spread_cell};
use super::records::{Rec, num, text};

/// `median (min–max)` of a `{median, min, max}` object, in seconds.
fn spread_of(v: &Value) -> String {
    spread_cell((num(v, "median"), num(v, "min"), num(v, "max")), |x| {
        sig(x, 3)
    })
}

/// A record's median seconds with its range.
fn seconds_cell(rec: &Rec<'_>) -> String {
    spread_cell((rec.seconds, rec.num("min"), rec.num("max")), |x| sig(x, 3))
}

fn of<'r, 'a>(recs: &'r [Rec<'a>], experiment: &str) -> Vec<&'r Rec<'a>> {
    recs.iter().filter(|r| r.experiment == experiment).collect()
}

/// Append the tables of the slow-host, racks and validation records; whether
/// there were any.
pub(super) fn push_topologies(out: &mut String, recs: &[Rec<'_>]) -> bool {
    let mut any = push_slow_host(out, recs);
    any |= push_file_to_file(out, recs);
    any |= push_push(out, recs);
    any |= push_racks(out, recs);
    any |= push_validation(out, recs);
    any
}

/// The records of `experiment`, and the one its heading describes (the
/// first that is not the unicast); none without records.
fn rows_and_first<'r, 'a>(
    recs: &'r [Rec<'a>],
    experiment: &str,
) -> Option<(Vec<&'r Rec<'a>>, &'r Rec<'a>)> {
    let rows = of(recs, experiment);
    let first = *rows
        .iter()
        .find(|r| r.system != "unicast")
        .or(rows.first())?;
    Some((rows, first))
}

/// A table of `rows` under `header`: each row's `cells`, then its runs and
/// the machine's CPU idle.
fn push_rows<const N: usize>(
    out: &mut String,
    header: &[String],
    rows: &[&Rec<'_>],
    cells: impl Fn(&Rec<'_>) -> [String; N],
) {
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| cells(r).into_iter().chain(runs_and_idle(r)).collect())
        .collect();
    push_table(out, header, &table);
}

/// A record's last two cells: its runs and the machine's CPU idle.
fn runs_and_idle(r: &Rec<'_>) -> [String; 2] {
    [
        cell(r.num("runs"), |x| format!("{x:.0}")),
        cell(r.num("cpu_idle"), percent),
    ]
}

fn push_slow_host(out: &mut String, recs: &[Rec<'_>]) -> bool {
    let Some((rows, first)) = rows_and_first(recs, "slow_host") else {
        return false;
    };
    let _ = writeln!(
        out,
        "## One slow host\n\n{} hosts, host {} at {} both ways, {}; times from the root's send \
         (MPI: from the barrier) to each receiver's delivery, medians over runs (range); ratios \
         to a unicast between two fast hosts in the same run.\n",
        first.nodes.unwrap_or(0),
        first.raw["slow_host"],
        text(first.raw, "slow_rate").unwrap_or("?"),
        size_label(first.size.unwrap_or(0)),
    );
    push_fast_and_slow(out, &rows);
    true
}

fn push_file_to_file(out: &mut String, recs: &[Rec<'_>]) -> bool {
    let Some((rows, first)) = rows_and_first(recs, "file_to_file") else {
        return false;
    };
    let _ = writeln!(
        out,
        "## From disk to disk\n\n{} hosts, one file of {} from the root's disk to every \
         receiver's disk with plain `rdmc member` (its defaults; fresh processes per run); \
         times from the root's start (before it reads the file) to each receiver's delivery, \
         reported once the file is flushed and renamed; medians over runs (range); ratios to a \
         unicast between two fast hosts of the same lab. The disk's own bound, {} receivers' \
         copies written and flushed at once: {} s, taking {} CPU-seconds of the cores the lab's \
         hosts share. With a slow host: host {} at {} both ways, named to the members.\n",
        first.nodes.unwrap_or(0),
        size_label(first.size.unwrap_or(0)),
        first.nodes.unwrap_or(1).saturating_sub(1),
        cell(first.num("disk_seconds"), |x| sig(x, 3)),
        cell(first.num("disk_cpu_seconds"), |x| sig(x, 2)),
        rows.iter()
            .find_map(|r| r.raw["slow_host"].as_u64())
            .unwrap_or(0),
        rows.iter()
            .find_map(|r| text(r.raw, "slow_rate"))
            .unwrap_or("?"),
    );
    push_fast_and_slow(out, &rows);
    true
}

/// The table of the slow-host and file-to-file records: each row's latest
/// fast receiver and slow one against the unicast.
fn push_fast_and_slow(out: &mut String, rows: &[&Rec<'_>]) {
    let header = header(
        "system | algorithm | slow host named | fast receivers' last (s) | × unicast | \
         slow receiver (s) | × unicast | runs | CPU idle",
    );
    push_rows(out, &header, rows, |r| {
        let unicast = r.system == "unicast";
        [
            r.system.to_owned(),
            r.algorithm.to_owned(),
            if unicast {
                String::new()
            } else {
                r.raw["slow_named"].as_bool().unwrap_or(false).to_string()
            },
            if unicast {
                seconds_cell(r)
            } else {
                spread_of(&r.raw["fast"])
            },
            cell(r.num("fast_ratio").or(unicast.then_some(1.0)), ratio),
            spread_of(&r.raw["slow"]),
            cell(r.num("slow_ratio"), ratio),
        ]
    });
}

/// Bytes in MiB with one decimal.
fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / f64::from(1u32 << 20))
}

fn push_push(out: &mut String, recs: &[Rec<'_>]) -> bool {
    let Some((rows, first)) = rows_and_first(recs, "push") else {
        return false;
    };
    let _ = writeln!(
        out,
        "## Push to 15 hosts\n\n{} hosts at {} each way; one tree of {} files, {} (one file \
         of {} and small files of 1–64 KiB, some mode 755), from host 0 to every other host \
         over real sshd ({}): `rdmc push --hosts` (ssh launch included), `pdcp -r -p` \
         (pdsh's ssh module, fanout 15), 15 `scp -r -p` at once, and one `scp -r -p` to one \
         host (the single host-to-host copy); seconds from the start to the exit (0 \
         required), medians over runs (range); every copy compared with the source (`diff \
         -r`, modes, sizes and mtimes).\n",
        first.nodes.unwrap_or(0),
        text(first.raw, "rate").unwrap_or("?"),
        first.raw["files"],
        mib(first.size.unwrap_or(0) as f64),
        mib(first.num("large_size").unwrap_or(0.0)),
        text(first.raw, "ssh").unwrap_or("ssh"),
    );
    let header = header(
        "system | command | receivers | seconds | × single copy | × rdmc push | runs | CPU idle",
    );
    push_rows(out, &header, &rows, |r| {
        [
            r.system.to_owned(),
            r.algorithm.to_owned(),
            cell(r.num("receivers"), |x| format!("{x:.0}")),
            seconds_cell(r),
            cell(r.num("ratio_to_single"), ratio),
            cell(r.num("ratio_to_rdmc"), ratio),
        ]
    });
    true
}

/// The push experiment's figure: each system's median seconds, the single
/// copy first; `None` without push records.
pub(super) fn push_plot(dir: &Path, recs: &[Rec<'_>]) -> anyhow::Result<Option<PathBuf>> {
    let Some((rows, first)) = rows_and_first(recs, "push") else {
        return Ok(None);
    };
    let chart = BarChart {
        title: format!(
            "Push of {} in {} files from one host to {} others",
            mib(first.size.unwrap_or(0) as f64),
            first.raw["files"],
            first.nodes.unwrap_or(1).saturating_sub(1),
        ),
        x_desc: "copy",
        y_desc: "seconds to every copy (median)",
        categories: rows.iter().map(|r| r.system.to_owned()).collect(),
        series: vec![(
            "seconds".to_owned(),
            rows.iter().map(|r| r.seconds).collect(),
        )],
    };
    let path = dir.join("push.svg");
    draw_bar_chart(&path, &chart)?;
    Ok(Some(path))
}

fn push_racks(out: &mut String, recs: &[Rec<'_>]) -> bool {
    let Some((rows, first)) = rows_and_first(recs, "racks") else {
        return false;
    };
    let _ = writeln!(
        out,
        "## Two racks\n\n{} hosts in {} racks, uplink at {} both ways, members listed \
         interleaved across the racks (MPI: the same rank order), {}; the uplink bound is the \
         message crossing the uplink once (4 × unicast at a quarter rate).\n",
        first.nodes.unwrap_or(0),
        first.raw["racks"],
        text(first.raw, "uplink").unwrap_or("?"),
        size_label(first.size.unwrap_or(0)),
    );
    let header =
        header("system | algorithm | seconds | × unicast | × uplink bound | runs | CPU idle");
    push_rows(out, &header, &rows, |r| {
        [
            r.system.to_owned(),
            r.algorithm.to_owned(),
            seconds_cell(r),
            cell(r.num("ratio_to_unicast"), ratio),
            cell(r.num("ratio_to_bound"), ratio),
        ]
    });
    true
}

/// The simulator's record of a case in a model.
fn prediction<'r, 'a>(
    sims: &[&'r Rec<'a>],
    algorithm: &str,
    nodes: u64,
    size: u64,
    model: &str,
) -> Option<&'r Rec<'a>> {
    sims.iter().copied().find(|r| {
        r.algorithm == algorithm
            && r.nodes == Some(nodes)
            && r.size == Some(size)
            && text(r.raw, "model") == Some(model)
    })
}

/// The models of the validation, as their records name them, in order.
fn models(sims: &[&Rec<'_>]) -> Vec<String> {
    let mut models: Vec<String> = Vec::new();
    for r in sims {
        if let Some(m) = text(r.raw, "model")
            && !models.iter().any(|k| k == m)
        {
            models.push(m.to_owned());
        }
    }
    models
}

fn push_validation(out: &mut String, recs: &[Rec<'_>]) -> bool {
    let all = of(recs, "validation");
    let lab: Vec<_> = all.iter().copied().filter(|r| r.system == "lab").collect();
    let sims: Vec<_> = all.iter().copied().filter(|r| r.system == "sim").collect();
    if lab.is_empty() {
        return false;
    }
    let latency = sims.first().and_then(|r| r.num("latency_us"));
    let _ = writeln!(
        out,
        "## The lab against the simulator\n\nLab: median seconds (range); simulator: its \
         prediction with the lab's rate and one-way latency ({} µs, ping) in each \
         send-completion model, and its difference from the lab (+: the model is slower). \
         CPU idle: the machine's during the lab's measurement.\n",
        cell(latency, |x| format!("{x:.0}")),
    );
    let models = models(&sims);
    let mut header = header("size | nodes | algorithm | lab (s) | lab × unicast");
    for m in &models {
        header.push(format!("sim {m} (s)"));
        header.push("difference".to_owned());
        header.push("× unicast".to_owned());
    }
    header.push("CPU idle".to_owned());
    let mut table = Vec::new();
    for size in sorted_distinct(lab.iter().filter_map(|r| r.size)) {
        for nodes in sorted_distinct(lab.iter().filter_map(|r| r.nodes)) {
            for r in lab
                .iter()
                .filter(|r| r.size == Some(size) && r.nodes == Some(nodes))
            {
                let unicast = lab
                    .iter()
                    .find(|u| {
                        u.algorithm == "unicast" && u.size == Some(size) && u.nodes == Some(nodes)
                    })
                    .and_then(|u| u.seconds);
                let mut row = vec![
                    size_label(size),
                    nodes.to_string(),
                    r.algorithm.to_owned(),
                    seconds_cell(r),
                    cell(r.seconds.zip(unicast).map(|(s, u)| s / u), ratio),
                ];
                for m in &models {
                    let p = prediction(&sims, r.algorithm, nodes, size, m);
                    row.push(cell(p.and_then(|p| p.seconds), |x| sig(x, 3)));
                    row.push(cell(p.and_then(|p| p.num("error")), signed_percent));
                    row.push(cell(p.and_then(|p| p.num("predicted_ratio")), ratio));
                }
                row.push(cell(r.num("cpu_idle"), percent));
                table.push(row);
            }
        }
    }
    push_table(out, &header, &table);
    true
}

/// `+12.3 %`, `-4.0 %`.
fn signed_percent(x: f64) -> String {
    format!("{:+.1} %", x * 100.0)
}

/// One plot per message size: each algorithm's lab seconds (solid) and the
/// simulator's in each model (dashed), against group size.
pub(super) fn validation_plots(dir: &Path, recs: &[Rec<'_>]) -> anyhow::Result<Vec<PathBuf>> {
    let all = of(recs, "validation");
    let lab: Vec<_> = all.iter().copied().filter(|r| r.system == "lab").collect();
    let sims: Vec<_> = all.iter().copied().filter(|r| r.system == "sim").collect();
    let models = models(&sims);
    let mut written = Vec::new();
    for size in sorted_distinct(lab.iter().filter_map(|r| r.size)) {
        let algorithms = sorted_distinct(lab.iter().map(|r| r.algorithm));
        let mut lines = Vec::new();
        for (a, algorithm) in algorithms.iter().enumerate() {
            let color = if *algorithm == "unicast" {
                BLACK
            } else {
                COLORS[a % COLORS.len()]
            };
            let series = |rows: &[&Rec<'_>]| -> Vec<(f64, f64)> {
                let mut points: Vec<(f64, f64)> = rows
                    .iter()
                    .filter(|r| r.algorithm == *algorithm && r.size == Some(size))
                    .filter_map(|r| Some((r.nodes? as f64, r.seconds?)))
                    .collect();
                points.sort_by(|p, q| p.0.total_cmp(&q.0));
                points
            };
            lines.push(Line {
                label: format!("{algorithm}: lab"),
                color,
                stroke: Stroke::Solid,
                points: series(&lab),
            });
            for m in &models {
                let model_rows: Vec<&Rec<'_>> = sims
                    .iter()
                    .copied()
                    .filter(|r| text(r.raw, "model") == Some(m.as_str()))
                    .collect();
                lines.push(Line {
                    label: format!("{algorithm}: sim, {m}"),
                    color,
                    stroke: Stroke::Dashed,
                    points: series(&model_rows),
                });
            }
        }
        lines.retain(|l| !l.points.is_empty());
        let name = format!("validation_{}.svg", size_label(size).replace(' ', ""));
        let path = dir.join(&name);
        let nodes_label = |x: f64| format!("{x:.0}");
        draw_line_chart(
            &path,
            &LineChart {
                title: format!("Lab vs simulator, {}", size_label(size)),
                x_desc: "group size (nodes, root included)",
                y_desc: "seconds (last receiver)",
                x_log: true,
                x_label: &nodes_label,
                lines,
                reference: None,
            },
        )?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::{ReportDir, report_dir};
    use super::super::{file_names, write_report};

    /// The summary and plot names of the report of `records`, written
    /// into a fresh directory (kept alive by the returned guard, so that
    /// a failing test keeps it).
    fn report(records: &[serde_json::Value], name: &str) -> (ReportDir, String, Vec<String>) {
        let dir = report_dir(&format!("topologies-{name}"));
        let files = write_report(&dir, records, &json!({})).unwrap();
        let plots = file_names(&files.plots);
        (dir, files.summary_markdown, plots)
    }

    #[test]
    fn file_to_file_table_states_the_disk_bound() {
        let records = [
            json!({"experiment": "file_to_file", "system": "unicast", "algorithm": "tcp-copy",
                   "nodes": 16, "size": 67108864, "seconds": 2.2, "min": 2.1, "max": 2.3, "runs": 5}),
            json!({"experiment": "file_to_file", "system": "rdmc",
                   "algorithm": "binomial-pipeline", "slow_named": false, "nodes": 16,
                   "size": 67108864, "seconds": 2.4, "disk_seconds": 0.71,
                   "disk_cpu_seconds": 0.9,
                   "fast": {"median": 2.4, "min": 2.3, "max": 2.6},
                   "fast_ratio": 1.09, "runs": 5, "cpu_idle": 0.3}),
            json!({"experiment": "file_to_file", "system": "rdmc",
                   "algorithm": "binomial-pipeline", "slow_named": true, "nodes": 16,
                   "size": 67108864, "seconds": 4.5, "disk_seconds": 0.71, "slow_host": 5,
                   "slow_rate": "125000kbit", "fast": {"median": 2.5, "min": 2.4, "max": 2.7},
                   "slow": {"median": 4.5, "min": 4.4, "max": 4.6},
                   "fast_ratio": 1.14, "slow_ratio": 2.05, "runs": 5, "cpu_idle": 0.3}),
        ];
        let (_dir, summary, _plots) = report(&records, "files");
        assert!(summary.contains("## From disk to disk"), "{summary}");
        assert!(
            summary.contains("flushed at once: 0.710 s, taking 0.90 CPU-seconds"),
            "{summary}"
        );
        assert!(summary.contains("host 5 at 125000kbit"), "{summary}");
        assert!(
            summary.contains("| rdmc | binomial-pipeline | false | 2.40 (2.30–2.60) | 1.09 |"),
            "{summary}"
        );
        assert!(
            summary.contains(
                "| rdmc | binomial-pipeline | true | 2.50 (2.40–2.70) | 1.14 | 4.50 (4.40–4.60) | 2.05 | 5 | 30% |"
            ),
            "{summary}"
        );
    }

    #[test]
    fn push_table_compares_with_the_single_copy_and_rdmc() {
        let facts = json!({"experiment": "push", "nodes": 16, "size": 301989888u64,
                           "files": 1001, "large_size": 268435456u64, "rate": "250mbit",
                           "ssh": "OpenSSH_9.2p1", "runs": 5, "cpu_idle": 0.5});
        let rec = |system: &str, command: &str, receivers: u64, s: [f64; 3], ratios: [f64; 2]| {
            let mut r = facts.clone();
            let fields = json!({"system": system, "algorithm": command, "receivers": receivers,
                                "seconds": s[0], "min": s[1], "max": s[2],
                                "ratio_to_single": ratios[0], "ratio_to_rdmc": ratios[1]});
            for (k, v) in fields.as_object().unwrap() {
                r[k] = v.clone();
            }
            r
        };
        let records = [
            rec(
                "scp-single",
                "scp -r -p to one host",
                1,
                [10.0, 9.9, 10.2],
                [1.0, 0.9],
            ),
            rec(
                "rdmc",
                "rdmc push --hosts",
                15,
                [11.1, 11.0, 11.4],
                [1.11, 1.0],
            ),
            rec(
                "pdcp",
                "pdcp -r -p -f 15",
                15,
                [150.0, 149.0, 152.0],
                [15.0, 13.5],
            ),
        ];
        let (_dir, summary, plots) = report(&records, "push");
        assert!(plots.contains(&"push.svg".to_owned()), "{plots:?}");
        assert!(summary.contains("## Push to 15 hosts"), "{summary}");
        assert!(
            summary.contains("one tree of 1001 files, 288.0 MiB (one file of 256.0 MiB"),
            "{summary}"
        );
        assert!(summary.contains("(OpenSSH_9.2p1)"), "{summary}");
        assert!(
            summary.contains(
                "| rdmc | rdmc push --hosts | 15 | 11.1 (11.0–11.4) | 1.11 | 1.00 | 5 | 50% |"
            ),
            "{summary}"
        );
        assert!(
            summary.contains("| pdcp | pdcp -r -p -f 15 | 15 | 150 (149–152) | 15.00 | 13.50 |"),
            "{summary}"
        );
    }

    #[test]
    fn slow_host_and_racks_tables() {
        let records = [
            json!({"experiment": "slow_host", "system": "unicast", "algorithm": "tcp-copy",
                   "nodes": 16, "size": 67108864, "seconds": 2.0, "min": 1.9, "max": 2.1, "runs": 3}),
            json!({"experiment": "slow_host", "system": "rdmc", "algorithm": "chain",
                   "slow_named": true, "nodes": 16, "size": 67108864, "seconds": 4.3,
                   "slow_host": 5, "slow_rate": "125000kbit",
                   "fast": {"median": 2.2, "min": 2.1, "max": 2.5},
                   "slow": {"median": 4.2, "min": 4.1, "max": 4.4},
                   "fast_ratio": 1.1, "slow_ratio": 2.1, "runs": 3, "cpu_idle": 0.25}),
            json!({"experiment": "racks", "system": "mpi", "algorithm": "pipeline",
                   "nodes": 16, "size": 67108864, "racks": 2, "uplink": "62500kbit",
                   "seconds": 17.0, "min": 16.0, "max": 18.0, "ratio_to_unicast": 8.5,
                   "ratio_to_bound": 2.125, "runs": 3}),
        ];
        let (_dir, summary, plots) = report(&records, "tables");
        assert!(summary.contains("## One slow host"), "{summary}");
        assert!(summary.contains("host 5 at 125000kbit"), "{summary}");
        assert!(
            summary.contains(
                "| rdmc | chain | true | 2.20 (2.10–2.50) | 1.10 | 4.20 (4.10–4.40) | 2.10 | 3 | 25% |"
            ),
            "{summary}"
        );
        assert!(summary.contains("## Two racks"), "{summary}");
        assert!(
            summary.contains("| mpi | pipeline | 17.0 (16.0–18.0) | 8.50 | 2.12 | 3 |"),
            "{summary}"
        );
        assert!(plots.is_empty());
    }

    #[test]
    fn validation_table_and_plot() {
        let records = [
            json!({"experiment": "validation", "system": "lab", "algorithm": "unicast",
                   "nodes": 2, "size": 8388608, "seconds": 0.28}),
            json!({"experiment": "validation", "system": "lab", "algorithm": "chain",
                   "nodes": 2, "size": 8388608, "seconds": 0.30, "cpu_idle": 0.5}),
            json!({"experiment": "validation", "system": "sim", "algorithm": "chain",
                   "model": "sent", "nodes": 2, "size": 8388608, "seconds": 0.27,
                   "error": -0.1, "predicted_ratio": 1.0, "latency_us": 40}),
        ];
        let (_dir, summary, plots) = report(&records, "validation");
        assert!(
            summary.contains("## The lab against the simulator"),
            "{summary}"
        );
        assert!(summary.contains("(40 µs, ping)"), "{summary}");
        assert!(
            summary.contains("| 8MiB | 2 | chain | 0.300 | 1.07 | 0.270 | -10.0 % | 1.00 | 50% |"),
            "{summary}"
        );
        assert_eq!(plots, vec!["validation_8MiB.svg".to_owned()]);
    }
}
