//! What a run ended with, for the tests to check: queries, a few direct
//! interventions, and the outcome checks shared by many tests.

use super::*;

impl Cluster {
    /// Whether `rank`'s creation completed.
    pub(crate) fn is_ready(&self, rank: Rank) -> bool {
        self.nodes[rank].ready
    }

    /// Why `rank`'s creation failed in the rendezvous, if it did.
    pub(crate) fn create_failure(&self, rank: Rank) -> Option<&CreateFailure> {
        self.nodes[rank].create_failure.as_ref()
    }

    /// `Join`s that reached a node before it created the group.
    pub(crate) fn early_joins(&self) -> u64 {
        self.early_joins
    }

    /// Control messages that reached a node before it created the group.
    pub(crate) fn early_controls(&self) -> u64 {
        self.early_controls
    }

    /// Messages the root submitted.
    pub(crate) fn submitted(&self) -> u64 {
        self.submitted
    }

    /// Messages completed (root) or delivered (receivers) by `rank`.
    pub(crate) fn completed(&self, rank: Rank) -> u64 {
        self.nodes[rank].completed
    }

    /// Number of `Closed` events of `rank`.
    pub(crate) fn closed(&self, rank: Rank) -> u32 {
        self.nodes[rank].closed
    }

    /// `Failed` events of `rank`.
    pub(crate) fn failures(&self, rank: Rank) -> &[Failure] {
        &self.nodes[rank].failures
    }

    /// Whether `rank` crashed.
    pub(crate) fn is_crashed(&self, rank: Rank) -> bool {
        self.nodes[rank].crashed
    }

    /// The member itself, for direct pokes.
    pub(crate) fn member_mut(&mut self, rank: Rank) -> &mut GroupMember {
        self.nodes[rank]
            .member
            .as_mut()
            .expect("the group exists here")
    }

    /// `rank` leaves the group now (`GroupMember::shutdown`), if it has it.
    pub(crate) fn shutdown(&mut self, rank: Rank) {
        self.log(format_args!("{rank}: shutdown"));
        if let Some(member) = self.nodes[rank].member.as_mut() {
            member.shutdown();
            self.drain(rank);
        }
    }

    /// Deliver `control` from `from` to `to` now (a forged message), if
    /// `to` has the group.
    pub(crate) fn inject_control(&mut self, from: Rank, to: Rank, control: Control) {
        self.log(format_args!("FORGED control {from}->{to}: {control:?}"));
        if let Some(member) = self.nodes[to].member.as_mut() {
            member.handle_control(from, control);
            self.drain(to);
        }
    }

    /// Nothing is in flight any more and no member has actions queued.
    pub(crate) fn assert_quiescent(&mut self) {
        if !self.active.is_empty() {
            self.bug(format_args!("events still pending"));
        }
        for rank in 0..self.n {
            if let Some(a) = self.nodes[rank]
                .member
                .as_mut()
                .and_then(GroupMember::poll_action)
            {
                self.bug(format_args!("member {rank} still had an action: {a:?}"));
            }
            if let Some(a) = self.nodes[rank].rendezvous.poll_action() {
                self.bug(format_args!("node {rank} still had an action: {a:?}"));
            }
            if !self.nodes[rank].crashed && self.nodes[rank].creating() {
                self.bug(format_args!("node {rank} is still creating the group"));
            }
        }
    }

    /// Check the outcome of a failure-free run: every creation completed,
    /// every message everywhere, and `Closed` exactly once on every member
    /// iff the root closed.
    #[track_caller]
    pub(crate) fn assert_clean_outcome(&self) {
        for rank in 0..self.n {
            let node = &self.nodes[rank];
            if !node.ready || node.create_failure.is_some() {
                self.bug(format_args!(
                    "node {rank}: creation not completed ({:?})",
                    node.create_failure
                ));
            }
            if !node.failures.is_empty() {
                self.bug(format_args!("member {rank} failed: {:?}", node.failures));
            }
            if node.completed != self.submitted {
                self.bug(format_args!(
                    "member {rank} has {} of {} messages after the run drained",
                    node.completed, self.submitted
                ));
            }
            let want = u32::from(self.close_called);
            if node.closed != want {
                self.bug(format_args!(
                    "member {rank} closed {} times (root closed: {})",
                    node.closed, self.close_called
                ));
            }
        }
    }

    /// Check the outcome of a run with one crash: every survivor reached
    /// exactly one terminal event; a failure names the crashed member and is
    /// not a protocol violation; no creation fails in the rendezvous (no
    /// mismatch, and the failure reaches every survivor before a deadline).
    #[track_caller]
    pub(crate) fn assert_crash_outcome(&self) {
        let c = self.crashed.expect("a crash happened");
        // A survivor that lost the crashed member's Join with the crash (a
        // random suffix of its signals is lost) never has the group: its
        // application cannot close it, so the group cannot close. Its
        // creation times out naming the crashed member; the root, waiting
        // on its close acknowledgement, times out on it (no progress) and
        // tells the others.
        let lost_join = |rank: Rank| {
            matches!(
                &self.nodes[rank].create_failure,
                Some(CreateFailure::TimedOut { missing }) if missing[..] == [NodeId(c as u32)]
            )
        };
        for rank in (0..self.n).filter(|&r| r != c) {
            let node = &self.nodes[rank];
            let terminals = node.closed as usize
                + node.failures.len()
                + usize::from(node.create_failure.is_some());
            if terminals != 1 {
                self.bug(format_args!(
                    "survivor {rank}: {} Closed, failures {:?}, creation failure {:?}",
                    node.closed, node.failures, node.create_failure
                ));
            }
            if let Some(f) = &node.create_failure {
                // Every failure is relayed to every member (a crashed
                // member's signals aside): nobody waits for a deadline,
                // but one whose Join from the crashed member was lost.
                if !lost_join(rank) {
                    self.bug(format_args!("survivor {rank}: creation failed with {f:?}"));
                }
            } else if let Some(f) = node.failures.first() {
                // Found or heard of, the crash is the loss of a member.
                let reason_ok = f.kind == FailureKind::Unreachable;
                let on_lost_join =
                    f.suspect.is_some_and(lost_join) && f.kind == FailureKind::NoProgress;
                if !on_lost_join && (f.suspect != Some(c) || !reason_ok) {
                    self.bug(format_args!(
                        "survivor {rank} failed with {f:?}, expected suspect {c}"
                    ));
                }
            } else if node.completed != self.submitted {
                self.bug(format_args!("survivor {rank} closed without every message"));
            }
        }
    }
}
