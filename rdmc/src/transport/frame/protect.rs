//! Protection of `tcp` frames: every frame (header and payload) carries a
//! tag computed with a per-direction key and the frame's sequence number,
//! so a frame modified, forged, replayed, reordered or dropped on the wire
//! fails its check and the link with it.
//!
//! Three modes ([`WireSecurity`]):
//!
//! - **authenticated** (the default): a 16-byte AES-256-GCM tag follows
//!   the payload, with the sequence number as nonce, the payload as
//!   associated data and the header as the (discarded) plaintext: GMAC, the
//!   authentication-only use of GCM, over the header and the payload; the
//!   payload travels in the clear;
//! - **encrypted**: AES-256-GCM with the header as associated data and the
//!   sequence number as nonce; the payload is encrypted, a 16-byte tag
//!   follows it; headers (kind, group id, lengths) stay readable;
//! - **none**: no tag, for fabrics that are trusted (nothing on the path
//!   can alter bytes).
//!
//! The keys come from [`WireKeys::derive`]: HKDF-SHA256 over the cluster key
//! with both ends' fresh nonces as salt, one key per direction (so frames
//! reflected back to their sender fail too). Sequence numbers start at 0 on
//! each connection and never repeat under one key (a connection that would
//! wrap 2^64 frames fails instead).

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, Tag as AeadTag, UnboundKey};
use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::hkdf;

use super::HEADER_LEN;

/// How `tcp` links protect the bytes on the wire.
///
/// Chosen per node with
/// [`TcpConfig::with_wire_security`](crate::TcpConfig::with_wire_security);
/// every member must choose the same (a node with a peer that does not
/// fails to start, with
/// [`Error::WireSecurityMismatch`](crate::Error::WireSecurityMismatch)).
///
/// What an attacker on the network path can and cannot do:
///
/// - with [`Authenticated`](Self::Authenticated) (the default) or
///   [`Encrypted`](Self::Encrypted) it **cannot** make a member accept a byte
///   that the peer did not send, in the order it sent it: a modified,
///   injected, replayed, reordered, dropped or truncated frame fails the
///   link, and the groups using it fail naming the peer; it cannot reuse
///   anything from another connection or direction (keys are fresh per
///   connection and direction);
/// - it **can** always stop traffic (drop or delay packets, reset the
///   connection): that is a failure, reported within the failure timeout,
///   never a wrong delivery;
/// - with [`Authenticated`](Self::Authenticated) it **can** read the
///   messages; with [`Encrypted`](Self::Encrypted) it can read only the
///   frame headers (group ids, block and message sizes, timing), not the
///   message bytes;
/// - with [`None`](Self::None) it can read, alter and inject anything after
///   the handshake: use it only on a fabric nothing untrusted can reach.
///
/// A holder of the cluster key is trusted: it can join as any member.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WireSecurity {
    /// No protection after the handshake: for trusted fabrics only.
    None,
    /// Every frame authenticated (an AES-256-GCM tag over the header and
    /// the payload, with a sequence number as nonce); payloads in the
    /// clear. The default.
    #[default]
    Authenticated,
    /// Every frame authenticated and its payload encrypted (AES-256-GCM).
    Encrypted,
}

/// The mode's name, as `rdmc member --wire-security` spells it: `none`,
/// `authenticated`, `encrypted`.
impl std::fmt::Display for WireSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl WireSecurity {
    /// The byte that names the mode in the key agreement.
    pub(crate) fn code(self) -> u8 {
        match self {
            WireSecurity::None => 0,
            WireSecurity::Authenticated => 1,
            WireSecurity::Encrypted => 2,
        }
    }

    /// The mode named by `code`, if any.
    pub(crate) fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(WireSecurity::None),
            1 => Some(WireSecurity::Authenticated),
            2 => Some(WireSecurity::Encrypted),
            _ => None,
        }
    }

    /// The mode's name, as in error messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            WireSecurity::None => "none",
            WireSecurity::Authenticated => "authenticated",
            WireSecurity::Encrypted => "encrypted",
        }
    }

    /// Bytes of the tag after each frame's payload.
    pub(crate) fn tag_len(self) -> usize {
        match self {
            WireSecurity::None => 0,
            WireSecurity::Authenticated | WireSecurity::Encrypted => 16,
        }
    }
}

/// Longest tag of any mode.
pub(crate) const MAX_TAG_LEN: usize = 16;

/// A frame's tag (as many bytes as the mode uses).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tag {
    bytes: [u8; MAX_TAG_LEN],
    len: usize,
}

impl Tag {
    fn new(src: &[u8]) -> Self {
        let mut bytes = [0; MAX_TAG_LEN];
        bytes[..src.len()].copy_from_slice(src);
        Tag {
            bytes,
            len: src.len(),
        }
    }

    /// The tag's bytes, as sent.
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Why a frame was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProtectError {
    /// The tag does not match: the frame was altered, forged, replayed,
    /// reordered or a frame before it was dropped.
    #[error("frame {seq} failed authentication (altered, replayed, reordered or a frame lost)")]
    BadTag {
        /// The sequence number the frame should have had.
        seq: u64,
    },
    /// The connection has used up its sequence numbers.
    #[error("the connection has used up its frame sequence numbers")]
    Exhausted,
}

/// The two keys of a connection, one per direction.
pub(crate) struct WireKeys {
    /// For the frames this end sends.
    pub(crate) send: [u8; 32],
    /// For the frames this end receives.
    pub(crate) recv: [u8; 32],
}

impl std::fmt::Debug for WireKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WireKeys(..)")
    }
}

/// HKDF output length of 32 bytes.
struct Len32;

impl hkdf::KeyType for Len32 {
    fn len(&self) -> usize {
        32
    }
}

/// Domain separation of the frame keys.
const KEY_LABEL: &[u8] = b"rdmc tcp frame key v2";

impl WireKeys {
    /// The keys of the connection between node `me` and node `peer` in
    /// `mode`: HKDF-SHA256 with the cluster key `secret` as input key
    /// material, both ends' fresh nonces as salt (the lower node id's
    /// first) and the direction and mode as info.
    pub(crate) fn derive(
        secret: &[u8],
        mode: WireSecurity,
        me: u32,
        peer: u32,
        my_nonce: &[u8; 32],
        peer_nonce: &[u8; 32],
    ) -> Self {
        let mut salt = [0u8; 64];
        let (first, second) = if me < peer {
            (my_nonce, peer_nonce)
        } else {
            (peer_nonce, my_nonce)
        };
        salt[..32].copy_from_slice(first);
        salt[32..].copy_from_slice(second);
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, &salt).extract(secret);
        let key = |from: u32, to: u32| {
            let (from, to, mode) = (from.to_be_bytes(), to.to_be_bytes(), [mode.code()]);
            let info: [&[u8]; 4] = [KEY_LABEL, &mode, &from, &to];
            let mut out = [0u8; 32];
            prk.expand(&info, Len32)
                .and_then(|okm| okm.fill(&mut out))
                .expect("32 bytes is a valid HKDF-SHA256 length");
            out
        };
        WireKeys {
            send: key(me, peer),
            recv: key(peer, me),
        }
    }
}

/// One direction's primitive.
enum Cipher {
    None,
    /// AES-256-GCM used for its tag only (mode `Authenticated`).
    Mac(Box<LessSafeKey>),
    /// AES-256-GCM encrypting the payload (mode `Encrypted`).
    Aead(Box<LessSafeKey>),
}

impl Cipher {
    fn new(mode: WireSecurity, key: &[u8; 32]) -> Self {
        let gcm = || {
            Box::new(LessSafeKey::new(
                UnboundKey::new(&AES_256_GCM, key).expect("a 32-byte AES-256 key"),
            ))
        };
        match mode {
            WireSecurity::None => Cipher::None,
            WireSecurity::Authenticated => Cipher::Mac(gcm()),
            WireSecurity::Encrypted => Cipher::Aead(gcm()),
        }
    }

    /// The tag of frame `seq` in mode `Authenticated`: AES-256-GCM's tag
    /// with nonce `seq`, the payload as associated data and the header as
    /// plaintext (its ciphertext is thrown away). GCM's tag is a MAC of the
    /// associated data and the ciphertext, and the ciphertext of the header
    /// under one nonce determines the header, so the tag authenticates
    /// both; a receiver computes it again and compares. The payload goes
    /// through GHASH only (which, on a CPU with carry-less multiply
    /// instructions, costs less per byte than a keyed hash): it is the
    /// associated data, not the plaintext, so that it needs no copy and no
    /// encryption.
    fn mac(key: &LessSafeKey, seq: u64, header: &[u8], payload: &[u8]) -> AeadTag {
        let mut copy = [0u8; HEADER_LEN];
        let copy = &mut copy[..header.len()];
        copy.copy_from_slice(header);
        key.seal_in_place_separate_tag(nonce(seq), Aad::from(payload), copy)
            .expect("a frame is far below GCM's length limits")
    }
}

fn nonce(seq: u64) -> Nonce {
    let mut bytes = [0u8; 12];
    bytes[4..].copy_from_slice(&seq.to_be_bytes());
    Nonce::assume_unique_for_key(bytes)
}

/// One direction of a connection: its mode, key and next sequence number.
struct Direction {
    mode: WireSecurity,
    cipher: Cipher,
    seq: u64,
}

impl std::fmt::Debug for Direction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Direction")
            .field("mode", &self.mode)
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

impl Direction {
    fn new(mode: WireSecurity, key: &[u8; 32]) -> Self {
        Direction {
            mode,
            cipher: Cipher::new(mode, key),
            seq: 0,
        }
    }

    /// The next frame's sequence number.
    fn next_seq(&mut self) -> Result<u64, ProtectError> {
        let seq = self.seq;
        self.seq = seq.checked_add(1).ok_or(ProtectError::Exhausted)?;
        Ok(seq)
    }
}

/// The sending half: tags (and, encrypted, encrypts) frames in order.
#[derive(Debug)]
pub(crate) struct Sealer(Direction);

impl Sealer {
    /// Protect frames sent with `key` in `mode`.
    pub(crate) fn new(mode: WireSecurity, key: &[u8; 32]) -> Self {
        Sealer(Direction::new(mode, key))
    }

    /// The tag of the next frame, whose header (at most
    /// [`HEADER_LEN`] bytes, long or short) is `header` and whose payload is
    /// `payload`, sent as it is (modes `None` and `Authenticated`).
    ///
    /// # Panics
    ///
    /// In mode `Encrypted` (use [`Sealer::seal_into`]).
    pub(crate) fn tag(&mut self, header: &[u8], payload: &[u8]) -> Result<Tag, ProtectError> {
        let seq = self.0.next_seq()?;
        match &self.0.cipher {
            Cipher::None => Ok(Tag::new(&[])),
            Cipher::Mac(key) => Ok(Tag::new(Cipher::mac(key, seq, header, payload).as_ref())),
            Cipher::Aead(_) => panic!("an encrypting sealer must copy the payload"),
        }
    }

    /// Seal the next frame: its payload `payload`, in mode `Encrypted`
    /// encrypted into `scratch` (then the bytes to send are `scratch`),
    /// else sent as it is (and `scratch` is untouched). Returns the tag and
    /// whether the bytes to send are in `scratch`.
    pub(crate) fn seal_into(
        &mut self,
        header: &[u8],
        payload: &[u8],
        scratch: &mut Vec<u8>,
    ) -> Result<(Tag, bool), ProtectError> {
        if !matches!(self.0.cipher, Cipher::Aead(_)) {
            return Ok((self.tag(header, payload)?, false));
        }
        let seq = self.0.next_seq()?;
        let Cipher::Aead(key) = &self.0.cipher else {
            unreachable!("checked above")
        };
        scratch.clear();
        scratch.extend_from_slice(payload);
        let tag = key
            .seal_in_place_separate_tag(nonce(seq), Aad::from(header), scratch)
            .map_err(|_| ProtectError::Exhausted)?;
        Ok((Tag::new(tag.as_ref()), true))
    }
}

/// The receiving half: checks (and, encrypted, decrypts) frames in order.
#[derive(Debug)]
pub(crate) struct Opener(Direction);

impl Opener {
    /// Check frames received with `key` in `mode`.
    pub(crate) fn new(mode: WireSecurity, key: &[u8; 32]) -> Self {
        Opener(Direction::new(mode, key))
    }

    /// The mode.
    pub(crate) fn mode(&self) -> WireSecurity {
        self.0.mode
    }

    /// Check the next frame: `header`, then `payload` as received and
    /// `tag`; in mode `Encrypted` the payload is decrypted in place. On an
    /// error the payload's bytes are not to be used (and the connection
    /// not either: the sequence is lost).
    pub(crate) fn open(
        &mut self,
        header: &[u8],
        payload: &mut [u8],
        tag: &[u8],
    ) -> Result<(), ProtectError> {
        let seq = self.0.next_seq()?;
        let ok = match &self.0.cipher {
            Cipher::None => true,
            Cipher::Mac(key) => {
                let expected = Cipher::mac(key, seq, header, payload);
                verify_slices_are_equal(expected.as_ref(), tag).is_ok()
            }
            Cipher::Aead(key) => key
                .open_in_place_separate_tag(nonce(seq), Aad::from(header), tag, payload)
                .is_ok(),
        };
        if ok {
            Ok(())
        } else {
            Err(ProtectError::BadTag { seq })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODES: [WireSecurity; 2] = [WireSecurity::Authenticated, WireSecurity::Encrypted];

    fn keys(mode: WireSecurity) -> (Sealer, Opener) {
        let a = WireKeys::derive(
            b"a cluster key of some bytes",
            mode,
            0,
            1,
            &[1; 32],
            &[2; 32],
        );
        let b = WireKeys::derive(
            b"a cluster key of some bytes",
            mode,
            1,
            0,
            &[2; 32],
            &[1; 32],
        );
        assert_eq!(a.send, b.recv);
        assert_eq!(a.recv, b.send);
        assert_ne!(a.send, a.recv);
        (Sealer::new(mode, &a.send), Opener::new(mode, &b.recv))
    }

    /// A sealed frame: header, bytes on the wire, tag.
    type Frame = ([u8; HEADER_LEN], Vec<u8>, Vec<u8>);

    fn seal(sealer: &mut Sealer, i: u8, len: usize) -> Frame {
        let header = [i; HEADER_LEN];
        let payload: Vec<u8> = (0..len).map(|j| (j as u8).wrapping_mul(i)).collect();
        let mut scratch = Vec::new();
        let (tag, in_scratch) = sealer.seal_into(&header, &payload, &mut scratch).unwrap();
        let wire = if in_scratch { scratch } else { payload };
        (header, wire, tag.as_slice().to_vec())
    }

    fn open(opener: &mut Opener, frame: &Frame) -> Result<Vec<u8>, ProtectError> {
        let mut payload = frame.1.clone();
        opener.open(&frame.0, &mut payload, &frame.2)?;
        Ok(payload)
    }

    #[test]
    fn frames_in_order_open_to_their_payloads() {
        for mode in MODES {
            let (mut s, mut o) = keys(mode);
            for (i, len) in [(1u8, 0usize), (2, 1), (3, 1000), (4, 70_000)] {
                let frame = seal(&mut s, i, len);
                assert_eq!(frame.2.len(), mode.tag_len());
                let expected: Vec<u8> = (0..len).map(|j| (j as u8).wrapping_mul(i)).collect();
                if mode == WireSecurity::Encrypted && len > 16 {
                    assert_ne!(frame.1, expected, "encrypted on the wire");
                }
                assert_eq!(open(&mut o, &frame).unwrap(), expected, "{mode:?}");
            }
        }
    }

    #[test]
    fn any_flipped_bit_fails() {
        for mode in MODES {
            let (mut s, _) = keys(mode);
            let frame = seal(&mut s, 7, 300);
            let total = HEADER_LEN + frame.1.len() + frame.2.len();
            for at in 0..total {
                for bit in [0x01u8, 0x80] {
                    let (_, mut o) = keys(mode);
                    let mut bad = frame.clone();
                    if at < HEADER_LEN {
                        bad.0[at] ^= bit;
                    } else if at < HEADER_LEN + bad.1.len() {
                        bad.1[at - HEADER_LEN] ^= bit;
                    } else {
                        bad.2[at - HEADER_LEN - frame.1.len()] ^= bit;
                    }
                    assert_eq!(
                        open(&mut o, &bad),
                        Err(ProtectError::BadTag { seq: 0 }),
                        "{mode:?} byte {at}"
                    );
                }
            }
        }
    }

    #[test]
    fn replayed_reordered_dropped_or_truncated_frames_fail() {
        for mode in MODES {
            let (mut s, _) = keys(mode);
            let frames: Vec<Frame> = (0..3).map(|i| seal(&mut s, i + 1, 100)).collect();
            // Replay: the first frame twice.
            let (_, mut o) = keys(mode);
            open(&mut o, &frames[0]).unwrap();
            assert!(open(&mut o, &frames[0]).is_err(), "{mode:?} replay");
            // Reorder: the second before the first.
            let (_, mut o) = keys(mode);
            assert!(open(&mut o, &frames[1]).is_err(), "{mode:?} reorder");
            // Drop: the first frame lost.
            let (_, mut o) = keys(mode);
            open(&mut o, &frames[0]).unwrap();
            assert!(open(&mut o, &frames[2]).is_err(), "{mode:?} drop");
            // Truncate: a shorter payload or tag.
            let (_, mut o) = keys(mode);
            let mut short = frames[0].clone();
            short.1.pop();
            assert!(open(&mut o, &short).is_err(), "{mode:?} short payload");
            let (_, mut o) = keys(mode);
            let mut short = frames[0].clone();
            short.2.pop();
            assert!(open(&mut o, &short).is_err(), "{mode:?} short tag");
        }
    }

    #[test]
    fn frames_do_not_open_in_the_other_direction_mode_or_connection() {
        for mode in MODES {
            let (mut s, _) = keys(mode);
            let frame = seal(&mut s, 5, 64);
            // Reflected back to its sender (its receive key).
            let a = WireKeys::derive(
                b"a cluster key of some bytes",
                mode,
                0,
                1,
                &[1; 32],
                &[2; 32],
            );
            let mut back = Opener::new(mode, &a.recv);
            assert!(open(&mut back, &frame).is_err());
            // Another connection (other nonces).
            let c = WireKeys::derive(
                b"a cluster key of some bytes",
                mode,
                1,
                0,
                &[2; 32],
                &[3; 32],
            );
            assert!(open(&mut Opener::new(mode, &c.recv), &frame).is_err());
            // Another key.
            let d = WireKeys::derive(
                b"another cluster key, same length",
                mode,
                1,
                0,
                &[2; 32],
                &[1; 32],
            );
            assert!(open(&mut Opener::new(mode, &d.recv), &frame).is_err());
        }
        let auth = WireKeys::derive(b"k", WireSecurity::Authenticated, 0, 1, &[1; 32], &[2; 32]);
        let enc = WireKeys::derive(b"k", WireSecurity::Encrypted, 0, 1, &[1; 32], &[2; 32]);
        assert_ne!(auth.send, enc.send);
    }

    /// The authenticated tag is AES-256-GCM's with the sequence number as
    /// nonce, the payload as associated data and the header as plaintext.
    /// The expected tag comes from another implementation (OpenSSL, through
    /// Python's `cryptography`: `AESGCM(key).encrypt(nonce, header,
    /// payload)[-16:]`).
    #[test]
    fn authenticated_tag_is_gcm_over_the_payload_and_header() {
        let key: [u8; 32] = std::array::from_fn(|i| i as u8);
        let header = [0xa5; HEADER_LEN];
        let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let mut sealer = Sealer::new(WireSecurity::Authenticated, &key);
        sealer.0.seq = 0x0102_0304_0506_0708;
        let tag = sealer.tag(&header, &payload).unwrap();
        let expected = [
            0x68, 0x7b, 0x38, 0xff, 0xbc, 0x2e, 0x93, 0x8e, 0x4c, 0xe9, 0x2d, 0xf4, 0xfc, 0xa8,
            0x4d, 0x0f,
        ];
        assert_eq!(tag.as_slice(), expected);
        let mut opener = Opener::new(WireSecurity::Authenticated, &key);
        opener.0.seq = 0x0102_0304_0506_0708;
        let mut received = payload.clone();
        opener.open(&header, &mut received, &expected).unwrap();
        assert_eq!(received, payload, "the payload is left as it came");
    }

    #[test]
    fn mode_none_adds_nothing_and_checks_nothing() {
        let mut s = Sealer::new(WireSecurity::None, &[0; 32]);
        let mut o = Opener::new(WireSecurity::None, &[0; 32]);
        let mut scratch = Vec::new();
        let (tag, in_scratch) = s.seal_into(&[0; HEADER_LEN], b"abc", &mut scratch).unwrap();
        assert!(tag.as_slice().is_empty() && !in_scratch);
        o.open(&[9; HEADER_LEN], &mut [1, 2], &[]).unwrap();
    }

    proptest::proptest! {
        /// Random bytes never open (nor panic), whatever their lengths.
        #[test]
        fn random_frames_are_refused(
            header in proptest::array::uniform32(proptest::prelude::any::<u8>()),
            payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            tag in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
        ) {
            for mode in MODES {
                let (_, mut o) = keys(mode);
                let mut payload = payload.clone();
                proptest::prop_assert!(o.open(&header, &mut payload, &tag).is_err());
            }
        }
    }

    #[test]
    fn modes_round_trip_their_codes_and_print_their_names() {
        for (mode, name) in [
            (WireSecurity::None, "none"),
            (WireSecurity::Authenticated, "authenticated"),
            (WireSecurity::Encrypted, "encrypted"),
        ] {
            assert_eq!(WireSecurity::from_code(mode.code()), Some(mode));
            assert_eq!(mode.to_string(), name);
        }
        assert_eq!(WireSecurity::from_code(3), None);
        assert_eq!(WireSecurity::default(), WireSecurity::Authenticated);
    }

    /// The frame keys are pinned (HKDF-SHA256 over the cluster key, salted
    /// with the lower node id's nonce first): a change is a wire change.
    /// Nothing printed shows a key.
    #[test]
    fn frame_keys_are_pinned_and_never_printed() {
        let derive = |me, peer, mine: u8, theirs: u8| {
            WireKeys::derive(
                b"k",
                WireSecurity::Encrypted,
                me,
                peer,
                &[mine; 32],
                &[theirs; 32],
            )
        };
        let keys = derive(0, 1, 1, 2);
        let hex = |k: &[u8; 32]| k.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(
            hex(&keys.send),
            "692cb0928dbccbafb0a6807ff973f7468bad3b7ec0e15fe3d9e2b5a4bc729000"
        );
        assert_eq!(
            hex(&keys.recv),
            "bccdb2ed462ad66c56e185f595aec246f4fde6c6f7c81843ab2f6efe0722ffd9"
        );
        // The other end agrees, whichever id is lower.
        let other = derive(1, 0, 2, 1);
        assert_eq!((other.send, other.recv), (keys.recv, keys.send));
        assert_eq!(format!("{keys:?}"), "WireKeys(..)");
        let sealer = Sealer::new(WireSecurity::Encrypted, &keys.send);
        let printed = format!("{sealer:?}");
        assert!(
            printed.contains("mode: Encrypted") && printed.contains("seq: 0"),
            "{printed}"
        );
        assert!(!printed.contains(&hex(&keys.send)[..8]), "{printed}");
    }
}
