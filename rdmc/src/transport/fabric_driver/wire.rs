//! The control messages of the RDMA-style transports (`ofi`, `rdma`): fixed
//! 64-byte messages into small registered receive buffers — on `ofi` each
//! peer's control endpoint, never the data endpoint, so they can never
//! consume (or land in) a data buffer; on `rdma` two-sided sends on the
//! peer's queue pair, whose block writes consume receives without touching
//! their memory.
//!
//! ```text
//! offset size field
//!      0    1 kind      1 signal, 2 credit, 3 block header, 4 heartbeat,
//!                       5 revoke, 6 returned
//!      1    7 reserved  zero
//!      8   32 signal:   a 32-byte signal frame header (the shared signal codec)
//!      8    8 credit:   group | 16 4 slot | 20 4 zero | 24 8 len | 32 8 addr | 40 8 key
//!      8    8 header:   group | 16 4 slot | 20 4 zero | 24 8 len | 32 8 immediate
//!      8    8 revoke:   group
//!      8    8 returned: group | 16 4 slot
//! ```
//! (every byte not listed is zero).
//!
//! A heartbeat has no fields (all zero after the kind); it keeps an idle
//! peer's failure detector quiet.
//!
//! A *credit* is the receiver's pre-posted receive: "slot `slot` of mine is
//! `len` bytes of registered memory at `addr` under `key`; write your next
//! block of `group` there". It goes out before the ready-for-block signal
//! on the same (ordered) endpoint. A *block header* tells the receiver the
//! exact length and immediate value of the block written into `slot`; the
//! write itself carries `slot` in the low 32 bits of its remote CQ data (so
//! it fits the 4-byte immediates of verbs too) and, with 8-byte CQ data, the
//! block's length in the high 32 bits (0 when not carried).
//!
//! A credit's memory stays the receiver's to keep until the block is
//! written into it, or the sender says it never will be: a sender that is
//! done with a group gives back the credits it holds for it (*returned*),
//! and a receiver that is done with a group while a peer still holds some
//! of its credits asks for them back (*revoke*; answered with a returned
//! for each credit not used yet — a used one is being written). Without
//! that, a group that fails leaves its receive memory registered at every
//! receiver whose sender outlives it.

use crate::ids::GroupId;
use crate::transport::Signal;
use crate::transport::frame::{HEADER_LEN, Header};

/// Size of every control message.
pub(crate) const MSG_LEN: usize = 64;

const KIND_SIGNAL: u8 = 1;
const KIND_CREDIT: u8 = 2;
const KIND_HEADER: u8 = 3;
const KIND_HEARTBEAT: u8 = 4;
const KIND_REVOKE: u8 = 5;
const KIND_RETURNED: u8 = 6;

/// A control message between two nodes (not the group protocol's
/// [`Control`](crate::proto::Control), which travels inside a
/// [`ControlMessage::Signal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ControlMessage {
    /// A control-plane signal of `group`.
    Signal { group: GroupId, signal: Signal },
    /// A pre-posted receive the peer may write its next block of `group` into.
    Credit(Credit),
    /// The exact length and immediate of the block written into `slot`.
    BlockHeader {
        group: GroupId,
        slot: u32,
        len: u64,
        immediate: u64,
    },
    /// "I am alive."
    Heartbeat,
    /// "I am done with `group`: give back the credits of it you hold."
    Revoke { group: GroupId },
    /// "I will write nothing into `slot` of `group`."
    Returned { group: GroupId, slot: u32 },
}

/// Where the next block of `group` may be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Credit {
    pub(crate) group: GroupId,
    pub(crate) slot: u32,
    pub(crate) len: u64,
    pub(crate) addr: u64,
    pub(crate) key: u64,
}

/// Why a control message could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WireError {
    #[error("unknown control message kind {0}")]
    UnknownKind(u8),
    #[error("reserved control message bytes are not zero")]
    Reserved,
    #[error("bad signal: {0}")]
    Signal(String),
}

fn u64_at(b: &[u8; MSG_LEN], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

fn u32_at(b: &[u8; MSG_LEN], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

impl ControlMessage {
    /// The message's 64 bytes.
    pub(crate) fn encode(&self) -> [u8; MSG_LEN] {
        let mut out = [0u8; MSG_LEN];
        match *self {
            ControlMessage::Signal { group, signal } => {
                out[0] = KIND_SIGNAL;
                out[8..8 + HEADER_LEN].copy_from_slice(&Header::Signal { group, signal }.encode());
            }
            ControlMessage::Credit(c) => {
                out[0] = KIND_CREDIT;
                out[8..16].copy_from_slice(&c.group.0.to_le_bytes());
                out[16..20].copy_from_slice(&c.slot.to_le_bytes());
                out[24..32].copy_from_slice(&c.len.to_le_bytes());
                out[32..40].copy_from_slice(&c.addr.to_le_bytes());
                out[40..48].copy_from_slice(&c.key.to_le_bytes());
            }
            ControlMessage::BlockHeader {
                group,
                slot,
                len,
                immediate,
            } => {
                out[0] = KIND_HEADER;
                out[8..16].copy_from_slice(&group.0.to_le_bytes());
                out[16..20].copy_from_slice(&slot.to_le_bytes());
                out[24..32].copy_from_slice(&len.to_le_bytes());
                out[32..40].copy_from_slice(&immediate.to_le_bytes());
            }
            ControlMessage::Heartbeat => out[0] = KIND_HEARTBEAT,
            ControlMessage::Revoke { group } => {
                out[0] = KIND_REVOKE;
                out[8..16].copy_from_slice(&group.0.to_le_bytes());
            }
            ControlMessage::Returned { group, slot } => {
                out[0] = KIND_RETURNED;
                out[8..16].copy_from_slice(&group.0.to_le_bytes());
                out[16..20].copy_from_slice(&slot.to_le_bytes());
            }
        }
        out
    }

    /// Decode and validate a message.
    pub(crate) fn decode(b: &[u8; MSG_LEN]) -> Result<Self, WireError> {
        if b[1..8].iter().any(|&x| x != 0) {
            return Err(WireError::Reserved);
        }
        match b[0] {
            KIND_SIGNAL => {
                if b[8 + HEADER_LEN..].iter().any(|&x| x != 0) {
                    return Err(WireError::Reserved);
                }
                let header: &[u8; HEADER_LEN] =
                    b[8..8 + HEADER_LEN].try_into().expect("header bytes");
                match Header::decode(header, 0) {
                    Ok(Header::Signal { group, signal }) => {
                        Ok(ControlMessage::Signal { group, signal })
                    }
                    Ok(other) => Err(WireError::Signal(format!("not a signal: {other:?}"))),
                    Err(e) => Err(WireError::Signal(e.to_string())),
                }
            }
            KIND_CREDIT => {
                if u32_at(b, 20) != 0 || b[48..].iter().any(|&x| x != 0) {
                    return Err(WireError::Reserved);
                }
                Ok(ControlMessage::Credit(Credit {
                    group: GroupId(u64_at(b, 8)),
                    slot: u32_at(b, 16),
                    len: u64_at(b, 24),
                    addr: u64_at(b, 32),
                    key: u64_at(b, 40),
                }))
            }
            KIND_HEADER => {
                if u32_at(b, 20) != 0 || b[40..].iter().any(|&x| x != 0) {
                    return Err(WireError::Reserved);
                }
                Ok(ControlMessage::BlockHeader {
                    group: GroupId(u64_at(b, 8)),
                    slot: u32_at(b, 16),
                    len: u64_at(b, 24),
                    immediate: u64_at(b, 32),
                })
            }
            KIND_HEARTBEAT if b[8..].iter().all(|&x| x == 0) => Ok(ControlMessage::Heartbeat),
            KIND_HEARTBEAT => Err(WireError::Reserved),
            KIND_REVOKE if b[16..].iter().all(|&x| x == 0) => Ok(ControlMessage::Revoke {
                group: GroupId(u64_at(b, 8)),
            }),
            KIND_RETURNED if b[20..].iter().all(|&x| x == 0) => Ok(ControlMessage::Returned {
                group: GroupId(u64_at(b, 8)),
                slot: u32_at(b, 16),
            }),
            KIND_REVOKE | KIND_RETURNED => Err(WireError::Reserved),
            kind => Err(WireError::UnknownKind(kind)),
        }
    }
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Control;

    #[test]
    fn every_message_round_trips() {
        let messages = [
            ControlMessage::Signal {
                group: GroupId(7),
                signal: Signal::Group(Control::ReadyForBlock),
            },
            ControlMessage::Signal {
                group: GroupId(u64::MAX),
                signal: Signal::Join { digest: u128::MAX },
            },
            ControlMessage::Credit(Credit {
                group: GroupId(3),
                slot: 99,
                len: 1 << 20,
                addr: 0xdead_beef_0000,
                key: 42,
            }),
            ControlMessage::BlockHeader {
                group: GroupId(3),
                slot: u32::MAX,
                len: 12345,
                immediate: 1 << 40,
            },
            ControlMessage::Heartbeat,
            ControlMessage::Revoke {
                group: GroupId(u64::MAX),
            },
            ControlMessage::Returned {
                group: GroupId(5),
                slot: u32::MAX,
            },
        ];
        for m in messages {
            assert_eq!(ControlMessage::decode(&m.encode()), Ok(m));
        }
    }

    #[test]
    fn garbage_is_refused() {
        let mut b = [0u8; MSG_LEN];
        assert_eq!(ControlMessage::decode(&b), Err(WireError::UnknownKind(0)));
        b[0] = KIND_CREDIT;
        b[60] = 1;
        assert_eq!(ControlMessage::decode(&b), Err(WireError::Reserved));
        b[60] = 0;
        b[0] = KIND_REVOKE;
        b[16] = 1;
        assert_eq!(ControlMessage::decode(&b), Err(WireError::Reserved));
        b[0] = KIND_RETURNED;
        assert!(ControlMessage::decode(&b).is_ok(), "the slot");
        b[20] = 1;
        assert_eq!(ControlMessage::decode(&b), Err(WireError::Reserved));
        b[16] = 0;
        b[20] = 0;
        b[0] = KIND_SIGNAL;
        assert!(matches!(
            ControlMessage::decode(&b),
            Err(WireError::Signal(_))
        ));
    }
}
