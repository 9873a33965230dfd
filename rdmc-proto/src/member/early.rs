//! Early announcement: over a transport whose sends complete once buffered
//! (TCP), a receiver that takes blocks from one sender at a time
//! ([`Announce::OneSender`]) would leave its port idle for a round trip at
//! every change of sender: the next sender may send only after the
//! ready-for-block that follows the previous block's arrival. With
//! [`MemberConfig::early_announce`] the transport reports when a block has
//! only a few bytes left to arrive, and the member announces the next
//! sender's receive then: its ready-for-block and first bytes cross the
//! network while the last bytes of the current block still arrive, and
//! the two blocks share the port for at most the threshold's bytes.
//!
//! [`MemberConfig::early_announce`]: super::MemberConfig::early_announce

use super::{Announce, GroupMember, Rank};

impl GroupMember {
    /// The block arriving from `from` (the next one this member posted a
    /// receive for from that peer) has `remaining` bytes still to come.
    ///
    /// A hint, never a violation: with [`Announce::OneSender`] and
    /// [`MemberConfig::early_announce`](super::MemberConfig::early_announce)
    /// set, if `remaining` is at most the threshold and that block is the
    /// only one announced, the receive of the next block is announced now
    /// even if another member sends it. Otherwise (no threshold, more
    /// bytes left, more blocks announced, no such block) it is ignored,
    /// and the next sender is announced when the block arrives
    /// ([`handle_block`](Self::handle_block)). Reported once per block
    /// by transports that can see a block's progress (the `tcp` reader);
    /// the others never call it.
    pub fn handle_block_progress(&mut self, from: Rank, remaining: u64) {
        if self.is_finished() || self.config.announce != Announce::OneSender {
            return;
        }
        let Some(threshold) = self.config.early_announce else {
            return;
        };
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        let only = cur.expected.len() == 1 && cur.expected[0].1.peer == from;
        if !only || remaining > threshold {
            return;
        }
        tracing::trace!(
            seq = cur.seq,
            from,
            remaining,
            "block nearly here: announcing the next sender"
        );
        cur.nearly_done = true;
        self.expect_next_block();
    }
}
