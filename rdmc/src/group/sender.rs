//! [`Sender`]: the root's handle on a group.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures::Sink;
use tokio::sync::oneshot;

use super::receipt::{Receipt, Reply};
use super::{Closing, Handle};
use crate::error::Error;
use crate::ids::{GroupId, NodeId};
use crate::in_flight::InFlight;
use crate::runtime::{Acks, Command};
use crate::transport::MessageBuffer;

/// The root's handle on a group: it multicasts messages to every other
/// member, in order, and closes the group.
///
/// Every wait says what it waits for:
///
/// | call | resolves once |
/// |---|---|
/// | [`send`](Self::send), [`reserve`](Self::reserve) | there is room within the bound on messages in flight, and the message is **queued** |
/// | [`Receipt::sent`] | the message is **sent**: every block this node sends of it has left, its buffer is free |
/// | [`Receipt::delivered`] | **every member's application has taken** the message |
/// | [`flush`](Self::flush) | every message queued so far is delivered |
/// | [`close`](Self::close) | every message is delivered and every receiver closed: the group is **closed** |
///
/// The [`Sink`] implementation is the same calls: `poll_ready` reserves
/// room, `start_send` queues, `poll_flush` is [`flush`](Self::flush) and
/// `poll_close` is [`close`](Self::close) — so `SinkExt::send` resolves
/// once the message is delivered, and `send_all` streams messages within
/// the bound.
///
/// `Sender` is `Send`, `Sync` and `Unpin`; it is not `Clone` (one root
/// handle per group: its close is the group's). Several tasks may send
/// through a shared reference; room goes to the waiting sends first come,
/// first served (as tokio's `mpsc`), and messages go out in the order their
/// room was granted — so sends started in order, as `buffered` and
/// `buffer_unordered` start them, queue their messages in that order.
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
/// let (root, receiver) = tokio::try_join!(
///     nodes[0].create_group(GroupId(1), &members, config.clone()),
///     nodes[1].create_group(GroupId(1), &members, config),
/// )?;
/// let (mut root, mut receiver) = (root.into_sender().unwrap(), receiver.into_receiver().unwrap());
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
#[derive(Debug)]
pub struct Sender {
    pub(super) handle: Handle,
    in_flight: Arc<InFlight>,
    /// The group's largest message.
    max_message_size: u64,
    /// Room the [`Sink`] reserved for its next item.
    sink_room: bool,
    closing: Closing,
}

impl Sender {
    /// What this member (the root) has moved so far: messages complete
    /// (every block sent), block bytes and blocks sent. A snapshot of
    /// counters the node keeps as it works, cheap to take; they also go to
    /// the `metrics` facade ([`stats`](crate::stats)).
    pub fn stats(&self) -> crate::GroupStats {
        self.handle.counters.snapshot()
    }

    pub(super) fn new(handle: Handle, in_flight: Arc<InFlight>, max_message_size: u64) -> Self {
        Sender {
            handle,
            in_flight,
            max_message_size,
            sink_room: false,
            closing: Closing::default(),
        }
    }

    /// The group's id.
    pub fn id(&self) -> GroupId {
        self.handle.id
    }

    /// The members, in rank order; the first is this node, the root.
    pub fn members(&self) -> &[NodeId] {
        &self.handle.members
    }

    /// Messages queued and not yet taken by every member's application.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.count()
    }

    /// The bound on [`in_flight`](Self::in_flight)
    /// ([`GroupConfig::with_max_in_flight`](crate::GroupConfig::with_max_in_flight)).
    pub fn max_in_flight(&self) -> Option<u64> {
        self.in_flight.max()
    }

    /// Multicast `data` to every member: wait for room within the bound on
    /// messages in flight (at once without one), then queue the message.
    /// Messages go out one after another in the order they were queued.
    /// The [`Receipt`] tells when the message is [sent](Receipt::sent) and
    /// [delivered](Receipt::delivered).
    ///
    /// # Errors
    /// [`Error::Closed`] after [`close`](Self::close) began;
    /// [`Error::GroupFailed`] if the group failed; [`Error::NodeShutDown`];
    /// [`Error::MessageTooLarge`] for a message over the group's limit
    /// ([`GroupConfig::with_max_message_size`](crate::GroupConfig::with_max_message_size)),
    /// at once. A message the node cannot take for another reason is
    /// queued and refused there: its receipt's futures fail.
    ///
    /// # Cancel safety
    /// Cancel safe: a message is queued only when the future resolves; if
    /// it is dropped before, the message is not sent.
    ///
    /// # Examples
    ///
    /// ```
    /// # use futures::StreamExt;
    /// # use rdmc::{GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), rdmc::Error> {
    /// # let nodes = Node::in_memory_all(&MemCluster::new(2), NodeConfig::new())?;
    /// # let members = [NodeId(0), NodeId(1)];
    /// # let (root, receiver) = tokio::try_join!(
    /// #     nodes[0].create_group(GroupId(1), &members, GroupConfig::new()),
    /// #     nodes[1].create_group(GroupId(1), &members, GroupConfig::new()),
    /// # )?;
    /// # let mut root = root.into_sender().unwrap();
    /// # let mut receiver = receiver.into_receiver().unwrap();
    /// # let reader = tokio::spawn(async move {
    /// #     while let Some(m) = receiver.next().await { m?; }
    /// #     receiver.close().await
    /// # });
    /// let mut receipts = Vec::new();
    /// for i in 0u8..3 {
    ///     receipts.push(root.send(vec![i; 1000]).await?);
    /// }
    /// for receipt in receipts {
    ///     let timings = receipt.sent().await?; // its buffer is free
    ///     assert!(timings.total >= timings.waiting);
    /// }
    /// root.close().await?; // every member has all three messages
    /// # reader.await.expect("reader")?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send(&self, data: impl Into<Bytes>) -> Result<Receipt, Error> {
        let data = data.into();
        self.check_size(data.len())?;
        Ok(self.reserve().await?.send(data))
    }

    /// A message of `len` bytes is within the group's limit; else
    /// [`Error::MessageTooLarge`], before it takes room or reaches the node.
    fn check_size(&self, len: usize) -> Result<(), Error> {
        let size = len as u64;
        if size > self.max_message_size {
            return Err(Error::MessageTooLarge {
                size,
                max: self.max_message_size,
            });
        }
        Ok(())
    }

    /// Queue `data` if there is room now, as [`send`](Self::send) does.
    ///
    /// # Errors
    /// [`Error::TooManyInFlight`] if the group is at its bound on messages
    /// in flight, or other sends wait for room (it does not go before
    /// them); otherwise as [`send`](Self::send).
    pub fn try_send(&self, data: impl Into<Bytes>) -> Result<Receipt, Error> {
        let data = data.into();
        self.check_size(data.len())?;
        self.in_flight.try_reserve()?;
        Ok(Permit { sender: self }.send(data))
    }

    /// Queue `data` at once, without a bound in mind: a refusal (the bound,
    /// the group's end) comes back through the receipt's futures. For the
    /// crate's own groups, which have no bound.
    pub(crate) fn queue(&self, data: impl Into<Bytes>) -> Receipt {
        match self.try_send(data) {
            Ok(receipt) => receipt,
            Err(e) => Receipt::refused(e, self.handle.node),
        }
    }

    /// Wait for room for one message within the bound on messages in
    /// flight, and hold it: the [`Permit`] queues the message without
    /// waiting (as tokio's `mpsc::Sender::reserve`). Dropping the permit
    /// gives the room back. Waiting reservations (and sends) get room in
    /// the order they first waited.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    ///
    /// # Cancel safety
    /// Cancel safe: room is held only once the future resolves.
    pub async fn reserve(&self) -> Result<Permit<'_>, Error> {
        self.in_flight.reserve().await?;
        Ok(Permit { sender: self })
    }

    /// Multicast the contents of `file`, as [`send`](Self::send) does with
    /// bytes in memory: the file is mapped (off the async threads) and sent
    /// from the mapping, and each block's memory is dropped once the root
    /// has sent it, so a file larger than memory can be sent. The file
    /// must not change until the message is [sent](Receipt::sent). Linux only.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be read or mapped; otherwise as
    /// [`send`](Self::send).
    ///
    /// # Cancel safety
    /// If dropped before it resolves, the file is not sent.
    #[cfg(target_os = "linux")]
    pub async fn send_file(&self, file: std::fs::File) -> Result<Receipt, Error> {
        let map = move || {
            let len = usize::try_from(file.metadata()?.len()).map_err(std::io::Error::other)?;
            MessageBuffer::map_file(file, len, false)
        };
        let source = tokio::task::spawn_blocking(map)
            .await
            .map_err(std::io::Error::other)??;
        self.check_size(source.len())?;
        let permit = self.reserve().await?;
        Ok(permit.submit(Arc::clone(&source).into_bytes(), Some(source)))
    }

    /// Wait until every message queued so far has been delivered to every
    /// member's application (no message in flight).
    ///
    /// # Errors
    /// The group's failure; [`Error::NodeShutDown`].
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn flush(&self) -> Result<(), Error> {
        futures::future::poll_fn(|cx| self.in_flight.poll_empty(cx)).await
    }

    /// Close the group: no more messages are accepted, every receiver learns
    /// how many there were, and the future resolves `Ok` once **every
    /// member's application has every message and has closed** — or with
    /// the group's failure. See [`Group`](super::Group#delivered-means-the-application-has-it).
    ///
    /// # Errors
    /// [`Error::GroupFailed`] if the group failed (before or during the
    /// close), naming the member that failed, left, closed early or made
    /// no progress; [`Error::NodeShutDown`].
    ///
    /// # Cancel safety
    /// Cancel safe: the close takes effect when the future is first polled;
    /// call `close` again to wait for it once more (after it completed, it
    /// returns the same outcome again).
    pub async fn close(&mut self) -> Result<(), Error> {
        let Sender {
            handle, closing, ..
        } = self;
        futures::future::poll_fn(|cx| closing.poll(handle, cx)).await
    }

    /// Wait until the group ends: `Ok` once it closed, or its failure as
    /// soon as it fails — to learn of a failure between sends.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn closed(&self) -> Result<(), Error> {
        futures::future::poll_fn(|cx| self.in_flight.poll_ended(cx)).await
    }
}

/// Room for one message within a group's bound on messages in flight,
/// from [`Sender::reserve`]: [`send`](Self::send) queues the message
/// without waiting. Dropped unused, it gives the room back.
#[derive(Debug)]
#[must_use = "a permit holds room for a message until it is used or dropped"]
pub struct Permit<'a> {
    sender: &'a Sender,
}

impl Permit<'_> {
    /// Queue `data` in the room this permit holds. A message over the
    /// group's limit is refused (and the room given back): the receipt's
    /// futures fail with [`Error::MessageTooLarge`].
    pub fn send(self, data: impl Into<Bytes>) -> Receipt {
        self.submit(data.into(), None)
    }

    fn submit(self, data: Bytes, source: Option<Arc<MessageBuffer>>) -> Receipt {
        let sender = self.sender;
        // The room is the message's now: it leaves flight when the node
        // answers (delivered, refused or failed).
        std::mem::forget(self);
        submit(sender, data, source)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.sender.in_flight.remove();
    }
}

/// Queue `data` (in room already reserved) with the node's actor.
fn submit(sender: &Sender, data: Bytes, source: Option<Arc<MessageBuffer>>) -> Receipt {
    let node = sender.handle.node;
    if let Err(e) = sender.check_size(data.len()) {
        sender.in_flight.remove();
        return Receipt::refused(e, node);
    }
    let (reply, response) = oneshot::channel();
    let (delivered_tx, delivered) = oneshot::channel();
    let (persisted_tx, persisted) = oneshot::channel();
    let command = Command::Send {
        group: sender.handle.id,
        data,
        source,
        reply,
        acks: Acks {
            delivered: delivered_tx,
            persisted: persisted_tx,
        },
    };
    match sender.handle.command(command) {
        Ok(()) => Receipt::new(
            Reply::pending(response, node),
            Reply::pending(delivered, node),
            Reply::pending(persisted, node),
        ),
        Err(e) => {
            sender.in_flight.remove();
            Receipt::refused(e, node)
        }
    }
}

impl Sink<Bytes> for Sender {
    type Error = Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        if !self.sink_room {
            ready!(self.in_flight.poll_reserve_exclusive(cx))?;
            self.sink_room = true;
        }
        Poll::Ready(Ok(()))
    }

    fn start_send(mut self: Pin<&mut Self>, item: Bytes) -> Result<(), Error> {
        if let Err(e) = self.check_size(item.len()) {
            if std::mem::take(&mut self.sink_room) {
                self.in_flight.remove();
            }
            return Err(e);
        }
        if !std::mem::take(&mut self.sink_room) {
            // `poll_ready` was not called first: take room if there is some.
            self.in_flight.try_reserve()?;
        }
        // The receipt goes: `poll_flush` waits for every message instead.
        drop(submit(&self, item, None));
        Ok(())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.in_flight.poll_empty(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let this = &mut *self;
        if std::mem::take(&mut this.sink_room) {
            // Room reserved for an item that never came.
            this.in_flight.remove();
        }
        if matches!(this.closing, Closing::Open) {
            ready!(this.in_flight.poll_empty(cx))?;
        }
        this.closing.poll(&this.handle, cx)
    }
}
