//! The receiver's bookkeeping of the RDMA-style transports (`ofi`,
//! `rdma`): receive slots — a posted receive's memory, kept until the
//! peer's block write and its header are both in — and the credits peers
//! gave this node, per (peer, group), in the order given.
//!
//! Pure: no verbs, no libfabric. A driver registers the memory and sends
//! the credit; this table decides what a header or a landed write means,
//! and hands back the [`Completion`] to report, if any.

use std::collections::VecDeque;
use std::sync::Arc;

use super::wire::Credit;
use crate::collections::HashMap;
use crate::ids::{GroupId, NodeId};
use crate::transport::{Completion, MessageBuffer, RecvRegion};

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
    /// The peer said it will write nothing here.
    returned: bool,
    /// The block's length as the write reported it, if it did.
    written_len: Option<u64>,
    header: Option<(u64, u64)>,
}

/// A header or a write that matches no posted receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NoSlot;

/// What a group's release leaves to tell the peers.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Released {
    /// The peers that hold credits for slots of the group still kept:
    /// asked for them back.
    pub(crate) revoke: Vec<NodeId>,
    /// The credits of the group this node held (giver, slot): given back,
    /// nothing is written into them.
    pub(crate) give_back: Vec<(NodeId, u32)>,
}

/// The receive slots of a node and the credits it holds.
#[derive(Debug, Default)]
pub(crate) struct SlotTable {
    slots: Vec<Option<RecvSlot>>,
    free: Vec<u32>,
    credits: HashMap<(NodeId, GroupId), VecDeque<Credit>>,
}

impl SlotTable {
    /// Keep `region` for the next block `from` sends in `group`; the slot
    /// number to put in its credit.
    pub(crate) fn insert(&mut self, group: GroupId, from: NodeId, region: RecvRegion) -> u32 {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            (self.slots.len() - 1) as u32
        });
        self.slots[slot as usize] = Some(RecvSlot {
            group,
            from,
            region: Some(region),
            _keep: None,
            written: false,
            returned: false,
            written_len: None,
            header: None,
        });
        slot
    }

    /// `from` gave a credit: where its next block of the credit's group
    /// may be written.
    pub(crate) fn add_credit(&mut self, from: NodeId, credit: Credit) {
        self.credits
            .entry((from, credit.group))
            .or_default()
            .push_back(credit);
    }

    /// The oldest credit `to` gave for `group`, taken.
    pub(crate) fn take_credit(&mut self, to: NodeId, group: GroupId) -> Option<Credit> {
        self.credits
            .get_mut(&(to, group))
            .and_then(VecDeque::pop_front)
    }

    /// The group is over here: drop its credits, free its slots — keeping
    /// the memory of those a peer may still write into, until the write
    /// lands, the peer gives the credit back or is gone, reporting nothing
    /// for them. What to tell the peers: see [`Released`].
    pub(crate) fn release(&mut self, group: GroupId) -> Released {
        let mut give_back = Vec::new();
        self.credits.retain(|&(peer, g), credits| {
            if g == group {
                give_back.extend(credits.iter().map(|c| (peer, c.slot)));
            }
            g != group
        });
        give_back.sort_unstable();
        let mut revoke = Vec::new();
        for (i, entry) in self.slots.iter_mut().enumerate() {
            let Some(slot) = entry.as_mut().filter(|s| s.group == group) else {
                continue;
            };
            if slot.written || slot.returned || slot.region.is_none() {
                // Nothing more will land here.
                *entry = None;
                self.free.push(i as u32);
            } else {
                slot._keep = slot.region.take().map(|r| Arc::clone(r.buffer()));
                if !revoke.contains(&slot.from) {
                    revoke.push(slot.from);
                }
            }
        }
        revoke.sort_unstable();
        Released { revoke, give_back }
    }

    /// `from` is done with `group` and asks for the credits of it this
    /// node holds: taken, their slots (to give back).
    pub(crate) fn revoke(&mut self, from: NodeId, group: GroupId) -> Vec<u32> {
        self.credits
            .remove(&(from, group))
            .map(|credits| credits.into_iter().map(|c| c.slot).collect())
            .unwrap_or_default()
    }

    /// `from` will write nothing into `slot` of `group`: freed if the group
    /// is over here, else when it is.
    pub(crate) fn returned(&mut self, from: NodeId, group: GroupId, slot: u32) {
        let Some(entry) = self.slots.get_mut(slot as usize) else {
            return;
        };
        let Some(s) = entry
            .as_mut()
            .filter(|s| s.from == from && s.group == group && !s.written)
        else {
            return;
        };
        if s.region.is_none() {
            *entry = None;
            self.free.push(slot);
        } else {
            s.returned = true;
        }
    }

    /// `peer` is down (nothing of it lands any more): drop its credits and
    /// free its slots.
    pub(crate) fn drop_peer(&mut self, peer: NodeId) {
        self.credits.retain(|(p, _), _| *p != peer);
        for (i, entry) in self.slots.iter_mut().enumerate() {
            if entry.as_ref().is_some_and(|s| s.from == peer) {
                *entry = None;
                self.free.push(i as u32);
            }
        }
    }

    /// Forget every slot (the driver is closing: nothing lands any more).
    pub(crate) fn clear(&mut self) {
        self.slots.clear();
        self.free.clear();
    }

    /// The header of the block `from` writes into `slot` of `group`: its
    /// exact length and immediate value. What to report, if the block is
    /// complete now.
    pub(crate) fn header(
        &mut self,
        from: NodeId,
        group: GroupId,
        slot: u32,
        len: u64,
        immediate: u64,
    ) -> Result<Option<Completion>, NoSlot> {
        let s = self
            .slots
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .filter(|s| s.from == from && s.group == group && s.header.is_none())
            .ok_or(NoSlot)?;
        s.header = Some((len, immediate));
        if len == 0 {
            s.written = true;
        }
        Ok(self.complete(slot))
    }

    /// A block write landed in `slot`, `len` bytes if the transport
    /// reports it (and from `from`, if it knows). The peer it came from,
    /// and what to report, if the block is complete now.
    pub(crate) fn written(
        &mut self,
        slot: u32,
        from: Option<NodeId>,
        len: Option<u64>,
    ) -> Result<(NodeId, Option<Completion>), NoSlot> {
        let s = self
            .slots
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .filter(|s| !s.written && from.is_none_or(|f| f == s.from))
            .ok_or(NoSlot)?;
        s.written = true;
        s.written_len = len;
        let from = s.from;
        Ok((from, self.complete(slot)))
    }

    /// Free a slot whose write and header are both in; what to report: the
    /// block received, or why it cannot be (nothing for a retired slot).
    fn complete(&mut self, slot: u32) -> Option<Completion> {
        let entry = &mut self.slots[slot as usize];
        let done = entry
            .as_ref()
            .is_some_and(|s| s.written && (s.header.is_some() || s.region.is_none()));
        if !done {
            return None;
        }
        let s = entry.take().expect("checked");
        self.free.push(slot);
        let (Some(region), Some((len, immediate))) = (s.region, s.header) else {
            return None; // retired: the group is over here
        };
        let (group, peer) = (s.group, s.from);
        if len > region.len() as u64 {
            return Some(Completion::TransferFailed {
                group,
                peer,
                error: "block longer than the posted receive",
            });
        }
        if s.written_len.is_some_and(|l| l != len) {
            return Some(Completion::TransferFailed {
                group,
                peer,
                error: "a block's write and its header disagree on its length",
            });
        }
        // A bounce region copies the block on to where it belongs.
        region.landed(len as usize);
        tracing::trace!(group = group.0, from = peer.0, slot, len, "block received");
        Some(Completion::Received {
            group,
            from: peer,
            immediate,
            len: len as usize,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(len: usize) -> RecvRegion {
        MessageBuffer::new(len).region(0, len)
    }

    #[test]
    fn a_block_completes_once_header_and_write_are_in_either_order() {
        let mut t = SlotTable::default();
        let a = t.insert(GroupId(1), NodeId(2), region(100));
        assert!(matches!(
            t.header(NodeId(2), GroupId(1), a, 60, 7),
            Ok(None)
        ));
        let (from, done) = t.written(a, None, Some(60)).unwrap();
        assert_eq!(from, NodeId(2));
        assert!(matches!(
            done,
            Some(Completion::Received {
                immediate: 7,
                len: 60,
                ..
            })
        ));
        let b = t.insert(GroupId(1), NodeId(2), region(100));
        assert_eq!(b, a, "the freed slot is reused");
        assert!(matches!(t.written(b, Some(NodeId(2)), None), Ok((_, None))));
        let done = t.header(NodeId(2), GroupId(1), b, 100, 8).unwrap();
        assert!(matches!(done, Some(Completion::Received { len: 100, .. })));
    }

    #[test]
    fn what_matches_no_posted_receive_is_refused() {
        let mut t = SlotTable::default();
        let a = t.insert(GroupId(1), NodeId(2), region(10));
        // Another peer, another group, an unknown slot.
        assert!(matches!(
            t.header(NodeId(3), GroupId(1), a, 1, 0),
            Err(NoSlot)
        ));
        assert!(matches!(
            t.header(NodeId(2), GroupId(9), a, 1, 0),
            Err(NoSlot)
        ));
        assert!(matches!(
            t.header(NodeId(2), GroupId(1), 99, 1, 0),
            Err(NoSlot)
        ));
        assert!(matches!(
            t.written(a, Some(NodeId(3)), Some(1)),
            Err(NoSlot)
        ));
        // A second write into one slot.
        assert!(t.written(a, None, Some(1)).is_ok());
        assert!(matches!(t.written(a, None, Some(1)), Err(NoSlot)));
    }

    #[test]
    fn lengths_that_do_not_fit_or_disagree_fail_the_transfer() {
        let mut t = SlotTable::default();
        let a = t.insert(GroupId(1), NodeId(2), region(10));
        t.header(NodeId(2), GroupId(1), a, 11, 0).unwrap();
        let (_, done) = t.written(a, None, Some(11)).unwrap();
        assert!(matches!(done, Some(Completion::TransferFailed { .. })));
        let b = t.insert(GroupId(1), NodeId(2), region(10));
        t.header(NodeId(2), GroupId(1), b, 5, 0).unwrap();
        let (_, done) = t.written(b, None, Some(4)).unwrap();
        assert!(matches!(done, Some(Completion::TransferFailed { .. })));
    }

    #[test]
    fn a_released_slot_keeps_its_memory_until_the_write_and_reports_nothing() {
        let mut t = SlotTable::default();
        let a = t.insert(GroupId(1), NodeId(2), region(10));
        t.add_credit(
            NodeId(2),
            Credit {
                group: GroupId(1),
                slot: 0,
                len: 1,
                addr: 0,
                key: 0,
            },
        );
        t.release(GroupId(1));
        assert_eq!(t.take_credit(NodeId(2), GroupId(1)), None);
        let b = t.insert(GroupId(2), NodeId(2), region(10));
        assert_ne!(
            a, b,
            "a retired slot a write may still land in is not reused"
        );
        assert_eq!(
            t.written(a, None, Some(3)).map(|(_, c)| c.is_none()),
            Ok(true)
        );
        let c = t.insert(GroupId(2), NodeId(2), region(10));
        assert_eq!(c, a, "freed once the write landed");
        t.drop_peer(NodeId(2));
        assert!(matches!(
            t.header(NodeId(2), GroupId(2), b, 1, 0),
            Err(NoSlot)
        ));
    }

    fn credit(group: u64, slot: u32) -> Credit {
        Credit {
            group: GroupId(group),
            slot,
            len: 1,
            addr: 0,
            key: 0,
        }
    }

    #[test]
    fn a_kept_slot_is_freed_once_its_credit_comes_back() {
        let mut t = SlotTable::default();
        let a = t.insert(GroupId(1), NodeId(2), region(10));
        let released = t.release(GroupId(1));
        assert_eq!(released.revoke, vec![NodeId(2)], "its holder is asked");
        // Given back by another peer, for another group: not this slot's.
        t.returned(NodeId(3), GroupId(1), a);
        t.returned(NodeId(2), GroupId(9), a);
        assert_ne!(t.insert(GroupId(2), NodeId(2), region(10)), a);
        t.returned(NodeId(2), GroupId(1), a);
        assert_eq!(t.insert(GroupId(2), NodeId(2), region(10)), a, "freed");
    }

    #[test]
    fn a_credit_given_back_while_the_group_runs_frees_its_slot_at_the_release() {
        let mut t = SlotTable::default();
        let a = t.insert(GroupId(1), NodeId(2), region(10));
        t.returned(NodeId(2), GroupId(1), a);
        assert_ne!(
            t.insert(GroupId(1), NodeId(2), region(10)),
            a,
            "still the group's"
        );
        let released = t.release(GroupId(1));
        assert_eq!(released.revoke, vec![NodeId(2)], "the other slot is kept");
        assert_eq!(t.insert(GroupId(2), NodeId(3), region(10)), a, "freed");
    }

    #[test]
    fn credits_are_given_back_when_revoked_or_when_their_group_is_over() {
        let mut t = SlotTable::default();
        t.add_credit(NodeId(2), credit(1, 5));
        t.add_credit(NodeId(2), credit(1, 6));
        t.add_credit(NodeId(3), credit(1, 1));
        t.add_credit(NodeId(3), credit(2, 9));
        assert_eq!(t.revoke(NodeId(2), GroupId(1)), vec![5, 6]);
        assert_eq!(t.revoke(NodeId(2), GroupId(1)), Vec::<u32>::new());
        assert_eq!(t.take_credit(NodeId(2), GroupId(1)), None);
        let released = t.release(GroupId(1));
        assert_eq!(
            released,
            Released {
                revoke: vec![],
                give_back: vec![(NodeId(3), 1)],
            }
        );
        assert_eq!(t.take_credit(NodeId(3), GroupId(2)), Some(credit(2, 9)));
    }
}
