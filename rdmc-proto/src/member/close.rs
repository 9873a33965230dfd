//! The end of a group: the application's part in the close barrier, and
//! failures.
//!
//! The root's `close` sends every member the close count. A receiver
//! acknowledges only once **its application** has taken every message up
//! to that count and called `close` itself — the application's "I have
//! persisted what I took" — so the root's `Closed` means every member's
//! application has everything, not merely that the blocks arrived. A
//! receiver whose application closes without having taken every message
//! the root sent (it closed early, or messages came after its close) fails
//! the group, naming itself; one that leaves before closing fails it too.

use super::{
    Action, Closing, Control, Failure, FailureKind, GroupMember, MemberError, Phase, Rank,
};

impl GroupMember {
    /// The application closes the group.
    ///
    /// On the root this starts the close barrier: no more submits, and every
    /// member is told the close count. On a receiver it is the application's
    /// statement that it has taken — and persisted — every message it will
    /// take: the member acknowledges the root's close once the close count
    /// is known and every message up to it has been taken
    /// ([`message_consumed`](Self::message_consumed)). If the application
    /// has not taken every message when it closes (some are delivered but
    /// unread, one is in progress, or the root's close count is higher), or
    /// a message arrives after it closed, the group fails with
    /// [`FailureKind::ClosedUnread`] naming this member. Idempotent.
    pub fn close(&mut self) -> Result<(), MemberError> {
        self.check_open()?;
        self.progress += 1;
        if !self.is_root() {
            if !self.app_closed {
                self.app_closed = true;
                self.check_close();
            }
            return Ok(());
        }
        if self.closing.is_some() {
            return Ok(());
        }
        let total = self.next_seq;
        self.closing = Some(Closing {
            total,
            acked: vec![false; self.config.group_size],
        });
        for to in 1..self.config.group_size {
            self.control(to, Control::Close { messages: total });
        }
        self.check_close();
        Ok(())
    }

    /// Receiver: the application took one more delivered message, making
    /// room in the receive window (and counting towards the close).
    pub fn message_consumed(&mut self) {
        if self.consumed < self.completed {
            self.consumed += 1;
            self.report_taken();
        }
        if !self.is_finished() {
            self.progress += 1;
            self.arm();
            self.check_close();
        }
    }

    /// Number of delivered messages the application has taken (receivers).
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// The transport lost `peer` (or, with `None`, something it cannot name).
    ///
    /// Once the close barrier has made a failure irrelevant it is ignored: on
    /// the root, the failure of a member that already acknowledged every
    /// message; on another member that acknowledged (its application took
    /// every message and closed), the failure of any member but the root,
    /// whose verdict (closed or failed) then decides.
    pub fn handle_peer_failure(&mut self, peer: Option<Rank>) {
        self.handle_peer_failure_because(peer, None);
    }

    /// [`handle_peer_failure`](Self::handle_peer_failure), with what this
    /// member knows of why the peer is unreachable, in words
    /// ([`Failure::detail`]; it stays here).
    pub fn handle_peer_failure_because(&mut self, peer: Option<Rank>, detail: Option<String>) {
        self.handle_peer_failure_cutting_off(peer, &[], detail);
    }

    /// [`handle_peer_failure_because`](Self::handle_peer_failure_because)
    /// where the members at `cut_off` can no longer be heard from either
    /// (their signals came through the peer: relayed). The failure is moot
    /// only if it is moot for each of them too: a receiver that
    /// acknowledged the close still fails when the root's verdict came
    /// through the peer, and the root when an acknowledgement it waits for
    /// did.
    pub fn handle_peer_failure_cutting_off(
        &mut self,
        peer: Option<Rank>,
        cut_off: &[Rank],
        detail: Option<String>,
    ) {
        let moot = |r: &Rank| self.failure_is_moot(Some(*r), None);
        if self.failure_is_moot(peer, None) && cut_off.iter().all(moot) {
            tracing::debug!(peer, "failure after the close acknowledgement ignored");
            // The root decides, and may not see the peer itself (members
            // connected on demand): it hears of the failure, and fails the
            // group unless the peer acknowledged the close already.
            if let Some(suspect) = peer.filter(|_| !self.is_root() && !self.is_finished()) {
                self.control(0, Control::Suspect { suspect });
            }
            return;
        }
        // Cut off from the root's verdict after hearing of a failure: that
        // failure is the cause, not the member that carried the verdict.
        let lost = Failure {
            detail,
            ..Failure::new(peer, FailureKind::Unreachable)
        };
        let verdict_lost = !self.is_root() && cut_off.contains(&0);
        let failure = match self.heard.take() {
            Some(heard) if verdict_lost => heard,
            _ => lost,
        };
        self.fail(failure);
    }

    /// Something local to this member broke the group: its driver could
    /// not allocate a message's memory ([`FailureKind::OutOfMemory`]), or
    /// a message arrived corrupted ([`FailureKind::DigestMismatch`],
    /// naming `suspect`, the sender of its blocks). The group fails, every
    /// other member is told — the suspect too, which is alive — and `None`
    /// as the suspect means this member. `detail` says in words what went
    /// wrong, when the kind does not ([`Failure::detail`]; it stays here).
    pub fn handle_local_failure(
        &mut self,
        suspect: Option<Rank>,
        kind: FailureKind,
        detail: Option<String>,
    ) {
        let suspect = Some(suspect.unwrap_or(self.config.rank));
        self.fail(Failure {
            detail,
            ..Failure::new(suspect, kind)
        });
    }

    /// This member leaves (its application dropped the group, or its node
    /// shuts down): the group fails with this member as the suspect, and
    /// the others are told so — unless this receiver already acknowledged
    /// the close (its application took and closed everything): then nobody
    /// needs it any more, and it leaves quietly.
    pub fn shutdown(&mut self) {
        let acked = !self.is_root() && self.closing.as_ref().is_some_and(|c| c.acked[0]);
        let failure = Failure::new(Some(self.config.rank), FailureKind::LocalShutdown);
        if acked && !self.is_finished() {
            self.current = None;
            self.armed = false;
            self.actions.push_back(Action::Failed(failure.clone()));
            self.phase = Phase::Failed(failure);
            return;
        }
        self.fail(failure);
    }

    /// A report of the group's failure from `from` (relayed or its own):
    /// `detector` found `kind`, naming `suspect`. This member fails with the
    /// report's suspect and kind, and tells the others (unless the close
    /// barrier made the failure moot here).
    pub(super) fn handle_report(
        &mut self,
        from: Rank,
        suspect: Option<Rank>,
        kind: FailureKind,
        detector: Rank,
    ) {
        let n = self.config.group_size;
        if suspect.is_some_and(|s| s >= n) || detector >= n {
            return self.violation(from, "a failure report naming a member outside the group");
        }
        if detector == self.config.rank {
            // This member reports only once it failed, and then it listens
            // to nothing more.
            return self.violation(from, "a failure report this member did not make");
        }
        let failure = Failure {
            reported_by: Some(detector),
            ..Failure::new(suspect, kind)
        };
        // A failure the root found is its verdict, whoever carried it.
        if detector == 0 || !self.failure_is_moot(suspect, Some(from)) {
            self.fail(failure);
        } else if !self.is_root() && self.heard.is_none() {
            self.heard = Some(failure);
        }
    }

    /// Whether the failure of `suspect`, reported by `reporter` (`None`: by
    /// the transport), can no longer affect this member's outcome.
    pub(super) fn failure_is_moot(&self, suspect: Option<Rank>, reporter: Option<Rank>) -> bool {
        let (Some(closing), Some(suspect)) = (&self.closing, suspect) else {
            return false;
        };
        if self.is_root() {
            // A member that acknowledged has every message; but a reporter
            // that has not acknowledged failed with the group and never will.
            closing.acked[suspect] && reporter.is_none_or(|r| closing.acked[r])
        } else {
            // After acknowledging, only the root's verdict matters.
            closing.acked[0] && suspect != 0 && reporter != Some(0)
        }
    }

    pub(super) fn check_open(&self) -> Result<(), MemberError> {
        match &self.phase {
            Phase::Open => Ok(()),
            Phase::Closed => Err(MemberError::Closed),
            Phase::Failed(f) => Err(MemberError::Failed(f.clone())),
        }
    }

    pub(super) fn control(&mut self, to: Rank, control: Control) {
        self.actions.push_back(Action::SendControl { to, control });
    }

    pub(super) fn violation(&mut self, peer: Rank, detail: &str) {
        tracing::warn!(peer, detail, "protocol violation");
        self.fail(Failure::new(Some(peer), FailureKind::ProtocolViolation).with_detail(detail));
    }

    /// The application closed without taking every message.
    pub(super) fn fail_closed_unread(&mut self) {
        tracing::warn!(
            taken = self.consumed,
            delivered = self.completed,
            "the application closed the group before taking every message"
        );
        self.fail(Failure::new(
            Some(self.config.rank),
            FailureKind::ClosedUnread,
        ));
    }

    pub(super) fn fail(&mut self, failure: Failure) {
        if self.is_finished() {
            return;
        }
        tracing::debug!(%failure, "group failed");
        self.current = None;
        self.queued.clear();
        self.armed = false;
        // Every other member hears of it, the suspect too: one that broke
        // the protocol, stalled or was only stopped (and resumes) is alive,
        // and must learn that the group failed because of it rather than
        // blame a member that left because of it (or wait forever). A
        // failure learned from a report goes on as it came: its detector's
        // cause, so that every member fails with the same one.
        let report = Control::Failed {
            suspect: failure.suspect,
            kind: failure.kind,
            detector: failure.reported_by.unwrap_or(self.config.rank),
        };
        for to in 0..self.config.group_size {
            if to != self.config.rank {
                self.control(to, report);
            }
        }
        self.actions.push_back(Action::Failed(failure.clone()));
        self.phase = Phase::Failed(failure);
    }

    /// Advance the close barrier.
    pub(super) fn check_close(&mut self) {
        if !matches!(self.phase, Phase::Open) {
            return;
        }
        let total = self.closing.as_ref().map(|c| c.total);
        if !self.is_root() && self.app_closed {
            let unread = self.consumed < self.completed
                || self.current.is_some()
                || total.is_some_and(|t| t > self.completed);
            if unread {
                return self.fail_closed_unread();
            }
        }
        let Some(closing) = self.closing.as_mut() else {
            return;
        };
        if self.completed < closing.total || self.current.is_some() {
            return;
        }
        if self.config.rank == 0 {
            if closing.acked[1..].iter().all(|&a| a) {
                // Highest rank first: where signals are relayed along a
                // binomial tree over the ranks (every member's ancestors
                // have lower ranks), a relay then passes on the verdicts of
                // the members below it before its own reaches it, and may
                // leave as soon as it has its own.
                for to in (1..self.config.group_size).rev() {
                    self.actions.push_back(Action::SendControl {
                        to,
                        control: Control::Closed,
                    });
                }
                self.phase = Phase::Closed;
                self.actions.push_back(Action::Closed);
            }
            return;
        }
        if !self.all_delivered {
            self.all_delivered = true;
            self.actions.push_back(Action::AllDelivered);
        }
        if self.app_closed && self.consumed >= closing.total && !closing.acked[0] {
            closing.acked[0] = true;
            self.control(0, Control::CloseAck);
        }
    }
}
