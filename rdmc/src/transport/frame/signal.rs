//! The encoding of a [`Signal`] into a one-byte code and two 64-bit
//! arguments, as a signal frame carries it.
//!
//! | code | signal | first argument | second argument |
//! |---|---|---|---|
//! | 0 | ready-for-block(s) | how many beyond the first (0 to the window − 1) | 0 |
//! | 1 | close | messages | 0 |
//! | 2 | close-ack | 0 | 0 |
//! | 3 | closed | 0 | 0 |
//! | 4 | (retired: a failure without its cause, before version 5) | | |
//! | 5 | join | digest, low 64 bits | digest, high 64 bits |
//! | 6 | join-rejected | digest, low 64 bits | digest, high 64 bits |
//! | 7 | taken | messages | 0 |
//! | 8 | join-settings (the fingerprint, before a join or join-rejected) | fingerprint, low 64 bits | fingerprint, high 64 bits |
//! | 9 | id-in-use | 0 | 0 |
//! | 10 | suspect (receiver → root) | the suspect's rank | 0 |
//! | 11 | persisted | messages | 0 |
//! | 32 to 63 | failed, the cause's kind being the code − 32 (below) | suspect rank (low 32 bits, `u32::MAX`: none), detector rank (high 32 bits) | the kind's number, else 0 |
//!
//! A failure report carries its cause (the detector's
//! [`FailureKind`], [`FailureKind::to_code`]), each kind a code of its own
//! so that its number travels whole:
//!
//! | code − 32 | kind | number |
//! |---|---|---|
//! | 0 | unreachable | |
//! | 1 | protocol violation | |
//! | 2 | local shutdown (left) | |
//! | 3 | closed unread | |
//! | 4 | no progress | |
//! | 5 | out of memory | bytes asked for |
//! | 6 | digest mismatch | message |
//! | 7 | stalled | milliseconds |
//! | 8 | slow reader | milliseconds |
//! | 9 | receive target | |
//!
//! A rank fits 32 bits: a group's members are distinct node ids, which
//! are 32-bit.

use super::FrameError;
use crate::proto::{Control, FailureKind, READY_WINDOW, Rank};
use crate::transport::Signal;

/// The code of a failure report of kind code 0 (and room for 32 kinds).
const FAILED: u8 = 32;
const FAILED_LAST: u8 = FAILED + 31;
/// The suspect rank that says "none".
const NO_SUSPECT: u64 = u32::MAX as u64;

/// A rank as 32 bits (see the module's table).
fn rank_bits(rank: Rank) -> u64 {
    // A group has at most one member per 32-bit node id.
    u64::from(u32::try_from(rank).unwrap_or(u32::MAX))
}

/// A signal's code and two arguments.
pub(crate) fn encode(signal: Signal) -> (u8, u64, u64) {
    let digest = |d: u128| (d as u64, (d >> 64) as u64);
    match signal {
        Signal::Group(Control::ReadyForBlock) => (0, 0, 0),
        Signal::ReadyForBlocks { count } => (0, u64::from(count.saturating_sub(1)), 0),
        Signal::Group(Control::Close { messages }) => (1, messages, 0),
        Signal::Group(Control::CloseAck) => (2, 0, 0),
        Signal::Group(Control::Closed) => (3, 0, 0),
        Signal::Group(Control::Failed {
            suspect,
            kind,
            detector,
        }) => {
            let (code, number) = kind.to_code();
            let ranks = suspect.map_or(NO_SUSPECT, rank_bits) | rank_bits(detector) << 32;
            (FAILED + code, ranks, number)
        }
        Signal::Group(Control::Taken { messages }) => (7, messages, 0),
        Signal::Group(Control::Persisted { messages }) => (11, messages, 0),
        Signal::Join { digest: d } => {
            let (lo, hi) = digest(d);
            (5, lo, hi)
        }
        Signal::JoinRejected { digest: d } => {
            let (lo, hi) = digest(d);
            (6, lo, hi)
        }
        Signal::JoinSettings { fingerprint } => {
            let (lo, hi) = digest(fingerprint);
            (8, lo, hi)
        }
        Signal::IdInUse => (9, 0, 0),
        Signal::Group(Control::Suspect { suspect }) => (10, rank_bits(suspect), 0),
    }
}

/// The signal with `code` and arguments `a`, `b`, if they are valid.
pub(crate) fn decode(code: u8, a: u64, b: u64) -> Result<Signal, FrameError> {
    let no_args = |s: Signal| {
        if a == 0 && b == 0 {
            Ok(s)
        } else {
            Err(FrameError::BadArgument)
        }
    };
    let digest = u128::from(a) | (u128::from(b) << 64);
    match code {
        0 if b == 0 && a == 0 => Ok(Signal::Group(Control::ReadyForBlock)),
        0 if b == 0 && a < READY_WINDOW as u64 => Ok(Signal::ReadyForBlocks { count: a as u8 + 1 }),
        1 if b == 0 => Ok(Signal::Group(Control::Close { messages: a })),
        2 => no_args(Signal::Group(Control::CloseAck)),
        3 => no_args(Signal::Group(Control::Closed)),
        5 => Ok(Signal::Join { digest }),
        6 => Ok(Signal::JoinRejected { digest }),
        7 if b == 0 => Ok(Signal::Group(Control::Taken { messages: a })),
        11 if b == 0 => Ok(Signal::Group(Control::Persisted { messages: a })),
        8 => Ok(Signal::JoinSettings {
            fingerprint: digest,
        }),
        9 => no_args(Signal::IdInUse),
        10 if b == 0 && a < NO_SUSPECT => {
            Ok(Signal::Group(Control::Suspect { suspect: a as Rank }))
        }
        FAILED..=FAILED_LAST => {
            let kind = match FailureKind::from_code(code - FAILED, b) {
                Some(kind) => kind,
                // A kind this build knows, with a number it does not carry.
                None if FailureKind::from_code(code - FAILED, 0).is_some() => {
                    return Err(FrameError::BadArgument);
                }
                None => return Err(FrameError::UnknownSignal(code)),
            };
            let suspect = match a & NO_SUSPECT {
                NO_SUSPECT => None,
                r => Some(r as Rank),
            };
            let detector = (a >> 32) as Rank;
            Ok(Signal::Group(Control::Failed {
                suspect,
                kind,
                detector,
            }))
        }
        0 | 1 | 7 | 10 => Err(FrameError::BadArgument),
        other => Err(FrameError::UnknownSignal(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_report_carries_its_cause_whole() {
        // Every kind this build knows (its codes run from 0 without a
        // gap), with numbers small and large where it has one.
        let kinds: Vec<FailureKind> = (0..=u8::MAX)
            .map_while(|code| FailureKind::from_code(code, 0))
            .flat_map(|kind| {
                let (code, _) = kind.to_code();
                [1, 1 << 47, u64::MAX]
                    .into_iter()
                    .filter_map(move |n| FailureKind::from_code(code, n))
                    .chain([kind])
            })
            .collect();
        assert_eq!(kinds.len(), 10 + 4 * 3, "ten kinds, four with a number");
        for kind in kinds {
            for suspect in [None, Some(0), Some(7)] {
                let failed = Signal::Group(Control::Failed {
                    suspect,
                    kind,
                    detector: 5,
                });
                let (code, a, b) = encode(failed);
                assert!((FAILED..FAILED + 10).contains(&code), "{kind:?}");
                assert_eq!(decode(code, a, b), Ok(failed));
            }
        }
    }

    #[test]
    fn malformed_failure_reports_are_refused() {
        // The report without a cause of earlier versions.
        assert_eq!(decode(4, 2, 0), Err(FrameError::UnknownSignal(4)));
        // A kind this build does not know.
        assert_eq!(
            decode(FAILED + 10, 0, 0),
            Err(FrameError::UnknownSignal(42))
        );
        assert_eq!(
            decode(FAILED_LAST + 1, 0, 0),
            Err(FrameError::UnknownSignal(64))
        );
        // The rendezvous's id-in-use has no arguments.
        assert_eq!(decode(9, 1, 0), Err(FrameError::BadArgument));
        // A suspect's rank below the "no suspect" mark, and not at it.
        assert!(decode(10, NO_SUSPECT - 1, 0).is_ok());
        assert_eq!(decode(10, NO_SUSPECT, 0), Err(FrameError::BadArgument));
        assert_eq!(decode(9, 0, 0), Ok(Signal::IdInUse));
        assert_eq!(
            decode(u8::MAX, 0, 0),
            Err(FrameError::UnknownSignal(u8::MAX))
        );
        // A number on a kind without one.
        assert_eq!(decode(FAILED, 0, 1), Err(FrameError::BadArgument));
        assert_eq!(
            decode(FAILED + 9, 0, u64::MAX),
            Err(FrameError::BadArgument)
        );
        // Any ranks decode (the member checks them against its group).
        assert!(decode(FAILED + 5, u64::MAX, u64::MAX).is_ok());
    }
}
