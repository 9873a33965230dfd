//! What the root holds for each message it queued: a [`Receipt`], and the
//! futures it turns into, each named for what it waits for.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use crate::error::Error;
use crate::ids::NodeId;
use crate::runtime::MessageTimings;

/// The answer the node's actor gives one request, or the error that
/// refused the request before it reached the actor.
#[derive(Debug)]
pub(crate) struct Reply<T> {
    response: Result<oneshot::Receiver<Result<T, Error>>, Option<Error>>,
    node: NodeId,
}

impl<T> Reply<T> {
    /// The actor answers on `response`.
    pub(crate) fn pending(response: oneshot::Receiver<Result<T, Error>>, node: NodeId) -> Self {
        Reply {
            response: Ok(response),
            node,
        }
    }

    /// Refused at once with `error`.
    pub(crate) fn refused(error: Error, node: NodeId) -> Self {
        Reply {
            response: Err(Some(error)),
            node,
        }
    }
}

impl<T> Future for Reply<T> {
    type Output = Result<T, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let node = self.node;
        match &mut self.response {
            Err(e) => Poll::Ready(Err(e.take().unwrap_or(Error::NodeShutDown(node)))),
            // The actor dropped the reply: the node is gone.
            Ok(rx) => Pin::new(rx)
                .poll(cx)
                .map(|r| r.unwrap_or(Err(Error::NodeShutDown(node)))),
        }
    }
}

/// A message the root has queued: [`Sender::send`](crate::Sender::send)
/// (and [`Permit::send`](crate::Permit::send)) give one. The message is
/// sent whatever becomes of the receipt, so dropping it is fine (a bare
/// `root.send(data).await?;` queues and moves on); keep it to learn when
/// the message was [sent](Self::sent), [delivered](Self::delivered) or
/// [persisted](Self::persisted).
#[derive(Debug)]
pub struct Receipt {
    sent: Sent,
    delivered: Delivered,
    persisted: Persisted,
}

impl Receipt {
    pub(crate) fn new(
        sent: Reply<MessageTimings>,
        delivered: Reply<()>,
        persisted: Reply<()>,
    ) -> Self {
        Receipt {
            sent: Sent(sent),
            delivered: Delivered(delivered),
            persisted: Persisted(persisted),
        }
    }

    /// A receipt for a message refused with `error`: every future fails
    /// with it.
    pub(crate) fn refused(error: Error, node: NodeId) -> Self {
        Receipt::new(
            Reply::refused(error.clone(), node),
            Reply::refused(error.clone(), node),
            Reply::refused(error, node),
        )
    }

    /// A future that resolves once the message is **sent**: every block
    /// this node sends of it has been sent, so the root no longer uses its
    /// buffer (the receivers may still be receiving it). Resolves with the
    /// root's [`MessageTimings`] of the message, in send order.
    pub fn sent(self) -> Sent {
        self.sent
    }

    /// A future that resolves once **every member's application has taken
    /// the message** from its stream — what a replicated store waits for
    /// before it acknowledges a client's write.
    ///
    /// ```
    /// # use bytes::Bytes;
    /// # use futures::StreamExt;
    /// # use rdmc::{GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), rdmc::Error> {
    /// # let nodes = Node::in_memory_all(&MemCluster::new(3), NodeConfig::new())?;
    /// # let members = [NodeId(0), NodeId(1), NodeId(2)];
    /// # let (root, a, b) = tokio::try_join!(
    /// #     nodes[0].create_group(GroupId(1), &members, GroupConfig::new()),
    /// #     nodes[1].create_group(GroupId(1), &members, GroupConfig::new()),
    /// #     nodes[2].create_group(GroupId(1), &members, GroupConfig::new()),
    /// # )?;
    /// # let (mut root, mut a, mut b) = (root.into_sender().unwrap(),
    /// #     a.into_receiver().unwrap(), b.into_receiver().unwrap());
    /// let write = root.send(Bytes::from_static(b"object")).await?.delivered();
    /// let (x, y) = tokio::join!(a.next(), b.next()); // the replicas take it
    /// write.await?; // every replica's application has it
    /// # x.unwrap()?; y.unwrap()?;
    /// # tokio::try_join!(root.close(), a.close(), b.close())?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn delivered(self) -> Delivered {
        self.delivered
    }

    /// A future that resolves once **every receiver's application has the
    /// message on stable storage**, as each says: a receiver's
    /// [`Receiver::persisted`](crate::Receiver::persisted) acknowledges the
    /// messages its application persisted, and with
    /// [`Durability::Synced`](crate::Durability::Synced) its stream
    /// acknowledges each message received into a file once it synced it.
    /// What a storage service acknowledges to its client; always after
    /// [`delivered`](Self::delivered). The root's own copy is the
    /// application's to keep.
    ///
    /// A receiver whose application never acknowledges a message (the
    /// default [`Durability::Taken`](crate::Durability::Taken), no
    /// `persisted` call) holds it back until the group closes, when it
    /// fails with [`Error::NotPersisted`] naming the receivers that did not.
    ///
    /// ```
    /// # use bytes::Bytes;
    /// # use futures::StreamExt;
    /// # use rdmc::{GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), rdmc::Error> {
    /// # let nodes = Node::in_memory_all(&MemCluster::new(3), NodeConfig::new())?;
    /// # let members = [NodeId(0), NodeId(1), NodeId(2)];
    /// # let (root, a, b) = tokio::try_join!(
    /// #     nodes[0].create_group(GroupId(1), &members, GroupConfig::new()),
    /// #     nodes[1].create_group(GroupId(1), &members, GroupConfig::new()),
    /// #     nodes[2].create_group(GroupId(1), &members, GroupConfig::new()),
    /// # )?;
    /// # let (mut root, mut a, mut b) = (root.into_sender().unwrap(),
    /// #     a.into_receiver().unwrap(), b.into_receiver().unwrap());
    /// let write = root.send(Bytes::from_static(b"object")).await?.persisted();
    /// for replica in [&mut a, &mut b] {
    ///     let message = replica.next().await.unwrap()?;
    ///     // ... the replica writes `message.data` and syncs it, then:
    ///     replica.persisted(message.seq)?;
    /// }
    /// write.await?; // on every replica's stable storage
    /// # tokio::try_join!(root.close(), a.close(), b.close())?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn persisted(self) -> Persisted {
        self.persisted
    }

    /// Both futures: [`sent`](Self::sent) and [`delivered`](Self::delivered).
    pub fn split(self) -> (Sent, Delivered) {
        (self.sent, self.delivered)
    }
}

/// Resolves once a message is sent by the root (see [`Receipt::sent`]),
/// with the root's [`MessageTimings`] of it.
///
/// # Errors
/// The group's failure ([`Error::GroupFailed`], naming the member that
/// failed) if it fails before; the error that refused the message;
/// [`Error::NodeShutDown`].
///
/// # Cancel safety
/// Cancel safe: dropping it changes nothing about the message.
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct Sent(Reply<MessageTimings>);

/// Resolves once every member's application has taken a message (see
/// [`Receipt::delivered`]).
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
pub struct Delivered(Reply<()>);

/// Resolves once every receiver's application has a message on stable
/// storage (see [`Receipt::persisted`]).
///
/// # Errors
/// [`Error::NotPersisted`] if the group closed before, naming the receivers
/// that did not acknowledge it; the group's failure
/// ([`Error::GroupFailed`], naming the member that failed) if it fails
/// before; the error that refused the message.
///
/// # Cancel safety
/// Cancel safe: dropping it changes nothing about the message.
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct Persisted(Reply<()>);

impl Future for Persisted {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl Future for Sent {
    type Output = Result<MessageTimings, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl Future for Delivered {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}
