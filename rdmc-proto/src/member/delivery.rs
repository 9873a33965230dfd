//! What a storage service needs beside the data path: blocks released once
//! this member is done with them (so a message kept in a file need not stay
//! in memory), every receiver's count of messages its application took
//! (so the root learns when *every* member holds a message) and of those
//! it persisted (when every member has it on stable storage), and the
//! slow-reader timeout (a receiver whose application leaves a message
//! untaken too long fails the group, naming itself).

use std::time::Duration;

use super::{Action, Control, Failure, FailureKind, GroupMember, Phase, Rank, Schedule};

/// Since when a receiver's oldest untaken message has waited.
#[derive(Clone, Copy, Debug)]
pub(super) struct Unread {
    /// The first time the driver passed in while the message waited.
    since: Duration,
    /// The application's count of taken messages then: a take restarts the
    /// clock for the next message.
    consumed: u64,
}

impl GroupMember {
    /// How many times this member sends each block of a `blocks`-block
    /// message whose schedule has `steps` steps.
    pub(super) fn sends_per_block(&self, blocks: usize, steps: usize) -> Vec<u32> {
        let mut sends = vec![0u32; blocks];
        // `next_outgoing` skips the steps a member does not send at (all
        // of a sequential receiver's: thousands of members times k steps).
        let mut step = 0;
        while let Some((s, t)) = self.schedule.next_outgoing(blocks, step) {
            if s >= steps {
                break;
            }
            sends[t.block] += 1;
            step = s + 1;
        }
        sends
    }

    /// Release `block` of the current message if it is here and every
    /// send of it has completed.
    pub(super) fn release_if_done(&mut self, block: usize) {
        let is_root = self.is_root();
        let Some(cur) = self.current.as_ref() else {
            return;
        };
        let here = is_root || cur.received[block];
        if !here || cur.sends_left[block] > 0 {
            return;
        }
        self.actions.push_back(Action::ReleaseBlock {
            seq: cur.seq,
            offset: block * cur.block_size,
            len: super::block_len(cur.size, cur.block_size, block),
        });
    }

    /// Receiver: tell the root how many messages the application has taken.
    pub(super) fn report_taken(&mut self) {
        if !self.is_root() && matches!(self.phase, Phase::Open) {
            self.control(
                0,
                Control::Taken {
                    messages: self.consumed,
                },
            );
        }
    }

    /// Root: member `from`'s application has taken `messages` messages.
    pub(super) fn handle_taken(&mut self, from: Rank, messages: u64) {
        if !self.is_root() {
            return self.violation(from, "a taken count sent to a non-root");
        }
        if messages <= self.taken[from] {
            return self.violation(from, "a taken count that does not count up");
        }
        if messages > self.next_seq {
            return self.violation(from, "a taken count above the messages sent");
        }
        self.taken[from] = messages;
        self.check_delivered();
    }

    /// Root: announce the messages every member's application has taken
    /// (and that are complete here).
    pub(super) fn check_delivered(&mut self) {
        let upto = self.reached_by_all(&self.taken);
        while self.delivered < upto {
            self.actions.push_back(Action::MessageDelivered {
                seq: self.delivered,
            });
            self.delivered += 1;
        }
    }

    /// Root: the count of messages every receiver's entry in `counts`
    /// (one per rank, the root's unused) has reached and that are complete
    /// here.
    fn reached_by_all(&self, counts: &[u64]) -> u64 {
        let everyone = counts[1..].iter().copied().min();
        everyone.unwrap_or(self.completed).min(self.completed)
    }

    /// Root: how many messages every member's application has taken.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Receiver: the application has the first `messages` messages on
    /// stable storage; the root learns it (cumulative) while this member
    /// has not acknowledged the close. Returns whether the count was taken:
    /// a count above the messages the application took, or not above the
    /// last one, is not (nor is any at the root, which persists nothing
    /// for others).
    pub fn application_persisted(&mut self, messages: u64) -> bool {
        if self.is_root() || messages > self.consumed || messages <= self.persisted[0] {
            return false;
        }
        self.persisted[0] = messages;
        let acked = self.closing.as_ref().is_some_and(|c| c.acked[0]);
        if matches!(self.phase, Phase::Open) && !acked {
            self.control(0, Control::Persisted { messages });
        }
        true
    }

    /// Root: member `from`'s application has persisted `messages` messages.
    pub(super) fn handle_persisted(&mut self, from: Rank, messages: u64) {
        if !self.is_root() {
            return self.violation(from, "a persisted count sent to a non-root");
        }
        if messages <= self.persisted[from] {
            return self.violation(from, "a persisted count that does not count up");
        }
        // Each receiver reports a take before it can persist what it took.
        if messages > self.taken[from] {
            return self.violation(from, "a persisted count above the messages taken");
        }
        self.persisted[from] = messages;
        self.check_persisted();
    }

    /// Root: announce the messages every member's application has persisted
    /// (and that are complete here).
    pub(super) fn check_persisted(&mut self) {
        let upto = self.reached_by_all(&self.persisted);
        while self.all_persisted < upto {
            self.actions.push_back(Action::MessagePersisted {
                seq: self.all_persisted,
            });
            self.all_persisted += 1;
        }
    }

    /// Root: how many messages every member's application has persisted.
    pub fn persisted(&self) -> u64 {
        self.all_persisted
    }

    /// Root: how many messages member `rank`'s application has persisted,
    /// as it reported (0 for the root itself and for ranks outside the
    /// group).
    pub fn persisted_by(&self, rank: Rank) -> u64 {
        if rank == 0 {
            return 0;
        }
        self.persisted.get(rank).copied().unwrap_or(0)
    }

    /// Receiver: fail the group, naming this member, once a delivered
    /// message has waited for the application for the slow-reader timeout
    /// (counted from its delivery or the application's previous take,
    /// whichever is later).
    pub(super) fn check_slow_reader(&mut self, now: Duration) {
        let Some(timeout) = self.config.slow_reader_timeout else {
            return;
        };
        if self.is_root() || self.is_finished() || self.consumed >= self.completed {
            self.unread = None;
            return;
        }
        let since = match self.unread {
            Some(u) if u.consumed == self.consumed => u.since,
            _ => {
                self.unread = Some(Unread {
                    since: now,
                    consumed: self.consumed,
                });
                return;
            }
        };
        let waited = now.saturating_sub(since);
        if waited < timeout {
            return;
        }
        tracing::warn!(
            ?waited,
            "the application left a message untaken: slow reader"
        );
        let millis = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
        self.fail(Failure::new(
            Some(self.config.rank),
            FailureKind::SlowReader { millis },
        ));
    }

    /// When the slow-reader timeout of the waiting message passes, if one waits.
    pub(super) fn slow_reader_deadline(&self) -> Option<Duration> {
        let timeout = self.config.slow_reader_timeout?;
        let unread = self.unread?;
        if self.is_finished() {
            return None;
        }
        Some(unread.since.checked_add(timeout).unwrap_or(Duration::MAX))
    }
}
