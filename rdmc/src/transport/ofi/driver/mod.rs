//! The fabric driver: one task per node that owns every libfabric object of
//! the node — the endpoints (a data and a control endpoint per peer), the
//! one completion queue they share, the event queue, the registered control
//! buffers — posts every operation and reads every completion.
//!
//! The runtime's calls ([`Transport`](crate::transport::Transport)) reach it
//! as [`Cmd`]s, in order, so a receive is registered and its credit is on
//! the control endpoint before the ready-for-block that follows it.
//!
//! Completions are waited for as the node's [`CompletionMode`] says: by
//! sleeping on the CQ's (and EQ's) file descriptor through tokio's reactor —
//! drain, `fi_trywait`, await readiness, clear it, drain again, which is
//! safe with edge-triggered epoll — by spinning on `fi_cq_read`, or by
//! spinning for a window after each burst of activity and sleeping after.
//!
//! This module holds the driver's state, its run loop and its libfabric
//! primitives for the logic the RDMA-style drivers share
//! ([`FabricDriver`]: commands, credits, backlogs, control messages,
//! liveness, peers going down, the flush); its parts live in submodules by
//! job: [`ops`] (libfabric handles and operation contexts), [`control`]
//! (control-message slots, control sends), [`send`] (block writes),
//! [`root`] (registrations of a root's messages), [`recv`] (receive
//! buffers and landed writes), [`completions`] (reading the CQ),
//! [`failure`] (endpoint events, closing a failed peer's endpoints) and
//! [`teardown`] (closing everything).

mod completions;
mod control;
mod failure;
mod ops;
mod recv;
mod root;
mod send;
mod teardown;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use super::fabric::{Domain, Modes, Mr, OfiError, strerror};
use super::ffi;
use super::wire::MSG_LEN;
use crate::ids::{GroupId, NodeId};
use crate::transport::fabric_driver::state::{
    self, Core, FabricDriver, PeerLink, Posted, RootRegistrations, WriteOp,
};
use crate::transport::{CompletionSender, RecvRegion};
use crate::wait::{CompletionMode, WaitPolicy};

pub(crate) use self::control::ControlPool;
pub(crate) use self::ops::{Fid, WaitFd, ep_token, post_ctrl_recv, post_data_recv, token_peer};
use self::ops::{Op, OpCtx};
use self::root::RootRegistration;

/// Control receives kept posted per peer.
pub(crate) const CTRL_RECVS: usize = 64;
pub(crate) use crate::transport::fabric_driver::state::CTRL_SENDS;
/// Zero-length receives kept posted per peer's data endpoint when writes
/// with remote CQ data consume receives (`FI_RX_CQ_DATA`).
pub(crate) const DATA_RECVS: usize = 64;

pub(crate) use crate::transport::fabric_driver::endpoint::Cmd;

/// One connected peer.
pub(crate) type Peer = state::Peer<Endpoints>;

/// The endpoints to one peer.
#[derive(Debug)]
pub(crate) struct Endpoints {
    pub(crate) data: Option<Fid>,
    pub(crate) ctrl: Option<Fid>,
    writes_in_flight: usize,
}

impl Endpoints {
    /// A peer's `data` and `ctrl` endpoints, connected.
    pub(crate) fn new(data: Fid, ctrl: Fid) -> Self {
        Endpoints {
            data: Some(data),
            ctrl: Some(ctrl),
            writes_in_flight: 0,
        }
    }
}

impl PeerLink for Endpoints {
    fn writes_in_flight(&self) -> usize {
        self.writes_in_flight
    }
}

/// Everything the driver owns.
pub(crate) struct Driver {
    pub(crate) me: NodeId,
    pub(crate) modes: Modes,
    // Field order is drop order after `Drop::drop`: the fds' registrations
    // with the reactor go before the queues that own the fds.
    pub(crate) cq_fd: Option<AsyncFd<WaitFd>>,
    pub(crate) eq_fd: Option<AsyncFd<WaitFd>>,
    /// The peers, receive slots and credits, commands, liveness, flush.
    core: Core<Endpoints, Infallible>,
    /// The registered control-message slots (taken on drop, after the
    /// endpoints close).
    control_slots: Option<ControlPool>,
    pub(crate) cq: Fid,
    pub(crate) eq: Fid,
    pub(crate) mode: CompletionMode,
    pub(crate) next_key: u64,
    /// Whether writes carry the block length in the upper 32 bits of their
    /// CQ data too (8-byte CQ data; verbs has 4), checked against the header.
    pub(crate) len_in_cq_data: bool,
    /// Per group, the registration of the message its root sends now.
    root_registrations: RootRegistrations<Mr>,
    /// Last: the domain closes after every queue and endpoint.
    pub(crate) domain: Arc<Domain>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").field("me", &self.me).finish()
    }
}

impl Driver {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        me: NodeId,
        modes: Modes,
        domain: Arc<Domain>,
        cq: Fid,
        cq_fd: AsyncFd<WaitFd>,
        eq: Fid,
        eq_fd: AsyncFd<WaitFd>,
        peers: HashMap<NodeId, Peer>,
        control_slots: ControlPool,
        commands: mpsc::UnboundedReceiver<Cmd>,
        completions: CompletionSender,
        mode: CompletionMode,
        next_key: u64,
        failure_timeout: Duration,
    ) -> Self {
        Driver {
            me,
            modes,
            domain,
            cq_fd: Some(cq_fd),
            eq_fd: Some(eq_fd),
            core: Core::new(peers, commands, completions, failure_timeout),
            control_slots: Some(control_slots),
            cq,
            eq,
            mode,
            next_key,
            len_in_cq_data: false,
            root_registrations: RootRegistrations::default(),
        }
    }

    fn control_slots(&self) -> &ControlPool {
        self.control_slots
            .as_ref()
            .expect("the control slots live as long as the driver")
    }

    /// Run until the transport is dropped or flushed.
    pub(crate) async fn run(mut self) {
        let mut wait = WaitPolicy::new(self.mode);
        let mut fd_wait_works = true;
        loop {
            let Some(mut work) = self.take_commands() else {
                return;
            };
            work += self.poll_cq();
            work += self.poll_eq();
            if self.upkeep() {
                return;
            }
            if !wait.should_sleep_after(work).await {
                continue;
            }
            if fd_wait_works {
                // SAFETY: the fabric, CQ and EQ are open for the driver's life.
                let ret = unsafe { ffi::rdmc_trywait(self.domain.fabric(), self.cq.0, self.eq.0) };
                if ret == -ffi::FI_EAGAIN {
                    continue; // something arrived: drain it first
                }
                if ret < 0 {
                    tracing::warn!(
                        error = %strerror(-ret),
                        "fi_trywait is not supported: polling every millisecond"
                    );
                    fd_wait_works = false;
                }
            }
            let deadline = self.core.flush_deadline();
            let liveness = self.core.next_liveness_check;
            let (cq_fd, eq_fd) = (
                self.cq_fd.as_ref().expect("open"),
                self.eq_fd.as_ref().expect("open"),
            );
            tokio::select! {
                cmd = self.core.commands.recv() => match cmd {
                    Some(cmd) => self.on_command(cmd),
                    None => return,
                },
                guard = cq_fd.readable(), if fd_wait_works => {
                    if let Ok(mut guard) = guard {
                        guard.clear_ready();
                    }
                }
                guard = eq_fd.readable(), if fd_wait_works => {
                    if let Ok(mut guard) = guard {
                        guard.clear_ready();
                    }
                }
                () = tokio::time::sleep(Duration::from_millis(1)), if !fd_wait_works => {}
                () = tokio::time::sleep_until(liveness) => {}
                () = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)),
                    if deadline.is_some() => {}
            }
        }
    }
}

/// The libfabric primitives; the logic both drivers share is
/// [`FabricDriver`]'s.
impl FabricDriver for Driver {
    type Link = Endpoints;
    type Extra = Infallible;
    type Error = OfiError;
    const QUEUES: &'static str = "fabric endpoints";
    const MAX_WRITE: u64 = u64::MAX;

    fn core(&self) -> &Core<Endpoints, Infallible> {
        &self.core
    }

    fn core_mut(&mut self) -> &mut Core<Endpoints, Infallible> {
        &mut self.core
    }

    fn try_send_ctrl(&mut self, to: NodeId, bytes: &[u8; MSG_LEN]) -> Result<Posted, OfiError> {
        self.post_ctrl_send(to, bytes)
    }

    fn try_write(&mut self, to: NodeId, op: WriteOp) -> Result<Option<WriteOp>, OfiError> {
        self.post_write(to, op)
    }

    fn register_recv(&mut self, region: &RecvRegion) -> Result<(u64, u64), String> {
        let buf = Arc::clone(region.buffer());
        let (_, key) = self.buffer_mr(&buf)?;
        Ok((self.modes.remote_addr(buf.as_ptr(), region.offset()), key))
    }

    fn release_registrations(&mut self, group: GroupId) {
        self.root_registrations.remove(group);
    }

    fn close_link(&mut self, peer: NodeId) {
        self.close_endpoints(peer);
    }

    fn on_extra(&mut self, never: Infallible) {
        match never {}
    }
}
