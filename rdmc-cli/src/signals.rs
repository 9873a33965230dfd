//! The signals that end a command early: `SIGINT` (Ctrl-C) and `SIGTERM`
//! (what `kill`, systemd and docker send). A command that gets one stops
//! its work, tells its peers it leaves, removes what it had only begun to
//! write, and exits with an error naming the signal, as for any failure.

/// Resolves once the process gets `SIGINT` or `SIGTERM`, with what to say:
/// `interrupted (SIGINT)` or `terminated (SIGTERM)`. Never resolves if the
/// handlers cannot be installed (the signals then end the process as by
/// default).
///
/// Cancel safe: dropping the future leaves the handlers installed (tokio
/// keeps them for the process), which only means a later signal is noted
/// rather than ending the process at once.
pub async fn interrupted() -> String {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "interrupted (SIGINT)".to_owned(),
        _ = term.recv() => "terminated (SIGTERM)".to_owned(),
    }
}
