//! The signal codec both network transports share: the fixed frame header
//! that carries a [`Signal`] (or, on `tcp`, a chunk of a block or a
//! heartbeat), and the encoding of each signal into a code and two
//! arguments ([`signal`]). The `tcp` transport sends these frames, each
//! followed by the tag of its [`protect`]ion mode (none, 16 or 32 bytes);
//! the `ofi` transport embeds a signal frame in its control messages.
//!
//! Every frame starts with a fixed 32-byte header, little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | kind: 1 data chunk, 2 signal, 3 heartbeat |
//! | 1 | signal code (signals only, else 0) |
//! | 2..4 | reserved, 0 |
//! | 4..8 | payload length (data chunks only, else 0) |
//! | 8..16 | group id |
//! | 16..24 | data: the block's immediate value (the message size); signal: first argument |
//! | 24..32 | data: the block's total length; signal: second argument |
//!
//! A block is sent as one or more data chunks in order; chunks of different
//! groups interleave, so one group's large block never holds another group
//! back. Payload bytes follow their header directly and are read straight
//! into the receive posted for the block; on `tcp` the frame's tag follows
//! the payload and is checked before anything of the frame is acted on.

pub(crate) mod protect;
pub(crate) mod signal;

#[cfg(test)]
pub(crate) mod fuzz_tests;

use crate::ids::GroupId;
use crate::transport::Signal;

/// Size of every frame header.
pub(crate) const HEADER_LEN: usize = 32;

const KIND_DATA: u8 = 1;
const KIND_SIGNAL: u8 = 2;
const KIND_HEARTBEAT: u8 = 3;

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Header {
    /// A chunk of a block; `chunk_len` payload bytes follow.
    Data {
        group: GroupId,
        immediate: u64,
        block_len: u64,
        chunk_len: u32,
    },
    /// A control-plane signal.
    Signal { group: GroupId, signal: Signal },
    /// Keeps an idle connection's failure detector quiet.
    Heartbeat,
}

/// Why a header could not be decoded: the peer speaks something else.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FrameError {
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("unknown signal code {0}")]
    UnknownSignal(u8),
    #[error("reserved header bytes are not zero")]
    Reserved,
    #[error("a data chunk of {chunk} bytes exceeds the limit of {max}")]
    ChunkTooLarge { chunk: u32, max: u32 },
    #[error("a data chunk is longer than its block")]
    ChunkBeyondBlock,
    #[error("a signal or heartbeat carries a payload")]
    UnexpectedPayload,
    #[error("a signal argument is out of range")]
    BadArgument,
}

impl Header {
    /// Encode into the fixed header layout.
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        let (kind, code, chunk_len, group, a, b) = match *self {
            Header::Data {
                group,
                immediate,
                block_len,
                chunk_len,
            } => (KIND_DATA, 0, chunk_len, group.0, immediate, block_len),
            Header::Signal { group, signal } => {
                let (code, a, b) = signal::encode(signal);
                (KIND_SIGNAL, code, 0, group.0, a, b)
            }
            Header::Heartbeat => (KIND_HEARTBEAT, 0, 0, 0, 0, 0),
        };
        out[0] = kind;
        out[1] = code;
        out[4..8].copy_from_slice(&chunk_len.to_le_bytes());
        out[8..16].copy_from_slice(&group.to_le_bytes());
        out[16..24].copy_from_slice(&a.to_le_bytes());
        out[24..32].copy_from_slice(&b.to_le_bytes());
        out
    }

    /// Decode and validate a header; `max_chunk` bounds a data chunk's payload.
    pub(crate) fn decode(bytes: &[u8; HEADER_LEN], max_chunk: u32) -> Result<Self, FrameError> {
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        if bytes[2] != 0 || bytes[3] != 0 {
            return Err(FrameError::Reserved);
        }
        let (code, chunk_len, group, a, b) = (
            bytes[1],
            u32_at(4),
            GroupId(u64_at(8)),
            u64_at(16),
            u64_at(24),
        );
        match bytes[0] {
            KIND_DATA => {
                if code != 0 {
                    return Err(FrameError::Reserved);
                }
                if chunk_len > max_chunk {
                    return Err(FrameError::ChunkTooLarge {
                        chunk: chunk_len,
                        max: max_chunk,
                    });
                }
                if u64::from(chunk_len) > b {
                    return Err(FrameError::ChunkBeyondBlock);
                }
                Ok(Header::Data {
                    group,
                    immediate: a,
                    block_len: b,
                    chunk_len,
                })
            }
            KIND_SIGNAL => {
                if chunk_len != 0 {
                    return Err(FrameError::UnexpectedPayload);
                }
                Ok(Header::Signal {
                    group,
                    signal: signal::decode(code, a, b)?,
                })
            }
            KIND_HEARTBEAT => {
                if bytes[1..].iter().any(|&x| x != 0) {
                    return Err(FrameError::UnexpectedPayload);
                }
                Ok(Header::Heartbeat)
            }
            other => Err(FrameError::UnknownKind(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Control, READY_WINDOW};
    use proptest::prelude::*;

    const MAX: u32 = 1 << 20;

    fn signals() -> Vec<Signal> {
        vec![
            Signal::Group(Control::ReadyForBlock),
            Signal::ReadyForBlocks { count: 2 },
            Signal::ReadyForBlocks {
                count: READY_WINDOW as u8,
            },
            Signal::Group(Control::Close { messages: 0 }),
            Signal::Group(Control::Close { messages: u64::MAX }),
            Signal::Group(Control::CloseAck),
            Signal::Group(Control::Closed),
            Signal::Group(Control::Failed { suspect: None }),
            Signal::Group(Control::Failed { suspect: Some(0) }),
            Signal::Group(Control::Failed { suspect: Some(511) }),
            Signal::Group(Control::Taken { messages: 1 }),
            Signal::Group(Control::Taken { messages: u64::MAX }),
            Signal::Join { digest: 0 },
            Signal::Join {
                digest: u128::MAX - 7,
            },
            Signal::JoinRejected { digest: 1 << 100 },
        ]
    }

    #[test]
    fn every_signal_round_trips() {
        for signal in signals() {
            let h = Header::Signal {
                group: GroupId(0xdead_beef_0123),
                signal,
            };
            assert_eq!(Header::decode(&h.encode(), MAX), Ok(h), "{signal:?}");
        }
        assert_eq!(
            Header::decode(&Header::Heartbeat.encode(), MAX),
            Ok(Header::Heartbeat)
        );
    }

    #[test]
    fn data_headers_round_trip_and_are_bounded() {
        let h = Header::Data {
            group: GroupId(7),
            immediate: 10_000_019,
            block_len: 65_536,
            chunk_len: 65_536,
        };
        assert_eq!(Header::decode(&h.encode(), MAX), Ok(h));
        assert_eq!(
            Header::decode(&h.encode(), 1000),
            Err(FrameError::ChunkTooLarge {
                chunk: 65_536,
                max: 1000
            })
        );
        let beyond = Header::Data {
            group: GroupId(7),
            immediate: 10,
            block_len: 10,
            chunk_len: 11,
        };
        assert_eq!(
            Header::decode(&beyond.encode(), MAX),
            Err(FrameError::ChunkBeyondBlock)
        );
        let empty = Header::Data {
            group: GroupId(1),
            immediate: 0,
            block_len: 0,
            chunk_len: 0,
        };
        assert_eq!(Header::decode(&empty.encode(), MAX), Ok(empty));
    }

    #[test]
    fn malformed_headers_are_refused() {
        let mut bytes = Header::Heartbeat.encode();
        bytes[0] = 9;
        assert_eq!(Header::decode(&bytes, MAX), Err(FrameError::UnknownKind(9)));
        let mut bytes = Header::Heartbeat.encode();
        bytes[2] = 1;
        assert_eq!(Header::decode(&bytes, MAX), Err(FrameError::Reserved));
        let mut bytes = Header::Signal {
            group: GroupId(1),
            signal: Signal::Group(Control::Closed),
        }
        .encode();
        bytes[1] = 42;
        assert_eq!(
            Header::decode(&bytes, MAX),
            Err(FrameError::UnknownSignal(42))
        );
        bytes[1] = 3;
        bytes[4] = 1;
        assert_eq!(
            Header::decode(&bytes, MAX),
            Err(FrameError::UnexpectedPayload)
        );
        bytes[4] = 0;
        bytes[16] = 1;
        assert_eq!(Header::decode(&bytes, MAX), Err(FrameError::BadArgument));
    }

    #[test]
    fn ready_for_blocks_count_within_the_window() {
        let frame = |count: u64, b: u64| {
            let mut bytes = Header::Signal {
                group: GroupId(1),
                signal: Signal::Group(Control::ReadyForBlock),
            }
            .encode();
            bytes[16..24].copy_from_slice(&count.to_le_bytes());
            bytes[24..32].copy_from_slice(&b.to_le_bytes());
            Header::decode(&bytes, MAX)
        };
        let signal = |signal| {
            Ok(Header::Signal {
                group: GroupId(1),
                signal,
            })
        };
        // The first argument counts the ready-for-blocks beyond the first.
        assert_eq!(frame(0, 0), signal(Signal::Group(Control::ReadyForBlock)));
        assert_eq!(frame(1, 0), signal(Signal::ReadyForBlocks { count: 2 }));
        let most = READY_WINDOW as u64 - 1;
        assert_eq!(
            frame(most, 0),
            signal(Signal::ReadyForBlocks {
                count: READY_WINDOW as u8
            })
        );
        // More than a window's worth, or a second argument: refused.
        assert_eq!(frame(most + 1, 0), Err(FrameError::BadArgument));
        assert_eq!(frame(u64::MAX, 0), Err(FrameError::BadArgument));
        assert_eq!(frame(0, 1), Err(FrameError::BadArgument));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_decode_or_fail_cleanly(bytes in proptest::array::uniform32(any::<u8>())) {
            if let Ok(h) = Header::decode(&bytes, MAX) {
                // Whatever decodes re-encodes to a header that decodes the same.
                prop_assert_eq!(Header::decode(&h.encode(), MAX), Ok(h));
            }
        }
    }
}
