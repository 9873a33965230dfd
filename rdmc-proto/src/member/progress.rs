//! The progress timeout: a group that waits on a peer which stays alive
//! but does nothing (sends only heartbeats, holds a close open) fails
//! instead of stalling forever.
//!
//! Every input of the member is progress. Time is the driver's: it calls
//! [`GroupMember::handle_timeout`] with the current time after every input
//! and at [`GroupMember::poll_timeout`]; the member never reads a clock.

use std::time::Duration;

use super::{Failure, FailureKind, GroupMember, Phase, Rank, Schedule};

/// Since when a member has seen no progress.
#[derive(Clone, Copy, Debug)]
pub(super) struct Stall {
    /// The first time the driver passed in after the last progress.
    since: Duration,
    /// The member's progress counter then.
    progress: u64,
    /// Multiple of the timeout to wait for what the member waits on now.
    factor: u32,
}

impl GroupMember {
    /// The time is `now` (any clock the driver keeps, from any origin, as
    /// long as it never goes back): fail the group if it has made no
    /// progress for the progress timeout while this member waits on a peer,
    /// naming that peer ([`FailureKind::NoProgress`]).
    ///
    /// What a member waits on, and for how long:
    /// * a peer's ready-for-block for a block it holds, the completion of a
    ///   send to a peer, or (root) a member's close acknowledgement — which
    ///   needs that member's application to take every message and close:
    ///   the timeout;
    /// * a block from a peer (mid-message, or after the close count is
    ///   known): twice the timeout, since that peer may itself be held up
    ///   by another, who should be named first;
    /// * (receiver, after acknowledging) the root's verdict: four times the
    ///   timeout, since the root waits on every other member first.
    ///
    /// Each of them, plus the report grace
    /// ([`MemberConfig::report_grace`](super::MemberConfig::report_grace)):
    /// no progress is seen from outside the suspect, and a report of the
    /// failure that caused it, arriving meanwhile, decides instead
    /// ([one cause per failure](super::FailureKind#one-cause-per-failure)).
    ///
    /// A member waiting only on its own application (a full receive window,
    /// or a close its application has not made) or idle (the root sends
    /// nothing) never times out; the members waiting on it do.
    ///
    /// Call it after every input (cheap), and at [`poll_timeout`](Self::poll_timeout).
    ///
    /// It also checks the slow-reader timeout
    /// ([`MemberConfig::slow_reader_timeout`](super::MemberConfig::slow_reader_timeout)).
    pub fn handle_timeout(&mut self, now: Duration) {
        self.check_slow_reader(now);
        let Some(timeout) = self.config.progress_timeout else {
            return;
        };
        if self.is_finished() {
            return;
        }
        let stall = match self.stall {
            Some(stall) if stall.progress == self.progress => stall,
            _ => {
                self.stall = Some(Stall {
                    since: now,
                    progress: self.progress,
                    factor: 1,
                });
                return;
            }
        };
        if now
            < self
                .deadline(stall.since, timeout, stall.factor)
                .unwrap_or(Duration::MAX)
        {
            return;
        }
        let Some((peer, factor)) = self.waiting_on() else {
            // Idle, or waiting on the application: no deadline until the
            // next input.
            self.stall = None;
            return;
        };
        let at = self
            .deadline(stall.since, timeout, factor)
            .unwrap_or(Duration::MAX);
        if now < at {
            self.stall = Some(Stall { factor, ..stall });
            return;
        }
        tracing::warn!(peer, waited = ?now.saturating_sub(stall.since), "no progress");
        self.fail(Failure::new(Some(peer), FailureKind::NoProgress));
    }

    /// When the driver should call [`handle_timeout`](Self::handle_timeout)
    /// next, if the member has a deadline (in the driver's time).
    pub fn poll_timeout(&self) -> Option<Duration> {
        if self.is_finished() {
            return None;
        }
        let progress = self.config.progress_timeout.and_then(|timeout| {
            self.stall.and_then(|s| {
                self.deadline(s.since, timeout, s.factor)
                    .or(Some(Duration::MAX))
            })
        });
        [progress, self.slow_reader_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    /// When a member that has made no progress since `since` fails, waiting
    /// `factor` times the progress `timeout` and the report grace; `None`:
    /// never (beyond the driver's time).
    fn deadline(&self, since: Duration, timeout: Duration, factor: u32) -> Option<Duration> {
        since
            .checked_add(timeout.checked_mul(factor)?)?
            .checked_add(self.config.report_grace)
    }

    /// The peer this member waits on now, and the multiple of the progress
    /// timeout it waits for it.
    pub(crate) fn waiting_on(&self) -> Option<(Rank, u32)> {
        if !matches!(self.phase, Phase::Open) {
            return None;
        }
        if let Some(cur) = &self.current {
            if let Some(to) = cur.sending {
                return Some((to, 1));
            }
            if self.waiting_for_ready() {
                let (_, next) = self.schedule.next_outgoing(cur.blocks, cur.send_step)?;
                return Some((next.peer, 1));
            }
            return cur.expected.front().map(|&(_, t)| (t.peer, 2));
        }
        let closing = self.closing.as_ref()?;
        if self.is_root() {
            return (1..self.config.group_size)
                .find(|&r| !closing.acked[r])
                .map(|r| (r, 1));
        }
        if closing.acked[0] {
            return Some((0, 4));
        }
        if self.completed < closing.total && self.armed {
            return self.first.map(|f| (f.peer, 2));
        }
        None
    }
}
