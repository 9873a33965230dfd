//! The libfabric driver: one task per node that owns every libfabric object
//! of the node — the endpoints (a data and a control endpoint per peer), the
//! one completion queue they share, the event queue, the registered control
//! buffers — posts every operation and reads every completion.
//!
//! The runtime's calls ([`Transport`](crate::transport::Transport)) reach it
//! as [`Cmd`]s, in order, so a receive is registered and its credit is on
//! the control endpoint before the ready-for-block that follows it.
//!
//! Completions are waited for as the node's [`CompletionMode`] says (the
//! shared run loop's, [`run`](crate::transport::fabric_driver::run)); to
//! sleep, the driver waits on the CQ's (and EQ's) file descriptor through
//! tokio's reactor — drain, `fi_trywait`, await readiness, clear it, drain
//! again, which is safe with edge-triggered epoll.
//!
//! This module holds the driver's state and its libfabric primitives for
//! the logic the fabric drivers share ([`FabricDriver`]: commands,
//! credits, backlogs, control messages, liveness, peers going down, the
//! flush, the run loop); its parts live in submodules by job: [`ops`]
//! (libfabric handles and operation contexts), [`control`] (control-message
//! slots, control sends), [`send`] (block writes), [`root`] (registrations
//! of a root's messages), [`recv`] (receive buffers and landed writes),
//! [`completions`] (reading the CQ), [`failure`] (endpoint events, closing
//! a failed peer's endpoints), [`cm`] (the connection manager: connection
//! data, events, endpoints opened, connected and accepted), [`join`]
//! (replacing a restarted peer's endpoints) and [`teardown`] (closing
//! everything).

pub(crate) mod cm;
mod completions;
mod control;
mod join;
mod ops;
mod recv;
mod root;
mod send;
mod teardown;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use super::fabric::{Domain, Info, Modes, Mr, OfiError, strerror};
use super::ffi;
use crate::ids::NodeId;
use crate::transport::RecvRegion;
use crate::transport::fabric_driver::{self, Cmd, FabricDriver, PeerLink, Posted, WriteOp};
#[cfg(doc)]
use crate::wait::CompletionMode;

pub(crate) use self::control::ControlPool;
pub(crate) use self::join::{Join, OfiCmd};
pub(crate) use self::ops::{Fid, WaitFd, ep_token, post_ctrl_recv, post_data_recv, token_peer};
use self::ops::{Op, OpCtx, post_ctrl_send};
use self::root::RootRegistration;

/// Control receives kept posted per peer.
pub(crate) const CTRL_RECVS: usize = 64;
pub(crate) use crate::transport::fabric_driver::control_slots::CTRL_SENDS;
/// Zero-length receives kept posted per peer's data endpoint when writes
/// with remote CQ data consume receives (`FI_RX_CQ_DATA`).
pub(crate) const DATA_RECVS: usize = 64;

/// One connected peer.
pub(crate) type Peer = fabric_driver::Peer<Endpoints>;

/// The state every fabric driver keeps, of this one.
pub(crate) type Core = fabric_driver::Core<Endpoints, OfiCmd, Mr>;

/// The endpoints to one peer.
#[derive(Debug)]
pub(crate) struct Endpoints {
    pub(crate) data: Option<Fid>,
    pub(crate) ctrl: Option<Fid>,
    writes_in_flight: usize,
    /// Their generation: 0 at start, one more each time a restarted
    /// peer's endpoints replace the last.
    pub(crate) generation: u32,
    /// The peer's run they connect to.
    incarnation: u64,
}

impl Endpoints {
    /// A peer's `data` and `ctrl` endpoints, connected, of generation
    /// `generation`, to its run `incarnation`.
    pub(crate) fn new(data: Fid, ctrl: Fid, (generation, incarnation): (u32, u64)) -> Self {
        Endpoints {
            data: Some(data),
            ctrl: Some(ctrl),
            writes_in_flight: 0,
            generation,
            incarnation,
        }
    }

    /// Endpoints of generation `generation` to the peer's run
    /// `incarnation`, not opened yet.
    pub(crate) fn pending((generation, incarnation): (u32, u64)) -> Self {
        Endpoints {
            data: None,
            ctrl: None,
            writes_in_flight: 0,
            generation,
            incarnation,
        }
    }

    /// Shut down and close both endpoints (those still open), so the
    /// provider touches none of the memory posted on them any more.
    pub(crate) fn close(&mut self) {
        for ep in [self.data.take(), self.ctrl.take()].into_iter().flatten() {
            // SAFETY: an open endpoint; shut down before it is closed.
            unsafe { ffi::rdmc_shutdown(ep.0) };
            drop(ep);
        }
    }
}

impl PeerLink for Endpoints {
    fn writes_in_flight(&self) -> usize {
        self.writes_in_flight
    }

    fn incarnation(&self) -> u64 {
        self.incarnation
    }
}

/// Everything the driver owns. Field order is drop order after
/// `Drop::drop`: the fds' registrations with the reactor go before the
/// queues that own the fds, and the domain closes after every queue and
/// endpoint.
pub(crate) struct Driver {
    pub(crate) modes: Modes,
    cq_fd: Option<AsyncFd<WaitFd>>,
    eq_fd: Option<AsyncFd<WaitFd>>,
    /// Whether the driver can sleep on the CQ's and EQ's fds
    /// (`fi_trywait` works); else it polls every millisecond.
    fd_wait_works: bool,
    /// The peers, receive slots and credits, commands, liveness, flush,
    /// control slots and registrations of a root's messages.
    core: Core,
    /// Restarted peers whose new endpoints are being connected.
    joins: HashMap<NodeId, Join>,
    /// The passive endpoint restarted peers connect to (`None` once
    /// closed, or where the node takes none).
    pep: Option<Fid>,
    /// The provider's info, to connect to restarted peers' passive
    /// endpoints (`None`: the node connects to none).
    info: Option<Info>,
    /// Told of every peer's run that goes down, to look for its next run.
    downs: Option<mpsc::UnboundedSender<(NodeId, u64)>>,
    pub(crate) cq: Fid,
    pub(crate) eq: Fid,
    pub(crate) next_key: u64,
    /// Whether writes carry the block length in the upper 32 bits of their
    /// CQ data too (8-byte CQ data; verbs has 4), checked against the header.
    pub(crate) len_in_cq_data: bool,
    pub(crate) domain: Arc<Domain>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").field("me", &self.core.me).finish()
    }
}

/// The fabric's queues the driver reads: the completion queue and the
/// event queue, each with its wait fd registered with the reactor.
#[derive(Debug)]
pub(crate) struct Queues {
    pub(crate) cq: Fid,
    pub(crate) cq_fd: AsyncFd<WaitFd>,
    pub(crate) eq: Fid,
    pub(crate) eq_fd: AsyncFd<WaitFd>,
    /// The passive endpoint, kept listening for restarted peers.
    pub(crate) pep: Option<Fid>,
}

impl Driver {
    /// The driver of `core`'s node over `domain` (whose provider asks for
    /// `modes`), reading `queues`; its next memory key `next_key`.
    pub(crate) fn new(
        core: Core,
        modes: Modes,
        domain: Arc<Domain>,
        queues: Queues,
        next_key: u64,
    ) -> Self {
        Driver {
            modes,
            cq_fd: Some(queues.cq_fd),
            eq_fd: Some(queues.eq_fd),
            fd_wait_works: true,
            core,
            joins: HashMap::new(),
            pep: queues.pep,
            info: None,
            downs: None,
            cq: queues.cq,
            eq: queues.eq,
            next_key,
            len_in_cq_data: false,
            domain,
        }
    }
}

impl Driver {
    /// The same, connecting to restarted peers with `info` and telling
    /// `downs` of every peer's run that goes down.
    pub(crate) fn restarts(
        mut self,
        info: Info,
        downs: mpsc::UnboundedSender<(NodeId, u64)>,
    ) -> Self {
        self.info = Some(info);
        self.downs = Some(downs);
        self
    }
}

/// The libfabric primitives; the logic every fabric driver shares is
/// [`FabricDriver`]'s.
impl FabricDriver for Driver {
    type Link = Endpoints;
    type Extra = OfiCmd;
    type Registration = Mr;
    type Error = OfiError;
    type Wake = ();
    const QUEUES: &'static str = "fabric endpoints";
    const MAX_WRITE: u64 = u64::MAX;

    fn core(&self) -> &Core {
        &self.core
    }

    fn core_mut(&mut self) -> &mut Core {
        &mut self.core
    }

    fn post_ctrl_send(&mut self, to: NodeId, slot: usize, at: *mut u8) -> Result<Posted, OfiError> {
        let (p, slots) = self.core.up_with_slots(to);
        let link = p.map(|p| &p.link).expect("usable peers have endpoints");
        let ep = link.ctrl.as_ref().expect("usable peers have endpoints");
        post_ctrl_send(ep, slots, (to, link.generation), slot, at)
    }

    fn post_recv_slot(&mut self, peer: NodeId, slot: usize) -> Result<(), OfiError> {
        let (p, slots) = self.core.up_with_slots(peer);
        let link = p.map(|p| &p.link).expect("up");
        let ep = link.ctrl.as_ref().expect("up");
        post_ctrl_recv(ep, slots, (peer, link.generation), slot)
    }

    fn post_write(&mut self, to: NodeId, op: WriteOp) -> Result<Option<WriteOp>, OfiError> {
        self.post_block_write(to, op)
    }

    fn register_recv(&mut self, region: &RecvRegion) -> Result<(u64, u64), String> {
        let (_, key) = self.buffer_mr(region.buffer())?;
        let at = self
            .modes
            .remote_addr(region.buffer().as_ptr(), region.offset());
        Ok((at, key))
    }

    fn close_link(&mut self, peer: NodeId) {
        let link = &mut self.core.peer_mut(peer).link;
        link.close();
        let incarnation = link.incarnation;
        if let Some(downs) = &self.downs {
            let _ = downs.send((peer, incarnation));
        }
    }

    fn on_extra(&mut self, cmd: OfiCmd) {
        self.on_join_command(cmd);
    }

    fn poll(&mut self) -> usize {
        self.poll_cq() + self.poll_eq()
    }

    fn arm(&mut self) -> bool {
        if !self.fd_wait_works {
            return true;
        }
        // SAFETY: the fabric, CQ and EQ are open for the driver's life.
        let ret = unsafe { ffi::rdmc_trywait(self.domain.fabric(), self.cq.0, self.eq.0) };
        if ret == -ffi::FI_EAGAIN {
            return false; // something arrived: drain it first
        }
        if ret < 0 {
            tracing::warn!(
                error = %strerror(-ret),
                "fi_trywait is not supported: polling every millisecond"
            );
            self.fd_wait_works = false;
        }
        true
    }

    fn wake_sources(
        &mut self,
    ) -> (
        &mut mpsc::UnboundedReceiver<Cmd<OfiCmd>>,
        impl Future<Output = ()> + Send + '_,
    ) {
        let works = self.fd_wait_works;
        let cq_fd = self.cq_fd.as_ref().expect("open");
        let eq_fd = self.eq_fd.as_ref().expect("open");
        let woken = async move {
            tokio::select! {
                guard = cq_fd.readable(), if works => {
                    if let Ok(mut guard) = guard {
                        guard.clear_ready();
                    }
                }
                guard = eq_fd.readable(), if works => {
                    if let Ok(mut guard) = guard {
                        guard.clear_ready();
                    }
                }
                () = tokio::time::sleep(Duration::from_millis(1)), if !works => {}
            }
        };
        (&mut self.core.commands, woken)
    }

    fn on_wake(&mut self, (): ()) {}
}
