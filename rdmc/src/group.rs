//! [`Group`]: a member's handle on one multicast group.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;
use tokio::sync::{mpsc, oneshot};

use crate::error::Error;
use crate::ids::{GroupId, NodeId};
use crate::runtime::{Command, Deliveries, Message, MessageTimings};

/// A member's handle on a group.
///
/// On a receiver, the group is a [`Stream`] of the root's messages, in send
/// order, each delivered once all its bytes are here; after the group closes
/// the stream ends, after a failure it yields the failure once and then ends.
/// On the root, [`send`](Group::send) multicasts a message.
///
/// Dropping the handle leaves the group: if it is still open, it fails, and
/// the other members see this node as the failed one.
pub struct Group {
    id: GroupId,
    node: NodeId,
    members: Vec<NodeId>,
    commands: mpsc::UnboundedSender<Command>,
    deliveries: Deliveries,
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
        deliveries: Deliveries,
    ) -> Self {
        Group {
            id,
            node,
            members,
            commands,
            deliveries,
        }
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
    /// reached every member is what [`close`](Group::close) reports.
    ///
    /// # Errors
    /// [`Error::NotRoot`] on a non-root; [`Error::Closed`] after `close`;
    /// [`Error::MessageTooLarge`]; [`Error::GroupFailed`] if the group fails
    /// before the message is locally complete; [`Error::NodeShutDown`].
    ///
    /// # Cancel safety
    /// Dropping the returned future does not withdraw the message: it is
    /// still sent, and the outcome is then only visible through `close`.
    pub fn send(&self, data: impl Into<Bytes>) -> SendFuture {
        let (reply, response) = oneshot::channel();
        let sent = self.commands.send(Command::Send {
            group: self.id,
            data: data.into(),
            reply,
        });
        SendFuture {
            response: sent.ok().map(|()| response),
            node: self.node,
        }
    }

    /// Close the group: resolves `Ok` once **every member has every message**
    /// the root sent, or with the group's failure.
    ///
    /// On the root this starts the close (no more sends are accepted); on
    /// other members it waits for the root's close to complete. Messages not
    /// yet read from the stream can still be read afterwards — but a member
    /// holding a full receive window of unread messages
    /// ([`GroupConfig::with_receive_window`](crate::GroupConfig::with_receive_window))
    /// takes no more, so while more messages may still come, keep reading
    /// the stream (e.g. read it to its end, then close) or the close waits.
    ///
    /// # Errors
    /// [`Error::GroupFailed`] if the group failed (before or during the close);
    /// [`Error::NodeShutDown`].
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future does not affect the group; call
    /// `close` again to wait once more.
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
        let item = self.deliveries.poll_recv(cx);
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

/// The future returned by [`Group::send`].
#[derive(Debug)]
#[must_use = "the message is sent regardless; await the future to learn when it is locally complete"]
pub struct SendFuture {
    response: Option<oneshot::Receiver<Result<MessageTimings, Error>>>,
    node: NodeId,
}

impl Future for SendFuture {
    type Output = Result<MessageTimings, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let node = self.node;
        match self.response.as_mut() {
            None => Poll::Ready(Err(Error::NodeShutDown(node))),
            Some(rx) => Pin::new(rx)
                .poll(cx)
                .map(|r| r.unwrap_or(Err(Error::NodeShutDown(node)))),
        }
    }
}
