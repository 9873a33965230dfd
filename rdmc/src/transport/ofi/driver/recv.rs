//! The receiver's half of a block transfer: buffers registered, slots
//! credited to the sender, and a block delivered once both its write and
//! its header are in.

use super::{Driver, post_data_recv};
use std::ffi::c_void;
use std::sync::Arc;

use crate::transport::ofi::fabric::{Access, Mr};
use crate::transport::ofi::wire::{ControlMessage, Credit};

use crate::ids::{GroupId, NodeId};
use crate::transport::{Completion, MessageBuffer, RecvRegion};
use tokio::time::Instant;

/// A receive this node posted: its credit is (or is about to be) with the
/// peer, which writes the block into it and sends its header.
#[derive(Debug)]
pub(super) struct RecvSlot {
    pub(super) group: GroupId,
    pub(super) from: NodeId,
    /// The memory; `None` once retired (the group was released here).
    pub(super) region: Option<RecvRegion>,
    /// Kept alive while the peer may still write into a retired slot.
    pub(super) _keep: Option<Arc<MessageBuffer>>,
    pub(super) written: bool,
    /// The block's length as the write's CQ data carried it, if it did.
    pub(super) data_len: Option<u64>,
    pub(super) header: Option<(u64, u64)>,
}

impl Driver {
    /// Register (once) the buffer a region belongs to.
    pub(super) fn buffer_mr(
        &mut self,
        buf: &Arc<MessageBuffer>,
    ) -> Result<(*mut c_void, u64), String> {
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
    pub(super) fn post_recv(&mut self, group: GroupId, from: NodeId, region: RecvRegion) {
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
        self.send_ctrl(from, ControlMessage::Credit(credit));
    }

    pub(super) fn release(&mut self, group: GroupId) {
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

    pub(super) fn repost_data_recv(&mut self, peer: NodeId) {
        let Some(p) = self.peers.get(&peer).filter(|p| !p.down) else {
            return;
        };
        if let Err(e) = post_data_recv(p.data.as_ref().expect("up"), peer) {
            self.peer_failed(peer, &e.to_string());
        }
    }

    /// A block write with CQ data `data` landed.
    pub(super) fn written(&mut self, data: u64) {
        let slot = (data & 0xFFFF_FFFF) as u32;
        let data_len = data >> 32;
        match self.slots.get_mut(slot as usize).and_then(Option::as_mut) {
            Some(s) if !s.written => {
                s.written = true;
                s.data_len = (data_len != 0).then_some(data_len);
                let from = s.from;
                if let Some(p) = self.peers.get_mut(&from) {
                    p.clock.heard(Instant::now());
                }
                self.maybe_complete(slot);
            }
            _ => tracing::warn!(slot, "a write landed in no posted receive"),
        }
    }

    /// Deliver a slot's block once both its write and its header are in.
    pub(super) fn maybe_complete(&mut self, slot: u32) {
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
}
