//! The signals that end a command early: `SIGINT` (Ctrl-C), `SIGTERM`
//! (what `kill`, systemd and docker send) and `SIGHUP` (the terminal or the
//! ssh session that started the command went away; not when the command
//! was started with it ignored, as by `nohup`). A command that gets one
//! stops its work, tells its peers it leaves, removes what it had only
//! begun to write, and exits with an error naming the signal, as for any
//! failure.

/// Forget handlers of `SIGINT` and `SIGTERM` that a linked library
/// installed as it loaded, so that the signals reach [`interrupted`] and
/// nothing else: some libraries libfabric loads (the InfiniPath/PSM
/// ones of Debian's libfabric, for back traces) install handlers that
/// exit(1) on `SIGTERM`, and tokio's handler chains to the handler it
/// found. A disposition the process was started with (default, or
/// ignored, as for a shell's background job) is kept. Call it first in
/// `main`, before any thread starts.
pub fn forget_library_handlers() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: plain sigaction calls on zeroed (valid) structs, before
        // any other thread runs; a handler found is replaced by the default
        // disposition, which needs no code of ours.
        unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut current) != 0 {
                continue;
            }
            if current.sa_sigaction != libc::SIG_DFL && current.sa_sigaction != libc::SIG_IGN {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
    }
}

/// Resolves once the process gets `SIGINT`, `SIGTERM` or `SIGHUP`, with
/// what to say: `interrupted (SIGINT)`, `terminated (SIGTERM)` or `hung up
/// (SIGHUP)`. Never resolves if the handlers cannot be installed (the
/// signals then end the process as by default). `SIGHUP` is left alone
/// when the process started with it ignored (`nohup`).
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
    let mut hup = match hangup_ignored() {
        true => None,
        false => signal(SignalKind::hangup()).ok(),
    };
    let hung_up = async {
        match &mut hup {
            Some(hup) => hup.recv().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = int.recv() => "interrupted (SIGINT)".to_owned(),
        _ = term.recv() => "terminated (SIGTERM)".to_owned(),
        _ = hung_up => "hung up (SIGHUP)".to_owned(),
    }
}

/// Whether `SIGHUP` is ignored (the process was started so, by `nohup`).
fn hangup_ignored() -> bool {
    // SAFETY: a sigaction query into a zeroed (valid) struct; it changes
    // nothing.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGHUP, std::ptr::null(), &mut current) == 0
            && current.sa_sigaction == libc::SIG_IGN
    }
}
