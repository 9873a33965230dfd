//! Receive targets: where a receiver puts each incoming message.
//!
//! The original RDMC, described in "RDMC: A Reliable RDMA Multicast for
//! Large Objects" (Behrens, Jha, Birman, Tremel), asks the application,
//! when the first block of every incoming message arrives, where its bytes
//! should go (its incoming-message upcall). rdmc does the same through a
//! per-group hook, [`ReceiveTargets`], set with
//! [`GroupConfig::with_receive_targets`](crate::GroupConfig::with_receive_targets).

use std::fmt;
use std::future::Future;
use std::io;
use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::ids::GroupId;

/// A message that is arriving: what a [`ReceiveTargets`] hook is told.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Incoming {
    /// The group it is multicast in.
    pub group: GroupId,
    /// Its position in the root's send order, from 0.
    pub seq: u64,
    /// Its size in bytes.
    pub size: u64,
}

/// Where an incoming message's bytes go.
#[non_exhaustive]
#[derive(Debug)]
pub enum ReceiveTarget {
    /// A buffer from the node's pool, delivered as
    /// [`Message::data`](crate::Message::data): what a group without a hook
    /// does.
    Memory,
    /// The application's vector, resized to the message's size (it
    /// reallocates only if its capacity is smaller); delivered, without a
    /// copy, as [`Message::data`](crate::Message::data).
    Buffer(Vec<u8>),
    /// A file, opened for reading and writing: the message becomes its
    /// first `size` bytes (the file is resized to exactly that), so a
    /// message larger than memory can be received. Where the file system
    /// allows it (`O_DIRECT`; not tmpfs), the message arrives in memory
    /// the process reuses from message to message, 1 MiB at a time, and
    /// each such chunk is written to the file directly, past the page
    /// cache, by a writer thread once this member has relayed it (at most
    /// 32 MiB of it held per process; past that, and on other file
    /// systems, blocks go through a shared mapping of the file and the
    /// kernel writes them back). Delivered as
    /// [`Message::file`](crate::Message::file), with an empty
    /// [`Message::data`](crate::Message::data), once every byte is in the
    /// file (readable through any handle); call
    /// [`File::sync_all`](std::fs::File::sync_all) on it to have them on
    /// disk. A write that fails fails the group, naming this member. Linux
    /// only; elsewhere the message fails the group.
    ///
    /// The file's blocks are preallocated (`posix_fallocate`), so a full
    /// disk fails the group cleanly before any byte lands. Nobody may
    /// shorten the file until the message is delivered (a mapped page past
    /// a file's end raises `SIGBUS` in this process), and one file must
    /// not be the target of two messages at once. Blocks that go through
    /// the mapping are written there by the transport (on `tcp`, by its
    /// tasks on the tokio threads), so a disk much slower than the network
    /// can hold those threads in the kernel's writeback throttling; `ofi`
    /// and `rdma` never register file memory: each block arrives in a
    /// registered bounce buffer from the node's pool and is copied on.
    File(std::fs::File),
}

impl ReceiveTarget {
    /// A file at `path`, created (or emptied) for reading and writing, off
    /// the async threads: what a hook that keeps each message in a file of
    /// its own returns ([`ReceiveTargets`] has an example).
    ///
    /// # Errors
    /// The error opening the file.
    pub async fn create_file(path: impl AsRef<Path>) -> io::Result<ReceiveTarget> {
        let path = path.as_ref().to_path_buf();
        let open = move || {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(path)
        };
        let file = tokio::task::spawn_blocking(open)
            .await
            .map_err(io::Error::other)??;
        Ok(ReceiveTarget::File(file))
    }
}

type Hook = dyn Fn(Incoming) -> BoxFuture<'static, io::Result<ReceiveTarget>> + Send + Sync;

/// A receiver's hook that chooses, per incoming message, its
/// [`ReceiveTarget`].
///
/// The hook is called on the node's actor when the message's first block
/// has arrived: it must return at once; the work (opening a file, say) is
/// done by the future it returns, which runs on its own task, and the
/// message's other blocks wait for it. The file's mapping is made off the
/// async threads. An error fails the group, naming this member
/// ([`FailureKind::ReceiveTarget`](crate::FailureKind::ReceiveTarget)).
///
/// Cloning gives another handle to the same hook; two configurations are
/// equal when their hooks are the same one.
///
/// # Examples
///
/// Receive every message into a file of its own:
///
/// ```
/// use bytes::Bytes;
/// use futures::StreamExt;
/// use rdmc::{GroupConfig, GroupId, MemCluster, Node, NodeConfig, NodeId, ReceiveTarget, ReceiveTargets};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = std::env::temp_dir().join(format!("rdmc-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let place = dir.clone();
/// let targets = ReceiveTargets::new(move |incoming| {
///     let path = place.join(format!("message-{}", incoming.seq));
///     ReceiveTarget::create_file(path)
/// });
/// let nodes = Node::in_memory_all(&MemCluster::new(2), NodeConfig::new())?;
/// let members = [NodeId(0), NodeId(1)];
/// let (root, receiver) = tokio::try_join!(
///     nodes[0].create_group(GroupId(1), &members, GroupConfig::new()),
///     nodes[1].create_group(GroupId(1), &members, GroupConfig::new().with_receive_targets(targets)),
/// )?;
/// let (mut root, mut receiver) = (root.into_sender().unwrap(), receiver.into_receiver().unwrap());
/// root.send(Bytes::from_static(b"kept on disk")).await?;
/// let message = receiver.next().await.expect("a message")?;
/// let file = message.file.as_ref().expect("received into a file");
/// assert_eq!(file.len(), 12);
/// assert!(message.data.is_empty());
/// assert_eq!(std::fs::read(dir.join("message-0"))?, b"kept on disk");
/// # tokio::try_join!(root.close(), receiver.close())?;
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ReceiveTargets(Arc<Hook>);

impl ReceiveTargets {
    /// A hook calling `choose` for every incoming message.
    pub fn new<F, Fut>(choose: F) -> Self
    where
        F: Fn(Incoming) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = io::Result<ReceiveTarget>> + Send + 'static,
    {
        ReceiveTargets(Arc::new(move |incoming| Box::pin(choose(incoming))))
    }

    pub(crate) fn choose(
        &self,
        incoming: Incoming,
    ) -> BoxFuture<'static, io::Result<ReceiveTarget>> {
        (self.0)(incoming)
    }
}

impl fmt::Debug for ReceiveTargets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReceiveTargets(..)")
    }
}

impl PartialEq for ReceiveTargets {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ReceiveTargets {}

/// A message received into a file ([`ReceiveTarget::File`]): the file, of
/// which it is the first [`len`](Self::len) bytes.
#[derive(Clone, Debug)]
pub struct ReceivedFile {
    file: Arc<std::fs::File>,
    len: u64,
}

impl ReceivedFile {
    pub(crate) fn new(file: Arc<std::fs::File>, len: u64) -> Self {
        ReceivedFile { file, len }
    }

    /// The file, shared.
    pub(crate) fn shared(&self) -> Arc<std::fs::File> {
        Arc::clone(&self.file)
    }

    /// The file the hook gave (its cursor where the hook left it).
    pub fn file(&self) -> &std::fs::File {
        &self.file
    }

    /// The message's size in bytes (the file's length).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the message is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
