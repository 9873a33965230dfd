//! The messages of the mesh's last steps, after every connection's
//! handshake: each end's deadline, "connected to every member" (`Ready`),
//! "every member said so" (`Go`), and "I gave up; these members are why"
//! (`Fail`). Each is authenticated with the connection's session key (from
//! the handshake, [`super::handshake::SessionKey`]), the sender's and the
//! receiver's ids and its place in the sequence of its direction, so that
//! nobody without the cluster key can forge, replay, reflect or reorder one
//! — in particular, no stranger can make a member blame another.
//!
//! # Wire format
//!
//! ```text
//!   offset size field
//!        0    1 kind       1 = Info, 2 = Ready, 3 = Go, 4 = Fail
//!        1    8 arg        Info: milliseconds until the sender gives up
//!                          Fail: the number of ids that follow (< members)
//!                          otherwise 0
//!        9  4·k ids        Fail only: the members blamed, each < members
//!    9+4·k   32 tag        HMAC-SHA256(session key, b"rdmc mesh formation v1"
//!                            || from || to || seq || the bytes before the tag)
//! ```
//!
//! Integers are big-endian; `from`, `to` are the sender's and receiver's
//! node ids (4 bytes), `seq` the message's number in its direction (8
//! bytes, from 0). The length is known from the fixed part before anything
//! else is read, so a peer cannot make a member allocate more than the
//! member list's size.

#![cfg_attr(not(any(feature = "ofi", feature = "rdma")), allow(dead_code))]

use tokio::io::{AsyncRead, AsyncReadExt};

use super::handshake::SessionKey;
use crate::ids::NodeId;
use crate::transport::crypto::HmacSha256;

/// Domain separation for the tags.
const LABEL: &[u8] = b"rdmc mesh formation v1";
/// Size of a message's fixed part (kind and argument).
const FIXED_LEN: usize = 9;
/// Size of a tag.
const TAG_LEN: usize = 32;

/// One message of the mesh's last steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Message {
    /// "I give up forming the mesh this many milliseconds from now at the
    /// latest (unless I fail earlier)." The first message on every
    /// connection, both ways.
    Info { remaining_ms: u64 },
    /// "I am connected to every member."
    Ready,
    /// "Every member told me it is connected to every member": the
    /// sender's last message of the mesh's formation; what follows on the
    /// connection is the transport's.
    Go,
    /// "I gave up forming the mesh, because of these members."
    Fail { blame: Vec<NodeId> },
}

impl Message {
    fn kind(&self) -> u8 {
        match self {
            Message::Info { .. } => 1,
            Message::Ready => 2,
            Message::Go => 3,
            Message::Fail { .. } => 4,
        }
    }
}

/// Why a message could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FormationError {
    #[error("connection lost: {0}")]
    Io(#[from] std::io::Error),
    #[error("sent an unknown message kind {0}")]
    UnknownKind(u8),
    #[error("sent a malformed message")]
    Malformed,
    #[error("sent a message that failed authentication")]
    BadTag,
}

/// One direction of a connection's formation messages: the key, who sends
/// to whom, and how many were sent so far.
#[derive(Debug)]
pub(crate) struct Direction {
    key: SessionKey,
    from: NodeId,
    to: NodeId,
    seq: u64,
}

impl Direction {
    /// The direction from `from` to `to` of a connection with `key`.
    pub(crate) fn new(key: SessionKey, from: NodeId, to: NodeId) -> Self {
        Direction {
            key,
            from,
            to,
            seq: 0,
        }
    }

    fn tag(&self, body: &[u8]) -> HmacSha256 {
        self.key
            .mac()
            .chain_update(LABEL)
            .chain_update(self.from.0.to_be_bytes())
            .chain_update(self.to.0.to_be_bytes())
            .chain_update(self.seq.to_be_bytes())
            .chain_update(body)
    }

    /// The wire form of the next message in this direction.
    pub(crate) fn seal(&mut self, message: &Message) -> Vec<u8> {
        let (arg, ids): (u64, &[NodeId]) = match message {
            Message::Info { remaining_ms } => (*remaining_ms, &[]),
            Message::Ready | Message::Go => (0, &[]),
            Message::Fail { blame } => (blame.len() as u64, blame),
        };
        let mut bytes = Vec::with_capacity(FIXED_LEN + 4 * ids.len() + TAG_LEN);
        bytes.push(message.kind());
        bytes.extend_from_slice(&arg.to_be_bytes());
        for id in ids {
            bytes.extend_from_slice(&id.0.to_be_bytes());
        }
        let tag = self.tag(&bytes).finalize();
        bytes.extend_from_slice(&tag);
        self.seq += 1;
        bytes
    }

    /// Read the next message in this direction from `stream`, in a cluster
    /// of `members`; nothing past its end is read.
    pub(crate) async fn open<R: AsyncRead + Unpin>(
        &mut self,
        stream: &mut R,
        members: usize,
    ) -> Result<Message, FormationError> {
        let mut body = vec![0; FIXED_LEN];
        stream.read_exact(&mut body).await?;
        let kind = body[0];
        let arg = u64::from_be_bytes(body[1..FIXED_LEN].try_into().expect("8 bytes"));
        let ids = match kind {
            1 => 0,
            2 | 3 if arg == 0 => 0,
            4 if arg > 0 && arg < members as u64 => arg as usize,
            2..=4 => return Err(FormationError::Malformed),
            other => return Err(FormationError::UnknownKind(other)),
        };
        body.resize(FIXED_LEN + 4 * ids, 0);
        stream.read_exact(&mut body[FIXED_LEN..]).await?;
        let mut tag = [0; TAG_LEN];
        stream.read_exact(&mut tag).await?;
        self.tag(&body)
            .verify_slice(&tag)
            .map_err(|_| FormationError::BadTag)?;
        self.seq += 1;
        Ok(match kind {
            1 => Message::Info { remaining_ms: arg },
            2 => Message::Ready,
            3 => Message::Go,
            _ => {
                let blame: Vec<NodeId> = body[FIXED_LEN..]
                    .chunks_exact(4)
                    .map(|c| NodeId(u32::from_be_bytes(c.try_into().expect("4 bytes"))))
                    .collect();
                if blame.iter().any(|id| id.index() >= members) {
                    return Err(FormationError::Malformed);
                }
                Message::Fail { blame }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn pair() -> (Direction, Direction) {
        let key = SessionKey::for_tests([7; 32]);
        (
            Direction::new(key.clone(), NodeId(1), NodeId(2)),
            Direction::new(key, NodeId(1), NodeId(2)),
        )
    }

    #[tokio::test]
    async fn messages_round_trip_in_order() {
        let (mut tx, mut rx) = pair();
        let sent = [
            Message::Info { remaining_ms: 2900 },
            Message::Ready,
            Message::Fail {
                blame: vec![NodeId(0), NodeId(3)],
            },
            Message::Go,
        ];
        let mut wire = Vec::new();
        for m in &sent {
            wire.extend(tx.seal(m));
        }
        wire.extend_from_slice(b"link bytes");
        let mut stream = &wire[..];
        for m in &sent {
            assert_eq!(&rx.open(&mut stream, 4).await.unwrap(), m);
        }
        // Nothing after the last message was read.
        assert_eq!(stream, b"link bytes");
    }

    /// A message's wire form, pinned: members of other builds must
    /// compute the same tag (from Python's hmac).
    #[test]
    fn the_wire_form_is_pinned() {
        let (mut tx, _) = pair();
        let wire = tx.seal(&Message::Ready);
        let hex: String = wire.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "020000000000000000\
             a389584906b0da2bbce973ab783de2c7e90dc422bed1ec34c0a30d818a21d7f4"
        );
    }

    #[tokio::test]
    async fn forged_replayed_reordered_or_reflected_messages_are_refused() {
        let blame = Message::Fail {
            blame: vec![NodeId(0)],
        };
        // Every byte flipped: never accepted as the same message.
        let (mut tx, _) = pair();
        let good = tx.seal(&blame);
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x01;
            let (_, mut rx) = pair();
            let got = rx.open(&mut &bad[..], 4).await;
            assert!(got.is_err(), "byte {at}: {got:?}");
        }
        // Replayed (a second time, or out of order).
        let (mut tx, mut rx) = pair();
        let first = tx.seal(&Message::Ready);
        rx.open(&mut &first[..], 4).await.unwrap();
        assert!(matches!(
            rx.open(&mut &first[..], 4).await,
            Err(FormationError::BadTag)
        ));
        // Reflected: the other direction's key stream differs.
        let key = SessionKey::for_tests([7; 32]);
        let mut back = Direction::new(key.clone(), NodeId(2), NodeId(1));
        let mut forth = Direction::new(key, NodeId(1), NodeId(2));
        let reflected = forth.seal(&blame);
        assert!(matches!(
            back.open(&mut &reflected[..], 4).await,
            Err(FormationError::BadTag)
        ));
        // Another connection's key.
        let mut other = Direction::new(SessionKey::for_tests([8; 32]), NodeId(1), NodeId(2));
        let (mut tx, _) = pair();
        let sealed = tx.seal(&blame);
        assert!(matches!(
            other.open(&mut &sealed[..], 4).await,
            Err(FormationError::BadTag)
        ));
    }

    /// A message of any kind, with interesting arguments.
    fn message() -> impl Strategy<Value = Message> {
        prop_oneof![
            crate::transport::frame::fuzz_tests::word()
                .prop_map(|remaining_ms| Message::Info { remaining_ms }),
            Just(Message::Ready),
            Just(Message::Go),
            proptest::collection::vec(0..8u32, 1..8).prop_map(|ids| Message::Fail {
                blame: ids.into_iter().map(NodeId).collect()
            }),
        ]
    }

    /// Decode `bytes` as the first message of direction 1 → 2 of a cluster
    /// of `members`: what decodes, and how many bytes were read.
    fn decode(bytes: &[u8], members: usize) -> (Option<Message>, usize) {
        let (_, mut rx) = pair();
        let mut stream = bytes;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let got = runtime.block_on(rx.open(&mut stream, members)).ok();
        (got, bytes.len() - stream.len())
    }

    #[test]
    fn fuzz_formation_messages_never_panic_and_never_pass_altered() {
        // Genuine messages with 1-4 bytes xor-ed (or the stream cut), and
        // random bytes; clusters of 2-8 members.
        let strategy = (
            message(),
            proptest::collection::vec((any::<usize>(), 1..=255u8), 0..4),
            any::<Option<usize>>(),
            proptest::collection::vec(any::<u8>(), 0..96),
            2..9usize,
        );
        crate::transport::frame::fuzz_tests::fuzz(
            "formation messages",
            5_000,
            strategy,
            |(message, flips, cut, random, members)| {
                let (mut tx, _) = pair();
                let genuine = tx.seal(&message);
                let mut bytes = genuine.clone();
                for (at, mask) in &flips {
                    let at = at % bytes.len();
                    bytes[at] ^= mask;
                }
                if let Some(cut) = cut {
                    bytes.truncate(cut % (bytes.len() + 1));
                }
                let (got, read) = decode(&bytes, members);
                prop_assert!(read <= bytes.len());
                if let Some(got) = got {
                    // Only the genuine bytes, unchanged, pass.
                    prop_assert_eq!(&bytes[..read], &genuine[..]);
                    prop_assert_eq!(got, message);
                }
                // Random bytes never pass (no key), and never read past a
                // bounded length.
                let (got, read) = decode(&random, members);
                prop_assert!(got.is_none());
                prop_assert!(read <= FIXED_LEN + 4 * members + TAG_LEN);
                Ok(())
            },
        );
    }

    #[tokio::test]
    async fn a_blame_list_is_bounded_by_the_members_before_it_is_read() {
        let (_, mut rx) = pair();
        let mut huge = vec![4];
        huge.extend_from_slice(&u64::MAX.to_be_bytes());
        assert!(matches!(
            rx.open(&mut &huge[..], 4).await,
            Err(FormationError::Malformed)
        ));
        let mut unknown = vec![9];
        unknown.extend_from_slice(&[0; 8]);
        assert!(matches!(
            rx.open(&mut &unknown[..], 4).await,
            Err(FormationError::UnknownKind(9))
        ));
        // An id outside the cluster, even if authentic.
        let (mut tx, mut rx) = pair();
        let sealed = tx.seal(&Message::Fail {
            blame: vec![NodeId(5)],
        });
        assert!(matches!(
            rx.open(&mut &sealed[..], 4).await,
            Err(FormationError::Malformed)
        ));
    }
}
