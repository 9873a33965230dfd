//! The runtime's side of a transport run by a driver task (`ofi`, `rdma`):
//! every [`Transport`] call becomes a [`Cmd`], handed in order to the task
//! that owns the transport's objects.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

use crate::ids::{GroupId, NodeId};
use crate::transport::pool::BufferPool;
use crate::transport::{
    AllocError, BlockRef, Completion, CompletionSender, MessageBuffer, RecvRegion, Signal,
    Transport,
};

/// What the runtime asks of a driver task; `X` is what else a transport's
/// driver takes (its tests' hooks; nothing, by default).
#[derive(Debug)]
pub(crate) enum Cmd<X = Infallible> {
    PostRecv {
        group: GroupId,
        from: NodeId,
        region: RecvRegion,
    },
    PostSend {
        group: GroupId,
        to: NodeId,
        block: BlockRef,
        immediate: u64,
    },
    Signal {
        group: GroupId,
        to: NodeId,
        signal: Signal,
    },
    Release {
        group: GroupId,
    },
    Flush {
        done: oneshot::Sender<()>,
        limit: Duration,
    },
    /// A transport's own command.
    #[cfg_attr(not(all(test, feature = "rdma")), allow(dead_code))]
    Extra(X),
}

/// One node's transport, as the runtime sees it: every call is handed, in
/// order, to the node's driver task.
#[derive(Debug)]
pub(crate) struct DrivenEndpoint<X = Infallible> {
    pub(crate) commands: mpsc::UnboundedSender<Cmd<X>>,
    completions: CompletionSender,
    flush_timeout: Duration,
    task: Option<tokio::task::JoinHandle<()>>,
    pool: BufferPool,
    /// Whether a send completes once the provider buffered it (a
    /// socket-based libfabric provider) rather than once delivered.
    buffered_sends: bool,
    /// What [`Transport::describe`] says.
    description: String,
    /// What the transport runs beside the driver (`ofi`: the acceptor of
    /// restarted members): stopped when the transport goes, and awaited
    /// by a flush, so that a node that shut down holds nothing open.
    beside: Option<(tokio_util::sync::DropGuard, tokio::task::JoinHandle<()>)>,
}

impl<X> DrivenEndpoint<X> {
    /// The endpoint of the driver `task`, which reads `commands` and
    /// reports to `completions`; buffers come from `pool`.
    pub(crate) fn new(
        commands: mpsc::UnboundedSender<Cmd<X>>,
        completions: CompletionSender,
        flush_timeout: Duration,
        task: tokio::task::JoinHandle<()>,
        pool: BufferPool,
    ) -> Self {
        DrivenEndpoint {
            commands,
            completions,
            flush_timeout,
            task: Some(task),
            pool,
            buffered_sends: false,
            description: String::new(),
            beside: None,
        }
    }

    /// The same, running `task` beside the driver until `stop` is dropped:
    /// when the transport goes, or at its flush, which awaits the task's
    /// end.
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub(crate) fn with_task_beside(
        self,
        stop: tokio_util::sync::DropGuard,
        task: tokio::task::JoinHandle<()>,
    ) -> Self {
        DrivenEndpoint {
            beside: Some((stop, task)),
            ..self
        }
    }

    /// The same, described as `description` (see [`Transport::describe`]).
    #[cfg_attr(not(any(feature = "ofi", feature = "rdma")), allow(dead_code))]
    pub(crate) fn with_description(self, description: String) -> Self {
        DrivenEndpoint {
            description,
            ..self
        }
    }

    /// The same, its sends completing once buffered (see
    /// [`Transport::sends_complete_when_delivered`]): ofi over a socket
    /// provider.
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub(crate) fn with_buffered_sends(self, buffered_sends: bool) -> Self {
        DrivenEndpoint {
            buffered_sends,
            ..self
        }
    }

    fn command(&self, cmd: Cmd<X>, group: GroupId, peer: NodeId) {
        if self.commands.send(cmd).is_err() {
            let _ = self.completions.send(Completion::TransferFailed {
                group,
                peer,
                error: "the transport's driver task is gone",
            });
        }
    }
}

impl<X: Send + 'static> Transport for DrivenEndpoint<X> {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn sends_complete_when_delivered(&self) -> bool {
        !self.buffered_sends
    }

    fn post_recv(&mut self, group: GroupId, from: NodeId, region: RecvRegion) {
        // A file's mapping is not registered (pinned): the block lands in
        // a registered bounce buffer from the pool, copied on when in.
        let region = match region.is_file() {
            true => match self.pool.try_alloc(region.len()) {
                Ok(bounce) => region.via(&bounce),
                Err(e) => {
                    tracing::warn!(error = %e, "no bounce buffer for a file target");
                    region
                }
            },
            false => region,
        };
        let cmd = Cmd::PostRecv {
            group,
            from,
            region,
        };
        self.command(cmd, group, from);
    }

    fn post_send(&mut self, group: GroupId, to: NodeId, block: BlockRef, immediate: u64) {
        // As for receives: a block of a file is sent from a registered copy.
        let block = match block.is_file() {
            true => match self.pool.try_alloc(block.len()) {
                Ok(bounce) => {
                    bounce.region(0, block.len()).write(block.as_slice());
                    bounce.block(0, block.len())
                }
                Err(e) => {
                    tracing::warn!(error = %e, "no bounce buffer for a block of a file");
                    block
                }
            },
            false => block,
        };
        let cmd = Cmd::PostSend {
            group,
            to,
            block,
            immediate,
        };
        self.command(cmd, group, to);
    }

    fn send_signal(&mut self, group: GroupId, to: NodeId, signal: Signal) {
        self.command(Cmd::Signal { group, to, signal }, group, to);
    }

    fn release_group(&mut self, group: GroupId) {
        let _ = self.commands.send(Cmd::Release { group });
    }

    fn alloc_buffer(&mut self, len: usize) -> Result<Arc<MessageBuffer>, AllocError> {
        self.pool.try_alloc(len)
    }

    fn flush(&mut self) -> BoxFuture<'static, ()> {
        let (done, flushed) = oneshot::channel();
        let _ = self.commands.send(Cmd::Flush {
            done,
            limit: self.flush_timeout,
        });
        let task = self.task.take();
        let beside = self.beside.take();
        Box::pin(async move {
            let _ = flushed.await;
            if let Some(task) = task {
                let _ = task.await;
            }
            if let Some((stop, task)) = beside {
                drop(stop);
                let _ = task.await;
            }
        })
    }
}
