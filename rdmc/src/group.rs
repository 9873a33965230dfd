//! [`Group`]: a member's handle on one multicast group.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures::{Sink, Stream};
use tokio::sync::{mpsc, oneshot};

use crate::error::Error;
use crate::ids::{GroupId, NodeId};
use crate::in_flight::{Delivered, InFlight};
use crate::runtime::{Command, Joined, Message, MessageTimings};
use crate::transport::MessageBuffer;

/// A member's handle on a group.
///
/// On a receiver, the group is a [`Stream`] of the root's messages, in send
/// order, each delivered once all its bytes are here. The stream ends once
/// the root has closed the group and every message has been read; after a
/// failure it yields the failure once and then ends. On the root,
/// [`send`](Group::send) multicasts a message.
///
/// # Delivered means the application has it
///
/// The root's [`close`](Group::close) succeeds only once **every receiver's
/// application has taken every message from its stream and called
/// `close`** itself. A receiver's `close` is its application's statement
/// "I have persisted (or otherwise secured) every message I took": call it
/// only after that, typically after reading the stream to its end. A
/// receiver whose application goes away before — drops the group, its
/// process dies, its node shuts down — fails the group for every member,
/// naming it; so does one that closes without having taken every message
/// the root sent. The root's `close` then returns that failure, never `Ok`.
///
/// On the root the stream yields no messages: it stays pending while the
/// group is open, ends once the group has closed, and yields the group's
/// failure (once) if it fails. A root can therefore await its stream beside
/// its sends to learn of a failure as soon as it happens.
///
/// Dropping the handle leaves the group: if it is still open, it fails, and
/// the other members see this node as the failed one (unless this receiver
/// already closed and its close was acknowledged: then nobody needs it).
///
/// # Durability and flow control
///
/// Each message's [`SendFuture::delivered`] resolves once every member's
/// application has taken that message (a storage service acknowledges a
/// client's write then); [`GroupConfig::with_max_in_flight`](crate::GroupConfig::with_max_in_flight)
/// bounds the messages sent and not yet so delivered, and the root's
/// [`Sink`] implementation waits for room ([`Group::ready`] does the same
/// by hand). A receiver acknowledges each message its application takes,
/// cumulatively, to the root. A receiver whose application stops taking
/// messages can fail the group, naming it
/// ([`GroupConfig::with_slow_reader_timeout`](crate::GroupConfig::with_slow_reader_timeout)).
///
/// # Examples
///
/// A receiver reads its stream to the end (it ends once the root has
/// closed and every message is read), persists what it read, and then
/// closes, which resolves once every member's application has every
/// message:
///
/// ```
/// use bytes::Bytes;
/// use futures::{StreamExt, TryStreamExt};
/// use rdmc::{Group, GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId};
///
/// async fn receive_all(mut group: Group) -> Result<Vec<Bytes>, rdmc::Error> {
///     let messages: Vec<_> = group.by_ref().map_ok(|m| m.data).try_collect().await?;
///     // (A storage service writes and syncs each message here.)
///     group.close().await?;
///     Ok(messages)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), rdmc::Error> {
/// let cluster = MemCluster::new(2);
/// let nodes = Node::in_memory_all(&cluster, NodeConfig::new())?;
/// let members = [NodeId(0), NodeId(1)];
/// let (root, receiver) = tokio::try_join!(
///     nodes[0].create_group(GroupId(7), &members, GroupConfig::new()),
///     nodes[1].create_group(GroupId(7), &members, GroupConfig::new()),
/// )?;
/// let receiving = tokio::spawn(receive_all(receiver));
/// root.send(Bytes::from_static(b"first")).await?;
/// root.send(Bytes::from_static(b"second")).await?;
/// root.close().await?;
/// let got = receiving.await.expect("the receiving task")?;
/// assert_eq!(got, [Bytes::from_static(b"first"), Bytes::from_static(b"second")]);
/// # Ok(())
/// # }
/// ```
pub struct Group {
    id: GroupId,
    node: NodeId,
    members: Vec<NodeId>,
    commands: mpsc::UnboundedSender<Command>,
    joined: Joined,
    /// The close the [`Sink`] started, if it did.
    sink_close: SinkClose,
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("id", &self.id)
            .field("node", &self.node)
            .field("members", &self.members)
            .finish()
    }
}

impl Group {
    pub(crate) fn new(
        id: GroupId,
        node: NodeId,
        members: Vec<NodeId>,
        commands: mpsc::UnboundedSender<Command>,
        joined: Joined,
    ) -> Self {
        Group {
            id,
            node,
            members,
            commands,
            joined,
            sink_close: SinkClose::Open,
        }
    }

    fn in_flight(&self) -> &Arc<InFlight> {
        &self.joined.in_flight
    }

    /// The group's id.
    pub fn id(&self) -> GroupId {
        self.id
    }

    /// The members, in rank order; the first is the root.
    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// This member's rank (its index in [`members`](Group::members)).
    pub fn rank(&self) -> usize {
        self.members
            .iter()
            .position(|&n| n == self.node)
            .expect("a group's node is a member")
    }

    /// Whether this member is the root (the only sender).
    pub fn is_root(&self) -> bool {
        self.members.first() == Some(&self.node)
    }

    /// Multicast `data` to every member (root only).
    ///
    /// The message is queued when `send` is called, not when the future is
    /// first polled; messages are transferred one after another in the order
    /// of the `send` calls. The future resolves when the message is locally
    /// complete — every block this node sends has been sent, so its buffer is
    /// no longer used — and these completions come in send order, each with
    /// the root's [`MessageTimings`] of that message. That the message
    /// reached every member's application is what [`close`](Group::close)
    /// reports, and, message by message, [`SendFuture::delivered`].
    ///
    /// # Errors
    /// [`Error::NotRoot`] on a non-root; [`Error::Closed`] after `close`;
    /// [`Error::MessageTooLarge`]; [`Error::TooManyInFlight`] if the group
    /// has a bound on messages in flight
    /// ([`GroupConfig::with_max_in_flight`](crate::GroupConfig::with_max_in_flight))
    /// and is at it (wait with [`ready`](Self::ready) first);
    /// [`Error::GroupFailed`] if the group fails before the message is
    /// locally complete; [`Error::NodeShutDown`].
    ///
    /// # Cancel safety
    /// Dropping the returned future does not withdraw the message: it is
    /// still sent, and the outcome is then only visible through `close`.
    ///
    /// # Examples
    ///
    /// Queue several messages at once, then wait for each to be locally
    /// complete, and for the group to close:
    ///
    /// ```
    /// # use bytes::Bytes;
    /// # use futures::StreamExt;
    /// # use rdmc::{GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), rdmc::Error> {
    /// # let cluster = MemCluster::new(2);
    /// # let nodes = Node::in_memory_all(&cluster, NodeConfig::new())?;
    /// # let members = [NodeId(0), NodeId(1)];
    /// # let (root, mut receiver) = tokio::try_join!(
    /// #     nodes[0].create_group(GroupId(1), &members, GroupConfig::new()),
    /// #     nodes[1].create_group(GroupId(1), &members, GroupConfig::new()),
    /// # )?;
    /// # let reader = tokio::spawn(async move {
    /// #     while let Some(m) = receiver.next().await { m?; }
    /// #     receiver.close().await
    /// # });
    /// // `root` is the root's `Group`.
    /// let sends: Vec<_> = (0u8..3).map(|i| root.send(vec![i; 1000])).collect();
    /// for send in sends {
    ///     let timings = send.await?;
    ///     assert!(timings.total >= timings.waiting);
    /// }
    /// root.close().await?; // every member has all three messages
    /// # reader.await.expect("reader")?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn send(&self, data: impl Into<Bytes>) -> SendFuture {
        self.submit(data.into(), None)
    }

    fn submit(&self, data: Bytes, source: Option<Arc<MessageBuffer>>) -> SendFuture {
        if let Err(e) = self.in_flight().try_add() {
            return SendFuture {
                response: Err(Some(e.clone())),
                delivered: Err(Some(e)),
                node: self.node,
            };
        }
        let (reply, response) = oneshot::channel();
        let (delivered_tx, delivered) = oneshot::channel();
        let sent = self.commands.send(Command::Send {
            group: self.id,
            data,
            source,
            reply,
            delivered: delivered_tx,
        });
        if sent.is_err() {
            self.in_flight().remove();
            let e = Error::NodeShutDown(self.node);
            return SendFuture {
                response: Err(Some(e.clone())),
                delivered: Err(Some(e)),
                node: self.node,
            };
        }
        SendFuture {
            response: Ok(response),
            delivered: Ok(delivered),
            node: self.node,
        }
    }

    /// Multicast the contents of `file` (root only), as [`send`](Self::send)
    /// does with bytes in memory: the file is mapped (off the async
    /// threads) and sent from the mapping, and each block's memory is
    /// dropped once the root has sent it, so a file larger than memory can
    /// be sent. The file must not change until the message is locally
    /// complete. Linux only.
    ///
    /// # Errors
    /// An I/O error if the file cannot be read or mapped; otherwise the
    /// returned [`SendFuture`] carries the outcome, as for `send`.
    ///
    /// # Cancel safety
    /// If dropped before it resolves, the file is not sent.
    #[cfg(target_os = "linux")]
    pub async fn send_file(&self, file: std::fs::File) -> std::io::Result<SendFuture> {
        let map = move || {
            let len = usize::try_from(file.metadata()?.len()).map_err(std::io::Error::other)?;
            MessageBuffer::map_file(file, len, false)
        };
        let source = tokio::task::spawn_blocking(map)
            .await
            .map_err(std::io::Error::other)??;
        Ok(self.submit(Arc::clone(&source).into_bytes(), Some(source)))
    }

    /// Wait until a message may be sent within the group's bound on
    /// messages in flight
    /// ([`GroupConfig::with_max_in_flight`](crate::GroupConfig::with_max_in_flight));
    /// at once without a bound.
    ///
    /// # Errors
    /// The group's failure, once it failed.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn ready(&self) -> Result<(), Error> {
        futures::future::poll_fn(|cx| self.in_flight().poll_ready(cx)).await
    }

    /// Close the group: resolves `Ok` once **every member's application has
    /// every message** the root sent, or with the group's failure.
    ///
    /// On the root this starts the close: no more sends are accepted, and
    /// every receiver learns how many messages there are (its stream ends
    /// after the last one). On a receiver it is the application's statement
    /// that it has taken every message from the stream and persisted what it
    /// took: call it after reading the stream to its end and securing the
    /// messages (writing and syncing them, for a storage service). The
    /// receiver acknowledges the root's close only then, so the root's
    /// `close` — and every member's — resolves `Ok` only once every
    /// receiver's application has closed after taking every message.
    ///
    /// A receiver that calls `close` with messages it has not taken — unread
    /// in the stream, still arriving, or not sent yet when it closed (the
    /// root's close count is higher than what it took) — fails the group for
    /// every member, naming itself
    /// ([`FailureKind::ClosedUnread`](crate::FailureKind::ClosedUnread)):
    /// its copy would be incomplete, and rdmc never reports success then.
    /// (Waiting for the unread messages instead would let the acknowledgement
    /// go out for messages the application never persisted.) A receiver that
    /// never closes holds the group open; the others fail it after their
    /// progress timeout
    /// ([`GroupConfig::with_progress_timeout`](crate::GroupConfig::with_progress_timeout)).
    ///
    /// # Errors
    /// [`Error::GroupFailed`] if the group failed (before or during the
    /// close), naming the member that failed, left, closed early or made no
    /// progress; [`Error::NodeShutDown`].
    ///
    /// # Cancel safety
    /// Cancel safe: the close takes effect when the future is first polled
    /// (a receiver's statement then stands even if the future is dropped);
    /// call `close` again to wait once more.
    ///
    /// # Examples
    ///
    /// See the [type-level example](Group#examples) for a receiver that
    /// reads to the end, then closes. On the root, close ends the root's
    /// (empty) stream:
    ///
    /// ```
    /// # use futures::StreamExt;
    /// # use rdmc::{GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), rdmc::Error> {
    /// # let cluster = MemCluster::new(2);
    /// # let nodes = Node::in_memory_all(&cluster, NodeConfig::new())?;
    /// # let members = [NodeId(0), NodeId(1)];
    /// let (mut root, mut receiver) = tokio::try_join!(
    ///     nodes[0].create_group(GroupId(1), &members, GroupConfig::new()),
    ///     nodes[1].create_group(GroupId(1), &members, GroupConfig::new()),
    /// )?;
    /// root.send(&b"only message"[..]).await?;
    /// let receiving = async {
    ///     let message = receiver.next().await.expect("one message")?;
    ///     receiver.close().await?;
    ///     Ok::<_, rdmc::Error>(message)
    /// };
    /// let ((), message) = tokio::try_join!(root.close(), receiving)?;
    /// assert_eq!(&message.data[..], b"only message");
    /// assert!(root.next().await.is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn close(&self) -> Result<(), Error> {
        let (reply, response) = oneshot::channel();
        self.commands
            .send(Command::Close {
                group: self.id,
                reply,
            })
            .map_err(|_| Error::NodeShutDown(self.node))?;
        response.await.map_err(|_| Error::NodeShutDown(self.node))?
    }
}

impl Stream for Group {
    type Item = Result<Message, Error>;

    /// # Cancel safety
    /// Cancel safe: a message is removed from the stream only when returned.
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = self.joined.deliveries.poll_recv(cx);
        if let Poll::Ready(Some(Ok(_))) = &item {
            // Room in the receive window: the node may take the next message.
            let _ = self.commands.send(Command::Consumed { group: self.id });
        }
        item
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Leave { group: self.id });
    }
}

/// The root's [`Sink`] of messages: each item is [sent](Group::send);
/// `poll_ready` waits for room within the group's bound on messages in
/// flight ([`GroupConfig::with_max_in_flight`](crate::GroupConfig::with_max_in_flight));
/// `poll_flush` waits until every member's application has taken every
/// message sent; `poll_close` flushes, then [closes](Group::close) the
/// group. The errors are the group's failure (naming the member that
/// failed) and those of `send`.
///
/// ```
/// use bytes::Bytes;
/// use futures::{SinkExt, StreamExt, TryStreamExt};
/// use rdmc::{GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), rdmc::Error> {
/// let nodes = Node::in_memory_all(&MemCluster::new(2), NodeConfig::new())?;
/// let members = [NodeId(0), NodeId(1)];
/// let config = GroupConfig::new().with_max_in_flight(Some(2));
/// let (mut root, mut receiver) = tokio::try_join!(
///     nodes[0].create_group(GroupId(1), &members, config.clone()),
///     nodes[1].create_group(GroupId(1), &members, config),
/// )?;
/// let reading = tokio::spawn(async move {
///     let got: Vec<_> = receiver.by_ref().map_ok(|m| m.data).try_collect().await?;
///     receiver.close().await?;
///     Ok::<_, rdmc::Error>(got)
/// });
/// let mut messages = futures::stream::iter((0u8..10).map(|i| Ok(Bytes::from(vec![i; 100]))));
/// root.send_all(&mut messages).await?; // at most 2 in flight at a time
/// root.close().await?;
/// assert_eq!(reading.await.expect("reader")?.len(), 10);
/// # Ok(())
/// # }
/// ```
impl Sink<Bytes> for Group {
    type Error = Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.in_flight().poll_ready(cx)
    }

    fn start_send(self: Pin<&mut Self>, item: Bytes) -> Result<(), Error> {
        match self.submit(item, None).response {
            Err(e) => Err(e.unwrap_or(Error::NodeShutDown(self.node))),
            Ok(_) => Ok(()),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.in_flight().poll_empty(cx)
    }

    /// Closing again after the close completed returns its outcome again.
    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        if let SinkClose::Done(outcome) = &self.sink_close {
            return Poll::Ready(outcome.clone());
        }
        ready!(self.in_flight().poll_empty(cx))?;
        if let SinkClose::Open = self.sink_close {
            let (reply, response) = oneshot::channel();
            let command = Command::Close {
                group: self.id,
                reply,
            };
            if self.commands.send(command).is_err() {
                return Poll::Ready(Err(Error::NodeShutDown(self.node)));
            }
            self.sink_close = SinkClose::Closing(response);
        }
        let node = self.node;
        let SinkClose::Closing(rx) = &mut self.sink_close else {
            unreachable!("the close was started above")
        };
        let outcome = ready!(Pin::new(rx).poll(cx)).unwrap_or(Err(Error::NodeShutDown(node)));
        self.sink_close = SinkClose::Done(outcome.clone());
        Poll::Ready(outcome)
    }
}

/// Where the [`Sink`]'s close of a group stands.
#[derive(Debug)]
enum SinkClose {
    /// Not started.
    Open,
    /// Sent to the node; its reply is awaited.
    Closing(oneshot::Receiver<Result<(), Error>>),
    /// Completed with this outcome.
    Done(Result<(), Error>),
}

/// The future returned by [`Group::send`]: resolves when the message is
/// locally complete; [`delivered`](Self::delivered) turns it into one that
/// resolves when every member's application has taken it.
#[derive(Debug)]
#[must_use = "the message is sent regardless; await the future to learn when it is locally complete"]
pub struct SendFuture {
    response: Result<oneshot::Receiver<Result<MessageTimings, Error>>, Option<Error>>,
    delivered: Result<oneshot::Receiver<Result<(), Error>>, Option<Error>>,
    node: NodeId,
}

impl SendFuture {
    /// A future that resolves once **every member's application has taken
    /// this message** from its stream — each receiver acknowledges the
    /// messages its application takes to the root — rather than when it is
    /// locally complete: what a replicated store waits for before it
    /// acknowledges a client's write. It fails with the group's failure,
    /// naming the member that failed (a receiver that left, broke, or was
    /// too slow), if the group fails before.
    ///
    /// ```
    /// # use bytes::Bytes;
    /// # use futures::StreamExt;
    /// # use rdmc::{GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), rdmc::Error> {
    /// # let nodes = Node::in_memory_all(&MemCluster::new(3), NodeConfig::new())?;
    /// # let members = [NodeId(0), NodeId(1), NodeId(2)];
    /// # let (root, mut a, mut b) = tokio::try_join!(
    /// #     nodes[0].create_group(GroupId(1), &members, GroupConfig::new()),
    /// #     nodes[1].create_group(GroupId(1), &members, GroupConfig::new()),
    /// #     nodes[2].create_group(GroupId(1), &members, GroupConfig::new()),
    /// # )?;
    /// let write = root.send(Bytes::from_static(b"object")).delivered();
    /// let (x, y) = tokio::join!(a.next(), b.next()); // the replicas take it
    /// write.await?; // every replica's application has it
    /// # x.unwrap()?; y.unwrap()?;
    /// # tokio::try_join!(root.close(), a.close(), b.close())?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn delivered(self) -> Delivered {
        Delivered {
            response: self.delivered,
            node: self.node,
        }
    }
}

impl Future for SendFuture {
    type Output = Result<MessageTimings, Error>;

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
