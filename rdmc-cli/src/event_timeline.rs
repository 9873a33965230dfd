//! `RDMC_EVENT_TIMELINE=FILE`: every `tracing` event and span entry of the
//! library at trace level, with its `CLOCK_MONOTONIC` time and thread,
//! written to FILE as JSON lines when the process ends. If FILE is a
//! directory, to `FILE/PID.jsonl` (one file per process of a cluster).
//! Span entries (every poll of an instrumented task: many per second for
//! a node that spins) are recorded only with
//! `RDMC_EVENT_TIMELINE_SPANS=1`.
//!
//! For finding where a message's microseconds go: the usual log
//! (`RUST_LOG=rdmc=trace`) formats and writes a line per event, which costs
//! more than most of the steps it times. This records only the time, the
//! thread and the event's static metadata (file, line, message template)
//! into memory, a few hundred nanoseconds per event, and writes them out at
//! the end. The times are comparable across processes of one machine (and
//! with the `t` fields of `rdmc member --bench`).

use std::io::Write;
use std::sync::Mutex;

use tracing::{Event, Metadata, Subscriber, span};
use tracing_subscriber::layer::{Context, Layer};

/// Most records kept (about 40 MB); later ones are dropped and counted.
const MAX_RECORDS: usize = 1 << 20;

/// One recorded event or span entry.
struct Record {
    ns: u64,
    thread: u64,
    kind: &'static str,
    meta: &'static Metadata<'static>,
}

/// The layer: records into memory; [`Timeline::write`] writes them out.
pub(crate) struct Timeline {
    records: Mutex<Vec<Record>>,
    /// Whether span entries are recorded too.
    spans: bool,
    dropped: std::sync::atomic::AtomicU64,
}

impl Timeline {
    pub(crate) fn new() -> Self {
        Timeline {
            records: Mutex::new(Vec::with_capacity(1 << 16)),
            spans: std::env::var_os("RDMC_EVENT_TIMELINE_SPANS").is_some_and(|v| v == "1"),
            dropped: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn record(&self, kind: &'static str, meta: &'static Metadata<'static>) {
        let ns = rdmc_cli::clocks::clock_monotonic_ns();
        let thread = thread_id();
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        if records.len() < MAX_RECORDS {
            records.push(Record {
                ns,
                thread,
                kind,
                meta,
            });
        } else {
            self.dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Write every record to `path` as JSON lines.
    pub(crate) fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        let records = std::mem::take(&mut *self.records.lock().unwrap_or_else(|e| e.into_inner()));
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        for r in &records {
            let line = serde_json::json!({
                "t": r.ns,
                "thread": r.thread,
                "kind": r.kind,
                "name": r.meta.name(),
                "file": r.meta.file(),
                "line": r.meta.line(),
            });
            writeln!(out, "{line}")?;
        }
        let dropped = self.dropped.load(std::sync::atomic::Ordering::Relaxed);
        if dropped > 0 {
            writeln!(out, "{}", serde_json::json!({"dropped": dropped}))?;
        }
        out.flush()
    }
}

/// What `RDMC_TRACE`'s trace holds: the library's debug events and spans,
/// and the block events of the members (`rdmc_proto::member`) and of the
/// TCP links at trace level, which `rdmc-bench/scripts/timeline.py` reads.
pub(crate) const TRACE_FILTER: &str =
    "rdmc=debug,rdmc_proto::member=trace,rdmc::transport::tcp::link=trace";

/// Record the wall clock in the trace: a trace's `ts` counts microseconds
/// from its layer's start, so `unix_us - ts` of this event is that start on
/// the wall clock, which lines up the traces of several processes.
pub(crate) fn trace_clock() {
    let unix_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    tracing::debug!(target: "rdmc_cli::trace", unix_us, "trace clock");
}

/// Where this process writes its timeline (or trace), given
/// `RDMC_EVENT_TIMELINE` (`RDMC_TRACE`): the file, or in a directory
/// `PID.extension`, one per process of a cluster.
pub(crate) fn file_for(value: std::ffi::OsString, extension: &str) -> std::path::PathBuf {
    let path = std::path::PathBuf::from(value);
    if path.is_dir() {
        path.join(format!("{}.{extension}", std::process::id()))
    } else {
        path
    }
}

/// The calling thread's kernel id (asked once per thread).
fn thread_id() -> u64 {
    thread_local! {
        // SAFETY: gettid has no preconditions.
        #[allow(unsafe_code)]
        static TID: u64 = unsafe { libc::gettid() } as u64;
    }
    TID.with(|t| *t)
}

/// The [`Layer`] recording into a shared [`Timeline`].
pub(crate) struct TimelineLayer(pub(crate) std::sync::Arc<Timeline>);

impl<S> Layer<S> for TimelineLayer
where
    S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        self.0.record("event", event.metadata());
    }

    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        if !self.0.spans {
            return;
        }
        if let Some(meta) = ctx.metadata(id) {
            self.0.record("enter", meta);
        }
    }
}
