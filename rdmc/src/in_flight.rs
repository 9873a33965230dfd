//! The root's messages in flight — sent and not yet taken by every
//! member's application — shared between a [`Group`](crate::Group) handle
//! and the node's actor: the bound of
//! [`GroupConfig::with_max_in_flight`](crate::GroupConfig::with_max_in_flight),
//! the waits of [`Group::ready`](crate::Group::ready) and of the group's
//! `Sink`, and the [`Delivered`] future of each message.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use tokio::sync::oneshot;

use crate::error::Error;
use crate::ids::{GroupId, NodeId};

/// A group's count of messages in flight, and who waits for room.
#[derive(Debug)]
pub(crate) struct InFlight {
    group: GroupId,
    max: Option<u64>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    count: u64,
    /// The group's failure, once it failed: no room ever again.
    failed: Option<Error>,
    /// The tasks waiting for a change.
    wakers: Vec<Waker>,
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

    /// Count one more message, if there is room: else the error to refuse it with.
    pub(crate) fn try_add(&self) -> Result<(), Error> {
        let mut state = self.lock();
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

    /// One message left flight (every member took it, or the actor
    /// refused it).
    pub(crate) fn remove(&self) {
        let mut state = self.lock();
        state.count = state.count.saturating_sub(1);
        for waker in state.wakers.drain(..) {
            waker.wake();
        }
    }

    /// The group failed: every wait ends with `error`.
    pub(crate) fn fail(&self, error: Error) {
        let mut state = self.lock();
        state.failed.get_or_insert(error);
        for waker in state.wakers.drain(..) {
            waker.wake();
        }
    }

    /// Ready once a message may be sent within the bound.
    pub(crate) fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.poll_until(cx, |count| self.max.is_none_or(|max| count < max))
    }

    /// Ready once no message is in flight.
    pub(crate) fn poll_empty(&self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.poll_until(cx, |count| count == 0)
    }

    fn poll_until(
        &self,
        cx: &mut Context<'_>,
        done: impl Fn(u64) -> bool,
    ) -> Poll<Result<(), Error>> {
        let mut state = self.lock();
        if let Some(e) = &state.failed {
            return Poll::Ready(Err(e.clone()));
        }
        if done(state.count) {
            return Poll::Ready(Ok(()));
        }
        if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// Resolves once **every member's application has taken** one message from
/// its stream (see [`SendFuture::delivered`](crate::SendFuture::delivered)).
///
/// # Errors
/// The group's failure ([`Error::GroupFailed`], naming the member that
/// failed — a receiver that left, or whose application was too slow), or
/// the error that refused the message.
///
/// # Cancel safety
/// Cancel safe: dropping it changes nothing about the message.
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct Delivered {
    pub(crate) response: Result<oneshot::Receiver<Result<(), Error>>, Option<Error>>,
    pub(crate) node: NodeId,
}

impl Future for Delivered {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let node = self.node;
        match &mut self.response {
            Err(e) => Poll::Ready(Err(e.take().unwrap_or(Error::NodeShutDown(node)))),
            Ok(rx) => Pin::new(rx)
                .poll(cx)
                .map(|r| r.unwrap_or(Err(Error::NodeShutDown(node)))),
        }
    }
}
