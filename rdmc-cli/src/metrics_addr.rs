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
