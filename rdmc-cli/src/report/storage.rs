//! The storage workloads in the report: the Cosmos-like trace (goodput,
//! objects per second and per-write latency percentiles against the lab's
//! bound) and overlapping senders (aggregate bandwidth against the lab's
//! bound, rdmc beside MPI_Ibcast), as tables and plots.

use std::path::{Path, PathBuf};

use plotters::style::RGBColor;

use super::charts::{
    BarChart, Line, LineChart, Stroke, draw_bar_chart, draw_line_chart, line_look,
};
use super::datasets::sorted_distinct;
use super::format::{percent, sig, size_label};
use super::markdown::{header, push_table};
use super::records::{Rec, int, series_order};
use rdmc_sim::stats::percentile;

/// The percentiles the latency plot draws.
const PLOTTED_PERCENTILES: [f64; 7] = [10.0, 25.0, 50.0, 75.0, 90.0, 99.0, 100.0];

/// The records of `experiment`, by system and algorithm, then group size.
fn of<'r, 'a>(recs: &'r [Rec<'a>], experiment: &str) -> Vec<&'r Rec<'a>> {
    let mut chosen: Vec<&Rec<'_>> = recs
        .iter()
        .filter(|r| r.experiment == experiment && r.seconds.is_some())
        .collect();
    chosen.sort_by_key(|r| (series_order(r.system, r.algorithm), r.nodes));
    chosen
}

/// A record's per-write latencies.
fn latencies(rec: &Rec<'_>) -> Vec<f64> {
    rec.raw["latencies"]
        .as_array()
        .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
        .unwrap_or_default()
}

/// A number with `digits` significant digits, or an empty cell.
fn cell(x: Option<f64>, digits: i32) -> String {
    x.map_or(String::new(), |x| sig(x, digits))
}

/// The storage tables (nothing when there are no storage records);
/// whether any was written.
pub(super) fn push_storage(out: &mut String, recs: &[Rec<'_>]) -> bool {
    let cosmos = of(recs, "cosmos");
    if !cosmos.is_empty() {
        out.push_str(
            "## Storage: the Cosmos-like trace (3-replica writes)\n\n\
             Goodput: bytes delivered to replicas per second, from the first write's send to \
             the last replica's delivery. Bound: every host's incoming link (hosts x rate); \
             the trace's bound: its busiest host link (most bytes in or out) at full rate \
             from start to end. \
             Of fair-share ideal: the seconds of the same closed loop as a fluid on ideal \
             links shared max-min fairly, with the algorithm's use of its group's links, over \
             the measured seconds (a reference, not a bound). \
             Latency: a write's send to its root's acknowledgement that both replicas have it.\n\n",
        );
        let rows: Vec<Vec<String>> = cosmos
            .iter()
            .map(|r| {
                vec![
                    r.series(),
                    r.nodes.map_or(String::new(), |n| n.to_string()),
                    int(r.raw, "writes").map_or(String::new(), |n| n.to_string()),
                    int(r.raw, "window").map_or(String::new(), |n| n.to_string()),
                    r.size.map_or(String::new(), |s| sig(s as f64 / 1e6, 3)),
                    cell(r.seconds, 4),
                    cell(r.gbps(), 3),
                    cell(r.num("bound_gbps"), 3),
                    r.num("fraction_of_bound").map_or(String::new(), percent),
                    cell(r.num("trace_bound_gbps"), 3),
                    r.num("fraction_of_trace_bound")
                        .map_or(String::new(), percent),
                    r.num("fraction_of_fair_share")
                        .map_or(String::new(), percent),
                    cell(r.num("objects_per_second"), 3),
                    cell(r.num("latency_p50"), 3),
                    cell(r.num("latency_p90"), 3),
                    cell(r.num("latency_p99"), 3),
                    cell(r.num("latency_max"), 3),
                    r.num("cpu_idle").map_or(String::new(), percent),
                ]
            })
            .collect();
        push_table(
            out,
            &header(
                "algorithm | hosts | writes | in flight / root | mean object (MB) | seconds | \
                 goodput (Gbit/s) | bound (Gbit/s) | of bound | trace's bound (Gbit/s) | \
                 of trace's bound | of fair-share ideal | objects/s | p50 (s) | p90 (s) | \
                 p99 (s) | max (s) | CPU idle",
            ),
            &rows,
        );
    }
    let overlap = of(recs, "overlap");
    if !overlap.is_empty() {
        out.push_str(
            "## Storage: overlapping senders\n\n\
             Every host the root of its own group of all hosts, all sending at once. \
             Delivered: bytes received by all hosts per second; the papers' measure: bytes \
             sent (size x messages x senders) per second. Bound: every host's incoming link \
             (hosts x rate).\n\n",
        );
        let rows: Vec<Vec<String>> = overlap
            .iter()
            .map(|r| {
                let range = match (r.num("min"), r.num("max")) {
                    (Some(lo), Some(hi)) => format!("{}–{}", sig(lo, 3), sig(hi, 3)),
                    _ => String::new(),
                };
                vec![
                    r.series(),
                    r.nodes.map_or(String::new(), |n| n.to_string()),
                    format!(
                        "{} x {}",
                        int(r.raw, "messages").map_or("?".to_owned(), |m| m.to_string()),
                        r.size.map_or("?".to_owned(), size_label)
                    ),
                    int(r.raw, "runs").map_or(String::new(), |n| n.to_string()),
                    cell(r.seconds, 4),
                    range,
                    cell(r.gbps(), 3),
                    cell(r.num("sent_gbps"), 3),
                    cell(r.num("bound_gbps"), 3),
                    r.num("fraction_of_bound").map_or(String::new(), percent),
                    r.num("cpu_idle").map_or(String::new(), percent),
                ]
            })
            .collect();
        push_table(
            out,
            &header(
                "system | hosts | messages per sender | runs | seconds (median) | range | \
                 delivered (Gbit/s) | papers' measure (Gbit/s) | bound (Gbit/s) | of bound | \
                 CPU idle",
            ),
            &rows,
        );
    }
    !cosmos.is_empty() || !overlap.is_empty()
}

/// The storage plots the records have data for.
pub(super) fn storage_plots(dir: &Path, recs: &[Rec<'_>]) -> anyhow::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let cosmos = of(recs, "cosmos");
    let with_latencies: Vec<_> = cosmos.iter().filter(|r| !latencies(r).is_empty()).collect();
    if !with_latencies.is_empty() {
        let lines = with_latencies
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let l = latencies(r);
                let (color, stroke) = line_look(r.system, i);
                Line {
                    label: r.series(),
                    color,
                    stroke,
                    points: PLOTTED_PERCENTILES
                        .iter()
                        .map(|&p| (p, percentile(&l, p / 100.0)))
                        .collect(),
                }
            })
            .collect();
        let chart = LineChart {
            title: "Cosmos-like trace: per-write latency percentiles".to_owned(),
            x_desc: "percentile of writes",
            y_desc: "latency (s), send to all replicas acknowledged",
            x_log: false,
            x_label: &|x| format!("p{x:.0}"),
            lines,
            reference: None,
        };
        let path = dir.join("cosmos_latency.svg");
        draw_line_chart(&path, &chart)?;
        written.push(path);
    }
    if !cosmos.is_empty() {
        let chart = BarChart {
            title: "Cosmos-like trace: goodput to replicas".to_owned(),
            x_desc: "algorithm",
            y_desc: "Gbit/s",
            categories: cosmos.iter().map(|r| r.series()).collect(),
            series: vec![
                (
                    "goodput".to_owned(),
                    cosmos.iter().map(|r| r.gbps()).collect(),
                ),
                (
                    "lab's bound (hosts x rate in)".to_owned(),
                    cosmos.iter().map(|r| r.num("bound_gbps")).collect(),
                ),
            ],
        };
        let path = dir.join("cosmos_goodput.svg");
        draw_bar_chart(&path, &chart)?;
        written.push(path);
    }
    let overlap = of(recs, "overlap");
    if !overlap.is_empty() {
        let series = sorted_distinct(
            overlap
                .iter()
                .map(|r| (series_order(r.system, r.algorithm), r.series(), r.system)),
        );
        let mut lines: Vec<Line> = series
            .iter()
            .enumerate()
            .map(|(i, (_, label, system))| {
                let (color, stroke) = line_look(system, i);
                Line {
                    label: label.clone(),
                    color,
                    stroke,
                    points: overlap
                        .iter()
                        .filter(|r| r.series() == *label)
                        .filter_map(|r| Some((r.nodes? as f64, r.gbps()?)))
                        .collect(),
                }
            })
            .collect();
        let bound: Vec<(f64, f64)> = sorted_distinct(
            overlap
                .iter()
                .filter_map(|r| Some((r.nodes?, (r.num("bound_gbps")? * 1e3) as u64))),
        )
        .into_iter()
        .map(|(n, b)| (n as f64, b as f64 / 1e3))
        .collect();
        if !bound.is_empty() {
            lines.push(Line {
                label: "lab's bound (hosts x rate in)".to_owned(),
                color: RGBColor(0x60, 0x60, 0x60),
                stroke: Stroke::Dashed,
                points: bound,
            });
        }
        let chart = LineChart {
            title: "Overlapping senders: aggregate bandwidth delivered".to_owned(),
            x_desc: "hosts (each the root of its own group of all)",
            y_desc: "Gbit/s delivered, all hosts",
            x_log: false,
            x_label: &|x| format!("{x:.0}"),
            lines,
            reference: None,
        };
        let path = dir.join("overlap.svg");
        draw_line_chart(&path, &chart)?;
        written.push(path);
    }
    Ok(written)
}
