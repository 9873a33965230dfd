//! What every allreduce algorithm shares: its error, the edges' handles
//! and messages, and the verdict on the members' buffers.

use bytes::{BufMut, BytesMut};
use futures::StreamExt;

use crate::{Error, Group, Message, NodeId, Receiver, Sender};

/// Why an allreduce failed. Every surviving member returns the same error
/// for a bad buffer (the root decides and multicasts it).
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum AllreduceError {
    /// Members passed buffers of different lengths.
    #[error("member {member} passed {len} bytes where member {other} passed {expected}")]
    LengthMismatch {
        /// The member whose length differed from its parent's.
        member: NodeId,
        /// Its length.
        len: u64,
        /// The parent in the tree that noticed.
        other: NodeId,
        /// The parent's length.
        expected: u64,
    },
    /// A member's buffer is not a whole number of elements.
    #[error("member {member} passed {len} bytes, not a multiple of the {element}-byte element")]
    PartialElement {
        /// The member.
        member: NodeId,
        /// Its length.
        len: u64,
        /// The operator's element size.
        element: u64,
    },
    /// A member failed (or left) during the allreduce or its setup.
    #[error("member {member} failed: {source}")]
    MemberFailed {
        /// The member believed to have failed.
        member: NodeId,
        /// The group failure that showed it.
        #[source]
        source: Error,
    },
    /// A member sent something that is not this protocol.
    #[error("member {member} broke the allreduce protocol: {detail}")]
    Protocol {
        /// The member.
        member: NodeId,
        /// What was wrong.
        detail: String,
    },
    /// The groups could not be created, or a setting is out of range.
    #[error("allreduce setup failed: {0}")]
    Setup(#[source] Error),
}

/// Largest block of the ring's groups by default: each member holds one
/// such buffer per incoming lane for the first block of a message, and
/// beyond this size a round trip per message costs little against its bytes.
pub(super) const MAX_RING_BLOCK: usize = 4 << 20;

pub(super) fn failed(member: NodeId, error: Error) -> AllreduceError {
    let member = match &error {
        Error::GroupFailed {
            suspect: Some(s), ..
        } => *s,
        _ => member,
    };
    AllreduceError::MemberFailed {
        member,
        source: error,
    }
}

/// Copy `data`, which `member` sent for `dst`, into `dst`; data of another
/// length is a protocol violation by `member` (`what` names the piece).
pub(super) fn copy_exact(
    dst: &mut [u8],
    data: &[u8],
    member: NodeId,
    what: &str,
) -> Result<(), AllreduceError> {
    if data.len() != dst.len() {
        return Err(AllreduceError::Protocol {
            member,
            detail: format!("{what} of another length"),
        });
    }
    dst.copy_from_slice(data);
    Ok(())
}

/// This member's handle on a group it creates as the root.
pub(super) fn root_of(group: Group) -> Sender {
    group
        .into_sender()
        .unwrap_or_else(|_| unreachable!("this member is first in the member list"))
}

/// This member's handle on a group it creates as a receiver.
pub(super) fn receiver_of(group: Group) -> Receiver {
    group
        .into_receiver()
        .unwrap_or_else(|_| unreachable!("this member is not first in the member list"))
}

pub(super) async fn next_message(
    group: &mut Receiver,
    peer: NodeId,
) -> Result<Message, AllreduceError> {
    match group.next().await {
        Some(Ok(m)) => Ok(m),
        Some(Err(e)) => Err(failed(peer, e)),
        None => Err(AllreduceError::MemberFailed {
            member: peer,
            source: Error::Closed(group.id()),
        }),
    }
}

/// The bytes of a [`Verdict`] on the wire.
pub(super) const VERDICT: usize = 48;

/// What the members seen so far say about their buffers: the shortest and
/// the longest length with their ranks (the lowest rank among equals), and
/// the lowest rank whose length is not a whole number of elements, with
/// that length. Combining is associative and commutative, so every member
/// that has seen every buffer holds the same verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Verdict {
    shortest: (u64, u64),
    longest: (u64, u64),
    partial: (u64, u64),
}

impl Verdict {
    pub(super) fn of(len: u64, rank: u64, element: usize) -> Self {
        let partial = if (len as usize).is_multiple_of(element) {
            (u64::MAX, 0)
        } else {
            (rank, len)
        };
        Verdict {
            shortest: (len, rank),
            longest: (len, rank),
            partial,
        }
    }

    pub(super) fn combine(&mut self, other: &Verdict) {
        self.shortest = self.shortest.min(other.shortest);
        let key = |(len, rank): (u64, u64)| (len, u64::MAX - rank);
        if key(other.longest) > key(self.longest) {
            self.longest = other.longest;
        }
        self.partial = self.partial.min(other.partial);
    }

    pub(super) fn is_ok(&self) -> bool {
        self.partial.0 == u64::MAX && self.shortest.0 == self.longest.0
    }

    pub(super) fn put(&self, out: &mut BytesMut) {
        for v in [
            self.shortest.0,
            self.shortest.1,
            self.longest.0,
            self.longest.1,
            self.partial.0,
            self.partial.1,
        ] {
            out.put_u64_le(v);
        }
    }

    pub(super) fn get(data: &[u8]) -> Option<Self> {
        let head = data.get(..VERDICT)?;
        let v = |i: usize| u64::from_le_bytes(head[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        Some(Verdict {
            shortest: (v(0), v(1)),
            longest: (v(2), v(3)),
            partial: (v(4), v(5)),
        })
    }

    /// The error every member reports for this verdict, if any.
    pub(super) fn error(&self, members: &[NodeId], element: usize) -> Option<AllreduceError> {
        let node = |r: u64| members.get(r as usize).copied().unwrap_or(NodeId(u32::MAX));
        if self.partial.0 != u64::MAX {
            return Some(AllreduceError::PartialElement {
                member: node(self.partial.0),
                len: self.partial.1,
                element: element as u64,
            });
        }
        if self.shortest.0 != self.longest.0 {
            // The ring has no parent to compare with: the shortest buffer
            // (lowest rank among equals) against the longest.
            return Some(AllreduceError::LengthMismatch {
                member: node(self.shortest.1),
                len: self.shortest.0,
                other: node(self.longest.1),
                expected: self.longest.0,
            });
        }
        None
    }
}
