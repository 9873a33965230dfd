//! `summary.md`: the machine facts, then one markdown table per experiment
//! and message size, then the list of plots.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::Value;

use super::datasets::{
    BREAKDOWN_ROWS, LatencyTable, breakdown_label, breakdown_records, cpu_records, group_title,
    grouped, messages_per_second, small_latency_records, small_message_records, sorted_distinct,
};
use super::format::{percent, ratio, sig, size_label};
use super::markdown::{cell, header, push_table, row};
use super::records::{Rec, Variant, int, text, variant_labels};

/// Machine facts shown first, in this order; any others follow by name.
const MACHINE_KEYS: &[(&str, &str)] = &[
    ("command", "Command"),
    ("date", "Date"),
    ("rdmc_version", "rdmc version"),
    ("cpu_model", "CPU"),
    ("cores", "Cores"),
    ("memory_gib", "Memory (GiB)"),
    ("kernel", "Kernel"),
    ("rate", "Link rate"),
    ("wire_security", "rdmc wire security"),
    ("congestion_control", "TCP congestion control (lab hosts)"),
    ("mpi", "MPI"),
];

/// The markdown of one latency table.
fn push_latency_table(out: &mut String, table: &LatencyTable) {
    let _ = writeln!(out, "### {} messages\n", size_label(table.size));
    let runs: Vec<String> = table.runs.iter().map(u64::to_string).collect();
    let _ = writeln!(
        out,
        "Seconds are medians{}. \"× unicast\" is the time ÷ the unicast time at the same \
         size and group size; \"÷ binomial-pipeline\" is MPI's time ÷ rdmc's binomial \
         pipeline's (above 1: rdmc is faster).\n",
        if runs.is_empty() {
            String::new()
        } else {
            format!(" of {} runs", runs.join("/"))
        }
    );
    let has_unicast = !table.unicast.is_empty();
    let has_pipeline = !table.pipeline.is_empty();
    let has_idle = !table.cpu_idle_min.is_empty();
    let mut header = vec!["nodes".to_owned()];
    if has_unicast {
        header.push("unicast s".to_owned());
    }
    for (v, label) in table.variants.iter().zip(&table.labels) {
        header.push(format!("{label} s"));
        header.push(format!("{label} × unicast"));
        if v.system == "mpi" && has_pipeline {
            header.push(format!("{label} ÷ binomial-pipeline"));
        }
    }
    if has_idle {
        header.push("CPU idle (min, rdmc and unicast)".to_owned());
    }
    let rows: Vec<Vec<String>> = table
        .nodes
        .iter()
        .map(|&n| {
            let mut row = vec![n.to_string()];
            if has_unicast {
                row.push(cell(table.unicast.get(&n).copied(), |s| sig(s, 4)));
            }
            for (v, variant) in table.variants.iter().enumerate() {
                let at = |m: &BTreeMap<(usize, u64), f64>| m.get(&(v, n)).copied();
                row.push(cell(at(&table.seconds), |s| sig(s, 4)));
                row.push(cell(at(&table.ratios), ratio));
                if variant.system == "mpi" && has_pipeline {
                    row.push(cell(table.mpi_over_pipeline(v, n), ratio));
                }
            }
            if has_idle {
                row.push(cell(table.cpu_idle_min.get(&n).copied(), percent));
            }
            row
        })
        .collect();
    push_table(out, &header, &rows);
}

/// Bandwidth against block size: rows block size, columns message size.
fn push_block_size(out: &mut String, recs: &[Rec<'_>]) -> bool {
    let groups = grouped(recs, "block_size", |r| {
        r.block_size.is_some() && r.size.is_some() && r.gbps().is_some()
    });
    if groups.is_empty() {
        return false;
    }
    out.push_str("## Bandwidth vs block size (Gbit/s)\n\n");
    for (key, recs) in &groups {
        let _ = writeln!(out, "### {}\n", group_title(key));
        let sizes: BTreeSet<u64> = recs.iter().filter_map(|r| r.size).collect();
        let blocks: BTreeSet<u64> = recs.iter().filter_map(|r| r.block_size).collect();
        let cells: BTreeMap<(u64, u64), f64> = recs
            .iter()
            .filter_map(|r| Some(((r.block_size?, r.size?), r.gbps()?)))
            .collect();
        let header = row("block size", sizes.iter().map(|s| size_label(*s)));
        let rows: Vec<Vec<String>> = blocks
            .iter()
            .map(|&b| {
                let gbps = sizes.iter().map(|&s| cells.get(&(b, s)).copied());
                row(size_label(b), gbps.map(|g| cell(g, |g| sig(g, 3))))
            })
            .collect();
        push_table(out, &header, &rows);
    }
    true
}

/// Small messages: rows group size, for each variant the rate of a burst
/// (messages per second) and one message's latency (µs); one table per
/// message size. A value not measured (no bursts with `--small-burst 0`)
/// is "—".
fn push_small_messages(out: &mut String, recs: &[Rec<'_>]) -> bool {
    /// A size's records: the rates, then the latencies.
    type BySize<'r, 'a> = BTreeMap<u64, [Vec<&'r Rec<'a>>; 2]>;
    let mut by_size: BySize<'_, '_> = BTreeMap::new();
    let kinds = [small_message_records(recs), small_latency_records(recs)];
    for (kind, records) in kinds.into_iter().enumerate() {
        for rec in records {
            by_size.entry(rec.size.unwrap_or(1)).or_default()[kind].push(rec);
        }
    }
    if by_size.is_empty() {
        return false;
    }
    out.push_str("## Small messages (messages per second, and one message's latency)\n\n");
    for (size, [rates, latencies]) in &by_size {
        let _ = writeln!(out, "### {} messages\n", size_label(*size));
        let both = rates.iter().chain(latencies);
        let variants: Vec<Variant> = sorted_distinct(both.clone().map(|r| Variant::of(r)));
        let labels = variant_labels(&variants);
        let nodes: BTreeSet<u64> = both.filter_map(|r| r.nodes).collect();
        let cells = |records: &[&Rec<'_>], value: &dyn Fn(&Rec<'_>) -> Option<f64>| {
            let mut cells = BTreeMap::new();
            for rec in records {
                if let (Some(v), Some(n), Some(x)) = (
                    variants.iter().position(|v| *v == Variant::of(rec)),
                    rec.nodes,
                    value(rec),
                ) {
                    cells.insert((v, n), x);
                }
            }
            cells
        };
        let rate = cells(rates, &messages_per_second);
        let latency = cells(latencies, &|r| Some(r.seconds? * 1e6));
        let header = row(
            "nodes",
            labels
                .iter()
                .flat_map(|l| [format!("{l} msg/s"), format!("{l} latency µs")]),
        );
        let missing = |x: Option<String>| x.unwrap_or_else(|| "—".to_owned());
        let rows: Vec<Vec<String>> = nodes
            .iter()
            .map(|&n| {
                let values = (0..variants.len()).flat_map(|v| {
                    [
                        missing(rate.get(&(v, n)).map(|r| format!("{r:.0}"))),
                        missing(latency.get(&(v, n)).map(|us| sig(*us, 3))),
                    ]
                });
                row(n.to_string(), values)
            })
            .collect();
        push_table(out, &header, &rows);
    }
    true
}

/// The time breakdown in the layout of the paper's Table 1: rows the parts,
/// one column per measured algorithm and size.
fn push_breakdown(out: &mut String, recs: &[Rec<'_>]) -> bool {
    let chosen = breakdown_records(recs);
    if chosen.is_empty() {
        return false;
    }
    out.push_str("## Time breakdown on the member farthest from the root (µs)\n\n");
    let header = row(
        "",
        chosen.iter().map(|r| {
            let mut label = breakdown_label(r);
            if let Some(rank) = int(r.raw, "rank") {
                let _ = write!(label, " (rank {rank})");
            }
            label
        }),
    );
    let rows: Vec<Vec<String>> = BREAKDOWN_ROWS
        .iter()
        .map(|(label, field)| {
            let parts = chosen
                .iter()
                .map(|r| cell(r.num(field), |x| format!("{x:.2}")));
            row(*label, parts)
        })
        .collect();
    push_table(out, &header, &rows);
    true
}

/// CPU cost per completion mode: rows mode × size.
fn push_cpu(out: &mut String, recs: &[Rec<'_>]) -> bool {
    let chosen = cpu_records(recs);
    if chosen.is_empty() {
        return false;
    }
    out.push_str("## CPU use per completion mode\n\n");
    let header = header(
        "mode | size | nodes | algorithm | seconds | CPU s / message / member | \
         CPU s / GiB / member | CPU idle",
    );
    let rows: Vec<Vec<String>> = chosen
        .iter()
        .map(|r| {
            vec![
                text(r.raw, "mode").unwrap_or("").to_owned(),
                r.size.map_or(String::new(), size_label),
                r.nodes.map_or(String::new(), |n| n.to_string()),
                r.series(),
                cell(r.seconds, |s| sig(s, 4)),
                cell(r.num("cpu_seconds_per_message"), |s| sig(s, 3)),
                cell(r.num("cpu_seconds_per_gib"), |s| sig(s, 3)),
                cell(r.num("cpu_idle"), percent),
            ]
        })
        .collect();
    push_table(out, &header, &rows);
    true
}

/// The machine facts as a two-column table (nothing if `machine` is not a
/// non-empty object).
fn push_machine(out: &mut String, machine: &Value) {
    let Some(facts) = machine.as_object().filter(|m| !m.is_empty()) else {
        return;
    };
    let value_text = |key: &str, v: &Value| match (key, v) {
        ("command", Value::String(s)) => format!("`{s}`"),
        (_, Value::String(s)) => s.clone(),
        (_, other) => other.to_string(),
    };
    let mut rows = Vec::new();
    for (key, label) in MACHINE_KEYS {
        if let Some(v) = facts.get(*key).filter(|v| !v.is_null()) {
            rows.push(vec![(*label).to_owned(), value_text(key, v)]);
        }
    }
    for (key, v) in facts {
        if !v.is_null() && !MACHINE_KEYS.iter().any(|(k, _)| k == key) {
            rows.push(vec![key.clone(), value_text(key, v)]);
        }
    }
    out.push_str("## Machine\n\n");
    push_table(out, &["fact".to_owned(), "value".to_owned()], &rows);
}

/// The whole `summary.md`.
pub(super) fn summary_text(
    recs: &[Rec<'_>],
    latency: &[LatencyTable],
    machine: &Value,
    plots: &[String],
) -> String {
    let mut out = String::from("# rdmc bench\n\n");
    push_machine(&mut out, machine);
    let mut any = false;
    if !latency.is_empty() {
        out.push_str("## Latency vs group size\n\n");
        for table in latency {
            push_latency_table(&mut out, table);
        }
        any = true;
    }
    any |= push_block_size(&mut out, recs);
    any |= push_small_messages(&mut out, recs);
    any |= push_breakdown(&mut out, recs);
    any |= push_cpu(&mut out, recs);
    any |= super::storage::push_storage(&mut out, recs);
    any |= super::topologies::push_topologies(&mut out, recs);
    any |= super::collectives::push_allreduce(&mut out, recs);
    if !any {
        out.push_str("No measurements.\n\n");
    }
    if !plots.is_empty() {
        out.push_str("## Plots\n\n");
        for name in plots {
            let _ = writeln!(out, "- [{name}]({name})");
        }
        out.push('\n');
    }
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out.push('\n');
    out
}
