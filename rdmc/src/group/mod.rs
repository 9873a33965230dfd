//! A member's handle on one multicast group: the root's [`Sender`], a
//! receiver's [`Receiver`], and [`Group`], which is one or the other.

use std::fmt;

use tokio::sync::{mpsc, oneshot};

use crate::error::Error;
use crate::ids::{GroupId, NodeId};
use crate::runtime::{Command, Joined};

#[cfg(test)]
mod durability_tests;
mod receipt;
mod receiver;
mod sender;

pub use receipt::{Delivered, Persisted, Receipt, Sent};
pub use receiver::Receiver;
pub use sender::{Permit, Sender};

/// This node's membership of a group, as
/// [`Node::create_group`](crate::Node::create_group) returns it: the root
/// (its first member) holds a [`Sender`], every other member a
/// [`Receiver`]. Match on it, or take the handle you expect with
/// [`into_sender`](Self::into_sender) / [`into_receiver`](Self::into_receiver).
///
/// # Delivered means the application has it
///
/// The root's [`close`](Sender::close) succeeds only once **every
/// receiver's application has taken every message from its stream and
/// called [`close`](Receiver::close)** itself. A receiver's `close` is its
/// application's statement "I have persisted (or otherwise secured) every
/// message I took": call it only after that, typically after reading the
/// stream to its end. A receiver whose application goes away before —
/// drops its handle, its process dies, its node shuts down — fails the
/// group for every member, naming it; so does one that closes without
/// having taken every message the root sent. The root's `close` then
/// returns that failure, never `Ok`.
///
/// Dropping a handle leaves the group: if it is still open, it fails, and
/// the other members see this node as the failed one (unless this receiver
/// already closed and its close was acknowledged: then nobody needs it).
/// A root that gives up on its close (a `timeout` around it) and drops its
/// `Sender` so leaves the group too: the close goes on only while the
/// `Sender` lives. Stream combinators that take a stream by value and drop
/// it when it ends (`select_all`, `flatten`, `chain`, ...) drop the
/// `Receiver` before its close: give them `&mut` receivers instead
/// (`select_all(receivers.iter_mut())`) and close each afterwards.
///
/// # Durability and flow control
///
/// Each message's [`Receipt::delivered`] resolves once every member's
/// application has taken that message — and, where receivers choose
/// [`Durability::Synced`](crate::Durability::Synced) and receive into
/// files, once every such copy is on stable storage. Its
/// [`Receipt::persisted`] resolves once every receiver acknowledged the
/// message as on stable storage ([`Receiver::persisted`], or the stream of
/// a `Synced` receiver for the files it synced): what a storage service
/// acknowledges to its client, and the root knows it holds whatever each
/// receiver chose.
/// [`GroupConfig::with_max_in_flight`](crate::GroupConfig::with_max_in_flight)
/// bounds the messages queued and not yet so delivered, and
/// [`Sender::send`] waits for room within it. A receiver acknowledges each
/// message its application takes, cumulatively, to the root. A receiver
/// whose application stops taking messages can fail the group, naming it
/// ([`GroupConfig::with_slow_reader_timeout`](crate::GroupConfig::with_slow_reader_timeout)).
///
/// # Examples
///
/// ```
/// use bytes::Bytes;
/// use futures::{StreamExt, TryStreamExt};
/// use rdmc::{Group, GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId};
///
/// async fn run(group: Group) -> Result<Vec<Bytes>, rdmc::Error> {
///     match group {
///         Group::Root(mut root) => {
///             root.send(Bytes::from_static(b"first")).await?;
///             root.send(Bytes::from_static(b"second")).await?;
///             root.close().await?; // every receiver has both
///             Ok(Vec::new())
///         }
///         Group::Receiver(mut receiver) => {
///             let got = receiver.by_ref().map_ok(|m| m.data).try_collect().await?;
///             // (A storage service writes and syncs each message here.)
///             receiver.close().await?;
///             Ok(got)
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), rdmc::Error> {
/// let nodes = Node::in_memory_all(&MemCluster::new(2), NodeConfig::new())?;
/// let members = [NodeId(0), NodeId(1)];
/// let (root, receiver) = tokio::try_join!(
///     nodes[0].create_group(GroupId(7), &members, GroupConfig::new()),
///     nodes[1].create_group(GroupId(7), &members, GroupConfig::new()),
/// )?;
/// let (sent, got) = tokio::try_join!(run(root), run(receiver))?;
/// assert!(sent.is_empty());
/// assert_eq!(got, [Bytes::from_static(b"first"), Bytes::from_static(b"second")]);
/// # Ok(())
/// # }
/// ```
///
/// The roles are in the types: a receiver cannot send, and the root has no
/// stream to read.
///
/// ```compile_fail,E0599
/// # async fn f(receiver: rdmc::Receiver) {
/// receiver.send(bytes::Bytes::new()).await; // no `send` on a receiver
/// # }
/// ```
///
/// ```compile_fail,E0599
/// # async fn f(mut root: rdmc::Sender) {
/// use futures::StreamExt;
/// root.next().await; // the root's handle is not a stream
/// # }
/// ```
///
/// Nor can a send race the close: closing borrows the root's handle
/// exclusively until it completes.
///
/// ```compile_fail,E0502
/// # async fn f(mut root: rdmc::Sender) {
/// let closing = root.close();
/// let _ = root.send(bytes::Bytes::new()).await; // not while closing
/// let _ = closing.await;
/// # }
/// ```
#[derive(Debug)]
pub enum Group {
    /// This node is the group's root: it sends.
    Root(Sender),
    /// This node receives.
    Receiver(Receiver),
}

impl Group {
    pub(crate) fn new(
        id: GroupId,
        node: NodeId,
        members: Vec<NodeId>,
        commands: mpsc::UnboundedSender<Command>,
        joined: Joined,
    ) -> Self {
        let root = members.first() == Some(&node);
        let handle = Handle {
            id,
            node,
            members,
            commands,
            counters: joined.counters,
        };
        if root {
            Group::Root(Sender::new(
                handle,
                joined.in_flight,
                joined.max_message_size,
            ))
        } else {
            Group::Receiver(Receiver::new(handle, joined.deliveries, joined.durability))
        }
    }

    fn handle(&self) -> &Handle {
        match self {
            Group::Root(s) => &s.handle,
            Group::Receiver(r) => &r.handle,
        }
    }

    /// The group's id.
    pub fn id(&self) -> GroupId {
        self.handle().id
    }

    /// What this member of the group has moved so far (see
    /// [`Sender::stats`]).
    pub fn stats(&self) -> crate::GroupStats {
        self.handle().counters.snapshot()
    }

    /// The members, in rank order; the first is the root.
    pub fn members(&self) -> &[NodeId] {
        &self.handle().members
    }

    /// This member's rank (its index in [`members`](Self::members)).
    pub fn rank(&self) -> usize {
        self.handle().rank()
    }

    /// Whether this member is the root (the only sender).
    pub fn is_root(&self) -> bool {
        matches!(self, Group::Root(_))
    }

    /// Close the group, whatever this member's role: [`Sender::close`] or
    /// [`Receiver::close`].
    ///
    /// # Errors
    /// As theirs.
    ///
    /// # Cancel safety
    /// As theirs: cancel safe.
    pub async fn close(&mut self) -> Result<(), Error> {
        match self {
            Group::Root(s) => s.close().await,
            Group::Receiver(r) => r.close().await,
        }
    }

    /// The next event of the group as this member sees it: a receiver's
    /// next message, or the root's failure; `None` once it ended normally.
    pub(crate) async fn next_event(&mut self) -> Option<Result<crate::Message, Error>> {
        use futures::StreamExt;
        match self {
            Group::Root(s) => s.closed().await.err().map(Err),
            Group::Receiver(r) => r.next().await,
        }
    }

    /// The root's handle; a receiver's comes back as the error (it is not
    /// dropped, which would leave the group).
    ///
    /// # Errors
    /// The [`Receiver`], if this member is not the root.
    // The error is the other handle, given back whole (as `Arc::try_unwrap`
    // gives the `Arc` back), not a failure to pass up with `?`.
    #[allow(clippy::result_large_err)]
    pub fn into_sender(self) -> Result<Sender, Receiver> {
        match self {
            Group::Root(s) => Ok(s),
            Group::Receiver(r) => Err(r),
        }
    }

    /// A receiver's handle; the root's comes back as the error.
    ///
    /// # Errors
    /// The [`Sender`], if this member is the root.
    // The error is the other handle, given back whole (as `Arc::try_unwrap`
    // gives the `Arc` back), not a failure to pass up with `?`.
    #[allow(clippy::result_large_err)]
    pub fn into_receiver(self) -> Result<Receiver, Sender> {
        match self {
            Group::Receiver(r) => Ok(r),
            Group::Root(s) => Err(s),
        }
    }
}

/// What both roles' handles hold: which group, which node, and the way to
/// the node's actor. Dropping it leaves the group.
pub(crate) struct Handle {
    id: GroupId,
    node: NodeId,
    members: Vec<NodeId>,
    commands: mpsc::UnboundedSender<Command>,
    counters: std::sync::Arc<crate::stats::GroupCounters>,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("id", &self.id)
            .field("node", &self.node)
            .field("members", &self.members)
            .finish()
    }
}

impl Handle {
    fn rank(&self) -> usize {
        self.members
            .iter()
            .position(|&n| n == self.node)
            .expect("a group's node is a member")
    }

    /// Send the actor `command`.
    fn command(&self, command: Command) -> Result<(), Error> {
        self.commands
            .send(command)
            .map_err(|_| Error::NodeShutDown(self.node))
    }

    /// Close the group on the node (both roles): the reply comes once the
    /// group closed or failed.
    fn start_close(&self) -> Result<oneshot::Receiver<Result<(), Error>>, Error> {
        let (reply, response) = oneshot::channel();
        self.command(Command::Close {
            group: self.id,
            reply,
        })?;
        Ok(response)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Leave { group: self.id });
    }
}

/// A close in progress or done, as a handle's `close` keeps it: closing
/// again waits for the same close, and after it completed returns its
/// outcome again.
#[derive(Debug, Default)]
enum Closing {
    /// Not started.
    #[default]
    Open,
    /// Sent to the node; its reply is awaited.
    Waiting(receipt::Reply<()>),
    /// Completed with this outcome.
    Done(Result<(), Error>),
}

impl Closing {
    /// Start the close on `handle` if it is not started, then poll it.
    fn poll(
        &mut self,
        handle: &Handle,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Error>> {
        use std::future::Future;
        use std::task::Poll;
        loop {
            match self {
                Closing::Done(outcome) => return Poll::Ready(outcome.clone()),
                Closing::Open => {
                    *self = match handle.start_close() {
                        Ok(response) => {
                            Closing::Waiting(receipt::Reply::pending(response, handle.node))
                        }
                        Err(e) => Closing::Done(Err(e)),
                    };
                }
                Closing::Waiting(reply) => {
                    let outcome = std::task::ready!(std::pin::Pin::new(reply).poll(cx));
                    *self = Closing::Done(outcome);
                }
            }
        }
    }
}
