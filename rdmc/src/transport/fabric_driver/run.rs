//! A fabric driver's task: started with the node's endpoint, and its run
//! loop. Completions are waited for as the node's
//! [`CompletionMode`](crate::CompletionMode) says: by sleeping until the
//! fabric wakes the driver (read what there is, arm the fabric's
//! notification, read again, sleep), by spinning on the completion queue,
//! or by spinning for a window after each burst of activity and sleeping
//! after.

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::DriverOptions;
use super::driver::FabricDriver;
use super::endpoint::{Cmd, DrivenEndpoint};
use crate::transport::pool::BufferPool;
use crate::transport::{CompletionSender, Completions};
use crate::wait::WaitPolicy;

/// Start a driver task in `span`: `driver` makes the driver, given the
/// runtime's commands to read and the node's completion queue to report
/// to. The node's endpoint, handing the driver its calls, and the queue.
pub(crate) fn spawn<D>(
    options: &DriverOptions,
    span: tracing::Span,
    driver: impl FnOnce(mpsc::UnboundedReceiver<Cmd<D::Extra>>, CompletionSender) -> D,
) -> (DrivenEndpoint<D::Extra>, Completions)
where
    D: FabricDriver + Send + 'static,
    D::Extra: Send,
    D::Wake: Send,
{
    let (commands, inbox) = mpsc::unbounded_channel();
    let (completions, queue) = mpsc::unbounded_channel();
    let driver = driver(inbox, completions.clone());
    let task = tokio::spawn(tracing::Instrument::instrument(run(driver), span));
    let endpoint = DrivenEndpoint::new(
        commands,
        completions,
        options.flush_timeout,
        task,
        BufferPool::new(options.pool_budget),
    );
    (endpoint, queue)
}

/// What woke a sleeping driver.
enum Woken<X, W> {
    /// A command of the runtime; `None`: the transport is gone.
    Command(Option<Cmd<X>>),
    /// The fabric.
    Fabric(W),
    /// A peer's liveness check, or the flush's deadline, is due.
    Timer,
}

/// Run `driver` until the transport is dropped or flushed.
async fn run<D: FabricDriver>(mut driver: D) {
    let mut wait = WaitPolicy::new(driver.core().mode);
    loop {
        let Some(mut work) = driver.take_commands() else {
            return;
        };
        work += driver.poll();
        if driver.upkeep() {
            return;
        }
        if !wait.should_sleep_after(work).await || !driver.arm() {
            continue;
        }
        match sleep(&mut driver).await {
            Woken::Command(Some(cmd)) => driver.on_command(cmd),
            Woken::Command(None) => return,
            Woken::Fabric(wake) => driver.on_wake(wake),
            Woken::Timer => {}
        }
    }
}

/// Sleep until a command, the fabric, a peer's liveness check or the
/// flush's deadline wakes `driver`.
async fn sleep<D: FabricDriver>(driver: &mut D) -> Woken<D::Extra, D::Wake> {
    let deadline = driver.core().flush_deadline();
    let liveness = driver.core().next_liveness_check;
    let (commands, fabric) = driver.wake_sources();
    tokio::select! {
        cmd = commands.recv() => Woken::Command(cmd),
        wake = fabric => Woken::Fabric(wake),
        () = tokio::time::sleep_until(liveness) => Woken::Timer,
        () = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)),
            if deadline.is_some() => Woken::Timer,
    }
}
