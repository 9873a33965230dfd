//! The records each table and plot is drawn from: latency per message size
//! (with ratios to unicast), experiments grouped by system, algorithm and
//! group size, small-message rates, and the breakdown and CPU records in
//! their order.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::format::size_label;
use super::records::{Rec, Variant, int, series_label, series_order, text, variant_labels};

/// The completion modes in the order the CPU table lists them.
const MODES: &[&str] = &["interrupt", "adaptive", "hybrid", "polling"];

/// The rows of the breakdown table (the paper's Table 1): label and field.
pub(super) const BREAKDOWN_ROWS: &[(&str, &str)] = &[
    ("Remote setup", "remote_setup_us"),
    ("Remote block transfers", "remote_transfers_us"),
    ("Local setup", "local_setup_us"),
    ("Block transfers", "transferring_us"),
    ("Waiting", "waiting_us"),
    ("Copy", "copy_us"),
    ("Total", "total_us"),
];

/// Latency against group size for one message size: every number of the
/// latency table and plots.
#[derive(Debug)]
pub(super) struct LatencyTable {
    pub(super) size: u64,
    /// Group sizes measured, ascending.
    pub(super) nodes: Vec<u64>,
    /// Unicast seconds by group size.
    pub(super) unicast: BTreeMap<u64, f64>,
    /// The multicast variants (rdmc then MPI), sorted, and their labels.
    pub(super) variants: Vec<Variant>,
    pub(super) labels: Vec<String>,
    /// Seconds by (variant index, nodes).
    pub(super) seconds: BTreeMap<(usize, u64), f64>,
    /// Time ÷ unicast time by (variant index, nodes).
    pub(super) ratios: BTreeMap<(usize, u64), f64>,
    /// The fastest rdmc binomial pipeline's seconds by group size.
    pub(super) pipeline: BTreeMap<u64, f64>,
    /// The lowest CPU idle fraction among the size's records, by group size.
    pub(super) cpu_idle_min: BTreeMap<u64, f64>,
    /// The run counts of the medians.
    pub(super) runs: BTreeSet<u64>,
}

impl LatencyTable {
    /// MPI's time ÷ the rdmc binomial pipeline's, for an MPI variant.
    pub(super) fn mpi_over_pipeline(&self, variant: usize, nodes: u64) -> Option<f64> {
        if self.variants[variant].system != "mpi" {
            return None;
        }
        Some(self.seconds.get(&(variant, nodes))? / self.pipeline.get(&nodes)?)
    }
}

/// One [`LatencyTable`] per message size, ascending. A record needs `size`,
/// `nodes` and `seconds`; when several records fill the same cell, the last
/// one counts. The ratio to unicast is computed from the unicast time in the
/// same table row when there is one (so the table is consistent with
/// itself), else the record's `ratio_to_unicast` is used.
pub(super) fn latency_tables(recs: &[Rec<'_>]) -> Vec<LatencyTable> {
    let mut by_size: BTreeMap<u64, Vec<&Rec<'_>>> = BTreeMap::new();
    for rec in recs.iter().filter(|r| r.experiment == "latency") {
        if let (Some(size), Some(_), Some(_)) = (rec.size, rec.nodes, rec.seconds) {
            by_size.entry(size).or_default().push(rec);
        }
    }
    by_size
        .into_iter()
        .map(|(size, recs)| {
            let nodes: Vec<u64> = sorted_distinct(recs.iter().filter_map(|r| r.nodes));
            let variants: Vec<Variant> = sorted_distinct(
                recs.iter()
                    .filter(|r| r.system != "unicast")
                    .map(|r| Variant::of(r)),
            );
            let labels = variant_labels(&variants);
            let mut table = LatencyTable {
                size,
                nodes,
                unicast: BTreeMap::new(),
                variants,
                labels,
                seconds: BTreeMap::new(),
                ratios: BTreeMap::new(),
                pipeline: BTreeMap::new(),
                cpu_idle_min: BTreeMap::new(),
                runs: BTreeSet::new(),
            };
            let mut recorded_ratios = BTreeMap::new();
            for rec in &recs {
                let (Some(n), Some(seconds)) = (rec.nodes, rec.seconds) else {
                    continue;
                };
                // MPI ranks busy-wait: their idle time says nothing about
                // whether the CPU limited rdmc, so it is not counted here.
                if let Some(idle) = rec.num("cpu_idle").filter(|_| rec.system != "mpi") {
                    let min = table.cpu_idle_min.entry(n).or_insert(idle);
                    *min = min.min(idle);
                }
                if let Some(runs) = int(rec.raw, "runs") {
                    table.runs.insert(runs);
                }
                if rec.system == "unicast" {
                    table.unicast.insert(n, seconds);
                    continue;
                }
                let Some(v) = table.variants.iter().position(|v| *v == Variant::of(rec)) else {
                    continue;
                };
                table.seconds.insert((v, n), seconds);
                if let Some(r) = rec.num("ratio_to_unicast") {
                    recorded_ratios.insert((v, n), r);
                }
                if rec.system == "rdmc" && rec.algorithm == "binomial-pipeline" {
                    let best = table.pipeline.entry(n).or_insert(seconds);
                    *best = best.min(seconds);
                }
            }
            for (&(v, n), &seconds) in &table.seconds {
                let computed = table
                    .unicast
                    .get(&n)
                    .filter(|u| **u > 0.0)
                    .map(|u| seconds / u);
                if let Some(r) = computed.or_else(|| recorded_ratios.get(&(v, n)).copied()) {
                    table.ratios.insert((v, n), r);
                }
            }
            table
        })
        .collect()
}

/// A group of records of one experiment that share a table: system,
/// algorithm and group size.
pub(super) type GroupKey = ((u8, usize, String), String, String, Option<u64>);

/// Records of `experiment` grouped by system, algorithm and group size.
pub(super) fn grouped<'r, 'a>(
    recs: &'r [Rec<'a>],
    experiment: &str,
    keep: impl Fn(&Rec<'a>) -> bool,
) -> BTreeMap<GroupKey, Vec<&'r Rec<'a>>> {
    let mut groups: BTreeMap<GroupKey, Vec<&Rec<'_>>> = BTreeMap::new();
    for rec in of_experiment(recs, experiment, keep) {
        let key = (
            series_order(rec.system, rec.algorithm),
            rec.system.to_owned(),
            rec.algorithm.to_owned(),
            rec.nodes,
        );
        groups.entry(key).or_default().push(rec);
    }
    groups
}

/// The title of a [`GroupKey`]: "binomial-pipeline, 4 nodes".
pub(super) fn group_title(key: &GroupKey) -> String {
    let series = match key.1.as_str() {
        "rdmc" => format!("rdmc {}", key.2),
        _ => series_label(&key.1, &key.2),
    };
    match key.3 {
        Some(n) => format!("{series}, {n} nodes"),
        None => series,
    }
}

/// Messages per second of a small-message record: its
/// `messages_per_second`, else `burst` ÷ `seconds`.
pub(super) fn messages_per_second(rec: &Rec<'_>) -> Option<f64> {
    rec.num("messages_per_second")
        .or_else(|| Some(rec.num("burst")? / rec.seconds?))
}

/// The label of a breakdown record: "binomial-pipeline 256MiB/1MiB, 16
/// nodes" (algorithm, message size / block size, group size).
pub(super) fn breakdown_label(rec: &Rec<'_>) -> String {
    let mut label = rec.series();
    if let Some(size) = rec.size {
        let _ = write!(label, " {}", size_label(size));
    }
    if let Some(bs) = rec.block_size {
        let _ = write!(label, "/{}", size_label(bs));
    }
    if let Some(n) = rec.nodes {
        let _ = write!(label, ", {n} nodes");
    }
    label
}

/// The breakdown records that have at least one part, sorted.
pub(super) fn breakdown_records<'r, 'a>(recs: &'r [Rec<'a>]) -> Vec<&'r Rec<'a>> {
    sorted_records(
        recs,
        "breakdown",
        |r| BREAKDOWN_ROWS.iter().any(|(_, f)| r.num(f).is_some()),
        |r| {
            (
                series_order(r.system, r.algorithm),
                r.size,
                r.nodes,
                r.block_size,
            )
        },
    )
}

/// Sort key of a completion mode: [`MODES`] order, then by name.
fn mode_order(mode: &str) -> (usize, String) {
    let index = MODES.iter().position(|m| *m == mode).unwrap_or(MODES.len());
    (index, mode.to_owned())
}

/// The CPU records that have a mode, sorted by mode, size, group size.
pub(super) fn cpu_records<'r, 'a>(recs: &'r [Rec<'a>]) -> Vec<&'r Rec<'a>> {
    sorted_records(
        recs,
        "cpu",
        |r| text(r.raw, "mode").is_some(),
        |r| {
            (
                mode_order(text(r.raw, "mode").unwrap_or("")),
                r.size,
                r.nodes,
                series_order(r.system, r.algorithm),
            )
        },
    )
}

/// The small-message records that have a group size and a rate.
pub(super) fn small_message_records<'r, 'a>(recs: &'r [Rec<'a>]) -> Vec<&'r Rec<'a>> {
    of_experiment(recs, "small_messages", |r| {
        r.nodes.is_some() && messages_per_second(r).is_some()
    })
    .collect()
}

/// One small message's latency records that have a group size and
/// seconds (with or without the rate records of bursts beside them).
pub(super) fn small_latency_records<'r, 'a>(recs: &'r [Rec<'a>]) -> Vec<&'r Rec<'a>> {
    of_experiment(recs, "small_latency", |r| {
        r.nodes.is_some() && r.seconds.is_some()
    })
    .collect()
}

/// The records of `experiment` that `keep` accepts, in their order.
fn of_experiment<'r, 'a>(
    recs: &'r [Rec<'a>],
    experiment: &str,
    keep: impl Fn(&Rec<'a>) -> bool,
) -> impl Iterator<Item = &'r Rec<'a>> {
    recs.iter()
        .filter(move |r| r.experiment == experiment && keep(r))
}

/// The records of `experiment` that `keep` accepts, sorted by `key` (records
/// with equal keys keep their order).
fn sorted_records<'r, 'a, K: Ord>(
    recs: &'r [Rec<'a>],
    experiment: &str,
    keep: impl Fn(&Rec<'a>) -> bool,
    key: impl FnMut(&&'r Rec<'a>) -> K,
) -> Vec<&'r Rec<'a>> {
    let mut chosen: Vec<&Rec<'_>> = of_experiment(recs, experiment, keep).collect();
    chosen.sort_by_key(key);
    chosen
}

/// The distinct items, sorted.
pub(super) fn sorted_distinct<T: Ord>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    items
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}
