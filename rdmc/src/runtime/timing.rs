//! Per-message timings: where one member's time went while a message passed
//! through it (the breakdown of the RDMC paper's Table 1).

use std::time::{Duration, Instant};

/// Where one member's time went during one message.
///
/// Measured by the node's actor with the monotonic clock, at the moments it
/// handles the transport's completions, so each figure includes the time the
/// completion waited to be noticed (which is what the completion mode —
/// interrupt, hybrid or polling — changes).
///
/// * On a receiver ([`Message::timings`](crate::Message)) the message
///   starts when its first block arrives (into the node's bounce buffer: the
///   size is not known before).
/// * On the root ([`Receipt::sent`](crate::Receipt::sent)) it starts when
///   the node takes the message [`Sender::send`](crate::Sender::send)
///   queued.
///
/// After setup, the time to completion is cut at every event the node
/// handles for the group (a block sent or received, a peer's signal): an
/// interval during which the member held the next block it sends, had no
/// send outstanding and only lacked its target's ready-for-block counts as
/// [`waiting`](Self::waiting) (the papers' "waiting"), any other as
/// [`transferring`](Self::transferring).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageTimings {
    /// When the message started here (see above).
    pub started: Instant,
    /// Local setup. Root: from taking the message to handing its first
    /// block to the transport. Receiver: from the first block's arrival to
    /// the message's buffer allocated and its receives posted, not counting
    /// [`copy`](Self::copy).
    pub setup: Duration,
    /// Receiver: copying the first block out of the bounce buffer into the
    /// message's buffer. Zero on the root.
    pub copy: Duration,
    /// Time with a transfer possible or in progress (see above).
    pub transferring: Duration,
    /// Time with the next block ready to go and its target not ready for it.
    pub waiting: Duration,
    /// From [`started`](Self::started) to the message complete here.
    pub total: Duration,
}

impl MessageTimings {
    /// Time-zero timings starting at `started`.
    fn new(started: Instant) -> Self {
        MessageTimings {
            started,
            setup: Duration::ZERO,
            copy: Duration::ZERO,
            transferring: Duration::ZERO,
            waiting: Duration::ZERO,
            total: Duration::ZERO,
        }
    }
}

/// How the member spent an interval of a message's time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lap {
    /// Transfers were possible or in progress.
    Transfer,
    /// The next block waited for its target's ready-for-block.
    Waiting,
}

/// Accumulates one message's [`MessageTimings`] as its events happen.
#[derive(Clone, Debug)]
pub(crate) struct Stopwatch {
    timings: MessageTimings,
    /// The end of the last interval accounted for; `None` until setup ends.
    last: Option<Instant>,
    /// The message's `rdmc_message` span: open for as long as the message
    /// is in flight here (a trace viewer draws it as one slice).
    _span: tracing::Span,
}

/// The span of message `seq` (`bytes` long) of the group of `group`'s
/// span, from its start here to its completion or failure.
pub(crate) fn message_span(group: &tracing::Span, seq: u64, bytes: usize) -> tracing::Span {
    tracing::debug_span!(parent: group, "rdmc_message", seq, bytes)
}

impl Stopwatch {
    /// A message that started at `started`.
    pub(crate) fn start(started: Instant) -> Self {
        Stopwatch {
            timings: MessageTimings::new(started),
            last: None,
            _span: tracing::Span::none(),
        }
    }

    /// The same, its message's span `span`, closed when the message
    /// completes (or fails) here.
    pub(crate) fn traced(self, span: tracing::Span) -> Self {
        Stopwatch {
            _span: span,
            ..self
        }
    }

    /// Count `copy` as copy time (part of setup's wall time, kept apart).
    pub(crate) fn add_copy(&mut self, copy: Duration) {
        self.timings.copy += copy;
    }

    /// End the setup at `now` (only the first call counts).
    pub(crate) fn end_setup(&mut self, now: Instant) {
        if self.last.is_none() {
            let wall = now.saturating_duration_since(self.timings.started);
            self.timings.setup = wall.saturating_sub(self.timings.copy);
            self.last = Some(now);
        }
    }

    /// Whether the setup has ended.
    pub(crate) fn setup_ended(&self) -> bool {
        self.last.is_some()
    }

    /// An event at `now` ends the current interval, spent as `lap` says.
    pub(crate) fn lap(&mut self, now: Instant, lap: Lap) {
        let Some(last) = self.last else {
            return;
        };
        let interval = now.saturating_duration_since(last);
        match lap {
            Lap::Transfer => self.timings.transferring += interval,
            Lap::Waiting => self.timings.waiting += interval,
        }
        self.last = Some(now.max(last));
    }

    /// The message completed at `now`.
    pub(crate) fn finish(mut self, now: Instant) -> MessageTimings {
        self.end_setup(now);
        self.timings.total = now.saturating_duration_since(self.timings.started);
        self.timings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn intervals_are_split_by_what_ended_them() {
        let t0 = Instant::now();
        let mut sw = Stopwatch::start(t0);
        sw.add_copy(2 * MS);
        // Events before setup ends are not laps.
        sw.lap(t0 + MS, Lap::Transfer);
        assert!(!sw.setup_ended());
        sw.end_setup(t0 + 5 * MS);
        assert!(sw.setup_ended());
        sw.end_setup(t0 + 6 * MS); // ignored
        sw.lap(t0 + 15 * MS, Lap::Transfer);
        sw.lap(t0 + 18 * MS, Lap::Waiting);
        sw.lap(t0 + 28 * MS, Lap::Transfer);
        let t = sw.finish(t0 + 30 * MS);
        assert_eq!(t.started, t0);
        assert_eq!(t.copy, 2 * MS);
        assert_eq!(t.setup, 3 * MS);
        assert_eq!(t.transferring, 20 * MS);
        assert_eq!(t.waiting, 3 * MS);
        assert_eq!(t.total, 30 * MS);
        // Everything but the tail after the last event is accounted for.
        assert_eq!(
            t.setup + t.copy + t.transferring + t.waiting + 2 * MS,
            t.total
        );
    }

    #[test]
    fn a_message_finished_during_setup_has_setup_only() {
        let t0 = Instant::now();
        let t = Stopwatch::start(t0).finish(t0 + 4 * MS);
        assert_eq!(t.setup, 4 * MS);
        assert_eq!(t.transferring + t.waiting + t.copy, Duration::ZERO);
        assert_eq!(t.total, 4 * MS);
    }

    #[test]
    fn clock_going_backwards_never_panics_or_goes_negative() {
        let t0 = Instant::now() + 10 * MS;
        let mut sw = Stopwatch::start(t0);
        sw.end_setup(t0 - MS);
        sw.lap(t0 - 2 * MS, Lap::Transfer);
        let t = sw.finish(t0 - 3 * MS);
        assert_eq!(t.total, Duration::ZERO);
        assert_eq!(t.transferring, Duration::ZERO);
    }
}
