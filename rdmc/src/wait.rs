//! How a node waits for completions: the [`CompletionMode`]s, and the one
//! waiting policy every driver loop follows (the node's actor over its
//! completion channel, a fabric driver over its completion queue).

use std::time::{Duration, Instant};

/// How a node waits for completions: the trade between the CPU it burns and
/// the latency with which it notices one (the RDMC paper's interrupt, polling
/// and hybrid modes).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionMode {
    /// Sleep until a completion arrives (the papers' interrupt mode).
    Interrupt,
    /// Never sleep: poll for completions continuously.
    Polling,
    /// After any completion keep polling for `window`, then sleep until the
    /// next one — the papers' default with a 50 ms window.
    Hybrid {
        /// How long to keep polling after the last completion.
        window: Duration,
    },
}

impl Default for CompletionMode {
    fn default() -> Self {
        CompletionMode::Hybrid {
            window: Duration::from_millis(50),
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

/// The waiting policy of one driver loop in one [`CompletionMode`].
#[derive(Debug)]
pub(crate) struct WaitPolicy {
    mode: CompletionMode,
    /// Hybrid: poll until then, after the last pass that found work.
    spin_until: Option<Instant>,
}

impl WaitPolicy {
    pub(crate) fn new(mode: CompletionMode) -> Self {
        WaitPolicy {
            mode,
            spin_until: None,
        }
    }

    /// What to do after a pass that handled `work` events.
    pub(crate) fn after_pass(&mut self, work: usize) -> Next {
        self.after_pass_at(work, Instant::now())
    }

    fn after_pass_at(&mut self, work: usize, now: Instant) -> Next {
        if work > 0 {
            if let CompletionMode::Hybrid { window } = self.mode {
                self.spin_until = now.checked_add(window);
            }
            return Next::Again;
        }
        let spinning = match self.mode {
            CompletionMode::Polling => true,
            CompletionMode::Hybrid { .. } => self.spin_until.is_some_and(|until| now < until),
            CompletionMode::Interrupt => false,
        };
        if spinning {
            Next::Spin
        } else {
            self.spin_until = None;
            Next::Sleep
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(p.after_pass_at(0, t + Duration::from_secs(3600)), Next::Spin);
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
    fn an_enormous_window_spins_instead_of_overflowing() {
        let mut p = WaitPolicy::new(CompletionMode::Hybrid {
            window: Duration::MAX,
        });
        let t = Instant::now();
        assert_eq!(p.after_pass_at(1, t), Next::Again);
        // checked_add overflowed: no deadline, so sleep rather than spin forever.
        assert_eq!(p.after_pass_at(0, t), Next::Sleep);
    }
}
