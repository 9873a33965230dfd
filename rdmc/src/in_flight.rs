//! The root's messages in flight — queued and not yet taken by every
//! member's application — shared between a [`Sender`](crate::Sender) and
//! the node's actor: the bound of
//! [`GroupConfig::with_max_in_flight`](crate::GroupConfig::with_max_in_flight),
//! the waits for room (first come, first served, as tokio's semaphore) and
//! for every message's delivery, and the group's end.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
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
    /// The reservations waiting for room, in the order they came: each
    /// place's number and its task. Room goes to the first; nobody takes
    /// room while someone waits in line.
    line: VecDeque<(u64, Waker)>,
    /// The number of the next place in line.
    next_place: u64,
    /// The other tasks waiting for a change (every message delivered, the
    /// group's end, room for the `Sink`).
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

    /// Whether the bound leaves room for one more message.
    fn has_room(&self, state: &State) -> bool {
        self.max.is_none_or(|max| state.count < max)
    }

    /// Count one more message if there is room now and nobody waits in
    /// line for it: else why not (the bound, or the group's end).
    pub(crate) fn try_reserve(&self) -> Result<(), Error> {
        let mut state = self.lock();
        if let Some(ended) = &state.ended {
            return Err(self.refusal(ended));
        }
        match self.max {
            Some(max) if state.count >= max || !state.line.is_empty() => {
                Err(Error::TooManyInFlight {
                    group: self.group,
                    max,
                })
            }
            _ => {
                state.count += 1;
                Ok(())
            }
        }
    }

    /// A reservation that waits in line for room: it counts one more
    /// message once the room is its own (at once without a bound); the
    /// group's end refuses it. Dropped while it waits, it leaves the line.
    pub(crate) fn reserve(&self) -> Reserve<'_> {
        Reserve {
            in_flight: self,
            place: None,
        }
    }

    /// Count one more message once there is room and nobody waits in line
    /// for it, without a place in line: for the root's `Sink`, which holds
    /// the `Sender` exclusively while it waits, so that no reservation can
    /// wait beside it (and an abandoned `poll_ready` leaves no place behind).
    pub(crate) fn poll_reserve_exclusive(&self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let mut state = self.lock();
        if let Some(ended) = &state.ended {
            return Poll::Ready(Err(self.refusal(ended)));
        }
        if state.line.is_empty() && self.has_room(&state) {
            state.count += 1;
            return Poll::Ready(Ok(()));
        }
        register(&mut state, cx);
        Poll::Pending
    }

    /// Poll the reservation holding `place` in line (none yet: it joins
    /// the line if it must wait).
    fn poll_reserve(
        &self,
        cx: &mut Context<'_>,
        place: &mut Option<u64>,
    ) -> Poll<Result<(), Error>> {
        let mut state = self.lock();
        if let Some(ended) = &state.ended {
            let refusal = self.refusal(ended);
            if let Some(mine) = place.take() {
                state.line.retain(|(p, _)| *p != mine);
            }
            return Poll::Ready(Err(refusal));
        }
        let first = match *place {
            None => state.line.is_empty(),
            Some(mine) => state.line.front().is_some_and(|(p, _)| *p == mine),
        };
        if first && self.has_room(&state) {
            if place.take().is_some() {
                state.line.pop_front();
            }
            state.count += 1;
            self.wake_next(&state);
            return Poll::Ready(Ok(()));
        }
        match *place {
            Some(mine) => {
                if let Some((_, waker)) = state.line.iter_mut().find(|(p, _)| *p == mine)
                    && !waker.will_wake(cx.waker())
                {
                    *waker = cx.waker().clone();
                }
            }
            None => {
                let mine = state.next_place;
                state.next_place += 1;
                state.line.push_back((mine, cx.waker().clone()));
                *place = Some(mine);
            }
        }
        Poll::Pending
    }

    /// The reservation holding `place` gives up waiting.
    fn leave_line(&self, place: &mut Option<u64>) {
        if let Some(mine) = place.take() {
            let mut state = self.lock();
            state.line.retain(|(p, _)| *p != mine);
            self.wake_next(&state);
        }
    }

    /// Wake the first reservation in line if there is room for it.
    fn wake_next(&self, state: &State) {
        if self.has_room(state)
            && let Some((_, waker)) = state.line.front()
        {
            waker.wake_by_ref();
        }
    }

    /// One message left flight (every member took it, the group closed, or
    /// it was refused or never sent).
    pub(crate) fn remove(&self) {
        let mut state = self.lock();
        state.count = state.count.saturating_sub(1);
        self.wake_next(&state);
        state.wake_all();
    }

    /// The group ended (closed: `Ok`; failed: its failure): every wait
    /// ends with that.
    pub(crate) fn end(&self, outcome: Result<(), Error>) {
        let mut state = self.lock();
        state.ended.get_or_insert(outcome);
        for (_, waker) in &state.line {
            waker.wake_by_ref();
        }
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

/// Waits in line for room for one message (see [`InFlight::reserve`]).
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub(crate) struct Reserve<'a> {
    in_flight: &'a InFlight,
    /// Its place in line, once it waits.
    place: Option<u64>,
}

impl Future for Reserve<'_> {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        this.in_flight.poll_reserve(cx, &mut this.place)
    }
}

impl Drop for Reserve<'_> {
    fn drop(&mut self) {
        self.in_flight.leave_line(&mut self.place);
    }
}

fn register(state: &mut State, cx: &Context<'_>) {
    if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
        state.wakers.push(cx.waker().clone());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::task::{ArcWake, waker};

    use super::*;

    /// A task's waker that counts its wake-ups.
    #[derive(Default)]
    struct Task(AtomicUsize);

    impl ArcWake for Task {
        fn wake_by_ref(task: &Arc<Self>) {
            task.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Task {
        fn woken(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// Poll `f` once from `task`.
    fn poll<F: Future + Unpin>(f: &mut F, task: &Arc<Task>) -> Poll<F::Output> {
        let waker = waker(Arc::clone(task));
        Pin::new(f).poll(&mut Context::from_waker(&waker))
    }

    fn full(max: u64) -> InFlight {
        let in_flight = InFlight::new(GroupId(1), Some(max));
        for _ in 0..max {
            in_flight.try_reserve().unwrap();
        }
        in_flight
    }

    /// Two reservations waiting in line for room on a full `in_flight`,
    /// and their tasks.
    fn two_in_line(in_flight: &InFlight) -> ([Reserve<'_>; 2], [Arc<Task>; 2]) {
        let tasks: [Arc<Task>; 2] = Default::default();
        let mut line = [in_flight.reserve(), in_flight.reserve()];
        for (reserve, task) in line.iter_mut().zip(&tasks) {
            assert!(poll(reserve, task).is_pending());
        }
        (line, tasks)
    }

    #[test]
    fn room_goes_to_the_first_in_line_not_to_a_newcomer() {
        let in_flight = full(1);
        let ([mut first, mut second], [a, b]) = two_in_line(&in_flight);
        let c = Arc::default();
        in_flight.remove();
        assert_eq!((a.woken(), b.woken()), (1, 0), "only the first is woken");
        // Room, but the first in line has not taken it yet: a newcomer
        // waits behind, and `try_reserve` is refused.
        assert_eq!(
            in_flight.try_reserve(),
            Err(Error::TooManyInFlight {
                group: GroupId(1),
                max: 1
            })
        );
        let mut third = in_flight.reserve();
        assert!(poll(&mut third, &c).is_pending());
        assert!(poll(&mut second, &b).is_pending(), "not its turn");
        assert_eq!(poll(&mut first, &a), Poll::Ready(Ok(())));
        assert_eq!(in_flight.count(), 1);
        in_flight.remove();
        assert_eq!((b.woken(), c.woken()), (1, 0));
        assert!(poll(&mut third, &c).is_pending(), "not its turn");
        assert_eq!(poll(&mut second, &b), Poll::Ready(Ok(())));
        in_flight.remove();
        assert_eq!(poll(&mut third, &c), Poll::Ready(Ok(())));
        assert_eq!(in_flight.count(), 1);
    }

    #[test]
    fn a_reservation_dropped_in_line_passes_its_turn_on() {
        let in_flight = full(2);
        let ([first, mut second], [a, b]) = two_in_line(&in_flight);
        in_flight.remove();
        assert_eq!((a.woken(), b.woken()), (1, 0));
        drop(first);
        assert_eq!(b.woken(), 1, "the next in line is woken");
        assert_eq!(poll(&mut second, &b), Poll::Ready(Ok(())));
        assert_eq!(in_flight.count(), 2);
        // Dropped before it waited, or after it got room: nothing changes.
        drop(second);
        drop(in_flight.reserve());
        assert_eq!(in_flight.count(), 2);
    }

    #[test]
    fn without_a_bound_there_is_always_room_and_no_line() {
        let in_flight = InFlight::new(GroupId(1), None);
        let task = Arc::default();
        for _ in 0..1000 {
            assert_eq!(poll(&mut in_flight.reserve(), &task), Poll::Ready(Ok(())));
            in_flight.try_reserve().unwrap();
        }
        assert_eq!(in_flight.count(), 2000);
    }

    #[test]
    fn the_groups_end_refuses_everyone_in_line() {
        let in_flight = full(1);
        let ([mut first, mut second], [a, b]) = two_in_line(&in_flight);
        let failure = Error::NodeShutDown(crate::NodeId(0));
        in_flight.end(Err(failure.clone()));
        assert_eq!((a.woken(), b.woken()), (1, 1));
        assert_eq!(poll(&mut second, &b), Poll::Ready(Err(failure.clone())));
        assert_eq!(poll(&mut first, &a), Poll::Ready(Err(failure.clone())));
        assert_eq!(in_flight.try_reserve(), Err(failure));
        assert!(in_flight.lock().line.is_empty());
    }
}
