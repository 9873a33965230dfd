//! The registered memory the RDMA-style drivers (`ofi`, `rdma`) send
//! control messages from and receive them into: per peer, its receive
//! slots then its [`CTRL_SENDS`] send slots, [`MSG_LEN`] bytes each,
//! registered once with the fabric. How a slot is posted, and what its
//! registration is (a libfabric memory region, a verbs one), is the
//! driver's.

use std::ptr;

use super::wire::MSG_LEN;
use crate::ids::NodeId;

/// Control sends in flight per peer (each holds a registered 64-byte slot).
pub(crate) const CTRL_SENDS: usize = 64;

/// Registered memory for control messages: per peer, `recvs` receive
/// slots then `CTRL_SENDS` send slots, `MSG_LEN` bytes each; `R` is the
/// fabric's registration of it.
pub(crate) struct ControlSlots<R> {
    ptr: *mut u8,
    len: usize,
    recvs: usize,
    registration: Option<R>,
}

// SAFETY: the slots own their allocation; slots are handed to the fabric
// and read or written by the driver only between the completions that
// order them.
unsafe impl<R: Send> Send for ControlSlots<R> {}
// SAFETY: shared slots are only used by the one task that owns them
// (start-up, then the driver); `&self` methods touch disjoint slots, each
// only while no operation on it is outstanding.
unsafe impl<R: Sync> Sync for ControlSlots<R> {}

impl<R> std::fmt::Debug for ControlSlots<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPool")
            .field("len", &self.len)
            .finish()
    }
}

impl<R> ControlSlots<R> {
    /// Slots for peers with ids `0..nodes`, `recvs` receive slots each,
    /// registered by `register`, given the memory's address and length
    /// (memory that lives until the slots are dropped, which drop the
    /// registration first).
    pub(crate) fn registered<E>(
        nodes: usize,
        recvs: usize,
        register: impl FnOnce(*mut u8, usize) -> Result<R, E>,
    ) -> Result<Self, E> {
        let len = nodes.max(1) * (recvs + CTRL_SENDS) * MSG_LEN;
        let ptr = Box::into_raw(vec![0u8; len].into_boxed_slice()).cast::<u8>();
        let mut slots = ControlSlots {
            ptr,
            len,
            recvs,
            registration: None,
        };
        slots.registration = Some(register(ptr, len)?);
        Ok(slots)
    }

    /// The fabric's registration of the slots.
    pub(crate) fn registration(&self) -> Option<&R> {
        self.registration.as_ref()
    }

    /// Slots per peer: its receive slots, then its send slots.
    pub(crate) fn per_peer(&self) -> usize {
        self.recvs + CTRL_SENDS
    }

    /// Where slot `index` is.
    fn slot(&self, index: usize) -> *mut u8 {
        assert!((index + 1) * MSG_LEN <= self.len);
        // SAFETY: in bounds (checked above).
        unsafe { self.ptr.add(index * MSG_LEN) }
    }

    /// The index of receive slot `i` of `peer`, and where it is.
    pub(crate) fn recv_slot(&self, peer: NodeId, i: usize) -> (usize, *mut u8) {
        let index = peer.index() * self.per_peer() + i;
        (index, self.slot(index))
    }

    /// The index of send slot `i` of `peer`, and where it is.
    pub(crate) fn send_slot(&self, peer: NodeId, i: usize) -> (usize, *mut u8) {
        let index = peer.index() * self.per_peer() + self.recvs + i;
        (index, self.slot(index))
    }

    /// The message in slot `index`, which a completed receive filled.
    pub(crate) fn read(&self, index: usize) -> [u8; MSG_LEN] {
        let mut out = [0u8; MSG_LEN];
        // SAFETY: in bounds; the receive into this slot has completed, so
        // the fabric no longer writes it, and nothing else does.
        unsafe { ptr::copy_nonoverlapping(self.slot(index), out.as_mut_ptr(), MSG_LEN) };
        out
    }

    /// Fill send slot `index` (not in flight) with `msg`.
    pub(crate) fn write(&self, index: usize, msg: &[u8; MSG_LEN]) {
        // SAFETY: in bounds; the slot is free (no send from it in flight),
        // so the fabric does not read it, and nothing else does.
        unsafe { ptr::copy_nonoverlapping(msg.as_ptr(), self.slot(index), MSG_LEN) };
    }
}

impl<R> Drop for ControlSlots<R> {
    fn drop(&mut self) {
        drop(self.registration.take());
        let slice = ptr::slice_from_raw_parts_mut(self.ptr, self.len);
        // SAFETY: from Box::into_raw in `registered` with this length,
        // freed only here, after the registration is gone (and, as the
        // drivers drop their slots, after every endpoint or QP is closed).
        drop(unsafe { Box::from_raw(slice) });
    }
}
