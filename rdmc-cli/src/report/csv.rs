//! `results.csv`: one row per record, every field of the record schema in
//! a fixed order, then any other fields by name.

use std::collections::BTreeSet;

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

/// The whole `results.csv`.
pub(super) fn csv_text(records: &[Value]) -> String {
    let fixed: BTreeSet<&str> = CSV_COLUMNS.iter().copied().collect();
    let extra: BTreeSet<&str> = records
        .iter()
        .filter_map(Value::as_object)
        .flat_map(|o| o.keys().map(String::as_str))
        .filter(|k| !fixed.contains(k))
        .collect();
    let columns: Vec<&str> = CSV_COLUMNS.iter().copied().chain(extra).collect();
    let mut out = String::new();
    push_csv_row(&mut out, columns.iter().map(|c| (*c).to_owned()));
    for record in records.iter().filter(|r| r.is_object()) {
        push_csv_row(&mut out, columns.iter().map(|c| csv_value(record.get(*c))));
    }
    out
}

/// One CSV line. The quoting is RFC 4180's, written out here rather than
/// taken from the `csv` crate: the cells are plain numbers and short names,
/// and the rule (quote a cell containing a comma, quote or line break, and
/// double its quotes) is all there is to it.
fn push_csv_row(out: &mut String, cells: impl Iterator<Item = String>) {
    for (i, cell) in cells.enumerate() {
        if i > 0 {
            out.push(',');
        }
        if cell.contains([',', '"', '\n', '\r']) {
            out.push('"');
            out.push_str(&cell.replace('"', "\"\""));
            out.push('"');
        } else {
            out.push_str(&cell);
        }
    }
    out.push('\n');
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
