//! What a call of the pipelined tree sends: its buffer cut into chunks,
//! and the header on each call's first message on every edge, so that a
//! buffer of the wrong length fails every member with the same error
//! instead of leaving them waiting.

use bytes::{BufMut, Bytes, BytesMut};

use super::edge::AllreduceError;
use crate::{Message, NodeId};

/// Size of the header on each call's first message on every edge.
const HEADER: usize = 32;

/// A call's buffer cut into chunks of whole elements (the last one
/// shorter): the unit the tree pipelines.
#[derive(Clone, Copy, Debug)]
pub(super) struct Chunks {
    /// Bytes per chunk.
    size: usize,
    /// The buffer's length in bytes.
    len: usize,
}

impl Chunks {
    /// `len` bytes in chunks of about `chunk` bytes, whole elements of
    /// `element` bytes each.
    pub(super) fn new(chunk: usize, element: usize, len: usize) -> Self {
        Chunks {
            size: (chunk / element).max(1) * element,
            len,
        }
    }

    /// How many chunks a buffer of `len` bytes is cut into (one at least).
    pub(super) fn count(&self, len: u64) -> u64 {
        len.div_ceil(self.size as u64).max(1)
    }

    /// The bytes of chunk `i` of this buffer.
    pub(super) fn range(&self, i: usize) -> std::ops::Range<usize> {
        (i * self.size).min(self.len)..((i + 1) * self.size).min(self.len)
    }
}

/// A child's first message of a call.
#[derive(Debug)]
pub(super) struct FirstMessage {
    /// Its subtree's status.
    pub(super) status: Status,
    /// The child's buffer's length.
    pub(super) len: u64,
    /// Chunk 0 of its subtree's reduction.
    pub(super) chunk: Bytes,
}

/// A call's status as a subtree (or rank 0, for the whole call) found it:
/// fine, or the first bad buffer seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Status {
    Ok,
    LengthMismatch {
        member: NodeId,
        len: u64,
        other: NodeId,
        expected: u64,
    },
    PartialElement {
        member: NodeId,
        len: u64,
        element: u64,
    },
}

impl Status {
    /// The call's outcome as the caller sees it.
    pub(super) fn into_result(self) -> Result<(), AllreduceError> {
        match self {
            Status::Ok => Ok(()),
            Status::LengthMismatch {
                member,
                len,
                other,
                expected,
            } => Err(AllreduceError::LengthMismatch {
                member,
                len,
                other,
                expected,
            }),
            Status::PartialElement {
                member,
                len,
                element,
            } => Err(AllreduceError::PartialElement {
                member,
                len,
                element,
            }),
        }
    }
}

/// The header: a status tag, two node ids, the sender's length and one
/// more number (the other length or the element size of an error).
pub(super) fn encode(status: &Status, len: u64, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(HEADER + payload.len());
    let (tag, a, b, x, y) = match *status {
        Status::Ok => (0u32, 0, 0, len, 0),
        Status::LengthMismatch {
            member,
            len,
            other,
            expected,
        } => (1, member.0, other.0, len, expected),
        Status::PartialElement {
            member,
            len,
            element,
        } => (2, member.0, 0, len, element),
    };
    out.put_u32_le(tag);
    out.put_u32_le(a);
    out.put_u32_le(b);
    out.put_u32_le(0);
    out.put_u64_le(x);
    out.put_u64_le(y);
    out.extend_from_slice(payload);
    out.freeze()
}

/// The sender's length in a first message's header (0 if it has none).
pub(super) fn len_of(msg: &Message) -> u64 {
    msg.data
        .get(16..24)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

/// A first message from `peer`: the status in its header and the chunk
/// after it.
pub(super) fn decode(data: &Bytes, peer: NodeId) -> Result<(Status, Bytes), AllreduceError> {
    if data.len() < HEADER {
        return Err(AllreduceError::Protocol {
            member: peer,
            detail: format!(
                "a first message of {} bytes, shorter than the header",
                data.len()
            ),
        });
    }
    let u32_at = |i: usize| u32::from_le_bytes(data[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().expect("8 bytes"));
    let (tag, a, b) = (u32_at(0), NodeId(u32_at(4)), NodeId(u32_at(8)));
    let (x, y) = (u64_at(16), u64_at(24));
    let status = match tag {
        0 => Status::Ok,
        1 => Status::LengthMismatch {
            member: a,
            len: x,
            other: b,
            expected: y,
        },
        2 => Status::PartialElement {
            member: a,
            len: x,
            element: y,
        },
        t => {
            return Err(AllreduceError::Protocol {
                member: peer,
                detail: format!("unknown status {t}"),
            });
        }
    };
    Ok((status, data.slice(HEADER..)))
}
