//! What a storage service needs beside the data path: blocks released once
//! this member is done with them (so a message kept in a file need not stay
//! in memory), every receiver's count of messages its application took
//! (so the root learns when *every* member holds a message), and the
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
        let everyone = self.taken[1..]
            .iter()
            .copied()
            .min()
            .unwrap_or(self.completed);
        let upto = everyone.min(self.completed);
        while self.delivered < upto {
            self.actions.push_back(Action::MessageDelivered {
                seq: self.delivered,
            });
            self.delivered += 1;
        }
    }

    /// Root: how many messages every member's application has taken.
    pub fn delivered(&self) -> u64 {
        self.delivered
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
