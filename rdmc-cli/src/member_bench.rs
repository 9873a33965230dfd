//! `rdmc member --bench`: a member driven line by line by the benchmark
//! harness (`rdmc-bench`).
//!
//! Every member builds the same pseudo-random payload of `--max-size` bytes
//! (a fixed seed), so the root can send any prefix of it and every receiver
//! can check each message byte for byte without a second copy on the wire.
//!
//! The root reads commands from stdin, one per line:
//!
//! * `send SIZE COUNT`: send COUNT messages of the payload's first SIZE
//!   bytes back to back, wait until all are locally complete and every
//!   receiver's application has taken them, then print a `sent` event
//!   (`done_t` when they were locally complete, `acknowledged_t` when all
//!   were taken);
//! * `close` (or the end of stdin): close the group.
//!
//! Receivers report a `delivered` event for the last message of each run of
//! messages ready at once (every message of a latency run; a burst's last).
//! They hold their events until the group has been quiet for
//! [`REPORT_QUIET`] (or [`REPORT_HELD`] are held) and then print them in one
//! write, so that while a message is still on its way to other members no
//! receiver writes to the driver and the driver is not woken. The root's
//! `sent` event says `acknowledged`: it is printed only once every
//! receiver's application holds the messages, so the driver can send the
//! next command on it without waiting for the receivers' events. Messages
//! over [`CHECK_INLINE`] are checked on a thread at idle priority
//! ([`Checker`]); for those a receiver prints `checked` once one passed,
//! at once, and the driver sends the next command only once every
//! receiver has (the `ready` event says `"checks": "announced"`).
//! Every event carries `t`,
//! the `CLOCK_MONOTONIC` time in nanoseconds (one clock for every network
//! namespace of the machine, so the driver can subtract the root's times from
//! the receivers'), and `cpu`, the process's user + system CPU seconds so far.

use std::os::fd::AsFd;
use std::pin::Pin;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use rdmc::{Group, MessageTimings, Receiver, Sender};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use rdmc_cli::bench_protocol::{CHECK_INLINE, payload};
use rdmc_cli::clocks::{cpu_seconds, mono_ns};

/// Run the benchmark part of member `rank` on its group, with a payload of
/// `max_size` bytes (`--max-size`); then the caller closes.
pub(crate) async fn run(rank: u32, max_size: u64, group: &mut Group) -> anyhow::Result<()> {
    let max = usize::try_from(max_size).map_err(|_| anyhow!("--max-size is too large"))?;
    let payload = tokio::task::spawn_blocking(move || payload(max))
        .await
        .map_err(|e| anyhow!("generating the payload: {e}"))?;
    emit(
        json!({"event": "ready", "rank": rank, "t": mono_ns(Instant::now()),
                "cpu": cpu_seconds(), "checks": "announced"}),
    );
    match group {
        Group::Root(root) => send_commanded(rank, root, &payload).await,
        Group::Receiver(group) => receiver(rank, group, &payload).await,
    }
}

async fn send_commanded(rank: u32, group: &mut Sender, payload: &Bytes) -> anyhow::Result<()> {
    let mut lines = BufReader::new(commands()).lines();
    let mut seq = 0u64;
    while let Some(line) = lines
        .next_line()
        .await
        .map_err(|e| anyhow!("reading stdin: {e}"))?
    {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [] => continue,
            ["close"] => break,
            ["send", size, count] => {
                let size: usize = size.parse().map_err(|_| anyhow!("bad size in {line:?}"))?;
                let count: u64 = count
                    .parse()
                    .ok()
                    .filter(|&c| c > 0)
                    .ok_or_else(|| anyhow!("bad count in {line:?}"))?;
                if size > payload.len() {
                    bail!("size {size} is above --max-size {}", payload.len());
                }
                let data = payload.slice(..size);
                // The CPU count first: its system call stays out of the time.
                let cpu0 = cpu_seconds();
                let t0 = Instant::now();
                let mut receipts = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
                for _ in 0..count {
                    receipts.push(group.send(data.clone()).await.map_err(|e| anyhow!("{e}"))?);
                }
                let mut first = None;
                for receipt in receipts {
                    let timings = receipt.sent().await.map_err(|e| anyhow!("{e}"))?;
                    first.get_or_insert(timings);
                }
                let done = Instant::now();
                // Every member's application has taken every message sent
                // (the group's in-flight messages are all delivered).
                group.flush().await.map_err(|e| anyhow!("{e}"))?;
                let mut event = json!({"event": "sent", "rank": rank, "seq": seq,
                    "count": count, "size": size, "t": mono_ns(t0), "done_t": mono_ns(done),
                    "acknowledged_t": mono_ns(Instant::now()), "acknowledged": true,
                    "cpu0": cpu0, "cpu": cpu_seconds()});
                if let Some(t) = first {
                    add_timings(&mut event, &t);
                }
                emit(event);
                seq += count;
            }
            _ => bail!("unknown command {line:?}"),
        }
    }
    Ok(())
}

/// The root's stdin. A pipe (as `rdmc-bench` gives it) is read through
/// the runtime's own poller: one wake-up per command. Anything else goes
/// through `tokio::io::stdin`, which reads on a blocking thread — for each
/// command a wake-up of that thread, its read, then a wake-up of the
/// runtime's.
fn commands() -> Pin<Box<dyn AsyncRead + Send>> {
    let pipe = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(tokio::net::unix::pipe::Receiver::from_owned_fd);
    match pipe {
        Ok(pipe) => Box::pin(pipe),
        Err(_) => Box::pin(tokio::io::stdin()),
    }
}

/// How long a receiver holds its `delivered` events after the group's last
/// message: longer than the driver takes to send the next command, so a
/// series of messages sent one after another is reported after its last.
pub(crate) const REPORT_QUIET: Duration = Duration::from_millis(5);

/// The most `delivered` events a receiver holds before printing them.
pub(crate) const REPORT_HELD: usize = 256;

/// Most bytes of delivered messages a receiver holds unchecked before it
/// waits for the checks ([`Checker`]): two of the largest messages the lab
/// sends (256 MiB), so that on a machine without a spare moment the
/// messages wait for their checks instead of filling the memory.
const MAX_UNCHECKED: usize = 512 << 20;

/// How much of a message the [`Checker`] compares before it looks again at
/// whether it is behind (and so at its priority): a few milliseconds of work.
const CHECK_SLICE: usize = 16 << 20;

/// Receive, check every message against the root's payload, and report a
/// `delivered` event for the last message of each run of messages that were
/// ready at once (the measurements wait for a burst's last message only).
/// The events are held until the group is quiet (see the module docs):
/// printing and the driver's reading stay out of the time the next members
/// need the cores for the same message.
async fn receiver(rank: u32, group: &mut Receiver, payload: &Bytes) -> anyhow::Result<()> {
    let mut checker = Checker::spawn(payload.clone())?;
    // What each event says, kept raw: the JSON is built when printed.
    let mut held: Vec<Delivery> = Vec::new();
    loop {
        let next = if held.is_empty() {
            group.next().await
        } else if checker.unchecked > 0 {
            // Some held messages are still being checked: take the next
            // message or a verdict, whichever comes first. Waiting for the
            // checks here would leave the next message untaken while the
            // checking thread waits for an idle core.
            tokio::select! {
                next = group.next() => next,
                judged = checker.judge_one() => {
                    if let Err(e) = judged {
                        report_intact(rank, &mut held, &e);
                        bail!(e.reason);
                    }
                    announce_checked(rank, &mut checker);
                    continue;
                }
            }
        } else {
            match tokio::time::timeout(REPORT_QUIET, group.next()).await {
                Ok(next) => next,
                Err(_quiet) => {
                    report(rank, &mut held, &mut checker).await?;
                    continue;
                }
            }
        };
        let Some(first) = next else { break };
        let mut next = Some(first);
        // Take what is already delivered too, without waiting; only the
        // run's last message is reported (the CPU count once, then), so
        // the harness's own work per message stays out of a burst's time.
        let mut last = None;
        while let Some(message) = next {
            let at = Instant::now();
            let message = match message {
                Ok(message) => message,
                Err(e) => {
                    // What was delivered intact is still reported.
                    held.extend(last.map(Delivery::counted));
                    report(rank, &mut held, &mut checker).await?;
                    return Err(anyhow!("{e}"));
                }
            };
            last = Some(Delivery {
                seq: message.seq,
                size: message.data.len(),
                at,
                cpu: 0.0,
                timings: message.timings,
            });
            checker.submit(message.seq, message.data, payload);
            next = group.next().now_or_never().flatten();
        }
        held.extend(last.map(Delivery::counted));
        if let Err(e) = checker.settle(MAX_UNCHECKED).await {
            report_intact(rank, &mut held, &e);
            bail!(e.reason);
        }
        announce_checked(rank, &mut checker);
        if held.len() >= REPORT_HELD {
            report(rank, &mut held, &mut checker).await?;
        }
    }
    report(rank, &mut held, &mut checker).await
}

/// Print `held`'s `delivered` events once every one of their messages has
/// passed its check; if one failed, print those before it and say why.
async fn report(rank: u32, held: &mut Vec<Delivery>, checker: &mut Checker) -> anyhow::Result<()> {
    match checker.settle(0).await {
        Ok(()) => {
            announce_checked(rank, checker);
            print_deliveries(rank, held);
            Ok(())
        }
        Err(e) => {
            report_intact(rank, held, &e);
            Err(anyhow!(e.reason))
        }
    }
}

/// Print a `checked` event for each message the checking thread found
/// intact since the last call: `rdmc-bench` sends a large message's
/// successor only once every receiver has checked it, as Open MPI's
/// harness checks between its timed runs, so that no check shares the
/// cores with a measured transfer and no message's buffer is still held
/// when the next one needs one.
fn announce_checked(rank: u32, checker: &mut Checker) {
    for seq in checker.passed.drain(..) {
        emit(json!({"event": "checked", "rank": rank, "seq": seq}));
    }
}

/// Print the deliveries of `held` before the message that failed its check.
fn report_intact(rank: u32, held: &mut Vec<Delivery>, failed: &CheckFailed) {
    held.retain(|d| d.seq < failed.seq);
    print_deliveries(rank, held);
}

/// A receiver's `delivered` event before it is printed.
struct Delivery {
    seq: u64,
    size: usize,
    /// When the application took the message.
    at: Instant,
    /// The process's CPU seconds then.
    cpu: f64,
    timings: MessageTimings,
}

impl Delivery {
    /// With the process's CPU seconds now.
    fn counted(self) -> Delivery {
        Delivery {
            cpu: cpu_seconds(),
            ..self
        }
    }
}

/// Print `held`'s `delivered` events, one line each, in one write; empties it.
fn print_deliveries(rank: u32, held: &mut Vec<Delivery>) {
    use std::io::Write;
    let mut text = String::new();
    for d in held.drain(..) {
        let mut event = json!({"event": "delivered", "rank": rank, "seq": d.seq,
            "size": d.size, "t": mono_ns(d.at), "cpu": d.cpu});
        add_timings(&mut event, &d.timings);
        text.push_str(&event.to_string());
        text.push('\n');
    }
    let mut out = std::io::stdout().lock();
    // A closed stdout means the driver is gone: there is no one to tell.
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// Compares delivered messages with the payload on a thread of its own,
/// at the machine's lowest scheduling priority (`SCHED_IDLE`) while it
/// keeps up: a receiver still checks every byte of every message, but
/// with CPU time no member needs. Checked on the member's own thread, a
/// 64 MiB message took a few milliseconds of the cores that the members
/// after it still needed for the message's last blocks: where members
/// share few cores, the harness's own work showed in the measured time.
/// Open MPI's harness checks between its timed runs; likewise a receiver
/// says `checked` once a message passed ([`announce_checked`]) and
/// `rdmc-bench` sends the next large message only then. Where more than
/// one message waits all the same, the thread checks at normal priority until it has caught up.
struct Checker {
    jobs: Option<std::sync::mpsc::Sender<(u64, Bytes)>>,
    verdicts: tokio::sync::mpsc::UnboundedReceiver<Verdict>,
    /// Verdicts on the messages checked at once ([`CHECK_INLINE`]).
    inline: tokio::sync::mpsc::UnboundedSender<Verdict>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Messages submitted and not yet judged, shared with the thread.
    waiting: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Bytes of the messages submitted and not yet judged.
    unchecked: usize,
    /// The first message (lowest sequence number) judged to differ so far.
    failed: Option<CheckFailed>,
    /// Messages the thread found intact, not yet announced.
    passed: Vec<u64>,
}

/// What the checker found for one message.
struct Verdict {
    seq: u64,
    len: usize,
    intact: bool,
    /// The message's bytes, handed back so that the receiver's own thread
    /// drops them: their buffer goes back to the node's pool under a lock,
    /// which a thread at idle priority must never hold (preempted there,
    /// it would stall the member until the machine has an idle moment).
    data: Option<Bytes>,
}

/// The first message that differs from the payload.
#[derive(Debug)]
struct CheckFailed {
    seq: u64,
    reason: String,
}

impl Checker {
    /// Start the checking thread.
    fn spawn(payload: Bytes) -> anyhow::Result<Self> {
        use std::sync::atomic::Ordering;
        let (jobs, queue) = std::sync::mpsc::channel::<(u64, Bytes)>();
        let (verdict, verdicts) = tokio::sync::mpsc::unbounded_channel();
        let waiting = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let behind = waiting.clone();
        let inline = verdict.clone();
        let thread = std::thread::Builder::new()
            .name("rdmc-bench-check".into())
            .spawn(move || {
                let mut priority = Priority::Normal;
                for (seq, data) in queue {
                    let len = data.len();
                    let mut intact = len <= payload.len();
                    let slices = data.chunks(CHECK_SLICE).zip(payload.chunks(CHECK_SLICE));
                    for (got, want) in slices {
                        if !intact {
                            break;
                        }
                        // Idle priority unless another message waits too.
                        let wanted = if behind.load(Ordering::Acquire) > 1 {
                            Priority::Normal
                        } else {
                            Priority::Idle
                        };
                        if wanted != priority {
                            priority = wanted;
                            priority.apply();
                        }
                        intact = got == &want[..got.len()];
                    }
                    behind.fetch_sub(1, Ordering::AcqRel);
                    let judged = Verdict {
                        seq,
                        len,
                        intact,
                        data: Some(data),
                    };
                    if let Err(unsent) = verdict.send(judged) {
                        // The receiver is gone: its pool too, or nearly.
                        drop(unsent);
                        return;
                    }
                }
            })
            .map_err(|e| anyhow!("starting the checking thread: {e}"))?;
        Ok(Checker {
            jobs: Some(jobs),
            verdicts,
            inline,
            thread: Some(thread),
            waiting,
            unchecked: 0,
            failed: None,
            passed: Vec::new(),
        })
    }

    /// Check message `seq`: at once if it is small, else on the thread.
    fn submit(&mut self, seq: u64, data: Bytes, payload: &Bytes) {
        let len = data.len();
        self.unchecked += len;
        if len <= CHECK_INLINE {
            let intact = len <= payload.len() && data == payload[..len];
            let _ = self.inline.send(Verdict {
                seq,
                len,
                intact,
                data: None,
            });
            return;
        }
        self.waiting
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        if let Some(jobs) = &self.jobs {
            // The thread ends only when `jobs` is dropped (or it panicked:
            // then `settle` reports it).
            let _ = jobs.send((seq, data));
        }
    }

    /// Wait until at most `bytes` of the submitted messages are unchecked.
    /// If a message differs, wait until every one is judged and name the
    /// first that differs: every message before it is then known intact.
    async fn settle(&mut self, bytes: usize) -> Result<(), CheckFailed> {
        loop {
            while let Ok(verdict) = self.verdicts.try_recv() {
                self.record(verdict);
            }
            if self.failed.is_none() && self.unchecked <= bytes {
                return Ok(());
            }
            if self.unchecked == 0 {
                return Err(self.failed.take().expect("a message differs"));
            }
            self.judge_one().await?;
        }
    }

    /// Wait for the next verdict and take it into account (cancel-safe: a
    /// verdict is never lost). An error only if the checking thread is gone.
    async fn judge_one(&mut self) -> Result<(), CheckFailed> {
        match self.verdicts.recv().await {
            Some(verdict) => {
                self.record(verdict);
                Ok(())
            }
            None => Err(CheckFailed {
                seq: 0,
                reason: "the checking thread stopped".into(),
            }),
        }
    }

    /// Take a verdict into account.
    fn record(&mut self, verdict: Verdict) {
        self.unchecked -= verdict.len;
        if verdict.intact && verdict.data.is_some() {
            self.passed.push(verdict.seq);
        }
        if !verdict.intact && self.failed.as_ref().is_none_or(|f| verdict.seq < f.seq) {
            self.failed = Some(CheckFailed {
                seq: verdict.seq,
                reason: format!(
                    "message {} ({} bytes) differs from the root's payload",
                    verdict.seq, verdict.len
                ),
            });
        }
    }
}

impl Drop for Checker {
    fn drop(&mut self) {
        // Closing the queue ends the thread once it has checked what it holds.
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A scheduling priority of the checking thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Priority {
    /// Run only when no other thread wants a core (`SCHED_IDLE`).
    Idle,
    /// Like every other thread (`SCHED_OTHER`).
    Normal,
}

impl Priority {
    /// Make it the calling thread's. Best effort: a thread that may not
    /// change its policy keeps its priority.
    fn apply(self) {
        let policy = match self {
            Priority::Idle => libc::SCHED_IDLE,
            Priority::Normal => libc::SCHED_OTHER,
        };
        // SAFETY: a zeroed sched_param is valid (both policies take
        // priority 0); pid 0 is the calling thread.
        unsafe {
            let param: libc::sched_param = std::mem::zeroed();
            libc::sched_setscheduler(0, policy, &param);
        }
    }
}

/// Add a message's timings to an event: `started_t` in monotonic ns, the
/// rest in microseconds.
fn add_timings(event: &mut Value, t: &MessageTimings) {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    event["started_t"] = json!(mono_ns(t.started));
    event["setup_us"] = json!(us(t.setup));
    event["copy_us"] = json!(us(t.copy));
    event["transferring_us"] = json!(us(t.transferring));
    event["waiting_us"] = json!(us(t.waiting));
    event["total_us"] = json!(us(t.total));
}

fn emit(event: Value) {
    println!("{event}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_checker_passes_intact_messages_and_names_the_first_that_differs() {
        let payload = payload(1 << 20);
        let mut checker = Checker::spawn(payload.clone()).unwrap();
        // Large ones go to the thread, small ones are checked at once.
        checker.submit(0, payload.clone(), &payload);
        checker.submit(1, payload.slice(..1000), &payload);
        checker.submit(2, Bytes::new(), &payload);
        checker.settle(0).await.expect("intact messages pass");
        assert_eq!(checker.unchecked, 0);

        // A flipped byte in a large message, then a small message longer
        // than the payload allows, then an intact one.
        let mut flipped = payload.to_vec();
        flipped[777_777] ^= 1;
        checker.submit(3, payload.slice(..4096), &payload);
        checker.submit(4, Bytes::from(flipped), &payload);
        checker.submit(5, Bytes::from(vec![0u8; 70_000]), &payload);
        checker.submit(6, payload.slice(..200_000), &payload);
        let failed = checker.settle(0).await.expect_err("message 4 differs");
        assert_eq!(failed.seq, 4, "the first that differs");
        assert!(failed.reason.contains("message 4"), "{}", failed.reason);
        assert_eq!(checker.unchecked, 0, "every message was judged");
        checker.settle(0).await.expect("nothing left");

        // Too long for the payload: refused without comparing.
        checker.submit(7, Bytes::from(vec![0u8; (1 << 20) + 1]), &payload);
        checker.submit(8, Bytes::from(vec![0u8; 10]), &payload);
        let failed = checker.settle(0).await.expect_err("both differ");
        assert_eq!(failed.seq, 7);
    }

    #[tokio::test]
    async fn settling_waits_only_while_too_much_is_unchecked() {
        let payload = payload(1 << 20);
        let mut checker = Checker::spawn(payload.clone()).unwrap();
        for seq in 0..8 {
            checker.submit(seq, payload.clone(), &payload);
        }
        // At most one message's bytes may stay unchecked.
        checker.settle(1 << 20).await.unwrap();
        assert!(checker.unchecked <= 1 << 20);
        checker.settle(0).await.unwrap();
        assert_eq!(checker.unchecked, 0);
    }
}
