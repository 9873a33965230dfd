//! The root's messages in flight — queued and not yet taken by every
//! member's application — shared between a [`Sender`](crate::Sender) and
//! the node's actor: the bound of
//! [`GroupConfig::with_max_in_flight`](crate::GroupConfig::with_max_in_flight),
//! the waits for room and for every message's delivery, and the group's end.

use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use crate::error::Error;
use crate::ids::GroupId;

/// A group's count of messages in flight, and who waits for a change.
#[derive(Debug)]
pub(crate) struct InFlight {
    group: GroupId,
    max: Option<u64>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Messages queued (or with room reserved) and not yet taken by every
    /// member's application.
    count: u64,
    /// How the group ended, once it did: no room ever again.
    ended: Option<Result<(), Error>>,
    /// The tasks waiting for a change.
    wakers: Vec<Waker>,
}

impl State {
    fn wake_all(&mut self) {
        for waker in self.wakers.drain(..) {
            waker.wake();
        }
    }
}

impl InFlight {
    pub(crate) fn new(group: GroupId, max: Option<u64>) -> Self {
        InFlight {
            group,
            max,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The bound on messages in flight, if any.
    pub(crate) fn max(&self) -> Option<u64> {
        self.max
    }

    /// Messages in flight now.
    pub(crate) fn count(&self) -> u64 {
        self.lock().count
    }

    /// Why no message can be added once the group ended.
    fn refusal(&self, ended: &Result<(), Error>) -> Error {
        match ended {
            Ok(()) => Error::Closed(self.group),
            Err(e) => e.clone(),
        }
    }

    /// Count one more message if there is room now: else why not (the
    /// bound, or the group's end).
    pub(crate) fn try_reserve(&self) -> Result<(), Error> {
        let mut state = self.lock();
        if let Some(ended) = &state.ended {
            return Err(self.refusal(ended));
        }
        if let Some(max) = self.max
            && state.count >= max
        {
            return Err(Error::TooManyInFlight {
                group: self.group,
                max,
            });
        }
        state.count += 1;
        Ok(())
    }

    /// Count one more message once there is room (ready at once without a
    /// bound); the group's end refuses it.
    pub(crate) fn poll_reserve(&self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let mut state = self.lock();
        if let Some(ended) = &state.ended {
            return Poll::Ready(Err(self.refusal(ended)));
        }
        if self.max.is_none_or(|max| state.count < max) {
            state.count += 1;
            return Poll::Ready(Ok(()));
        }
        register(&mut state, cx);
        Poll::Pending
    }

    /// One message left flight (every member took it, the group closed, or
    /// it was refused or never sent).
    pub(crate) fn remove(&self) {
        let mut state = self.lock();
        state.count = state.count.saturating_sub(1);
        state.wake_all();
    }

    /// The group ended (closed: `Ok`; failed: its failure): every wait
    /// ends with that.
    pub(crate) fn end(&self, outcome: Result<(), Error>) {
        let mut state = self.lock();
        state.ended.get_or_insert(outcome);
        state.wake_all();
    }

    /// Ready once no message is in flight (`Ok`), or with the group's
    /// failure.
    pub(crate) fn poll_empty(&self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let mut state = self.lock();
        if let Some(Err(e)) = &state.ended {
            return Poll::Ready(Err(e.clone()));
        }
        if state.count == 0 {
            return Poll::Ready(Ok(()));
        }
        register(&mut state, cx);
        Poll::Pending
    }

    /// Ready with how the group ended, once it did.
    pub(crate) fn poll_ended(&self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let mut state = self.lock();
        if let Some(ended) = &state.ended {
            return Poll::Ready(ended.clone());
        }
        register(&mut state, cx);
        Poll::Pending
    }
}

fn register(state: &mut State, cx: &Context<'_>) {
    if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
        state.wakers.push(cx.waker().clone());
    }
}
