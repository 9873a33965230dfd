//! [`Message`]: what a receiver gets.

use bytes::Bytes;

use super::timing::MessageTimings;
use crate::ids::GroupId;
use crate::target::ReceivedFile;

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
    /// Its bytes, exactly as the root sent them (empty for a message
    /// received into a file: see [`file`](Self::file)).
    pub data: Bytes,
    /// For a message received into a file
    /// ([`ReceiveTarget::File`](crate::ReceiveTarget::File)): the file,
    /// holding its bytes. `None` for a message in memory.
    pub file: Option<ReceivedFile>,
    /// Where this member's time went while receiving (and relaying) it.
    pub timings: MessageTimings,
}

impl PartialEq for Message {
    fn eq(&self, other: &Self) -> bool {
        self.group == other.group && self.seq == other.seq && self.data == other.data
    }
}

impl Eq for Message {}
