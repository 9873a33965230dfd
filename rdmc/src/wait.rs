//! How a node waits for completions: the [`CompletionMode`]s, and the one
//! waiting policy every driver loop follows (the node's actor over its
//! completion channel, a fabric driver over its completion queue).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::proto::BATCH_FLAG;

/// How a node waits for completions: the trade between the CPU it burns and
/// the latency with which it notices one (the RDMC paper's interrupt,
/// polling and hybrid modes, and an adaptive mode that spins only under
/// load).
///
/// The default is [`Adaptive`](Self::Adaptive) with
/// [`DEFAULT_SPIN_GAP`](Self::DEFAULT_SPIN_GAP): interrupt-driven while
/// completions are sparse, so an idle node uses no CPU, and spin-polling
/// while they stream in, as long as the process does not then spin more
/// loops than the machine has cores, or for a while after small messages.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionMode {
    /// Sleep until a completion arrives (the papers' interrupt mode). Uses
    /// no CPU while waiting; each completion after a quiet spell costs a
    /// wake-up.
    Interrupt,
    /// Never sleep: poll for completions continuously. Burns a core per
    /// node (two with the `ofi` transport) even while idle; worth it only
    /// with a core to spare for every node of the machine. Between empty
    /// polls the thread yields its core to any other runnable thread (as
    /// MPI's ranks do with `mpi_yield_when_idle`), so nodes sharing few
    /// cores take turns instead of starving each other for whole time
    /// slices.
    Polling,
    /// After any completion keep polling for `window`, then sleep until the
    /// next one — the papers' default with a 50 ms window. Burns a core for
    /// as long as completions come less than `window` apart, however many
    /// nodes share the machine's cores.
    Hybrid {
        /// How long to keep polling after the last completion.
        window: Duration,
    },
    /// Interrupt-driven, spinning only under load: once two completions
    /// come less than `gap` apart, keep polling until none has come for
    /// `gap`, then sleep again. A loop starts spinning only while fewer
    /// loops of the process spin than the machine has cores and (on Linux)
    /// no runnable thread of the machine waits for a core; otherwise it
    /// waits for interrupts, and asks again no sooner than `gap` later. So
    /// several nodes sharing a few cores, in one process or many, never
    /// starve the threads that produce their completions.
    ///
    /// Small messages are the exception: after a block of a message of at
    /// most [`LATENCY_BOUND_MESSAGE`](Self::LATENCY_BOUND_MESSAGE) bytes (or
    /// of a batch of small messages) arrives, or such a message is sent,
    /// where a wake-up at every hop would cost more than the transfer
    /// itself, the loop keeps polling for
    /// [`SMALL_MESSAGE_SPIN`](Self::SMALL_MESSAGE_SPIN) after it, even while
    /// the machine's cores are busy, as MPI's ranks do: it yields the core
    /// between empty polls, like [`Polling`](Self::Polling), so members
    /// sharing few cores take turns. So messages that follow each other
    /// (requests, acknowledgements, a stream of small writes) find the
    /// members awake, and a node that has seen no small message for that
    /// long sleeps: an idle one uses no CPU. The blocks of large messages
    /// (however small the blocks) spin only with a core to spare.
    Adaptive {
        /// Completions closer together than this count as a stream worth
        /// spinning for, and a spin ends after this long without one.
        gap: Duration,
    },
}

impl CompletionMode {
    /// The default [`Adaptive`](Self::Adaptive) gap: 1 ms, a few block
    /// transfers' time on a fast link, and far shorter than any pause of an
    /// idle group.
    pub const DEFAULT_SPIN_GAP: Duration = Duration::from_millis(1);

    /// The largest message an [`Adaptive`](Self::Adaptive) loop counts as
    /// latency-bound traffic: 64 KiB, about where a message's time on a
    /// 10 Gbit/s link passes a thread's wake-up.
    pub const LATENCY_BOUND_MESSAGE: usize = 64 << 10;

    /// How long an [`Adaptive`](Self::Adaptive) loop keeps polling after a
    /// small message ([`LATENCY_BOUND_MESSAGE`](Self::LATENCY_BOUND_MESSAGE)):
    /// 50 ms, the papers' hybrid window.
    pub const SMALL_MESSAGE_SPIN: Duration = Self::PAPER_HYBRID_WINDOW;

    /// The papers' [`Hybrid`](Self::Hybrid) window: 50 ms.
    pub const PAPER_HYBRID_WINDOW: Duration = Duration::from_millis(50);
}

impl Default for CompletionMode {
    fn default() -> Self {
        CompletionMode::Adaptive {
            gap: Self::DEFAULT_SPIN_GAP,
        }
    }
}

/// What a driver loop does after a pass over its queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// The pass found work: yield to other tasks, then pass again.
    Again,
    /// The pass found nothing, but the mode says keep polling: yield, then
    /// pass again.
    Spin,
    /// The pass found nothing and the mode says sleep until woken.
    Sleep,
}

/// How many driver loops may spin at once, and how many do: shared by every
/// [`Adaptive`](CompletionMode::Adaptive) loop of the process.
#[derive(Debug)]
pub(crate) struct SpinBudget {
    limit: usize,
    spinning: AtomicUsize,
    /// How to ask the machine too whether it is full (its runnable threads
    /// outnumber the given cores, other processes' included): no spinning
    /// then. `None`: do not ask.
    machine_is_full: Option<fn(usize) -> bool>,
}

impl SpinBudget {
    /// A budget of `limit` loops spinning at once.
    pub(crate) const fn new(limit: usize) -> Self {
        SpinBudget {
            limit,
            spinning: AtomicUsize::new(0),
            machine_is_full: None,
        }
    }

    /// The process's budget: as many spinning loops as the machine has
    /// cores (as [`std::thread::available_parallelism`] counts them), and
    /// none while the machine has no idle core.
    pub(crate) fn process() -> &'static SpinBudget {
        static PROCESS: OnceLock<SpinBudget> = OnceLock::new();
        PROCESS.get_or_init(|| SpinBudget {
            machine_is_full: Some(machine_is_full),
            ..SpinBudget::new(std::thread::available_parallelism().map_or(1, usize::from))
        })
    }

    /// Whether a loop spinning for large messages should give its place up
    /// (if this budget asks the machine): the machine has no idle core
    /// left for a thread that wakes up (its runnable threads, the caller
    /// included, are as many as its cores).
    fn machine_busy(&self) -> bool {
        self.machine_is_full
            .is_some_and(|full| full(self.limit.saturating_sub(1)))
    }

    /// A place among the spinning loops, if one is free (and, if
    /// `ask_machine`, the machine has a core to spare).
    fn try_acquire(&'static self, ask_machine: bool) -> Option<SpinSlot> {
        let full = self.machine_is_full.filter(|_| ask_machine);
        if full.is_some_and(|full| full(self.limit)) {
            return None;
        }
        self.spinning
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .ok()
            .map(|_| SpinSlot(self))
    }

    /// Loops spinning now.
    #[cfg(test)]
    fn spinning(&self) -> usize {
        self.spinning.load(Ordering::Acquire)
    }
}

/// Whether more threads of the whole machine are runnable than it has
/// `cores` (the caller included): then a spinning loop would take a core
/// some thread is waiting for. Linux: the running count of
/// `/proc/loadavg` (a small in-memory file; reading it does not block).
/// Elsewhere, or if it cannot be read: no.
fn machine_is_full(cores: usize) -> bool {
    #[cfg(target_os = "linux")]
    if let Ok(loadavg) = std::fs::read_to_string("/proc/loadavg") {
        return runnable_of_loadavg(&loadavg).is_some_and(|running| running > cores);
    }
    let _ = cores;
    false
}

/// The runnable threads in a `/proc/loadavg` line (`"0.5 0.4 0.3 3/97 123"`: 3).
fn runnable_of_loadavg(line: &str) -> Option<usize> {
    let (running, _) = line.split_whitespace().nth(3)?.split_once('/')?;
    running.parse().ok()
}

/// A loop's place among the spinning loops of its [`SpinBudget`], given
/// back when dropped.
#[derive(Debug)]
struct SpinSlot(&'static SpinBudget);

impl Drop for SpinSlot {
    fn drop(&mut self) {
        self.0.spinning.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The waiting policy of one driver loop in one [`CompletionMode`].
#[derive(Debug)]
pub(crate) struct WaitPolicy {
    mode: CompletionMode,
    /// Hybrid and Adaptive: poll until then, after the last pass that found
    /// work.
    spin_until: Option<Instant>,
    /// Adaptive: when a pass last found work.
    last_work: Option<Instant>,
    /// Adaptive: a block of a small message moved since the last pass.
    small_message: bool,
    /// Adaptive: when a pass last saw a small message's block.
    last_small: Option<Instant>,
    /// Adaptive: the loop's place among the process's spinning loops, held
    /// while it spins.
    slot: Option<SpinSlot>,
    /// Adaptive: after a place was refused, do not ask again before then;
    /// while one is held for a stream of large messages, ask the machine
    /// again then whether it still has a core to spare.
    ask_after: Option<Instant>,
    budget: &'static SpinBudget,
}

impl WaitPolicy {
    pub(crate) fn new(mode: CompletionMode) -> Self {
        Self::with_budget(mode, SpinBudget::process())
    }

    fn with_budget(mode: CompletionMode, budget: &'static SpinBudget) -> Self {
        WaitPolicy {
            mode,
            spin_until: None,
            last_work: None,
            small_message: false,
            last_small: None,
            slot: None,
            ask_after: None,
            budget,
        }
    }

    /// The mode it follows.
    pub(crate) fn mode(&self) -> CompletionMode {
        self.mode
    }

    /// A block of a message of `size` bytes arrived, or a message of
    /// `size` bytes was sent, in the pass under way: the
    /// [`Adaptive`](CompletionMode::Adaptive) mode spins after small ones
    /// even on a busy machine. Only the message's size counts: the blocks
    /// of a large message can be as small (48 KiB over TCP by default), and
    /// a large transfer should not keep every member of a busy machine
    /// polling.
    pub(crate) fn message_moved(&mut self, size: u64) {
        self.small_message |= size <= CompletionMode::LATENCY_BOUND_MESSAGE as u64;
    }

    /// A block arrived carrying `immediate`, its message's size (with the
    /// flag of a batch of small messages, which counts as small whatever
    /// its size): see [`message_moved`](Self::message_moved).
    pub(crate) fn block_received(&mut self, immediate: u64) {
        if immediate & BATCH_FLAG != 0 {
            self.message_moved(0);
        } else {
            self.message_moved(immediate);
        }
    }

    /// What to do after a pass that handled `work` events.
    pub(crate) fn after_pass(&mut self, work: usize) -> Next {
        self.after_pass_at(work, Instant::now())
    }

    /// After a pass that handled `work` events: yield as the policy says,
    /// and say whether the loop should now sleep until woken (`false`:
    /// pass again).
    ///
    /// A pass that found nothing while the mode keeps polling first lets
    /// the other threads of the machine have the core for a moment (as
    /// MPI's ranks do with `mpi_yield_when_idle`): on a machine with few
    /// cores, a poller that never yields starves, for a whole time slice,
    /// the very threads that produce its completions — a provider's
    /// progress thread, the peers, members sharing the cores.
    pub(crate) async fn should_sleep_after(&mut self, work: usize) -> bool {
        match self.after_pass(work) {
            Next::Again => {
                tokio::task::yield_now().await;
                false
            }
            Next::Spin => {
                std::thread::yield_now();
                tokio::task::yield_now().await;
                false
            }
            Next::Sleep => true,
        }
    }

    fn after_pass_at(&mut self, work: usize, now: Instant) -> Next {
        // Counted even in a pass that found nothing: the block may have
        // come while the loop slept.
        if std::mem::take(&mut self.small_message) {
            self.last_small = Some(now);
        }
        if work > 0 {
            match self.mode {
                CompletionMode::Hybrid { window } => self.spin_until = now.checked_add(window),
                CompletionMode::Adaptive { gap } => {
                    let streaming = self
                        .last_work
                        .is_some_and(|last| now.saturating_duration_since(last) < gap);
                    self.last_work = Some(now);
                    if streaming {
                        self.spin_until = now.checked_add(gap);
                    }
                }
                CompletionMode::Interrupt | CompletionMode::Polling => {}
            }
            return Next::Again;
        }
        let spinning = match self.mode {
            CompletionMode::Polling => true,
            CompletionMode::Hybrid { .. } => self.spin_until.is_some_and(|until| now < until),
            CompletionMode::Adaptive { .. } => {
                let small = self.last_small.is_some_and(|last| {
                    now.saturating_duration_since(last) < CompletionMode::SMALL_MESSAGE_SPIN
                });
                (small || self.spin_until.is_some_and(|until| now < until))
                    && self.has_slot(now, small)
            }
            CompletionMode::Interrupt => false,
        };
        if spinning {
            Next::Spin
        } else {
            self.spin_until = None;
            self.slot = None;
            Next::Sleep
        }
    }

    /// Whether the loop holds a place among the spinning loops, taking one
    /// if one is free: for a stream of small messages whether or not the
    /// machine has a core to spare, otherwise only if it has (asking the
    /// machine at most once a gap). A place held for large messages is
    /// given up once the machine, asked again every gap, has no idle core
    /// left: a long transfer started on an idle machine does not keep its
    /// loop polling once other threads want the cores (16 members of a
    /// 2-core lab spinning through a push took 13.1–13.2 s, not 12.4–12.9).
    fn has_slot(&mut self, now: Instant, small: bool) -> bool {
        let due = self.ask_after.is_none_or(|after| now >= after);
        if self.slot.is_some() {
            if small || !due {
                return true;
            }
            self.ask_after = self.next_ask(now);
            if self.budget.machine_busy() {
                self.slot = None;
                return false;
            }
            return true;
        }
        if !small && !due {
            return false;
        }
        self.slot = self.budget.try_acquire(!small);
        self.ask_after = self.next_ask(now);
        self.slot.is_some()
    }

    /// When an adaptive loop next asks the machine: a gap after `now`.
    fn next_ask(&self, now: Instant) -> Option<Instant> {
        match self.mode {
            CompletionMode::Adaptive { gap } => now.checked_add(gap),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A budget of its own for one test (tests run in parallel).
    fn budget(limit: usize) -> &'static SpinBudget {
        Box::leak(Box::new(SpinBudget::new(limit)))
    }

    fn adaptive(gap: Duration, budget: &'static SpinBudget) -> WaitPolicy {
        WaitPolicy::with_budget(CompletionMode::Adaptive { gap }, budget)
    }

    /// An adaptive loop that has just seen two completions at `t`: a stream.
    fn streaming(gap: Duration, budget: &'static SpinBudget, t: Instant) -> WaitPolicy {
        let mut p = adaptive(gap, budget);
        assert_eq!(p.after_pass_at(1, t), Next::Again);
        assert_eq!(p.after_pass_at(1, t), Next::Again);
        p
    }

    #[test]
    fn interrupt_sleeps_whenever_a_pass_is_empty() {
        let mut p = WaitPolicy::new(CompletionMode::Interrupt);
        let t = Instant::now();
        assert_eq!(p.after_pass_at(3, t), Next::Again);
        assert_eq!(p.after_pass_at(0, t), Next::Sleep);
    }

    #[test]
    fn polling_never_sleeps() {
        let mut p = WaitPolicy::new(CompletionMode::Polling);
        let t = Instant::now();
        assert_eq!(p.after_pass_at(0, t), Next::Spin);
        assert_eq!(
            p.after_pass_at(0, t + Duration::from_secs(3600)),
            Next::Spin
        );
    }

    #[test]
    fn hybrid_spins_for_its_window_after_the_last_work_then_sleeps() {
        let window = Duration::from_millis(50);
        let mut p = WaitPolicy::new(CompletionMode::Hybrid { window });
        let t = Instant::now();
        // Nothing has happened yet: sleep.
        assert_eq!(p.after_pass_at(0, t), Next::Sleep);
        assert_eq!(p.after_pass_at(1, t), Next::Again);
        assert_eq!(p.after_pass_at(0, t + window / 2), Next::Spin);
        // Work again restarts the window.
        assert_eq!(p.after_pass_at(1, t + window / 2), Next::Again);
        assert_eq!(p.after_pass_at(0, t + window), Next::Spin);
        assert_eq!(p.after_pass_at(0, t + window / 2 + window), Next::Sleep);
        // Once asleep, an empty pass does not spin again.
        assert_eq!(p.after_pass_at(0, t + window / 2 + window / 2), Next::Sleep);
    }

    #[test]
    fn an_enormous_window_sleeps_instead_of_overflowing() {
        for mode in [
            CompletionMode::Hybrid {
                window: Duration::MAX,
            },
            CompletionMode::Adaptive { gap: Duration::MAX },
        ] {
            let mut p = WaitPolicy::with_budget(mode, budget(4));
            let t = Instant::now();
            assert_eq!(p.after_pass_at(1, t), Next::Again);
            assert_eq!(p.after_pass_at(1, t), Next::Again);
            // checked_add overflowed: no deadline, so sleep rather than spin
            // forever.
            assert_eq!(p.after_pass_at(0, t), Next::Sleep, "{mode:?}");
        }
    }

    #[test]
    fn the_default_is_adaptive_with_a_short_gap() {
        assert_eq!(
            CompletionMode::default(),
            CompletionMode::Adaptive {
                gap: CompletionMode::DEFAULT_SPIN_GAP
            }
        );
        assert!(CompletionMode::DEFAULT_SPIN_GAP <= Duration::from_millis(1));
    }

    #[test]
    fn adaptive_sleeps_after_a_lone_completion() {
        let gap = Duration::from_millis(1);
        let mut p = adaptive(gap, budget(4));
        let t = Instant::now();
        assert_eq!(p.after_pass_at(0, t), Next::Sleep);
        assert_eq!(p.after_pass_at(1, t), Next::Again);
        assert_eq!(
            p.after_pass_at(0, t),
            Next::Sleep,
            "one completion is no stream"
        );
        // Completions a gap or more apart never start a spin.
        for i in 1..10 {
            let at = t + gap * i;
            assert_eq!(p.after_pass_at(1, at), Next::Again);
            assert_eq!(p.after_pass_at(0, at), Next::Sleep);
        }
    }

    #[test]
    fn adaptive_spins_while_completions_stream_and_sleeps_when_they_stop() {
        let gap = Duration::from_millis(1);
        let budget = budget(4);
        let mut p = adaptive(gap, budget);
        let t = Instant::now();
        assert_eq!(p.after_pass_at(1, t), Next::Again);
        assert_eq!(p.after_pass_at(0, t), Next::Sleep);
        // The next one comes within the gap: a stream, spin.
        let mut at = t + gap / 2;
        assert_eq!(p.after_pass_at(1, at), Next::Again);
        assert_eq!(p.after_pass_at(0, at), Next::Spin);
        assert_eq!(budget.spinning(), 1);
        // More keep coming: keep spinning past the first gap.
        for _ in 0..10 {
            assert_eq!(p.after_pass_at(0, at + gap / 3), Next::Spin);
            at += gap * 2 / 3;
            assert_eq!(p.after_pass_at(1, at), Next::Again);
            assert_eq!(p.after_pass_at(0, at), Next::Spin);
        }
        // Then they stop: spin for the gap, then sleep and give the place
        // back.
        assert_eq!(p.after_pass_at(0, at + gap / 2), Next::Spin);
        assert_eq!(p.after_pass_at(0, at + gap), Next::Sleep);
        assert_eq!(budget.spinning(), 0);
        // Asleep, it stays asleep.
        assert_eq!(p.after_pass_at(0, at + gap / 2), Next::Sleep);
        // A completion long after the last is a new start, not a stream.
        let later = at + gap * 10;
        assert_eq!(p.after_pass_at(1, later), Next::Again);
        assert_eq!(p.after_pass_at(0, later), Next::Sleep);
    }

    #[test]
    fn adaptive_loops_never_spin_more_than_the_budget_allows() {
        let gap = Duration::from_millis(1);
        let budget = budget(2);
        let mut loops: Vec<WaitPolicy> = (0..5).map(|_| adaptive(gap, budget)).collect();
        let t = Instant::now();
        // Every loop sees a stream of completions.
        let next: Vec<Next> = loops
            .iter_mut()
            .map(|p| {
                p.after_pass_at(1, t);
                p.after_pass_at(1, t + gap / 4);
                p.after_pass_at(0, t + gap / 4)
            })
            .collect();
        let spinning = next.iter().filter(|n| **n == Next::Spin).count();
        assert_eq!(spinning, 2, "{next:?}");
        assert_eq!(budget.spinning(), 2);
        // Those that got no place wait for interrupts; a spinner that goes
        // to sleep frees its place for the next stream.
        let spinner = next.iter().position(|n| *n == Next::Spin).unwrap();
        let sleeper = next.iter().position(|n| *n == Next::Sleep).unwrap();
        assert_eq!(loops[sleeper].after_pass_at(0, t + gap / 2), Next::Sleep);
        assert_eq!(loops[spinner].after_pass_at(0, t + gap * 2), Next::Sleep);
        assert_eq!(budget.spinning(), 1);
        let at = t + gap * 2;
        assert_eq!(loops[sleeper].after_pass_at(1, at - gap / 2), Next::Again);
        assert_eq!(loops[sleeper].after_pass_at(1, at), Next::Again);
        assert_eq!(loops[sleeper].after_pass_at(0, at), Next::Spin);
        assert_eq!(budget.spinning(), 2);
        // A loop that ends gives its place back.
        drop(loops);
        assert_eq!(budget.spinning(), 0);
    }

    #[test]
    fn a_large_stream_stops_spinning_once_the_machine_has_no_core_to_spare() {
        use std::sync::atomic::AtomicBool;
        static FULL: AtomicBool = AtomicBool::new(false);
        let machine: &'static SpinBudget = Box::leak(Box::new(SpinBudget {
            machine_is_full: Some(|_| FULL.load(Ordering::Acquire)),
            ..SpinBudget::new(2)
        }));
        let gap = Duration::from_millis(1);
        let t = Instant::now();
        // A stream of large messages on an idle machine spins.
        let mut p = streaming(gap, machine, t);
        assert_eq!(p.after_pass_at(0, t), Next::Spin);
        assert_eq!(machine.spinning(), 1);
        // The machine fills up: the loop keeps its place until it asks
        // again, a gap later, then gives it up and sleeps.
        FULL.store(true, Ordering::Release);
        let mut at = t;
        for _ in 0..3 {
            at += gap / 4;
            assert_eq!(p.after_pass_at(1, at), Next::Again);
        }
        assert_eq!(p.after_pass_at(0, at), Next::Spin);
        at += gap / 2;
        assert_eq!(p.after_pass_at(1, at), Next::Again);
        assert_eq!(p.after_pass_at(0, at), Next::Sleep);
        assert_eq!(machine.spinning(), 0);
        // While it is full the stream does not spin again, asking a gap
        // apart; once a core is free it does.
        at += gap / 2;
        assert_eq!(p.after_pass_at(1, at), Next::Again);
        assert_eq!(p.after_pass_at(0, at), Next::Sleep);
        FULL.store(false, Ordering::Release);
        at += gap / 4;
        assert_eq!(p.after_pass_at(1, at), Next::Again);
        assert_eq!(p.after_pass_at(0, at), Next::Sleep, "asked a gap after");
        at += gap / 4;
        assert_eq!(p.after_pass_at(1, at), Next::Again);
        assert_eq!(p.after_pass_at(0, at), Next::Spin);
        assert_eq!(machine.spinning(), 1);
        // Small messages keep their place on a full machine.
        FULL.store(true, Ordering::Release);
        p.message_moved(1);
        at += gap * 2;
        assert_eq!(p.after_pass_at(0, at), Next::Spin);
        assert_eq!(machine.spinning(), 1);
    }

    #[test]
    fn a_budget_of_one_core_still_lets_one_loop_spin() {
        let budget = budget(1);
        let gap = Duration::from_millis(1);
        let t = Instant::now();
        let (mut a, mut b) = (streaming(gap, budget, t), streaming(gap, budget, t));
        assert_eq!(a.after_pass_at(0, t), Next::Spin);
        assert_eq!(b.after_pass_at(0, t), Next::Sleep);
    }

    #[test]
    fn the_process_budget_is_the_core_count_and_asks_the_machine() {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(SpinBudget::process().limit, cores);
        assert!(SpinBudget::process().machine_is_full.is_some());
    }

    #[test]
    fn on_a_busy_machine_adaptive_spins_after_small_messages_only() {
        // A machine whose cores are always taken.
        let busy: &'static SpinBudget = Box::leak(Box::new(SpinBudget {
            machine_is_full: Some(|_| true),
            ..SpinBudget::new(4)
        }));
        let gap = Duration::from_millis(1);
        let spin = CompletionMode::SMALL_MESSAGE_SPIN;
        let t = Instant::now();
        let stream = |size: u64| {
            let mut p = adaptive(gap, busy);
            for k in 0..2 {
                p.message_moved(size);
                assert_eq!(p.after_pass_at(1, t + gap / 4 * k), Next::Again);
            }
            p
        };
        // Large messages: no core to spare, no spin.
        let mut large = stream(CompletionMode::LATENCY_BOUND_MESSAGE as u64 + 1);
        assert_eq!(large.after_pass_at(0, t + gap / 4), Next::Sleep);
        assert_eq!(busy.spinning(), 0);
        // The blocks of an 8 MiB message, however small, are a large
        // message's; those of a batch, however large, small messages'.
        let mut received = adaptive(gap, busy);
        for k in 0..2 {
            received.block_received(8 << 20);
            assert_eq!(received.after_pass_at(1, t + gap / 4 * k), Next::Again);
        }
        assert_eq!(received.after_pass_at(0, t + gap / 4), Next::Sleep);
        received.block_received((1 << 20) | BATCH_FLAG);
        assert_eq!(received.after_pass_at(0, t + gap / 2), Next::Spin);
        drop(received);
        // Small messages: spin all the same, within the process's budget,
        // for the small-message window after the last one (not just a gap).
        let mut small = stream(CompletionMode::LATENCY_BOUND_MESSAGE as u64);
        let last = t + gap / 4;
        assert_eq!(small.after_pass_at(0, last), Next::Spin);
        assert_eq!(busy.spinning(), 1);
        assert_eq!(small.after_pass_at(0, last + gap * 5), Next::Spin);
        // Other completions (no block) do not extend the window.
        assert_eq!(small.after_pass_at(1, last + spin / 2), Next::Again);
        assert_eq!(small.after_pass_at(0, last + spin / 2), Next::Spin);
        assert_eq!(small.after_pass_at(0, last + spin), Next::Sleep);
        assert_eq!(busy.spinning(), 0);
        // One small block after a quiet spell is enough to spin again.
        let later = last + spin * 3;
        small.message_moved(1);
        assert_eq!(small.after_pass_at(1, later), Next::Again);
        assert_eq!(small.after_pass_at(0, later + spin / 2), Next::Spin);
        assert_eq!(small.after_pass_at(0, later + spin), Next::Sleep);
        // A small block handled while the loop slept (outside a pass's
        // count) counts at the next pass, even an empty one.
        let woken = later + spin * 2;
        small.message_moved(1);
        assert_eq!(small.after_pass_at(0, woken), Next::Spin);
        assert_eq!(small.after_pass_at(0, woken + spin), Next::Sleep);
        // A stream of other completions asks the machine, which refuses.
        let quiet = later + spin * 3;
        assert_eq!(small.after_pass_at(1, quiet), Next::Again);
        assert_eq!(small.after_pass_at(1, quiet), Next::Again);
        assert_eq!(small.after_pass_at(0, quiet), Next::Sleep);
        assert_eq!(busy.spinning(), 0);
    }

    #[test]
    fn a_refused_loop_asks_again_only_a_gap_later() {
        let gap = Duration::from_millis(1);
        let budget = budget(1);
        let t = Instant::now();
        let (mut a, mut b) = (streaming(gap, budget, t), streaming(gap, budget, t));
        assert_eq!(a.after_pass_at(0, t), Next::Spin);
        assert_eq!(b.after_pass_at(0, t), Next::Sleep);
        // The place comes free, but b was refused just now: it sleeps
        // until a gap has passed, then gets it.
        drop(a);
        let soon = t + gap / 2;
        assert_eq!(b.after_pass_at(1, soon), Next::Again);
        assert_eq!(b.after_pass_at(0, soon), Next::Sleep);
        let later = t + gap;
        assert_eq!(b.after_pass_at(1, later), Next::Again);
        assert_eq!(b.after_pass_at(0, later), Next::Spin);
        assert_eq!(budget.spinning(), 1);
    }

    #[test]
    fn the_runnable_count_is_read_from_loadavg() {
        assert_eq!(runnable_of_loadavg("0.50 0.40 0.30 3/97 12345\n"), Some(3));
        assert_eq!(runnable_of_loadavg("10.51 10.75 7.88 12/310 99"), Some(12));
        assert_eq!(runnable_of_loadavg("garbage"), None);
        assert_eq!(runnable_of_loadavg("1 2 3 x/9 1"), None);
        // This machine: at least this thread runs.
        #[cfg(target_os = "linux")]
        {
            let line = std::fs::read_to_string("/proc/loadavg").unwrap();
            assert!(runnable_of_loadavg(&line).unwrap() >= 1, "{line}");
            assert!(machine_is_full(0));
        }
    }
}
