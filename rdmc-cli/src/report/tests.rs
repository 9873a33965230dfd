//! Tests of the whole report: the files `write_report` writes from a record
//! set touching every section, sparse and empty record sets, reading
//! `results.jsonl`, and the number and label formatting.

use serde_json::{Value, json};

use super::csv::{CSV_COLUMNS, csv_value};
use super::format::{percent, sig, size_label, tick};
use super::markdown::md_cell;
use super::{ReportFiles, file_names, read_records, write_report};
use crate::scratch::ScratchDir;

/// One test's report directory (a [`ScratchDir`]): removed when the test
/// passes, unless `RDMC_KEEP_TEST_REPORT` is set, to look at the report a
/// test wrote; kept when it fails. Dereferences to its path.
pub(super) struct ReportDir(Option<ScratchDir>);

impl std::ops::Deref for ReportDir {
    type Target = std::path::Path;

    fn deref(&self) -> &std::path::Path {
        self.0.as_deref().expect("held until dropped")
    }
}

impl Drop for ReportDir {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take()
            && std::env::var_os("RDMC_KEEP_TEST_REPORT").is_some()
        {
            eprintln!("test report kept in {}", dir.display());
            // Not dropped: the directory stays.
            std::mem::forget(dir);
        }
    }
}

/// A fresh [`ReportDir`] for the test `name`.
pub(super) fn report_dir(name: &str) -> ReportDir {
    ReportDir(Some(ScratchDir::new(&format!("bench-report-{name}"))))
}

/// A latency record.
fn latency(system: &str, algorithm: &str, nodes: u64, seconds: f64) -> Value {
    json!({"experiment": "latency", "system": system, "algorithm": algorithm,
           "nodes": nodes, "size": 8 << 20,
           "block_size": if system == "rdmc" { json!(1 << 20) } else { Value::Null },
           "seconds": seconds, "runs": 3, "all": [seconds, seconds, seconds],
           "min": seconds, "max": seconds, "cpu_idle": 0.9})
}

/// A record set touching every section, with known latency numbers:
/// at 4 nodes unicast 1.0 s, sequential 3.0 s, binomial pipeline 1.2 s,
/// MPI default 1.8 s, so the ratios are 3.00, 1.20, 1.80 and MPI ÷
/// binomial-pipeline is 1.50.
fn records() -> Vec<Value> {
    let mut records = vec![
        latency("unicast", "tcp-copy", 2, 1.0),
        latency("unicast", "tcp-copy", 4, 1.0),
        latency("rdmc", "sequential", 2, 1.0),
        latency("rdmc", "sequential", 4, 3.0),
        latency("rdmc", "binomial-pipeline", 2, 1.1),
        latency("rdmc", "binomial-pipeline", 4, 1.2),
        latency("mpi", "default", 2, 1.5),
        latency("mpi", "default", 4, 1.8),
    ];
    // The lowest CPU idle of the 4-node row.
    records[3]["cpu_idle"] = json!(0.8);
    // MPI busy-waits: its idle time is not the rdmc row's.
    records[7]["cpu_idle"] = json!(0.0);
    for (block, gbps) in [(16u64 << 10, 0.1), (1 << 20, 0.24), (16 << 20, 0.2)] {
        for size in [1u64 << 20, 128 << 20] {
            records.push(json!({"experiment": "block_size", "system": "rdmc",
                "algorithm": "binomial-pipeline", "nodes": 4, "size": size,
                "block_size": block, "seconds": 1.0, "runs": 3, "gbps": gbps}));
        }
    }
    for (nodes, rate) in [(2u64, 5000.0), (4, 4000.0)] {
        for algorithm in ["chain", "binomial-pipeline"] {
            records.push(json!({"experiment": "small_messages", "system": "rdmc",
                "algorithm": algorithm, "nodes": nodes, "size": 1, "burst": 1000,
                "messages_per_second": rate, "seconds": 0.25, "runs": 3}));
        }
        // One message's latency, measured for the chain only.
        records.push(json!({"experiment": "small_latency", "system": "rdmc",
            "algorithm": "chain", "nodes": nodes, "size": 1, "block_size": null,
            "seconds": 0.000_412, "runs": 21}));
    }
    records.push(json!({"experiment": "breakdown", "system": "rdmc",
        "algorithm": "binomial-pipeline", "nodes": 4, "size": 256 << 20,
        "block_size": 1 << 20, "rank": 3, "remote_setup_us": 11.5,
        "remote_transfers_us": 3.25, "local_setup_us": 1.0, "copy_us": 0.0,
        "transferring_us": 7.5, "waiting_us": 0.05, "total_us": 23.3}));
    for (mode, per_gib) in [("polling", 0.9), ("interrupt", 0.3), ("hybrid", 0.4)] {
        records.push(json!({"experiment": "cpu", "system": "rdmc",
            "algorithm": "binomial-pipeline", "nodes": 4, "size": 100 << 20,
            "seconds": 3.5, "mode": mode, "cpu_seconds_per_message": per_gib / 10.0,
            "cpu_seconds_per_gib": per_gib, "cpu_idle": 0.5, "rate": "250mbit"}));
    }
    records
}

fn machine() -> Value {
    json!({"cores": 2, "cpu_model": "Test CPU", "kernel": "6.1", "memory_gib": 23,
           "rate": "250mbit", "command": "rdmc bench --out x", "rdmc_version": "0.1.0"})
}

/// The contents of the `<text>` elements of an SVG, trimmed.
fn svg_texts(svg: &str) -> Vec<&str> {
    svg.split("<text")
        .skip(1)
        .filter_map(|rest| {
            let start = rest.find('>')? + 1;
            let end = rest.find("</text>")?;
            Some(rest.get(start..end)?.trim())
        })
        .collect()
}

/// Every plot is an SVG holding each of its expected texts (legends, axis
/// titles), plot by plot.
fn assert_plot_texts(plots: &[std::path::PathBuf], expected: &[Vec<&str>]) {
    assert_eq!(plots.len(), expected.len(), "{plots:?}");
    for (path, labels) in plots.iter().zip(expected) {
        let svg = std::fs::read_to_string(path).unwrap();
        assert!(svg.contains("<svg"), "{}", path.display());
        let texts = svg_texts(&svg);
        for label in labels {
            assert!(
                texts.iter().any(|t| t.contains(label)),
                "{} has no text {label:?}: {texts:?}",
                path.display()
            );
        }
    }
}

/// The lines of `text` from the one equal to `heading` to the next
/// heading.
fn section<'t>(text: &'t str, heading: &str) -> Vec<&'t str> {
    let mut lines = text.lines().skip_while(|l| *l != heading);
    assert_eq!(lines.next(), Some(heading), "no {heading:?} in:\n{text}");
    lines.take_while(|l| !l.starts_with('#')).collect()
}

/// The report of [`records`] and [`machine`], written into a fresh directory
/// (kept alive by the returned [`ReportDir`]).
fn full_report(name: &str) -> (ReportDir, Vec<Value>, ReportFiles) {
    let dir = report_dir(name);
    let records = records();
    let files = write_report(&dir, &records, &machine()).unwrap();
    (dir, records, files)
}

#[test]
fn report_csv_has_the_fixed_header_and_a_row_per_record() {
    let (_dir, records, files) = full_report("full-csv");
    // CSV: the fixed header, one row per record.
    let csv = std::fs::read_to_string(&files.csv).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], CSV_COLUMNS.join(","));
    assert!(lines[0].starts_with("experiment,system,algorithm,nodes,size,block_size,seconds"));
    assert_eq!(lines.len(), records.len() + 1);
    assert_eq!(
        lines[1].split(',').take(11).collect::<Vec<_>>(),
        [
            "latency",
            "unicast",
            "tcp-copy",
            "2",
            "8388608",
            "",
            "1.0",
            "3",
            "1.0",
            "1.0",
            "1.0;1.0;1.0"
        ]
    );
    assert!(
        lines
            .iter()
            .all(|l| l.split(',').count() == CSV_COLUMNS.len())
    );
}

#[test]
fn report_summary_has_the_machine_and_every_table() {
    let (_dir, _, files) = full_report("full-summary");
    // The summary: machine facts, then the latency table with computed
    // ratios.
    let summary = std::fs::read_to_string(&files.summary).unwrap();
    assert_eq!(summary, files.summary_markdown);
    assert!(
        summary.contains("| Command | `rdmc bench --out x` |"),
        "{summary}"
    );
    assert!(summary.contains("| CPU | Test CPU |"));
    let latency = section(&summary, "### 8MiB messages");
    let header = "| nodes | unicast s | sequential s | sequential × unicast \
        | binomial-pipeline s | binomial-pipeline × unicast | MPI default s \
        | MPI default × unicast | MPI default ÷ binomial-pipeline | CPU idle (min, rdmc and unicast) |";
    assert!(latency.contains(&header), "{latency:#?}");
    assert!(
        latency
            .contains(&"| 4 | 1.000 | 3.000 | 3.00 | 1.200 | 1.20 | 1.800 | 1.80 | 1.50 | 80% |"),
        "{latency:#?}"
    );
    assert!(
        latency
            .contains(&"| 2 | 1.000 | 1.000 | 1.00 | 1.100 | 1.10 | 1.500 | 1.50 | 1.36 | 90% |"),
        "{latency:#?}"
    );

    let blocks = section(&summary, "### rdmc binomial-pipeline, 4 nodes");
    assert!(
        blocks.contains(&"| block size | 1MiB | 128MiB |"),
        "{blocks:#?}"
    );
    assert!(blocks.contains(&"| 1MiB | 0.240 | 0.240 |"), "{blocks:#?}");
    let small = section(&summary, "### 1B messages");
    assert!(
        small.contains(
            &"| nodes | chain msg/s | chain latency µs | binomial-pipeline msg/s \
              | binomial-pipeline latency µs |"
        ),
        "{small:#?}"
    );
    assert!(
        small.contains(&"| 4 | 4000 | 412 | 4000 | — |"),
        "{small:#?}"
    );
    let breakdown = section(
        &summary,
        "## Time breakdown on the member farthest from the root (µs)",
    );
    assert!(
        breakdown.contains(&"| Remote setup | 11.50 |"),
        "{breakdown:#?}"
    );
    assert!(breakdown.contains(&"| Total | 23.30 |"), "{breakdown:#?}");
    let cpu = section(&summary, "## CPU use per completion mode");
    let modes: Vec<&str> = cpu
        .iter()
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert_eq!(modes, ["mode", "---", "interrupt", "hybrid", "polling"]);
    assert!(
        cpu.contains(
            &"| polling | 100MiB | 4 | binomial-pipeline | 3.500 | 0.0900 | 0.900 | 50% |"
        ),
        "{cpu:#?}"
    );
}

#[test]
fn report_plots_have_their_names_and_legends() {
    let (_dir, _, files) = full_report("full-plots");
    // The plots.
    let names = file_names(&files.plots);
    assert_eq!(
        names,
        [
            "latency_8MiB.svg",
            "ratio_8MiB.svg",
            "block_size.svg",
            "small_messages.svg",
            "cpu.svg",
            "breakdown.svg"
        ]
    );
    let legends = [
        vec!["unicast", "binomial-pipeline", "MPI default", "group size"],
        vec!["unicast (1×)", "sequential", "MPI default"],
        vec!["128MiB", "16KiB", "Gbit/s"],
        vec!["chain", "binomial-pipeline", "messages per second"],
        vec!["interrupt", "polling", "100MiB"],
        vec!["Remote setup", "Waiting"],
    ];
    assert_plot_texts(&files.plots, &legends);
    assert!(
        files
            .summary_markdown
            .contains("- [latency_8MiB.svg](latency_8MiB.svg)")
    );
    assert_eq!(files.paths().len(), 2 + files.plots.len());
}

#[test]
fn recorded_ratio_used_without_unicast_and_missing_fields_skipped() {
    let dir = report_dir("sparse");
    let records = vec![
        json!({"experiment": "latency", "system": "rdmc", "algorithm": "chain",
               "nodes": 4, "size": 1 << 20, "seconds": 2.0, "ratio_to_unicast": 1.25}),
        json!({"experiment": "latency", "system": "rdmc", "algorithm": "chain",
               "size": 1 << 20, "seconds": 2.0}),
        json!({"experiment": "latency", "system": "mpi", "nodes": 4, "seconds": null}),
        json!({"experiment": "cpu", "size": 1 << 20}),
        json!({"experiment": "breakdown", "system": "rdmc"}),
        json!({"experiment": "block_size", "size": 1, "block_size": 0, "seconds": 0.0}),
        json!({}),
        json!({"note": "a, \"quoted\"\nvalue"}),
    ];
    let files = write_report(&dir, &records, &Value::Null).unwrap();
    let summary = &files.summary_markdown;
    assert!(summary.contains("| 4 | 2.000 | 1.25 |"), "{summary}");
    assert!(!summary.contains("## Machine"));
    assert!(!summary.contains("CPU use"));
    assert!(!summary.contains("breakdown"));
    assert!(!summary.contains("block size"));
    let csv = std::fs::read_to_string(&files.csv).unwrap();
    assert!(csv.lines().next().unwrap().ends_with(",total_us,note"));
    assert!(csv.ends_with(",\"a, \"\"quoted\"\"\nvalue\"\n"), "{csv}");
    assert_eq!(csv.matches("\nlatency,").count(), 3);
    let names: Vec<_> = files.plots.iter().map(|p| p.file_name().unwrap()).collect();
    assert_eq!(names, ["latency_1MiB.svg", "ratio_1MiB.svg"]);
}

/// `--small-burst 0`: one message's latency measured, no burst's rate;
/// the summary has the latencies, the rates "—".
#[test]
fn latency_only_small_messages_get_their_table() {
    let dir = report_dir("small-latency-only");
    let records = vec![
        json!({"experiment": "small_latency", "system": "rdmc",
               "algorithm": "binomial-pipeline", "nodes": 8, "size": 1024,
               "block_size": null, "mode": "interrupt", "seconds": 0.000_523,
               "runs": 21, "all": [0.000_523], "min": 0.0005, "max": 0.0006,
               "receivers_us": [null, 301.5, 523.0]}),
        json!({"experiment": "small_latency", "system": "mpi", "algorithm": "default",
               "nodes": 8, "size": 1024, "seconds": 0.000_987, "runs": 21}),
        json!({"experiment": "small_latency", "system": "mpi", "algorithm": "binomial",
               "nodes": 8, "size": 1024, "seconds": 0.0, "runs": 0}),
    ];
    let files = write_report(&dir, &records, &Value::Null).unwrap();
    let summary = &files.summary_markdown;
    assert!(!summary.contains("No measurements."), "{summary}");
    let small = section(summary, "### 1KiB messages");
    assert!(
        small.contains(
            &"| nodes | binomial-pipeline msg/s | binomial-pipeline latency µs \
              | MPI default msg/s | MPI default latency µs |"
        ),
        "{small:#?}"
    );
    assert!(small.contains(&"| 8 | — | 523 | — | 987 |"), "{small:#?}");
    // No rates, so no rate plot.
    assert!(files.plots.is_empty());
}

#[test]
fn no_records_give_a_summary_without_tables() {
    let dir = report_dir("empty");
    let files = write_report(&dir.join("sub"), &[], &machine()).unwrap();
    assert!(files.summary_markdown.contains("No measurements."));
    assert!(files.plots.is_empty());
    let csv = std::fs::read_to_string(&files.csv).unwrap();
    assert_eq!(csv.lines().count(), 1);
}

#[test]
fn jsonl_is_read_and_bad_lines_are_named() {
    let dir = report_dir("jsonl");
    let good = dir.join("good.jsonl");
    std::fs::write(&good, "{\"a\": 1}\n\n  \n{\"b\": [2]}\n").unwrap();
    let records = read_records(&good).unwrap();
    assert_eq!(records, [json!({"a": 1}), json!({"b": [2]})]);

    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"a\": 1}\n\n{\"b\": oops}\n{}\n").unwrap();
    let error = format!("{:#}", read_records(&bad).unwrap_err());
    assert!(error.contains("bad.jsonl line 3, column 7: "), "{error}");
    assert!(!error.contains("line 1"), "{error}");

    std::fs::write(&bad, "{}\n[1, 2]\n").unwrap();
    let error = format!("{:#}", read_records(&bad).unwrap_err());
    assert!(
        error.contains("line 2") && error.contains("not a JSON object"),
        "{error}"
    );

    assert!(read_records(&dir.join("missing.jsonl")).is_err());
}

#[test]
fn labels_and_numbers() {
    assert_eq!(size_label(8 << 20), "8MiB");
    assert_eq!(size_label(256 << 20), "256MiB");
    assert_eq!(size_label(16 << 10), "16KiB");
    assert_eq!(size_label(1), "1B");
    assert_eq!(size_label(10_000_019), "10000019B");
    assert_eq!(size_label(0), "0B");
    assert_eq!(sig(1.0, 4), "1.000");
    assert_eq!(sig(0.268_44, 4), "0.2684");
    assert_eq!(sig(1234.5, 4), "1234");
    assert_eq!(sig(12_345.6, 3), "12346");
    assert_eq!(tick(0.05), "0.05");
    assert_eq!(tick(1.0), "1");
    assert_eq!(tick(250.0), "250");
    assert_eq!(tick(0.0), "0");
    assert_eq!(percent(0.876), "88%");
    assert_eq!(md_cell("a|b"), "a\\|b");
    assert_eq!(csv_value(Some(&json!([1, 2.5]))), "1;2.5");
    assert_eq!(csv_value(Some(&Value::Null)), "");
    assert_eq!(csv_value(None), "");
}

#[test]
fn storage_records_get_their_tables_and_plots() {
    let dir = report_dir("storage");
    let latencies: Vec<f64> = (1..=100).map(|i| f64::from(i) / 10.0).collect();
    let records = vec![
        json!({"experiment": "cosmos", "system": "rdmc", "algorithm": "binomial-pipeline",
               "nodes": 16, "size": 29_000_000, "seconds": 20.0, "runs": 1, "writes": 100,
               "window": 2, "gbps": 2.0, "bound_gbps": 4.0, "fraction_of_bound": 0.5,
               "trace_bound_gbps": 2.5, "fraction_of_trace_bound": 0.8,
               "fraction_of_fair_share": 0.9,
               "objects_per_second": 5.0, "latency_p50": 5.0, "latency_p90": 9.0,
               "latency_p99": 9.9, "latency_max": 10.0, "latencies": latencies}),
        json!({"experiment": "cosmos", "system": "rdmc", "algorithm": "sequential",
               "nodes": 16, "size": 29_000_000, "seconds": 30.0, "gbps": 1.25,
               "bound_gbps": 4.0}),
        json!({"experiment": "overlap", "system": "rdmc", "algorithm": "binomial-pipeline",
               "nodes": 4, "size": 1 << 20, "messages": 2, "seconds": 1.0, "runs": 3,
               "min": 0.9, "max": 1.2, "gbps": 0.8, "sent_gbps": 0.27, "bound_gbps": 1.0,
               "fraction_of_bound": 0.8}),
        json!({"experiment": "overlap", "system": "mpi", "algorithm": "ibcast",
               "nodes": 4, "size": 1 << 20, "messages": 2, "seconds": 2.0, "runs": 3,
               "gbps": 0.4, "bound_gbps": 1.0}),
        json!({"experiment": "overlap", "system": "rdmc", "algorithm": "binomial-pipeline",
               "nodes": 8, "size": 1 << 20, "messages": 2, "seconds": 3.0, "runs": 3,
               "gbps": 1.5, "bound_gbps": 2.0}),
    ];
    let files = write_report(&dir, &records, &Value::Null).unwrap();
    let names = file_names(&files.plots);
    assert_eq!(
        names,
        ["cosmos_latency.svg", "cosmos_goodput.svg", "overlap.svg"]
    );
    let legends = [
        vec!["binomial-pipeline", "p50", "p99"],
        vec!["sequential", "goodput", "bound (hosts x rate in)"],
        vec![
            "binomial-pipeline",
            "MPI ibcast",
            "bound (hosts x rate in)",
            "hosts",
        ],
    ];
    assert_plot_texts(&files.plots, &legends);
    let cosmos = section(
        &files.summary_markdown,
        "## Storage: the Cosmos-like trace (3-replica writes)",
    );
    let row = cosmos
        .iter()
        .find(|l| l.starts_with("| binomial-pipeline |"))
        .expect("a row per algorithm");
    assert!(row.contains("| 16 | 100 | 2 | 29.0 |"), "{row}");
    assert!(
        row.contains("| 2.00 | 4.00 | 50% | 2.50 | 80% | 90% | 5.00 | 5.00 | 9.00 | 9.90 | 10.0 |"),
        "{row}"
    );
    let overlap = section(&files.summary_markdown, "## Storage: overlapping senders");
    assert!(
        overlap.iter().any(|l| l
            .starts_with("| binomial-pipeline | 4 | 2 x 1MiB | 3 | 1.000 | 0.900–1.20 | 0.800 |")),
        "{overlap:?}"
    );
    assert!(overlap.iter().any(|l| l.starts_with("| MPI ibcast | 4 |")));
}
