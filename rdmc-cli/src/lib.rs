//! The internals of the `rdmc` command that the workspace's benchmark
//! harness (`rdmc-bench`) shares with it: the cluster setup every member
//! process makes, sizes on the command line, cluster keys, the workload
//! files of `rdmc member --bench --workload`, what `rdmc member --bench`
//! and its driver agree on, the clocks their events are on, and the report
//! drawn from measurements (`rdmc simulate --plot` draws the same).
//!
//! Not a stable API: the command is the product (`rdmc --help`); this
//! library only lets the harness drive the same code without a copy.

#![warn(missing_docs, rust_2018_idioms)]

pub mod bench_protocol;
pub mod clocks;
pub mod cluster;
pub mod identity;
pub mod keygen;
pub mod members;
pub mod metrics_addr {
    //! `--metrics-addr ADDR`: serve the library's metrics (what it reports to
    //! the `metrics` facade: bytes and blocks per peer, messages, latencies,
    //! failures, open groups; `rdmc::stats` lists them) as Prometheus text at
    //! `http://ADDR/metrics` for as long as the command runs.

    use std::net::SocketAddr;

    use anyhow::{Context as _, anyhow};

    /// Install the Prometheus exporter, listening at `addr`, as the process's
    /// metrics recorder (at most once per process). Call it before the runtime
    /// starts: the exporter runs on a thread of its own.
    pub fn serve(addr: SocketAddr) -> anyhow::Result<()> {
        // Bind first, so that a port in use is a clear error here rather than
        // a log line from the exporter's thread.
        drop(std::net::TcpListener::bind(addr).with_context(|| format!("--metrics-addr {addr}"))?);
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
            // Its message only: it carries its cause's text already.
            .map_err(|e| anyhow!("--metrics-addr {addr}: {e}"))
    }
}
pub mod report;
pub mod signals;
pub mod size;
pub mod workload;

/// The tests' scratch directories (one helper for the whole workspace).
#[cfg(test)]
#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;
