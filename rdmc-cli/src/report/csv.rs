//! `results.csv`: one row per record, every field of the record schema in
//! a fixed order, then any other fields by name.

use std::collections::BTreeSet;

use anyhow::{Context as _, anyhow};
use serde_json::Value;

/// The columns of `results.csv`, in order: every field of the record schema.
/// Fields a record has beyond these are appended after them, sorted by name.
pub(super) const CSV_COLUMNS: &[&str] = &[
    "experiment",
    "system",
    "algorithm",
    "nodes",
    "size",
    "block_size",
    "seconds",
    "runs",
    "min",
    "max",
    "all",
    "ratio_to_unicast",
    "gbps",
    "cpu_idle",
    "rate",
    "mode",
    "messages_per_second",
    "burst",
    "cpu_seconds_per_message",
    "cpu_seconds_per_gib",
    "rank",
    "remote_setup_us",
    "remote_transfers_us",
    "local_setup_us",
    "copy_us",
    "transferring_us",
    "waiting_us",
    "total_us",
];

/// The whole `results.csv`: RFC 4180 quoting (a cell with a comma, quote or
/// line break is quoted, its quotes doubled), lines ending in `\n`.
pub(super) fn csv_text(records: &[Value]) -> anyhow::Result<String> {
    let fixed: BTreeSet<&str> = CSV_COLUMNS.iter().copied().collect();
    let extra: BTreeSet<&str> = records
        .iter()
        .filter_map(Value::as_object)
        .flat_map(|o| o.keys().map(String::as_str))
        .filter(|k| !fixed.contains(k))
        .collect();
    let columns: Vec<&str> = CSV_COLUMNS.iter().copied().chain(extra).collect();
    let failed = || "results.csv";
    let mut writer = ::csv::WriterBuilder::new()
        .terminator(::csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    writer.write_record(&columns).with_context(failed)?;
    for record in records.iter().filter(|r| r.is_object()) {
        let cells = columns.iter().map(|c| csv_value(record.get(*c)));
        writer.write_record(cells).with_context(failed)?;
    }
    let bytes = writer
        .into_inner()
        .map_err(|e| anyhow!("results.csv: {}", e.error()))?;
    String::from_utf8(bytes).context("results.csv")
}

/// The text of one cell: empty when missing or null, strings as they are,
/// arrays joined with `;`, objects as JSON.
pub(super) fn csv_value(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| csv_value(Some(item)))
            .collect::<Vec<_>>()
            .join(";"),
        Some(other) => other.to_string(),
    }
}
