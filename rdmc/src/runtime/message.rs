//! [`Message`]: what a receiver gets.

use bytes::Bytes;

use super::timing::MessageTimings;
use crate::ids::GroupId;

/// A message delivered to a receiver.
///
/// Two messages are equal when their group, sequence number and bytes are;
/// [`timings`](Self::timings) are not compared.
#[non_exhaustive]
#[derive(Clone, Debug)]
pub struct Message {
    /// The group it was multicast in.
    pub group: GroupId,
    /// Its position in the root's send order, from 0.
    pub seq: u64,
    /// Its bytes, exactly as the root sent them.
    pub data: Bytes,
    /// Where this member's time went while receiving (and relaying) it.
    pub timings: MessageTimings,
}

impl PartialEq for Message {
    fn eq(&self, other: &Self) -> bool {
        self.group == other.group && self.seq == other.seq && self.data == other.data
    }
}

impl Eq for Message {}
