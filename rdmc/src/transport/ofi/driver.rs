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

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, oneshot};

use super::fabric::{Access, Domain, Modes, Mr, OfiError, check, strerror};
use super::ffi;
use super::wire::{Control, Credit, MSG_LEN};
use crate::wait::{CompletionMode, Next, WaitPolicy};
use crate::ids::{GroupId, NodeId};
use crate::transport::{BlockRef, Completion, CompletionSender, MessageBuffer, RecvRegion, Signal};

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

/// What the runtime asks of the driver.
#[derive(Debug)]
pub(crate) enum Cmd {
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
}

/// An owned libfabric object (endpoint or queue), closed on drop.
#[derive(Debug)]
pub(crate) struct Fid(pub(crate) *mut c_void);

// SAFETY: fids of a thread-safe domain may be used from any thread; this
// one is only used by the task owning it.
unsafe impl Send for Fid {}
// SAFETY: as for Send: a shared `&Fid` only ever passes the handle to
// libfabric calls, which a thread-safe domain allows from any thread.
unsafe impl Sync for Fid {}

impl Drop for Fid {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: a fid we opened, closed only here.
            unsafe { ffi::rdmc_close(self.0) };
        }
    }
}

/// A queue's wait file descriptor, owned by libfabric (closed with the queue).
#[derive(Debug)]
pub(crate) struct WaitFd(pub(crate) RawFd);

impl AsRawFd for WaitFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// The endpoint context token of (peer, kind): an integer, never dereferenced.
pub(crate) fn ep_token(peer: NodeId, ctrl: bool) -> *mut c_void {
    (1 + 2 * peer.index() + usize::from(ctrl)) as *mut c_void
}

/// The (peer, is-control) an endpoint context token stands for.
pub(crate) fn token_peer(token: *mut c_void) -> Option<(NodeId, bool)> {
    let t = (token as usize).checked_sub(1)?;
    Some((NodeId(u32::try_from(t / 2).ok()?), t % 2 == 1))
}

/// Registered memory for control messages: per peer, `CTRL_RECVS` receive
/// slots then `CTRL_SENDS` send slots, `MSG_LEN` bytes each.
pub(crate) struct ControlPool {
    ptr: *mut u8,
    len: usize,
    mr: Option<Mr>,
}

// SAFETY: the pool owns its allocation; slots are handed to the provider and
// read or written by the driver only between the completions that order them.
unsafe impl Send for ControlPool {}
// SAFETY: a shared pool is only used by the one task that owns it (start-up,
// then the driver); `&self` methods touch disjoint slots, each only while
// no operation on it is outstanding.
unsafe impl Sync for ControlPool {}

impl std::fmt::Debug for ControlPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPool")
            .field("len", &self.len)
            .finish()
    }
}

impl ControlPool {
    pub(crate) const PER_PEER: usize = CTRL_RECVS + CTRL_SENDS;

    /// A pool for peers with ids `0..nodes`, registered with `domain`.
    pub(crate) fn new(domain: &Arc<Domain>, nodes: usize, key: u64) -> Result<Self, OfiError> {
        let len = nodes.max(1) * Self::PER_PEER * MSG_LEN;
        let ptr = Box::into_raw(vec![0u8; len].into_boxed_slice()).cast::<u8>();
        let mut pool = ControlPool { ptr, len, mr: None };
        // SAFETY: the allocation lives until `drop`, which drops the MR first.
        pool.mr = Some(unsafe { Mr::register(domain, ptr, len, Access::Local, key) }?);
        Ok(pool)
    }

    fn slot(&self, index: usize) -> *mut u8 {
        assert!((index + 1) * MSG_LEN <= self.len);
        // SAFETY: in bounds (checked above).
        unsafe { self.ptr.add(index * MSG_LEN) }
    }

    pub(crate) fn recv_slot(&self, peer: NodeId, i: usize) -> (usize, *mut u8) {
        let index = peer.index() * Self::PER_PEER + i;
        (index, self.slot(index))
    }

    fn send_slot(&self, peer: NodeId, i: usize) -> (usize, *mut u8) {
        let index = peer.index() * Self::PER_PEER + CTRL_RECVS + i;
        (index, self.slot(index))
    }

    pub(crate) fn desc(&self) -> *mut c_void {
        self.mr.as_ref().map_or(ptr::null_mut(), Mr::desc)
    }

    /// The message in slot `index`, which a completed receive filled.
    fn read(&self, index: usize) -> [u8; MSG_LEN] {
        let mut out = [0u8; MSG_LEN];
        // SAFETY: in bounds; the receive into this slot has completed, so the
        // provider no longer writes it, and nothing else does.
        unsafe { ptr::copy_nonoverlapping(self.slot(index), out.as_mut_ptr(), MSG_LEN) };
        out
    }

    /// Fill send slot `index` (not in flight) with `msg`.
    fn write(&self, index: usize, msg: &[u8; MSG_LEN]) {
        // SAFETY: in bounds; the slot is free (not posted), so nobody reads it.
        unsafe { ptr::copy_nonoverlapping(msg.as_ptr(), self.slot(index), MSG_LEN) };
    }
}

impl Drop for ControlPool {
    fn drop(&mut self) {
        drop(self.mr.take());
        let slice = ptr::slice_from_raw_parts_mut(self.ptr, self.len);
        // SAFETY: from Box::into_raw in `new` with this length, freed only
        // here, after the registration is gone and every endpoint is closed.
        drop(unsafe { Box::from_raw(slice) });
    }
}

/// An operation's context: room for the `fi_context2` (which contains an
/// `fi_context`) the provider may use (`FI_CONTEXT`, `FI_CONTEXT2`), then
/// what the completion means to us. Boxed; the raw
/// pointer is the libfabric context until the completion hands it back.
#[repr(C)]
pub(crate) struct OpCtx {
    fi_context: [*mut c_void; 8],
    op: Op,
}

pub(crate) enum Op {
    CtrlRecv {
        peer: NodeId,
        index: usize,
    },
    DataRecv {
        peer: NodeId,
    },
    CtrlSend {
        peer: NodeId,
        slot: usize,
    },
    Write {
        peer: NodeId,
        group: GroupId,
        _block: BlockRef,
        _mr: Option<Arc<RootRegistration>>,
    },
}

/// A root's whole message, registered once for all its block writes (with
/// `FI_MR_LOCAL`). Holds the bytes, so they outlive the registration.
pub(crate) struct RootRegistration {
    mr: Mr,
    message: bytes::Bytes,
}

impl OpCtx {
    pub(crate) fn boxed(op: Op) -> *mut c_void {
        Box::into_raw(Box::new(OpCtx {
            fi_context: [ptr::null_mut(); 8],
            op,
        }))
        .cast()
    }

    /// Take back a context given to the provider.
    ///
    /// # Safety
    /// `ctx` must come from [`OpCtx::boxed`] and not have been taken back.
    pub(crate) unsafe fn take(ctx: *mut c_void) -> Op {
        // SAFETY: the caller's contract.
        unsafe { Box::from_raw(ctx.cast::<OpCtx>()) }.op
    }
}

/// Post a control receive into pool slot `i` of `peer`.
pub(crate) fn post_ctrl_recv(
    ep: &Fid,
    pool: &ControlPool,
    peer: NodeId,
    i: usize,
) -> Result<(), OfiError> {
    let (index, slot) = pool.recv_slot(peer, i);
    let ctx = OpCtx::boxed(Op::CtrlRecv { peer, index });
    // SAFETY: the endpoint is open; the slot is registered memory of the
    // pool, which outlives every endpoint; the context stays allocated until
    // its completion comes back (or forever, if it never does).
    let ret = unsafe { ffi::rdmc_recv(ep.0, slot.cast(), MSG_LEN, pool.desc(), ctx) };
    if ret < 0 {
        // SAFETY: the post failed, so the provider did not keep the context.
        drop(unsafe { OpCtx::take(ctx) });
    }
    check("fi_recv", ret as i64)
}

/// Post a zero-length receive on a data endpoint (for `FI_RX_CQ_DATA`).
pub(crate) fn post_data_recv(ep: &Fid, peer: NodeId) -> Result<(), OfiError> {
    let ctx = OpCtx::boxed(Op::DataRecv { peer });
    // SAFETY: the endpoint is open; a zero-length receive names no memory;
    // the context stays allocated until its completion comes back.
    let ret = unsafe { ffi::rdmc_recv(ep.0, ptr::null_mut(), 0, ptr::null_mut(), ctx) };
    if ret < 0 {
        // SAFETY: the post failed, so the provider did not keep the context.
        drop(unsafe { OpCtx::take(ctx) });
    }
    check("fi_recv", ret as i64)
}

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
    /// When anything last came from the peer.
    last_heard: Instant,
    /// When a control message last went to the peer.
    last_sent: Instant,
}

impl Peer {
    pub(crate) fn new(data: Fid, ctrl: Fid) -> Self {
        let now = Instant::now();
        Peer {
            last_heard: now,
            last_sent: now,
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

/// A block write waiting for room on its endpoint.
#[derive(Debug)]
struct WriteOp {
    group: GroupId,
    block: BlockRef,
    credit: Credit,
}

/// A receive this node posted: its credit is (or is about to be) with the
/// peer, which writes the block into it and sends its header.
#[derive(Debug)]
struct RecvSlot {
    group: GroupId,
    from: NodeId,
    /// The memory; `None` once retired (the group was released here).
    region: Option<RecvRegion>,
    /// Kept alive while the peer may still write into a retired slot.
    _keep: Option<Arc<MessageBuffer>>,
    written: bool,
    /// The block's length as the write's CQ data carried it, if it did.
    data_len: Option<u64>,
    header: Option<(u64, u64)>,
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
    pub(crate) pool: Option<ControlPool>,
    pub(crate) cq: Fid,
    pub(crate) eq: Fid,
    pub(crate) commands: mpsc::UnboundedReceiver<Cmd>,
    pub(crate) completions: CompletionSender,
    pub(crate) mode: CompletionMode,
    pub(crate) next_key: u64,
    /// Whether writes carry the block length in the upper 32 bits of their
    /// CQ data too (8-byte CQ data; verbs has 4), checked against the header.
    pub(crate) len_in_cq_data: bool,
    /// A peer silent this long is down; heartbeats go out at a third of it.
    failure_timeout: Duration,
    next_liveness_check: Instant,
    slots: Vec<Option<RecvSlot>>,
    free_slots: Vec<u32>,
    credits: HashMap<(NodeId, GroupId), VecDeque<Credit>>,
    /// Per group, the registration of the message its root sends now.
    root_registrations: HashMap<GroupId, Arc<RootRegistration>>,
    flushing: Option<(oneshot::Sender<()>, tokio::time::Instant)>,
    /// Last: the domain closes after every queue and endpoint.
    pub(crate) domain: Arc<Domain>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").field("me", &self.me).finish()
    }
}

/// What a post call said.
enum Posted {
    Yes,
    /// No room now: retry after reading completions.
    Again,
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
        pool: ControlPool,
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
            pool: Some(pool),
            cq,
            eq,
            commands,
            completions,
            mode,
            next_key,
            failure_timeout,
            len_in_cq_data: false,
            next_liveness_check: Instant::now(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            credits: HashMap::new(),
            root_registrations: HashMap::new(),
            flushing: None,
        }
    }

    fn pool(&self) -> &ControlPool {
        self.pool
            .as_ref()
            .expect("the pool lives as long as the driver")
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
            let liveness = tokio::time::Instant::from_std(self.next_liveness_check);
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
                () = tokio::time::sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)),
                    if deadline.is_some() => {}
            }
        }
    }

    /// Send heartbeats to peers not written to lately; declare peers silent
    /// for the failure timeout down.
    fn check_liveness(&mut self) {
        let now = Instant::now();
        let interval = self.failure_timeout / 3;
        self.next_liveness_check = now + (self.failure_timeout / 6).max(Duration::from_millis(1));
        let mut silent = Vec::new();
        let mut idle = Vec::new();
        for (&id, p) in &self.peers {
            if p.down {
                continue;
            }
            if now.duration_since(p.last_heard) > self.failure_timeout {
                silent.push(id);
            } else if now.duration_since(p.last_sent) >= interval && self.flushing.is_none() {
                idle.push(id);
            }
        }
        for id in idle {
            self.send_ctrl(id, Control::Heartbeat);
        }
        for id in silent {
            let why = format!("silent for {:?}", self.failure_timeout);
            self.peer_failed(id, &why);
        }
    }

    /// Whether a flush is complete (or timed out); answers it if so.
    fn flush_done(&mut self) -> bool {
        let Some((_, deadline)) = &self.flushing else {
            return false;
        };
        let idle = self.peers.values().all(Peer::idle);
        if !idle && tokio::time::Instant::now() < *deadline {
            return false;
        }
        if !idle {
            tracing::warn!("gave up flushing the fabric endpoints");
        }
        if let Some((done, _)) = self.flushing.take() {
            let _ = done.send(());
        }
        true
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
                    self.send_ctrl(to, Control::Signal { group, signal });
                } else {
                    self.unreachable(group, to);
                }
            }
            Cmd::Release { group } => self.release(group),
            Cmd::Flush { done, limit } => {
                self.flushing = Some((done, tokio::time::Instant::now() + limit));
            }
        }
    }

    /// Register (once) the buffer a region belongs to.
    fn buffer_mr(&mut self, buf: &Arc<MessageBuffer>) -> Result<(*mut c_void, u64), String> {
        if let Some(reg) = buf.registration().get() {
            return match reg.downcast_ref::<Mr>() {
                Some(mr) if mr.in_domain(&self.domain) => Ok((mr.desc(), mr.key())),
                _ => Err("the buffer is registered with another domain".into()),
            };
        }
        let key = self.next_key;
        self.next_key += 1;
        // SAFETY: the registration (of the whole allocation) is stored in the
        // buffer itself, which drops it before freeing its memory, or hands
        // memory and registration over together to the node's pool
        // (`MessageBuffer::drop`).
        let mr = unsafe {
            Mr::register(
                &self.domain,
                buf.as_ptr(),
                buf.capacity(),
                Access::LocalAndRemoteWrite,
                key,
            )
        }
        .map_err(|e| e.to_string())?;
        let (desc, key) = (mr.desc(), mr.key());
        let _ = buf.registration().set(Box::new(mr));
        Ok((desc, key))
    }

    /// The receiver's half of a block transfer: register the memory, keep
    /// the region in a slot, and give the peer a credit for it.
    fn post_recv(&mut self, group: GroupId, from: NodeId, region: RecvRegion) {
        if !self.usable(from) {
            return self.unreachable(group, from);
        }
        let (addr, key) = if region.len() == 0 {
            (0, 0)
        } else {
            let buf = Arc::clone(region.buffer());
            match self.buffer_mr(&buf) {
                Ok((_, key)) => (self.modes.remote_addr(buf.as_ptr(), region.offset()), key),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot register a receive buffer");
                    return self.emit(Completion::TransferFailed {
                        group,
                        peer: from,
                        error: "memory registration failed",
                    });
                }
            }
        };
        let len = region.len() as u64;
        let slot = self.free_slots.pop().unwrap_or_else(|| {
            self.slots.push(None);
            (self.slots.len() - 1) as u32
        });
        self.slots[slot as usize] = Some(RecvSlot {
            group,
            from,
            region: Some(region),
            _keep: None,
            written: false,
            data_len: None,
            header: None,
        });
        let credit = Credit {
            group,
            slot,
            len,
            addr,
            key,
        };
        tracing::trace!(group = group.0, from = from.0, slot, len, "receive posted");
        self.send_ctrl(from, Control::Credit(credit));
    }

    /// The sender's half: take the receiver's credit, write the block there
    /// with the slot as remote CQ data, and send the block's header.
    fn post_send(&mut self, group: GroupId, to: NodeId, block: BlockRef, immediate: u64) {
        if !self.usable(to) {
            return self.unreachable(group, to);
        }
        let Some(credit) = self
            .credits
            .get_mut(&(to, group))
            .and_then(VecDeque::pop_front)
        else {
            return self.emit(Completion::TransferFailed {
                group,
                peer: to,
                error: "the receiver posted no receive",
            });
        };
        let len = block.len() as u64;
        if len > credit.len {
            return self.emit(Completion::TransferFailed {
                group,
                peer: to,
                error: "block longer than the posted receive",
            });
        }
        self.send_ctrl(
            to,
            Control::BlockHeader {
                group,
                slot: credit.slot,
                len,
                immediate,
            },
        );
        if len == 0 {
            // Nothing to write: the header alone completes the receive.
            return self.emit(Completion::Sent { group, to });
        }
        let op = WriteOp {
            group,
            block,
            credit,
        };
        let peer = self.peers.get_mut(&to).expect("usable peers exist");
        if peer.write_backlog.is_empty() && peer.writes_in_flight < WRITES_IN_FLIGHT {
            match self.try_write(to, op) {
                Ok(None) => {}
                Ok(Some(op)) => self.peer_mut(to).write_backlog.push_back(op),
                Err(e) => self.peer_failed(to, &e.to_string()),
            }
        } else {
            peer.write_backlog.push_back(op);
        }
    }

    fn peer_mut(&mut self, peer: NodeId) -> &mut Peer {
        self.peers.get_mut(&peer).expect("a known peer")
    }

    /// Post one block write; `Ok(Some(op))` if there is no room now.
    fn try_write(&mut self, to: NodeId, op: WriteOp) -> Result<Option<WriteOp>, OfiError> {
        let (desc, mr) = match op.block.buffer() {
            Some(buf) => {
                let buf = Arc::clone(buf);
                match self.buffer_mr(&buf) {
                    Ok((desc, _)) => (desc, None),
                    Err(e) => {
                        return Err(OfiError {
                            call: "fi_mr_reg",
                            code: 0,
                            message: e,
                        });
                    }
                }
            }
            None if self.modes.mr_local => {
                let reg = self.root_registration(op.group, &op.block)?;
                (reg.mr.desc(), Some(reg))
            }
            None => (ptr::null_mut(), None),
        };
        let src = op.block.as_slice();
        let (src_ptr, len) = (src.as_ptr(), src.len());
        let credit = op.credit;
        let ctx = OpCtx::boxed(Op::Write {
            peer: to,
            group: op.group,
            _block: op.block.clone(),
            _mr: mr,
        });
        let ep = self.peers[&to]
            .data
            .as_ref()
            .expect("usable peers have endpoints");
        // SAFETY: the endpoint is open; the source bytes are kept alive (and
        // registered, where that is needed) by the context until the write
        // completes; the remote address and key come from the receiver's
        // credit, so the provider checks them against its registration.
        let ret = unsafe {
            ffi::rdmc_writedata(
                ep.0,
                src_ptr.cast(),
                len,
                desc,
                self.cq_data(credit.slot, len),
                credit.addr,
                credit.key,
                ctx,
            )
        };
        if ret < 0 {
            // SAFETY: the post failed, so the provider did not keep the context.
            drop(unsafe { OpCtx::take(ctx) });
            if ret == -(ffi::FI_EAGAIN as isize) {
                return Ok(Some(op));
            }
            check("fi_writedata", ret as i64)?;
        }
        self.peer_mut(to).writes_in_flight += 1;
        tracing::trace!(
            group = op.group.0,
            to = to.0,
            slot = credit.slot,
            len,
            "block write posted"
        );
        Ok(None)
    }

    /// The registration of the root's message `block` is part of: cached per
    /// group, so a message is registered once, not per block (the root sends
    /// a group's messages one after another).
    fn root_registration(
        &mut self,
        group: GroupId,
        block: &BlockRef,
    ) -> Result<Arc<RootRegistration>, OfiError> {
        let message = block.message().expect("a root's block").clone();
        if let Some(reg) = self.root_registrations.get(&group)
            && reg.message.as_ptr() == message.as_ptr()
            && reg.message.len() == message.len()
        {
            return Ok(Arc::clone(reg));
        }
        let key = self.next_key;
        self.next_key += 1;
        // SAFETY: the registration holds a clone of the bytes, so they stay
        // allocated (and unchanged: `Bytes` are immutable) until it is
        // dropped; it is only read, as the source of writes.
        let mr = unsafe {
            Mr::register(
                &self.domain,
                message.as_ptr().cast_mut(),
                message.len(),
                Access::Source,
                key,
            )
        }?;
        let reg = Arc::new(RootRegistration { mr, message });
        self.root_registrations.insert(group, Arc::clone(&reg));
        Ok(reg)
    }

    /// The remote CQ data of a block write: the slot, and — where the
    /// provider carries 8 bytes — the length above it (0: not carried).
    fn cq_data(&self, slot: u32, len: usize) -> u64 {
        let len = match u32::try_from(len) {
            Ok(len) if self.len_in_cq_data => u64::from(len),
            _ => 0,
        };
        len << 32 | u64::from(slot)
    }

    /// Queue a control message to `to`, in order.
    fn send_ctrl(&mut self, to: NodeId, msg: Control) {
        let bytes = msg.encode();
        let peer = self.peer_mut(to);
        if !peer.ctrl_backlog.is_empty() {
            peer.ctrl_backlog.push_back(bytes);
            return;
        }
        match self.try_send_ctrl(to, &bytes) {
            Ok(Posted::Yes) => {}
            Ok(Posted::Again) => self.peer_mut(to).ctrl_backlog.push_back(bytes),
            Err(e) => self.peer_failed(to, &e.to_string()),
        }
    }

    fn try_send_ctrl(&mut self, to: NodeId, bytes: &[u8; MSG_LEN]) -> Result<Posted, OfiError> {
        let pool = self.pool.as_ref().expect("open");
        let peer = self.peers.get_mut(&to).expect("a known peer");
        let Some(i) = peer.free_sends.pop() else {
            return Ok(Posted::Again);
        };
        let (slot, at) = pool.send_slot(to, i);
        pool.write(slot, bytes);
        let ctx = OpCtx::boxed(Op::CtrlSend { peer: to, slot: i });
        let ep = peer.ctrl.as_ref().expect("usable peers have endpoints");
        // SAFETY: the endpoint is open; the slot is registered pool memory,
        // not reused until this send's completion returns it; the context
        // lives until then.
        let ret = unsafe { ffi::rdmc_send(ep.0, at.cast(), MSG_LEN, pool.desc(), ctx) };
        if ret < 0 {
            // SAFETY: the post failed, so the provider did not keep the context.
            drop(unsafe { OpCtx::take(ctx) });
            peer.free_sends.push(i);
            if ret == -(ffi::FI_EAGAIN as isize) {
                return Ok(Posted::Again);
            }
            check("fi_send", ret as i64)?;
        }
        peer.last_sent = Instant::now();
        Ok(Posted::Yes)
    }

    /// Post what waited for room, in order, per peer.
    fn retry_backlogs(&mut self) {
        let ids: Vec<NodeId> = self
            .peers
            .iter()
            .filter(|(_, p)| !p.down && (!p.ctrl_backlog.is_empty() || !p.write_backlog.is_empty()))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            while let Some(bytes) = self.peers[&id].ctrl_backlog.front().copied() {
                match self.try_send_ctrl(id, &bytes) {
                    Ok(Posted::Yes) => {
                        self.peer_mut(id).ctrl_backlog.pop_front();
                    }
                    Ok(Posted::Again) => break,
                    Err(e) => {
                        self.peer_failed(id, &e.to_string());
                        break;
                    }
                }
            }
            while !self.peers[&id].down && self.peers[&id].writes_in_flight < WRITES_IN_FLIGHT {
                let Some(op) = self.peer_mut(id).write_backlog.pop_front() else {
                    break;
                };
                match self.try_write(id, op) {
                    Ok(None) => {}
                    Ok(Some(op)) => {
                        self.peer_mut(id).write_backlog.push_front(op);
                        break;
                    }
                    Err(e) => {
                        self.peer_failed(id, &e.to_string());
                        break;
                    }
                }
            }
        }
    }

    fn release(&mut self, group: GroupId) {
        self.credits.retain(|(_, g), _| *g != group);
        self.root_registrations.remove(&group);
        for (i, entry) in self.slots.iter_mut().enumerate() {
            let Some(slot) = entry.as_mut().filter(|s| s.group == group) else {
                continue;
            };
            if slot.written || slot.region.is_none() {
                // Nothing more will land here.
                *entry = None;
                self.free_slots.push(i as u32);
            } else {
                // The peer may still write into it: keep the memory until
                // the write lands or the peer is gone, but report nothing.
                slot._keep = slot.region.take().map(|r| Arc::clone(r.buffer()));
            }
        }
    }

    /// Read every completion there is (a batch at most); how many.
    fn poll_cq(&mut self) -> usize {
        let mut handled = 0;
        // SAFETY: all-zero is a valid value of these plain C structs.
        let mut entries: [ffi::Cqe; 32] = unsafe { std::mem::zeroed() };
        while handled < BATCH {
            // SAFETY: the CQ is open; `entries` has room for 32 entries.
            let n = unsafe { ffi::rdmc_cq_read(self.cq.0, entries.as_mut_ptr(), entries.len()) };
            if n == -(ffi::FI_EAGAIN as isize) {
                break;
            }
            if n == -(ffi::FI_EAVAIL as isize) {
                self.read_cq_error();
                handled += 1;
                continue;
            }
            if n < 0 {
                tracing::warn!(error = %strerror((-n) as i32), "fi_cq_read failed");
                break;
            }
            for e in &entries[..n as usize] {
                self.on_cqe(*e);
            }
            handled += n as usize;
        }
        handled
    }

    fn on_cqe(&mut self, e: ffi::Cqe) {
        let remote_data = e.flags & ffi::FI_REMOTE_CQ_DATA != 0;
        if e.op_context.is_null() {
            // A peer's block write landed in one of our slots (remote
            // completions carry no context unless they consumed a receive).
            if remote_data {
                self.written(e.data);
            }
            return;
        }
        // Classify by our own context, not by the flags: some providers
        // (sockets) also flag the initiator's completion of a write with
        // immediate data as FI_REMOTE_CQ_DATA.
        // SAFETY: every operation we post carries a context from
        // `OpCtx::boxed`, handed back exactly once, here.
        match unsafe { OpCtx::take(e.op_context) } {
            Op::DataRecv { peer } => {
                // With FI_RX_CQ_DATA, a peer's write consumed this receive.
                self.repost_data_recv(peer);
                if remote_data {
                    self.written(e.data);
                }
            }
            Op::CtrlRecv { peer, index } => {
                if let Some(p) = self.peers.get_mut(&peer) {
                    p.last_heard = Instant::now();
                }
                let bytes = self.pool().read(index);
                self.repost_ctrl_recv(peer, index);
                match Control::decode(&bytes) {
                    Ok(c) => self.on_control(peer, c),
                    Err(err) => {
                        tracing::warn!(peer = peer.0, error = %err, "malformed control message");
                        self.peer_failed(peer, "malformed control message");
                    }
                }
            }
            Op::CtrlSend { peer, slot } => {
                if let Some(p) = self.peers.get_mut(&peer) {
                    p.free_sends.push(slot);
                }
            }
            Op::Write { peer, group, .. } => {
                if let Some(p) = self.peers.get_mut(&peer) {
                    p.writes_in_flight -= 1;
                }
                tracing::trace!(group = group.0, to = peer.0, "block write complete");
                self.emit(Completion::Sent { group, to: peer });
            }
        }
    }

    fn repost_ctrl_recv(&mut self, peer: NodeId, index: usize) {
        let Some(p) = self.peers.get(&peer).filter(|p| !p.down) else {
            return;
        };
        let i = index - peer.index() * ControlPool::PER_PEER;
        let result = post_ctrl_recv(p.ctrl.as_ref().expect("up"), self.pool(), peer, i);
        if let Err(e) = result {
            self.peer_failed(peer, &e.to_string());
        }
    }

    fn repost_data_recv(&mut self, peer: NodeId) {
        let Some(p) = self.peers.get(&peer).filter(|p| !p.down) else {
            return;
        };
        if let Err(e) = post_data_recv(p.data.as_ref().expect("up"), peer) {
            self.peer_failed(peer, &e.to_string());
        }
    }

    fn read_cq_error(&mut self) {
        // SAFETY: all-zero is a valid value of this plain C struct.
        let mut err: ffi::CqErr = unsafe { std::mem::zeroed() };
        // SAFETY: the CQ is open; `err` is a live local.
        let n = unsafe { ffi::rdmc_cq_readerr(self.cq.0, &mut err) };
        if n < 0 {
            return;
        }
        let message: String = err
            .message
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8 as char)
            .collect();
        if err.op_context.is_null() {
            tracing::warn!(error = %message, "error completion without a context");
            return;
        }
        // SAFETY: as in `on_cqe`: our context, handed back once.
        let op = unsafe { OpCtx::take(err.op_context) };
        let cancelled = err.err == ffi::FI_ECANCELED;
        let peer = match op {
            Op::CtrlRecv { peer, .. } | Op::DataRecv { peer } => peer,
            Op::CtrlSend { peer, slot } => {
                if let Some(p) = self.peers.get_mut(&peer) {
                    p.free_sends.push(slot);
                }
                peer
            }
            Op::Write { peer, group, .. } => {
                if let Some(p) = self.peers.get_mut(&peer) {
                    p.writes_in_flight -= 1;
                }
                if !cancelled {
                    self.emit(Completion::TransferFailed {
                        group,
                        peer,
                        error: "block write failed",
                    });
                }
                peer
            }
        };
        if !cancelled {
            self.peer_failed(peer, &message);
        }
    }

    fn on_control(&mut self, from: NodeId, c: Control) {
        match c {
            Control::Signal { group, signal } => self.emit(Completion::Signal {
                group,
                from,
                signal,
            }),
            Control::Credit(credit) => {
                self.credits
                    .entry((from, credit.group))
                    .or_default()
                    .push_back(credit);
            }
            Control::BlockHeader {
                group,
                slot,
                len,
                immediate,
            } => {
                let Some(s) = self
                    .slots
                    .get_mut(slot as usize)
                    .and_then(Option::as_mut)
                    .filter(|s| s.from == from && s.group == group && s.header.is_none())
                else {
                    tracing::warn!(peer = from.0, slot, "a block header for no posted receive");
                    return self.emit(Completion::TransferFailed {
                        group,
                        peer: from,
                        error: "block without a posted receive",
                    });
                };
                s.header = Some((len, immediate));
                if len == 0 {
                    s.written = true;
                }
                self.maybe_complete(slot);
            }
            Control::Heartbeat => {}
        }
    }

    /// A block write with CQ data `data` landed.
    fn written(&mut self, data: u64) {
        let slot = (data & 0xFFFF_FFFF) as u32;
        let data_len = data >> 32;
        match self.slots.get_mut(slot as usize).and_then(Option::as_mut) {
            Some(s) if !s.written => {
                s.written = true;
                s.data_len = (data_len != 0).then_some(data_len);
                let from = s.from;
                if let Some(p) = self.peers.get_mut(&from) {
                    p.last_heard = Instant::now();
                }
                self.maybe_complete(slot);
            }
            _ => tracing::warn!(slot, "a write landed in no posted receive"),
        }
    }

    /// Deliver a slot's block once both its write and its header are in.
    fn maybe_complete(&mut self, slot: u32) {
        let entry = &mut self.slots[slot as usize];
        let done = entry
            .as_ref()
            .is_some_and(|s| s.written && (s.header.is_some() || s.region.is_none()));
        if !done {
            return;
        }
        let s = entry.take().expect("checked");
        self.free_slots.push(slot);
        let (Some(region), Some((len, immediate))) = (s.region, s.header) else {
            return; // retired: the group is over here
        };
        if len > region.len() as u64 {
            return self.emit(Completion::TransferFailed {
                group: s.group,
                peer: s.from,
                error: "block longer than the posted receive",
            });
        }
        if s.data_len.is_some_and(|l| l != len) {
            return self.emit(Completion::TransferFailed {
                group: s.group,
                peer: s.from,
                error: "a block's CQ data and header disagree on its length",
            });
        }
        tracing::trace!(
            group = s.group.0,
            from = s.from.0,
            slot,
            len,
            "block received"
        );
        self.emit(Completion::Received {
            group: s.group,
            from: s.from,
            immediate,
            len: len as usize,
        });
    }

    /// Read every EQ event there is: a peer whose endpoint shut down or
    /// failed is down.
    fn poll_eq(&mut self) -> usize {
        let mut handled = 0;
        loop {
            // SAFETY: all-zero is a valid value of this plain C struct.
            let mut ev: ffi::Eqe = unsafe { std::mem::zeroed() };
            let mut data = [0u8; 64];
            // SAFETY: the EQ is open; `ev` and `data` are live locals of the
            // sizes given.
            let n = unsafe {
                ffi::rdmc_eq_read(self.eq.0, &mut ev, data.as_mut_ptr().cast(), data.len())
            };
            if n < 0 {
                break;
            }
            handled += 1;
            match ev.event {
                ffi::EV_SHUTDOWN | ffi::EV_ERROR => {
                    if let Some((peer, _)) = token_peer(ev.fid_context) {
                        let why = if ev.event == ffi::EV_SHUTDOWN {
                            "endpoint shut down".to_owned()
                        } else {
                            format!("endpoint error: {}", strerror(ev.err))
                        };
                        self.peer_failed(peer, &why);
                    }
                }
                ffi::EV_CONNREQ => {
                    // Connections are only accepted while the node starts.
                    // SAFETY: the connreq's info is ours to free.
                    unsafe { ffi::rdmc_freeinfo(ev.info) };
                }
                _ => {}
            }
        }
        handled
    }

    /// `peer` is gone: close its endpoints (so the provider touches none of
    /// the memory posted for it any more), drop what was posted for it, and
    /// tell the runtime — once.
    fn peer_failed(&mut self, peer: NodeId, why: &str) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        if p.down {
            return;
        }
        if self.flushing.is_none() {
            tracing::warn!(peer = peer.0, reason = why, "peer down");
        }
        p.down = true;
        p.ctrl_backlog.clear();
        p.write_backlog.clear();
        for ep in [p.data.take(), p.ctrl.take()].into_iter().flatten() {
            // SAFETY: an open endpoint; shutting it down before closing it.
            unsafe { ffi::rdmc_shutdown(ep.0) };
            drop(ep);
        }
        self.credits.retain(|(p, _), _| *p != peer);
        for (i, entry) in self.slots.iter_mut().enumerate() {
            if entry.as_ref().is_some_and(|s| s.from == peer) {
                *entry = None;
                self.free_slots.push(i as u32);
            }
        }
        self.emit(Completion::PeerDown { node: peer });
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Close the endpoints first: peers see them shut down, and the
        // provider is done with every buffer posted on them.
        for p in self.peers.values_mut() {
            for ep in [p.data.take(), p.ctrl.take()].into_iter().flatten() {
                // SAFETY: an open endpoint; shut down before it is closed.
                unsafe { ffi::rdmc_shutdown(ep.0) };
                drop(ep);
            }
        }
        // Take back the contexts of operations flushed from them.
        loop {
            // SAFETY: all-zero is a valid value of these plain C structs.
            let mut entries: [ffi::Cqe; 32] = unsafe { std::mem::zeroed() };
            // SAFETY: the CQ is still open.
            let n = unsafe { ffi::rdmc_cq_read(self.cq.0, entries.as_mut_ptr(), entries.len()) };
            if n == -(ffi::FI_EAVAIL as isize) {
                // SAFETY: as above.
                let mut err: ffi::CqErr = unsafe { std::mem::zeroed() };
                // SAFETY: the CQ is open; `err` is a live local.
                if unsafe { ffi::rdmc_cq_readerr(self.cq.0, &mut err) } < 0 {
                    break;
                }
                if !err.op_context.is_null() {
                    // SAFETY: our context, handed back once.
                    drop(unsafe { OpCtx::take(err.op_context) });
                }
                continue;
            }
            if n <= 0 {
                break;
            }
            for e in &entries[..n as usize] {
                if !e.op_context.is_null() {
                    // SAFETY: our context, handed back once.
                    drop(unsafe { OpCtx::take(e.op_context) });
                }
            }
        }
        self.slots.clear();
        // Deregister the fds from the reactor before the queues close them.
        drop(self.cq_fd.take());
        drop(self.eq_fd.take());
        let _ = &self.me;
        drop(self.pool.take());
    }
}
