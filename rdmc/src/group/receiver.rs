//! [`Receiver`]: a receiving member's handle on a group.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use futures::stream::FusedStream;

use super::{Closing, Handle};
use crate::error::Error;
use crate::ids::{GroupId, NodeId};
use crate::runtime::{Command, Deliveries, Message};

/// A receiving member's handle on a group: a [`Stream`] of the root's
/// messages, in send order, each delivered once all its bytes are here.
///
/// The stream ends once the root has closed the group and every message
/// has been read; after a failure it yields the failure once and then
/// ends (it is a [`FusedStream`]). Messages that had arrived whole before
/// the failure, and were not read yet, come first: each is intact, and the
/// failure says the group ended without the rest. When the application has taken every
/// message and secured it, it calls [`close`](Self::close): see
/// [`Group`](super::Group#delivered-means-the-application-has-it) for what
/// that promises.
///
/// `Receiver` is `Send`, `Sync` and `Unpin`; it is not `Clone` (its
/// stream is read once, and its close speaks for the whole application).
///
/// ```
/// use futures::{StreamExt, TryStreamExt};
/// use rdmc::{GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), rdmc::Error> {
/// let nodes = Node::in_memory_all(&MemCluster::new(2), NodeConfig::new())?;
/// let members = [NodeId(0), NodeId(1)];
/// let (root, receiver) = tokio::try_join!(
///     nodes[0].create_group(GroupId(1), &members, GroupConfig::new()),
///     nodes[1].create_group(GroupId(1), &members, GroupConfig::new()),
/// )?;
/// let (mut root, mut receiver) = (root.into_sender().unwrap(), receiver.into_receiver().unwrap());
/// root.send(&b"only message"[..]).await?;
/// let receiving = async {
///     let sizes: Vec<usize> = receiver.by_ref().map_ok(|m| m.data.len()).try_collect().await?;
///     receiver.close().await?;
///     Ok::<_, rdmc::Error>(sizes)
/// };
/// let ((), sizes) = tokio::try_join!(root.close(), receiving)?;
/// assert_eq!(sizes, [12]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Receiver {
    pub(super) handle: Handle,
    deliveries: Deliveries,
    /// The stream has ended.
    ended: bool,
    closing: Closing,
}

impl Receiver {
    /// What this member has moved so far: messages delivered to the
    /// application, block bytes and blocks received, and those it relayed
    /// to other members. A snapshot of counters the node keeps as it works,
    /// cheap to take; they also go to the `metrics` facade
    /// ([`stats`](crate::stats)).
    pub fn stats(&self) -> crate::GroupStats {
        self.handle.counters.snapshot()
    }

    pub(super) fn new(handle: Handle, deliveries: Deliveries) -> Self {
        Receiver {
            handle,
            deliveries,
            ended: false,
            closing: Closing::default(),
        }
    }

    /// The group's id.
    pub fn id(&self) -> GroupId {
        self.handle.id
    }

    /// The members, in rank order; the first is the root.
    pub fn members(&self) -> &[NodeId] {
        &self.handle.members
    }

    /// This member's rank (its index in [`members`](Self::members), ≥ 1).
    pub fn rank(&self) -> usize {
        self.handle.rank()
    }

    /// Messages delivered here and not yet taken from the stream.
    pub fn unread(&self) -> usize {
        self.deliveries.len()
    }

    /// Close: the application's statement that it has taken every message
    /// from the stream and persisted what it took. Resolves `Ok` once every
    /// member's application has every message and the group closed, or with
    /// the group's failure.
    ///
    /// A receiver that calls `close` with messages it has not taken —
    /// unread in the stream, still arriving, or not sent yet when it closed
    /// (the root's close count is higher than what it took) — fails the
    /// group for every member, naming itself
    /// ([`FailureKind::ClosedUnread`](crate::FailureKind::ClosedUnread)):
    /// its copy would be incomplete, and rdmc never reports success then.
    /// A receiver that never closes holds the group open; the others fail
    /// it after their progress timeout
    /// ([`GroupConfig::with_progress_timeout`](crate::GroupConfig::with_progress_timeout)).
    ///
    /// # Errors
    /// [`Error::GroupFailed`] if the group failed (before or during the
    /// close), naming the member that failed; [`Error::NodeShutDown`].
    ///
    /// # Cancel safety
    /// Cancel safe: the close takes effect when the future is first polled
    /// (the statement then stands even if the future is dropped); call
    /// `close` again to wait for it once more.
    pub async fn close(&mut self) -> Result<(), Error> {
        let Receiver {
            handle, closing, ..
        } = self;
        futures::future::poll_fn(|cx| closing.poll(handle, cx)).await
    }
}

impl Stream for Receiver {
    type Item = Result<Message, Error>;

    /// # Cancel safety
    /// Cancel safe: a message is removed from the stream only when returned.
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let item = std::task::ready!(self.deliveries.poll_recv(cx));
        match &item {
            Some(Ok(_)) => {
                // Room in the receive window: the node may take the next message.
                let _ = self.handle.command(Command::Consumed {
                    group: self.handle.id,
                });
            }
            Some(Err(_)) | None => self.ended = true,
        }
        Poll::Ready(item)
    }
}

impl FusedStream for Receiver {
    fn is_terminated(&self) -> bool {
        self.ended
    }
}
