//! [`Receiver`]: a receiving member's handle on a group.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use futures::stream::FusedStream;
use tokio::task::JoinHandle;

use super::{Closing, Handle};
use crate::config::Durability;
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
    durability: Durability,
    /// The next message, while its file is synced
    /// ([`Durability::Synced`]; boxed: a message is large, and rarely here).
    syncing: Option<Box<(Message, JoinHandle<std::io::Result<()>>)>>,
    /// A message's file could not be synced: nothing more is handed over.
    unsynced: bool,
    /// Messages taken from the stream.
    taken: u64,
    /// Messages acknowledged as persisted (a count from the first).
    persisted: u64,
    /// Messages the stream synced past the first not acknowledged.
    synced_ahead: BTreeSet<u64>,
    /// Tests: the messages whose sync fails, and the syncs done.
    #[cfg(test)]
    pub(crate) fail_sync: Option<u64>,
    #[cfg(test)]
    pub(crate) syncs: usize,
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

    pub(super) fn new(handle: Handle, deliveries: Deliveries, durability: Durability) -> Self {
        Receiver {
            handle,
            deliveries,
            ended: false,
            closing: Closing::default(),
            durability,
            syncing: None,
            unsynced: false,
            taken: 0,
            persisted: 0,
            synced_ahead: BTreeSet::new(),
            #[cfg(test)]
            fail_sync: None,
            #[cfg(test)]
            syncs: 0,
        }
    }

    /// The message whose file was being synced, once the sync is over:
    /// the message, or (the sync failed) the group's failure, told to the
    /// node.
    fn poll_synced(&mut self, cx: &mut Context<'_>) -> Poll<Result<Message, String>> {
        let (_, sync) = &mut **self.syncing.as_mut().expect("syncing");
        let synced = std::task::ready!(Pin::new(sync).poll(cx));
        let (message, _) = *self.syncing.take().expect("syncing");
        let synced = synced.map_err(std::io::Error::other).and_then(|done| done);
        Poll::Ready(
            synced
                .map(|()| message)
                .map_err(|e| format!("cannot sync the file: {e}")),
        )
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
        self.deliveries.len() + usize::from(self.syncing.is_some())
    }

    /// Acknowledge that this member's application has every message up to
    /// and including `seq` (a [`Message::seq`]) on stable storage: the
    /// root's [`Receipt::persisted`](crate::Receipt::persisted) of a message
    /// resolves once every receiver acknowledged it. Cumulative: it
    /// acknowledges every message before `seq` too; a message acknowledged
    /// already changes nothing. Acknowledge before [`close`](Self::close):
    /// the root hears none after it.
    ///
    /// With [`Durability::Synced`] the stream acknowledges each message it
    /// received into a file and synced, as soon as every message before it
    /// is acknowledged: messages in memory are the application's to
    /// acknowledge.
    ///
    /// # Errors
    /// [`Error::NotTaken`] if the application has not taken message `seq`
    /// from the stream.
    pub fn persisted(&mut self, seq: u64) -> Result<(), Error> {
        if seq >= self.taken {
            let group = self.handle.id;
            return Err(Error::NotTaken { group, seq });
        }
        self.acknowledge(seq + 1);
        Ok(())
    }

    /// Acknowledge the first `count` messages and those the stream synced
    /// right after them.
    fn acknowledge(&mut self, count: u64) {
        let mut count = count.max(self.persisted);
        self.synced_ahead.retain(|&seq| seq >= count);
        while self.synced_ahead.remove(&count) {
            count += 1;
        }
        if count > self.persisted {
            self.persisted = count;
            let (group, messages) = (self.handle.id, count);
            let _ = self.handle.command(Command::Persisted { group, messages });
        }
    }

    /// Close: the application's statement that it has taken every message
    /// from the stream and secured what it took (acknowledge what it
    /// persisted with [`persisted`](Self::persisted) first: the root's
    /// [`Receipt::persisted`](crate::Receipt::persisted) counts only those
    /// acknowledgements). Resolves `Ok` once every member's application has
    /// every message and the group closed, or with the group's failure.
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
    /// Cancel safe: a message is removed from the stream only when returned
    /// (one whose file is being synced stays in the stream meanwhile).
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut synced = false;
        let item = loop {
            if self.ended {
                return Poll::Ready(None);
            }
            if self.syncing.is_some() {
                match std::task::ready!(self.poll_synced(cx)) {
                    Ok(message) => {
                        synced = true;
                        break Some(Ok(message));
                    }
                    Err(error) => {
                        // The group fails, naming this member; nothing
                        // after the message is handed over (its failure
                        // comes next in the stream).
                        let group = self.handle.id;
                        let _ = self.handle.command(Command::NotDurable { group, error });
                        self.unsynced = true;
                        continue;
                    }
                }
            }
            match std::task::ready!(self.deliveries.poll_recv(cx)) {
                Some(Ok(_)) if self.unsynced => {}
                Some(Ok(message))
                    if self.durability == Durability::Synced && message.file.is_some() =>
                {
                    let file = message.file.as_ref().expect("checked").shared();
                    #[cfg(test)]
                    let fails = {
                        self.syncs += 1;
                        self.fail_sync == Some(message.seq)
                    };
                    #[cfg(not(test))]
                    let fails = false;
                    let sync = tokio::task::spawn_blocking(move || {
                        if fails {
                            return Err(std::io::Error::other("a failure the test planted"));
                        }
                        file.sync_data()
                    });
                    self.syncing = Some(Box::new((message, sync)));
                }
                item => break item,
            }
        };
        match &item {
            Some(Ok(message)) => {
                // Room in the receive window: the node may take the next message.
                let _ = self.handle.command(Command::Consumed {
                    group: self.handle.id,
                });
                self.taken = message.seq + 1;
                if synced {
                    self.synced_ahead.insert(message.seq);
                    let persisted = self.persisted;
                    self.acknowledge(persisted);
                }
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
