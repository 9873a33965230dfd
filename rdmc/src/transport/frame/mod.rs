//! The signal codec both network transports share: the frame header that
//! carries a [`Signal`] (or, on `tcp`, a chunk of a block or a heartbeat),
//! and the encoding of each signal into a code and two
//! arguments ([`signal`]). The `tcp` transport sends these frames, each
//! followed by the tag of its [`protect`]ion mode (none, or 16 bytes);
//! the `ofi` transport embeds a signal frame in its control messages.
//!
//! A frame starts with a long (32-byte) or a short (8-byte) header,
//! little-endian; its first byte, the kind, says which. Long headers:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | kind: 1 data chunk, 2 signal, 7 relayed signal |
//! | 1 | signal code (signals only, else 0) |
//! | 2..4 | reserved, 0 |
//! | 4..8 | payload length (data chunks and relayed signals only, else 0) |
//! | 8..16 | group id |
//! | 16..24 | data: the block's immediate value (the message size); signal: first argument |
//! | 24..32 | data: the block's total length; signal: second argument |
//!
//! A relayed signal travels between two members of a group that share no
//! connection, hop by hop over members that do; its payload is its route
//! ([`relay`]).
//!
//! Short headers, which on `tcp` say only what the frames before them on
//! the same connection do not ([`Context`]):
//!
//! | kind (byte 0) | bytes 1..4 | bytes 4..8 | meaning |
//! |---|---|---|---|
//! | 3 heartbeat | 0 | 0 | keeps an idle connection's failure detector quiet |
//! | 6 goodbye | 0 | 0 | the sender leaves for good: its last frame |
//! | 8 idle close | 0 | 0 | the sender closes the connection, idle: its last frame |
//! | 4 data chunk continued | 0 | payload length | a chunk of the group, immediate value and block length of the previous data frame |
//! | 5 signal, same group | code, 0, 0 | first argument (the second is 0) | a signal to the group the previous frame named |
//!
//! A short frame with no previous frame to continue is malformed. On a
//! connection that carries one message's blocks the data frames after the
//! first, and the ready-for-block signals back, are short: 24 bytes of
//! header saved per 32 KiB block, 0.07 % of the wire.
//!
//! A block is sent as one or more data chunks in order; chunks of different
//! groups interleave, so one group's large block never holds another group
//! back. Payload bytes follow their header directly and are read straight
//! into the receive posted for the block; on `tcp` the frame's tag follows
//! the payload and is checked before anything of the frame is acted on.
//! (The `ofi` transport embeds only long signal headers.)

pub(crate) mod protect;
pub(crate) mod relay;
pub(crate) mod signal;

#[cfg(test)]
pub(crate) mod fuzz_tests;

use crate::ids::GroupId;
use crate::transport::Signal;

/// Size of a long frame header, the largest.
pub(crate) const HEADER_LEN: usize = 32;

/// Size of a short frame header.
pub(crate) const SHORT_HEADER_LEN: usize = 8;

const KIND_DATA: u8 = 1;
const KIND_SIGNAL: u8 = 2;
const KIND_HEARTBEAT: u8 = 3;
const KIND_DATA_CONTINUED: u8 = 4;
const KIND_SIGNAL_SAME_GROUP: u8 = 5;
const KIND_GOODBYE: u8 = 6;
const KIND_RELAY: u8 = 7;
const KIND_IDLE: u8 = 8;

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
    /// A control-plane signal on its way to another member; its route
    /// ([`relay::Route`]), `route_len` bytes, follows.
    Relay {
        group: GroupId,
        signal: Signal,
        route_len: u32,
    },
    /// Keeps an idle connection's failure detector quiet.
    Heartbeat,
    /// The sender is leaving for good (its node shuts down): nothing
    /// follows, and the connection's end is not a failure.
    Goodbye,
    /// The sender closes the connection, which no group needs any more:
    /// nothing follows, and its end is not the peer leaving or failing.
    Idle,
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
    #[error("a short frame with no previous frame to continue")]
    NothingToContinue,
    #[error("a relayed signal's route is malformed")]
    BadRoute,
}

/// The header of a frame that is its kind alone.
fn bare(kind: u8) -> Header {
    match kind {
        KIND_HEARTBEAT => Header::Heartbeat,
        KIND_GOODBYE => Header::Goodbye,
        _ => Header::Idle,
    }
}

/// A data chunk of `chunk` bytes is within the receiver's limit and its
/// block.
fn check_chunk(chunk: u32, block_len: u64, max_chunk: u32) -> Result<(), FrameError> {
    if chunk > max_chunk {
        return Err(FrameError::ChunkTooLarge {
            chunk,
            max: max_chunk,
        });
    }
    if u64::from(chunk) > block_len {
        return Err(FrameError::ChunkBeyondBlock);
    }
    Ok(())
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
            Header::Relay {
                group,
                signal,
                route_len,
            } => {
                let (code, a, b) = signal::encode(signal);
                (KIND_RELAY, code, route_len, group.0, a, b)
            }
            Header::Heartbeat => (KIND_HEARTBEAT, 0, 0, 0, 0, 0),
            Header::Goodbye => (KIND_GOODBYE, 0, 0, 0, 0, 0),
            Header::Idle => (KIND_IDLE, 0, 0, 0, 0, 0),
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
                check_chunk(chunk_len, b, max_chunk)?;
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
            KIND_RELAY => {
                relay::check_len(chunk_len)?;
                Ok(Header::Relay {
                    group,
                    signal: signal::decode(code, a, b)?,
                    route_len: chunk_len,
                })
            }
            KIND_HEARTBEAT | KIND_GOODBYE | KIND_IDLE => {
                if bytes[1..].iter().any(|&x| x != 0) {
                    return Err(FrameError::UnexpectedPayload);
                }
                Ok(bare(bytes[0]))
            }
            other => Err(FrameError::UnknownKind(other)),
        }
    }
}

/// What the frames so far on one direction of a connection imply, so that
/// the next can say less: the group, immediate value and block length of
/// the last data frame, and the group the last frame named. The writer and
/// the reader of a direction each keep one, and both update it frame by
/// frame in the order of the wire (on `tcp` every frame's tag covers its
/// header and sequence number, so an attacker can neither forge nor
/// reorder the frames the context comes from).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Context {
    data: Option<(GroupId, u64, u64)>,
    group: Option<GroupId>,
}

/// A header as encoded for the wire: long or short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Encoded {
    bytes: [u8; HEADER_LEN],
    len: usize,
}

impl Encoded {
    /// The header's bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl Context {
    /// The length of the header whose first byte is `kind`: the bytes to
    /// read before [`decode`](Self::decode) (an unknown kind is short and
    /// refused there).
    pub(crate) fn header_len(kind: u8) -> usize {
        match kind {
            KIND_DATA | KIND_SIGNAL | KIND_RELAY => HEADER_LEN,
            _ => SHORT_HEADER_LEN,
        }
    }

    /// Encode `header` as the next frame, short where the frames before it
    /// allow.
    pub(crate) fn encode(&mut self, header: &Header) -> Encoded {
        let mut bytes = [0u8; HEADER_LEN];
        let short = |bytes: &mut [u8; HEADER_LEN], kind: u8, code: u8, arg: u32| {
            bytes[0] = kind;
            bytes[1] = code;
            bytes[4..8].copy_from_slice(&arg.to_le_bytes());
            SHORT_HEADER_LEN
        };
        let len = match *header {
            Header::Heartbeat => short(&mut bytes, KIND_HEARTBEAT, 0, 0),
            Header::Goodbye => short(&mut bytes, KIND_GOODBYE, 0, 0),
            Header::Idle => short(&mut bytes, KIND_IDLE, 0, 0),
            Header::Data {
                group,
                immediate,
                block_len,
                chunk_len,
            } if self.data == Some((group, immediate, block_len)) => {
                short(&mut bytes, KIND_DATA_CONTINUED, 0, chunk_len)
            }
            Header::Signal { group, signal } if self.group == Some(group) => {
                match signal::encode(signal) {
                    (code, a, 0) if a <= u64::from(u32::MAX) => {
                        short(&mut bytes, KIND_SIGNAL_SAME_GROUP, code, a as u32)
                    }
                    _ => {
                        bytes = header.encode();
                        HEADER_LEN
                    }
                }
            }
            Header::Data { .. } | Header::Signal { .. } | Header::Relay { .. } => {
                bytes = header.encode();
                HEADER_LEN
            }
        };
        self.advance(header);
        Encoded { bytes, len }
    }

    /// Take in `header`, just written or read: what the next frame may
    /// leave out. The writer and the reader run the same rule.
    fn advance(&mut self, header: &Header) {
        match *header {
            Header::Data {
                group,
                immediate,
                block_len,
                ..
            } => {
                self.data = Some((group, immediate, block_len));
                self.group = Some(group);
            }
            Header::Signal { group, .. } => self.group = Some(group),
            // A relayed signal leaves the context as it was.
            Header::Relay { .. } | Header::Heartbeat | Header::Goodbye | Header::Idle => {}
        }
    }

    /// Decode and validate the next frame's header, `bytes` (as long as
    /// [`header_len`](Self::header_len) of its first byte says);
    /// `max_chunk` bounds a data chunk's payload.
    pub(crate) fn decode(&mut self, bytes: &[u8], max_chunk: u32) -> Result<Header, FrameError> {
        if let Ok(long) = <&[u8; HEADER_LEN]>::try_from(bytes) {
            let header = Header::decode(long, max_chunk)?;
            if let Header::Heartbeat | Header::Goodbye | Header::Idle = header {
                // Heartbeats, goodbyes and idle closes are short on `tcp`.
                return Err(FrameError::UnknownKind(long[0]));
            }
            self.advance(&header);
            return Ok(header);
        }
        let bytes: &[u8; SHORT_HEADER_LEN] = bytes
            .try_into()
            .map_err(|_| FrameError::UnknownKind(bytes.first().copied().unwrap_or(0)))?;
        if bytes[2] != 0 || bytes[3] != 0 {
            return Err(FrameError::Reserved);
        }
        let (kind, code) = (bytes[0], bytes[1]);
        let arg = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
        let header = match kind {
            KIND_HEARTBEAT | KIND_GOODBYE | KIND_IDLE => {
                if code != 0 || arg != 0 {
                    return Err(FrameError::UnexpectedPayload);
                }
                bare(kind)
            }
            KIND_DATA_CONTINUED => {
                if code != 0 {
                    return Err(FrameError::Reserved);
                }
                let (group, immediate, block_len) =
                    self.data.ok_or(FrameError::NothingToContinue)?;
                check_chunk(arg, block_len, max_chunk)?;
                Header::Data {
                    group,
                    immediate,
                    block_len,
                    chunk_len: arg,
                }
            }
            KIND_SIGNAL_SAME_GROUP => {
                let group = self.group.ok_or(FrameError::NothingToContinue)?;
                Header::Signal {
                    group,
                    signal: signal::decode(code, u64::from(arg), 0)?,
                }
            }
            other => return Err(FrameError::UnknownKind(other)),
        };
        self.advance(&header);
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Control, FailureKind, READY_WINDOW};
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
            Signal::Group(Control::Failed {
                suspect: None,
                kind: FailureKind::Unreachable,
                detector: 0,
            }),
            Signal::Group(Control::Failed {
                suspect: Some(0),
                kind: FailureKind::SlowReader { millis: u64::MAX },
                detector: 3,
            }),
            Signal::Group(Control::Failed {
                suspect: Some(511),
                kind: FailureKind::OutOfMemory { size: 1 << 62 },
                detector: u32::MAX as usize,
            }),
            Signal::Group(Control::Failed {
                suspect: Some(u32::MAX as usize - 1),
                kind: FailureKind::ReceiveTarget,
                detector: 1,
            }),
            Signal::Group(Control::Taken { messages: 1 }),
            Signal::Group(Control::Suspect { suspect: 0 }),
            Signal::Group(Control::Suspect {
                suspect: u32::MAX as usize - 1,
            }),
            Signal::Group(Control::Taken { messages: u64::MAX }),
            Signal::Group(Control::Persisted { messages: 1 }),
            Signal::Group(Control::Persisted { messages: u64::MAX }),
            Signal::Join { digest: 0 },
            Signal::Join {
                digest: u128::MAX - 7,
            },
            Signal::JoinRejected { digest: 1 << 100 },
            Signal::JoinSettings {
                fingerprint: u128::MAX,
            },
            Signal::IdInUse,
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
        // The limit and the block themselves are allowed.
        assert_eq!(Header::decode(&h.encode(), 65_536), Ok(h));
        assert_eq!(
            Header::decode(&h.encode(), 65_535),
            Err(FrameError::ChunkTooLarge {
                chunk: 65_536,
                max: 65_535
            })
        );
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

    /// Encode `headers` in order through a writer's context, decode them
    /// through a reader's; returns each header's encoded length.
    fn over_the_wire(headers: &[Header]) -> Vec<usize> {
        let (mut writer, mut reader) = (Context::default(), Context::default());
        let mut lens = Vec::new();
        for h in headers {
            let encoded = writer.encode(h);
            let bytes = encoded.as_slice();
            assert_eq!(Context::header_len(bytes[0]), bytes.len(), "{h:?}");
            assert_eq!(reader.decode(bytes, MAX), Ok(*h));
            assert_eq!(reader, writer, "the two ends agree after {h:?}");
            lens.push(bytes.len());
        }
        lens
    }

    #[test]
    fn one_message_after_its_first_frame_goes_in_short_headers() {
        let data = |group: u64, block_len: u64, chunk_len: u32| Header::Data {
            group: GroupId(group),
            immediate: 100_000,
            block_len,
            chunk_len,
        };
        let signal = |group: u64, signal| Header::Signal {
            group: GroupId(group),
            signal,
        };
        let ready = Signal::ReadyForBlocks { count: 4 };
        let headers = [
            Header::Heartbeat,
            data(1, 32_768, 32_768),
            data(1, 32_768, 32_768),
            // Another group's block in between: long, and so is the first
            // group's next block.
            data(2, 32_768, 1000),
            data(1, 32_768, 32_768),
            data(1, 32_768, 32_768),
            // The message's last, shorter block: long.
            data(1, 1_696, 1_696),
            signal(1, ready),
            signal(1, Signal::Group(Control::Taken { messages: 3 })),
            signal(2, ready),
            signal(2, ready),
            // Arguments that do not fit a short header.
            signal(2, Signal::Group(Control::Taken { messages: 1 << 40 })),
            signal(2, Signal::Join { digest: 1 << 70 }),
            signal(2, Signal::Join { digest: 5 }),
            // Group 2's block again after group 1's: long.
            data(2, 32_768, 31_768),
            Header::Heartbeat,
            Header::Goodbye,
        ];
        let (long, short) = (HEADER_LEN, SHORT_HEADER_LEN);
        assert_eq!(
            over_the_wire(&headers),
            [
                short, long, short, long, long, short, long, short, short, long, short, long, long,
                short, long, short, short,
            ]
        );
    }

    #[test]
    fn short_frames_need_a_frame_to_continue() {
        let mut writer = Context::default();
        writer.encode(&Header::Data {
            group: GroupId(3),
            immediate: 1,
            block_len: 10,
            chunk_len: 5,
        });
        let short_data = writer.encode(&Header::Data {
            group: GroupId(3),
            immediate: 1,
            block_len: 10,
            chunk_len: 5,
        });
        let short_signal = writer.encode(&Header::Signal {
            group: GroupId(3),
            signal: Signal::Group(Control::Closed),
        });
        for short in [short_data, short_signal] {
            assert_eq!(short.as_slice().len(), SHORT_HEADER_LEN);
            assert_eq!(
                Context::default().decode(short.as_slice(), MAX),
                Err(FrameError::NothingToContinue)
            );
        }
        // After a signal only, a data chunk still has nothing to continue.
        let mut reader = Context::default();
        let long_signal = Context::default().encode(&Header::Signal {
            group: GroupId(3),
            signal: Signal::Group(Control::Closed),
        });
        reader.decode(long_signal.as_slice(), MAX).unwrap();
        assert_eq!(
            reader.decode(short_data.as_slice(), MAX),
            Err(FrameError::NothingToContinue)
        );
        assert_eq!(
            reader.decode(short_signal.as_slice(), MAX),
            Ok(Header::Signal {
                group: GroupId(3),
                signal: Signal::Group(Control::Closed),
            })
        );
    }

    #[test]
    fn short_data_chunks_are_bounded_like_long_ones() {
        let mut reader = Context::default();
        let first = Header::Data {
            group: GroupId(3),
            immediate: 1,
            block_len: 10,
            chunk_len: 4,
        };
        reader.decode(first.encode().as_slice(), MAX).unwrap();
        let short = |chunk: u32| {
            let mut b = [0u8; SHORT_HEADER_LEN];
            b[0] = KIND_DATA_CONTINUED;
            b[4..].copy_from_slice(&chunk.to_le_bytes());
            b
        };
        assert_eq!(
            reader.decode(&short(11), MAX),
            Err(FrameError::ChunkBeyondBlock)
        );
        assert_eq!(
            reader.decode(&short(10), 8),
            Err(FrameError::ChunkTooLarge { chunk: 10, max: 8 })
        );
        let mut reserved = short(1);
        reserved[2] = 1;
        assert_eq!(reader.decode(&reserved, MAX), Err(FrameError::Reserved));
        let mut heartbeat = [0u8; SHORT_HEADER_LEN];
        heartbeat[0] = KIND_HEARTBEAT;
        heartbeat[7] = 1;
        assert_eq!(
            reader.decode(&heartbeat, MAX),
            Err(FrameError::UnexpectedPayload)
        );
        // A long heartbeat is not a frame of a connection.
        assert_eq!(
            reader.decode(&Header::Heartbeat.encode(), MAX),
            Err(FrameError::UnknownKind(KIND_HEARTBEAT))
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_decode_or_fail_cleanly(bytes in proptest::array::uniform32(any::<u8>())) {
            if let Ok(h) = Header::decode(&bytes, MAX) {
                // Whatever decodes re-encodes to a header that decodes the same.
                prop_assert_eq!(Header::decode(&h.encode(), MAX), Ok(h));
            }
        }

        #[test]
        fn any_sequence_of_headers_crosses_the_wire(
            headers in proptest::collection::vec(
                prop_oneof![
                    (0..3u64, 0..2u64, 1..4u64, 0..4u32).prop_map(|(g, i, b, c)| Header::Data {
                        group: GroupId(g),
                        immediate: i,
                        block_len: b,
                        chunk_len: c.min(b as u32),
                    }),
                    (0..3u64, 0..3u8).prop_map(|(g, c)| Header::Signal {
                        group: GroupId(g),
                        signal: match c {
                            0 => Signal::ReadyForBlocks { count: 2 },
                            1 => Signal::Group(Control::Taken { messages: u64::MAX }),
                            _ => Signal::Join { digest: 7 },
                        },
                    }),
                    Just(Header::Heartbeat),
                    Just(Header::Goodbye),
                    Just(Header::Idle),
                ],
                0..40,
            )
        ) {
            over_the_wire(&headers);
        }
    }
}
