//! Acknowledgements: each receiver's count of the messages its application
//! persisted, told to the root in transfers (a batch's messages count as
//! one), and the root's futures of each message it sent — delivered (every
//! receiver's application took it) and persisted (every receiver's
//! application has it on stable storage) — answered in send order.

use tokio::sync::oneshot;

use super::GroupState;
use crate::error::Error;

/// Where one message's [`Delivered`](crate::Delivered) and
/// [`Persisted`](crate::Persisted) futures learn their outcomes.
#[derive(Debug)]
pub(crate) struct Acks {
    pub(crate) delivered: oneshot::Sender<Result<(), Error>>,
    pub(crate) persisted: oneshot::Sender<Result<(), Error>>,
}

impl Acks {
    /// Both futures fail with `error`.
    pub(crate) fn fail(self, error: &Error) {
        let _ = self.delivered.send(Err(error.clone()));
        let _ = self.persisted.send(Err(error.clone()));
    }
}

impl GroupState {
    /// Receiver: the application took a message; whether that completes
    /// its transfer (the member counts transfers).
    pub(in crate::runtime) fn took_message(&mut self) -> bool {
        self.app_taken += 1;
        let done = match self.untaken.front_mut() {
            Some(left) if *left > 1 => {
                *left -= 1;
                false
            }
            Some(_) => {
                self.untaken.pop_front();
                true
            }
            None => true,
        };
        if done {
            self.transfer_ends.push_back(self.app_taken);
        }
        done
    }

    /// Receiver: the application has its first `messages` messages on
    /// stable storage; the count of transfers that makes, if it grew (a
    /// batch counts once all its messages are persisted).
    pub(in crate::runtime) fn persisted_through(&mut self, messages: u64) -> Option<u64> {
        let before = self.transfers_persisted;
        while self
            .transfer_ends
            .front()
            .is_some_and(|&end| end <= messages)
        {
            self.transfer_ends.pop_front();
            self.transfers_persisted += 1;
        }
        (self.transfers_persisted > before).then_some(self.transfers_persisted)
    }
}

/// Root: every member took transfer `seq`: answer the delivered futures of
/// its messages (more than one for a batch); their persisted futures wait
/// on.
pub(super) fn answer_delivered(g: &mut GroupState, seq: u64) {
    while g.durable.front().is_some_and(|(s, _)| *s == seq) {
        let (_, acks) = g.durable.pop_front().expect("checked");
        // Out of flight first: whoever `delivered` wakes sees it gone.
        g.in_flight.remove();
        let _ = acks.delivered.send(Ok(()));
        g.persisting.push_back((seq, acks.persisted));
    }
}

/// Root: every member persisted transfer `seq`.
pub(super) fn answer_persisted(g: &mut GroupState, seq: u64) {
    while g.persisting.front().is_some_and(|(s, _)| *s == seq) {
        let (_, reply) = g.persisting.pop_front().expect("checked");
        let _ = reply.send(Ok(()));
    }
}

/// The group closed: every member's application took every message (their
/// taken counts came before their close acknowledgements), and a message
/// not persisted by every member by then never will be (their persisted
/// counts came before too).
pub(super) fn answer_closed(g: &mut GroupState) {
    while let Some(&(seq, _)) = g.durable.front() {
        answer_delivered(g, seq);
    }
    for (seq, reply) in std::mem::take(&mut g.persisting) {
        let members = (1..g.members.len())
            .filter(|&rank| g.member.persisted_by(rank) <= seq)
            .map(|rank| g.members[rank])
            .collect();
        let _ = reply.send(Err(Error::NotPersisted {
            group: g.id,
            members,
        }));
    }
}

/// The group failed with `error`: every message's futures not yet answered
/// learn it.
pub(super) fn answer_failed(g: &mut GroupState, error: &Error) {
    for (_, acks) in g.durable.drain(..) {
        acks.fail(error);
    }
    for (_, reply) in g.persisting.drain(..) {
        let _ = reply.send(Err(error.clone()));
    }
}
