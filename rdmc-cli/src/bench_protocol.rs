//! What `rdmc member --bench` and the process driving it (the workspace's
//! benchmark harness, `rdmc-bench`) agree on besides the commands and
//! events: the payload every member builds alike, so that the root can send
//! any prefix of it and every receiver can check each message byte for
//! byte, and which messages receivers check on a thread of their own (and
//! say `checked` for). The events' times are on [`crate::clocks`].

use bytes::Bytes;
use rand::{Rng, SeedableRng, rngs::StdRng};

/// The payload's seed: the same on every member.
const PAYLOAD_SEED: u64 = 0x5244_4d43_4245_4e43;

/// Messages up to this size a receiver checks at once, on its own thread:
/// a few microseconds, less than handing them to its checking thread (a
/// wake-up per message) would cost. Larger ones are checked on that thread,
/// and the receiver prints a `checked` event once one passed.
pub const CHECK_INLINE: usize = 64 << 10;

/// The payload every member agrees on: `len` pseudo-random bytes.
pub fn payload(len: usize) -> Bytes {
    let mut data = vec![0u8; len];
    StdRng::seed_from_u64(PAYLOAD_SEED).fill_bytes(&mut data);
    Bytes::from(data)
}
