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
//! This module holds the driver's state and its run loop; its parts live in
//! submodules by job: [`ops`] (libfabric handles and operation contexts),
//! [`control`] (control-message slots and messages), [`send`] (credits and
//! block writes), [`root`] (registrations of a root's messages), [`recv`]
//! (receive slots and delivery), [`completions`] (reading the CQ),
//! [`failure`] (peers going down) and [`teardown`] (flush and close).

mod completions;
mod control;
mod failure;
mod ops;
mod recv;
mod root;
mod send;
mod teardown;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, oneshot};

use super::fabric::{Domain, Modes, strerror};
use super::ffi;
use super::wire::{ControlMessage, MSG_LEN};
use crate::ids::{GroupId, NodeId};
use crate::transport::liveness::{Liveness, PeerClock};
use crate::transport::slots::SlotTable;
use crate::transport::{Completion, CompletionSender};
use crate::wait::{CompletionMode, Next, WaitPolicy};

pub(crate) use self::control::ControlPool;
use self::control::Posted;
pub(crate) use self::ops::{Fid, WaitFd, ep_token, post_ctrl_recv, post_data_recv, token_peer};
use self::ops::{Op, OpCtx};
use self::root::RootRegistration;
use self::send::WriteOp;

/// Control receives kept posted per peer.
pub(crate) const CTRL_RECVS: usize = 64;
/// Control sends in flight per peer (each holds a registered 64-byte slot).
pub(crate) const CTRL_SENDS: usize = 64;
/// Zero-length receives kept posted per peer's data endpoint when writes
/// with remote CQ data consume receives (`FI_RX_CQ_DATA`).
pub(crate) const DATA_RECVS: usize = 64;
/// Block writes in flight per peer.
const WRITES_IN_FLIGHT: usize = 16;
/// Most commands and completions handled before yielding.
const BATCH: usize = 256;

pub(crate) use crate::transport::driven::Cmd;

/// One connected peer.
#[derive(Debug)]
pub(crate) struct Peer {
    pub(crate) data: Option<Fid>,
    pub(crate) ctrl: Option<Fid>,
    pub(crate) down: bool,
    ctrl_backlog: VecDeque<[u8; MSG_LEN]>,
    free_sends: Vec<usize>,
    write_backlog: VecDeque<WriteOp>,
    writes_in_flight: usize,
    /// When anything last came from the peer, and when a control message
    /// last went to it.
    clock: PeerClock,
}

impl Peer {
    pub(crate) fn new(data: Fid, ctrl: Fid) -> Self {
        Peer {
            clock: PeerClock::new(Instant::now()),
            data: Some(data),
            ctrl: Some(ctrl),
            down: false,
            ctrl_backlog: VecDeque::new(),
            free_sends: (0..CTRL_SENDS).rev().collect(),
            write_backlog: VecDeque::new(),
            writes_in_flight: 0,
        }
    }

    fn idle(&self) -> bool {
        self.down
            || (self.ctrl_backlog.is_empty()
                && self.free_sends.len() == CTRL_SENDS
                && self.write_backlog.is_empty()
                && self.writes_in_flight == 0)
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
    pub(crate) peers: HashMap<NodeId, Peer>,
    /// The registered control-message slots (taken on drop, after the
    /// endpoints close).
    control_slots: Option<ControlPool>,
    pub(crate) cq: Fid,
    pub(crate) eq: Fid,
    pub(crate) commands: mpsc::UnboundedReceiver<Cmd>,
    pub(crate) completions: CompletionSender,
    pub(crate) mode: CompletionMode,
    pub(crate) next_key: u64,
    /// Whether writes carry the block length in the upper 32 bits of their
    /// CQ data too (8-byte CQ data; verbs has 4), checked against the header.
    pub(crate) len_in_cq_data: bool,
    /// When peers are down, and when they are due a heartbeat.
    liveness: Liveness,
    next_liveness_check: Instant,
    /// Receive slots, and the credits peers gave.
    slots: SlotTable,
    /// Per group, the registration of the message its root sends now.
    root_registrations: HashMap<GroupId, Arc<RootRegistration>>,
    flushing: Option<(oneshot::Sender<()>, Instant)>,
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
            peers,
            control_slots: Some(control_slots),
            cq,
            eq,
            commands,
            completions,
            mode,
            next_key,
            liveness: Liveness::new(failure_timeout),
            len_in_cq_data: false,
            next_liveness_check: Instant::now(),
            slots: SlotTable::default(),
            root_registrations: HashMap::new(),
            flushing: None,
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
            let mut work = 0;
            while work < BATCH {
                match self.commands.try_recv() {
                    Ok(cmd) => self.on_command(cmd),
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => return,
                }
                work += 1;
            }
            work += self.poll_cq();
            work += self.poll_eq();
            self.retry_backlogs();
            if Instant::now() >= self.next_liveness_check {
                self.check_liveness();
            }
            if self.flush_done() {
                return;
            }
            match wait.after_pass(work) {
                Next::Again => {
                    tokio::task::yield_now().await;
                    continue;
                }
                Next::Spin => {
                    // Nothing came: let other threads have the core for a
                    // moment (the provider's progress thread, the peers) — on
                    // a machine with few cores, a poller that never yields
                    // starves the very threads that produce its completions —
                    // then poll again.
                    std::thread::yield_now();
                    tokio::task::yield_now().await;
                    continue;
                }
                Next::Sleep => {}
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
            let deadline = self.flushing.as_ref().map(|(_, at)| *at);
            let liveness = self.next_liveness_check;
            let (cq_fd, eq_fd) = (
                self.cq_fd.as_ref().expect("open"),
                self.eq_fd.as_ref().expect("open"),
            );
            tokio::select! {
                cmd = self.commands.recv() => match cmd {
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

    fn on_command(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::PostRecv {
                group,
                from,
                region,
            } => self.post_recv(group, from, region),
            Cmd::PostSend {
                group,
                to,
                block,
                immediate,
            } => self.post_send(group, to, block, immediate),
            Cmd::Signal { group, to, signal } => {
                if self.usable(to) {
                    self.send_ctrl(to, ControlMessage::Signal { group, signal });
                } else {
                    self.unreachable(group, to);
                }
            }
            Cmd::Release { group } => self.release(group),
            Cmd::Flush { done, limit } => {
                self.flushing = Some((done, Instant::now() + limit));
            }
            Cmd::Extra(never) => match never {},
        }
    }

    fn emit(&self, c: Completion) {
        let _ = self.completions.send(c);
    }

    fn unreachable(&self, group: GroupId, peer: NodeId) {
        self.emit(Completion::TransferFailed {
            group,
            peer,
            error: "peer unreachable",
        });
    }

    fn usable(&self, peer: NodeId) -> bool {
        self.peers.get(&peer).is_some_and(|p| !p.down) && self.flushing.is_none()
    }

    fn peer_mut(&mut self, peer: NodeId) -> &mut Peer {
        self.peers.get_mut(&peer).expect("a known peer")
    }
}
