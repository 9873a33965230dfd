//! The report of `--only allreduce`: a table per run (each system and
//! algorithm's median milliseconds with the range, and the ratio to the best
//! MPI_Allreduce algorithm of the same run) and a bar chart by group size.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::charts::{BarChart, draw_bar_chart};
use super::datasets::sorted_distinct;
use super::format::{ratio, sig, size_label};
use super::markdown::{header, push_table, spread_cell};
use super::records::Rec;

fn allreduce_records<'r, 'a>(recs: &'r [Rec<'a>]) -> Vec<&'r Rec<'a>> {
    recs.iter()
        .filter(|r| r.experiment == "allreduce" && r.seconds.is_some())
        .collect()
}

/// `system algorithm`, as tables and legends name a series.
fn label(r: &Rec<'_>) -> String {
    format!("{} {}", r.system, r.algorithm)
}

/// Milliseconds, `median (min–max)`.
fn ms_cell(r: &Rec<'_>) -> String {
    spread_cell((r.seconds, r.num("min"), r.num("max")), |x| sig(x * 1e3, 3))
}

/// Append the allreduce table; whether there was one.
pub(super) fn push_allreduce(out: &mut String, recs: &[Rec<'_>]) -> bool {
    let rows = allreduce_records(recs);
    let Some(first) = rows.first() else {
        return false;
    };
    let _ = writeln!(
        out,
        "## Allreduce\n\nSum of {} of f32 per member, each group size on a lab of its own: \
         rdmc's algorithms, then every Open MPI MPI_Allreduce algorithm forced in turn and its \
         default rules, the same runs each; the slowest member's time per run, median (range) \
         in ms; ratio to the fastest exact MPI algorithm of the same lab.\n",
        size_label(first.size.unwrap_or(0)),
    );
    let header = header("members | system | algorithm | ms | × best MPI | exact");
    let mut ordered = rows.clone();
    ordered.sort_by_key(|r| (r.nodes, r.system != "rdmc"));
    let table: Vec<Vec<String>> = ordered
        .iter()
        .map(|r| {
            vec![
                r.nodes.map_or(String::new(), |n| n.to_string()),
                r.system.to_owned(),
                r.algorithm.to_owned(),
                ms_cell(r),
                r.num("ratio_to_best_mpi").map_or(String::new(), ratio),
                r.raw["exact"]
                    .as_bool()
                    .map_or(String::new(), |e| e.to_string()),
            ]
        })
        .collect();
    push_table(out, &header, &table);
    true
}

/// `allreduce.svg`: bars per system and algorithm, grouped by group size.
pub(super) fn allreduce_plot(dir: &Path, recs: &[Rec<'_>]) -> anyhow::Result<Option<PathBuf>> {
    let rows = allreduce_records(recs);
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let nodes = sorted_distinct(rows.iter().filter_map(|r| r.nodes));
    let mut labels: Vec<(bool, String)> = rows
        .iter()
        .map(|r| (r.system != "rdmc", label(r)))
        .collect();
    labels.sort();
    labels.dedup();
    let series = labels
        .into_iter()
        .map(|(_, name)| {
            let values = nodes
                .iter()
                .map(|n| {
                    rows.iter()
                        .filter(|r| r.nodes == Some(*n) && label(r) == name)
                        .filter_map(|r| r.seconds)
                        .next_back()
                        .map(|s| s * 1e3)
                })
                .collect();
            (name, values)
        })
        .collect();
    let chart = BarChart {
        title: format!(
            "Allreduce of {} of f32: rdmc and MPI_Allreduce",
            size_label(first.size.unwrap_or(0))
        ),
        x_desc: "group size",
        y_desc: "ms (slowest member, median)",
        categories: nodes.iter().map(|n| format!("{n} members")).collect(),
        series,
    };
    let path = dir.join("allreduce.svg");
    draw_bar_chart(&path, &chart)?;
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::report_dir;
    use super::super::{file_names, write_report};

    #[test]
    fn allreduce_table_and_plot() {
        let records = [
            json!({"experiment": "allreduce", "system": "mpi", "algorithm": "segmented_ring",
                   "mpi_algorithm": 5, "nodes": 8, "size": 1048576, "seconds": 0.061,
                   "min": 0.060, "max": 0.081, "exact": true, "ratio_to_best_mpi": 1.0}),
            json!({"experiment": "allreduce", "system": "rdmc", "algorithm": "ring",
                   "nodes": 8, "size": 1048576, "seconds": 0.068, "min": 0.0665,
                   "max": 0.0692, "exact": true, "ratio_to_best_mpi": 1.1148}),
        ];
        let dir = report_dir("allreduce");
        let files = write_report(&dir, &records, &json!({})).unwrap();
        let names = file_names(&files.plots);
        let svg = std::fs::read_to_string(dir.join("allreduce.svg")).unwrap();
        let summary = files.summary_markdown;
        assert!(summary.contains("## Allreduce"), "{summary}");
        assert!(summary.contains("Sum of 1MiB of f32"), "{summary}");
        // rdmc first, then MPI.
        let rdmc = summary.find("| 8 | rdmc | ring | 68.0 (66.5–69.2) | 1.11 | true |");
        let mpi = summary.find("| 8 | mpi | segmented_ring | 61.0 (60.0–81.0) | 1.00 | true |");
        assert!(rdmc.is_some() && mpi.is_some() && rdmc < mpi, "{summary}");
        assert_eq!(names, vec!["allreduce.svg".to_owned()]);
        assert!(
            svg.contains("rdmc ring") && svg.contains("8 members"),
            "{svg}"
        );
    }
}
