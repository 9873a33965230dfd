//! libfabric handles the driver owns and the contexts of the operations it
//! posts: every operation carries a boxed [`OpCtx`] that its completion
//! hands back.

use super::{ControlPool, Posted, RootRegistration};
use std::ffi::c_void;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr;
use std::sync::Arc;

use crate::transport::fabric_driver::wire::MSG_LEN;
use crate::transport::ofi::fabric::{OfiError, check};
use crate::transport::ofi::ffi;

use crate::ids::{GroupId, NodeId};
use crate::transport::BlockRef;

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

/// A peer and the generation of its endpoints: the endpoints of a peer's
/// first connection are generation 0, those that replace them (a restarted
/// peer let back in) the next, so that what is still reported about
/// closed ones is told apart.
pub(crate) type PeerGen = (NodeId, u32);

/// The endpoint context token of (peer, kind, generation): an integer,
/// never dereferenced (16 bits of the generation, on 64-bit targets).
pub(crate) fn ep_token(peer: NodeId, ctrl: bool, generation: u32) -> *mut c_void {
    let low = 1 + 2 * (peer.index() & 0x7FFF_FFFF) + usize::from(ctrl);
    let high = (generation as usize & 0xFFFF) << 16 << 16;
    (high | low) as *mut c_void
}

/// The (peer, is-control, generation) an endpoint context token stands for.
pub(crate) fn token_peer(token: *mut c_void) -> Option<(NodeId, bool, u32)> {
    let token = token as usize;
    let generation = (token >> 16 >> 16) as u32;
    let t = (token & 0xFFFF_FFFF).checked_sub(1)?;
    Some((NodeId(u32::try_from(t / 2).ok()?), t % 2 == 1, generation))
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

/// What an operation's completion means.
/// Each names the peer and the generation of its endpoints it was posted
/// on (`generation`).
pub(crate) enum Op {
    /// A control message from `peer` arrived in its receive slot `slot`.
    CtrlRecv {
        peer: NodeId,
        generation: u32,
        slot: usize,
    },
    DataRecv {
        peer: NodeId,
        generation: u32,
    },
    CtrlSend {
        peer: NodeId,
        generation: u32,
        slot: usize,
    },
    Write {
        peer: NodeId,
        generation: u32,
        group: GroupId,
        _block: BlockRef,
        _mr: Option<Arc<RootRegistration>>,
    },
}

impl Op {
    /// The peer and the generation of its endpoints the operation was
    /// posted on.
    pub(crate) fn peer_gen(&self) -> PeerGen {
        match *self {
            Op::CtrlRecv {
                peer, generation, ..
            }
            | Op::DataRecv { peer, generation }
            | Op::CtrlSend {
                peer, generation, ..
            }
            | Op::Write {
                peer, generation, ..
            } => (peer, generation),
        }
    }
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

/// Post a control receive into receive slot `slot` of `peer`, on its
/// endpoint `ep` of generation `generation`.
pub(crate) fn post_ctrl_recv(
    ep: &Fid,
    pool: &ControlPool,
    (peer, generation): PeerGen,
    slot: usize,
) -> Result<(), OfiError> {
    let (_, at) = pool.recv_slot(peer, slot);
    let ctx = OpCtx::boxed(Op::CtrlRecv {
        peer,
        generation,
        slot,
    });
    // SAFETY: the endpoint is open; the slot is registered memory of the
    // pool, which outlives every endpoint; the context stays allocated until
    // its completion comes back (or forever, if it never does).
    let ret = unsafe { ffi::rdmc_recv(ep.0, at.cast(), MSG_LEN, pool.desc(), ctx) };
    if ret < 0 {
        // SAFETY: the post failed, so the provider did not keep the context.
        drop(unsafe { OpCtx::take(ctx) });
    }
    check("fi_recv", ret as i64)
}

/// Post the control message in send slot `slot` of `peer`, at `at`, on its
/// control endpoint `ep`; `Posted::Again` if there is no room now.
pub(crate) fn post_ctrl_send(
    ep: &Fid,
    pool: &ControlPool,
    (peer, generation): PeerGen,
    slot: usize,
    at: *mut u8,
) -> Result<Posted, OfiError> {
    let ctx = OpCtx::boxed(Op::CtrlSend {
        peer,
        generation,
        slot,
    });
    // SAFETY: the endpoint is open; the slot is registered pool memory, not
    // reused until this send's completion returns it; the context lives
    // until then.
    let ret = unsafe { ffi::rdmc_send(ep.0, at.cast(), MSG_LEN, pool.desc(), ctx) };
    if ret < 0 {
        // SAFETY: the post failed, so the provider did not keep the context.
        drop(unsafe { OpCtx::take(ctx) });
        if ret == -(ffi::FI_EAGAIN as isize) {
            return Ok(Posted::Again);
        }
    }
    check("fi_send", ret as i64).map(|()| Posted::Yes)
}

/// Post a zero-length receive on a data endpoint (for `FI_RX_CQ_DATA`).
pub(crate) fn post_data_recv(ep: &Fid, (peer, generation): PeerGen) -> Result<(), OfiError> {
    let ctx = OpCtx::boxed(Op::DataRecv { peer, generation });
    // SAFETY: the endpoint is open; a zero-length receive names no memory;
    // the context stays allocated until its completion comes back.
    let ret = unsafe { ffi::rdmc_recv(ep.0, ptr::null_mut(), 0, ptr::null_mut(), ctx) };
    if ret < 0 {
        // SAFETY: the post failed, so the provider did not keep the context.
        drop(unsafe { OpCtx::take(ctx) });
    }
    check("fi_recv", ret as i64)
}
