//! The encoding of a [`Signal`] into a one-byte code and two 64-bit
//! arguments, as a signal frame carries it.
//!
//! | code | signal | first argument | second argument |
//! |---|---|---|---|
//! | 0 | ready-for-block(s) | how many beyond the first (0 to the window − 1) | 0 |
//! | 1 | close | messages | 0 |
//! | 2 | close-ack | 0 | 0 |
//! | 3 | closed | 0 | 0 |
//! | 4 | failed | suspect rank (`u64::MAX`: none) | 0 |
//! | 5 | join | digest, low 64 bits | digest, high 64 bits |
//! | 6 | join-rejected | digest, low 64 bits | digest, high 64 bits |
//! | 7 | taken | messages | 0 |

use super::FrameError;
use crate::proto::{Control, READY_WINDOW};
use crate::transport::Signal;

/// A signal's code and two arguments.
pub(crate) fn encode(signal: Signal) -> (u8, u64, u64) {
    let digest = |d: u128| (d as u64, (d >> 64) as u64);
    match signal {
        Signal::Group(Control::ReadyForBlock) => (0, 0, 0),
        Signal::ReadyForBlocks { count } => (0, u64::from(count.saturating_sub(1)), 0),
        Signal::Group(Control::Close { messages }) => (1, messages, 0),
        Signal::Group(Control::CloseAck) => (2, 0, 0),
        Signal::Group(Control::Closed) => (3, 0, 0),
        Signal::Group(Control::Failed { suspect }) => {
            (4, suspect.map_or(u64::MAX, |r| r as u64), 0)
        }
        Signal::Group(Control::Taken { messages }) => (7, messages, 0),
        Signal::Join { digest: d } => {
            let (lo, hi) = digest(d);
            (5, lo, hi)
        }
        Signal::JoinRejected { digest: d } => {
            let (lo, hi) = digest(d);
            (6, lo, hi)
        }
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
        4 if b == 0 => {
            let suspect = match a {
                u64::MAX => None,
                r => Some(usize::try_from(r).map_err(|_| FrameError::BadArgument)?),
            };
            Ok(Signal::Group(Control::Failed { suspect }))
        }
        5 => Ok(Signal::Join { digest }),
        6 => Ok(Signal::JoinRejected { digest }),
        7 if b == 0 => Ok(Signal::Group(Control::Taken { messages: a })),
        0 | 1 | 4 | 7 => Err(FrameError::BadArgument),
        other => Err(FrameError::UnknownSignal(other)),
    }
}
