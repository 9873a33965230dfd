//! Random and mutated inputs to the frame header decoder and the signal
//! codec: nothing a peer sends may panic the decoder, whatever decodes is
//! the one canonical encoding of its value, and a data header never lets a
//! peer announce more payload than the receiver allows.
//!
//! The small variants run with every `cargo test`; the `#[ignore]`d ones are
//! the long campaign (millions of cases, see RELIABILITY.md):
//! `cargo test -p rdmcast --lib fuzz -- --ignored --nocapture`. The environment
//! variable `RDMC_FUZZ_CASES` overrides the case count of every fuzz test.
//! This file also holds the runner the other decoders' fuzz tests share.

use std::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseResult, TestRunner};

use super::{Context, HEADER_LEN, Header, signal};
use crate::ids::GroupId;
use crate::proto::{Control, FailureKind, READY_WINDOW};
use crate::transport::Signal;

/// Runs `check` on `cases` values of `strategy` (or `RDMC_FUZZ_CASES` of
/// them), without shrinking for long and without persisting failures, and
/// reports the count and the time taken.
pub(crate) fn fuzz<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    check: impl Fn(S::Value) -> TestCaseResult,
) {
    let cases = std::env::var("RDMC_FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(cases);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 10_000,
        ..Config::default()
    });
    let start = Instant::now();
    let outcome = runner.run(&strategy, check);
    let seconds = start.elapsed().as_secs_f64();
    if let Err(e) = outcome {
        panic!("fuzz {name}: {e} (after {seconds:.2} s)");
    }
    eprintln!("fuzz {name}: {cases} cases passed in {seconds:.2} s");
}

/// Bytes that are mostly the interesting values of a field: zero, all ones,
/// small numbers, or anything.
pub(crate) fn word() -> impl Strategy<Value = u64> + Clone {
    prop_oneof![
        Just(0),
        Just(u64::MAX),
        0..64u64,
        any::<u64>(),
        (0..64u32).prop_map(|s| 1u64 << s),
    ]
}

/// `valid` with 0–4 of its bytes xor-ed with a non-zero mask, or, one time
/// in four, bytes of no protocol at all.
pub(crate) fn mutated<const N: usize>(
    valid: impl Strategy<Value = [u8; N]>,
) -> impl Strategy<Value = [u8; N]> {
    let edits = proptest::collection::vec((0..N, 1..=255u8), 0..=4);
    prop_oneof![
        3 => (valid, edits).prop_map(|(mut bytes, edits)| {
            for (at, mask) in edits {
                bytes[at] ^= mask;
            }
            bytes
        }),
        1 => proptest::array::uniform::<_, N>(any::<u8>()),
    ]
}

/// Every kind of signal, with interesting arguments.
pub(crate) fn any_signal() -> impl Strategy<Value = Signal> {
    let digest = || (word(), word()).prop_map(|(lo, hi)| u128::from(lo) | (u128::from(hi) << 64));
    prop_oneof![
        Just(Signal::Group(Control::ReadyForBlock)),
        (2..=READY_WINDOW as u8).prop_map(|count| Signal::ReadyForBlocks { count }),
        word().prop_map(|messages| Signal::Group(Control::Close { messages })),
        Just(Signal::Group(Control::CloseAck)),
        Just(Signal::Group(Control::Closed)),
        word().prop_map(|messages| Signal::Group(Control::Taken { messages })),
        word().prop_map(|messages| Signal::Group(Control::Persisted { messages })),
        (
            // A rank is 32 bits, u32::MAX saying "no suspect".
            proptest::option::of(word().prop_map(|r| (r as u32).min(u32::MAX - 1) as usize)),
            any_failure_kind(),
            word().prop_map(|r| r as u32 as usize),
        )
            .prop_map(|(suspect, kind, detector)| Signal::Group(Control::Failed {
                suspect,
                kind,
                detector,
            }))
            // Boxed: the strategies nest deep enough as they are (a debug
            // build's test thread runs out of stack otherwise).
            .boxed(),
        digest().prop_map(|digest| Signal::Join { digest }),
        digest().prop_map(|digest| Signal::JoinRejected { digest }),
        digest().prop_map(|fingerprint| Signal::JoinSettings { fingerprint }),
        Just(Signal::IdInUse),
    ]
}

/// Every failure kind, with interesting numbers.
fn any_failure_kind() -> impl Strategy<Value = FailureKind> {
    (0..10u8, word()).prop_map(|(code, number)| {
        FailureKind::from_code(code, number)
            .or_else(|| FailureKind::from_code(code, 0))
            .expect("a kind's code")
    })
}

/// Every kind of header, with interesting fields.
fn any_header() -> impl Strategy<Value = Header> {
    any_header_of(word)
}

/// Every kind of header, its numeric fields drawn from `field()`.
fn any_header_of<S>(field: impl Fn() -> S) -> impl Strategy<Value = Header>
where
    S: Strategy<Value = u64> + 'static,
{
    prop_oneof![
        (field(), field(), field(), field()).prop_map(|(g, immediate, block_len, chunk)| {
            Header::Data {
                group: GroupId(g),
                immediate,
                block_len,
                chunk_len: chunk as u32,
            }
        }),
        (field(), any_signal()).prop_map(|(g, signal)| Header::Signal {
            group: GroupId(g),
            signal,
        }),
        (field(), any_signal(), field()).prop_map(|(g, signal, len)| Header::Relay {
            group: GroupId(g),
            signal,
            route_len: len as u32,
        }),
        Just(Header::Heartbeat),
        Just(Header::Goodbye),
        Just(Header::Idle),
    ]
}

/// A header's bytes, valid or mutated, and the receiver's chunk limit.
fn header_input() -> impl Strategy<Value = ([u8; HEADER_LEN], u32)> {
    let max_chunk = prop_oneof![Just(0u32), Just(u32::MAX), 1..(1u32 << 24), any::<u32>()];
    (mutated(any_header().prop_map(|h| h.encode())), max_chunk)
}

/// A data header's chunk is within the receiver's limit and its block.
fn check_bounded(header: &Header, max_chunk: u32) -> TestCaseResult {
    if let Header::Data {
        chunk_len,
        block_len,
        ..
    } = *header
    {
        prop_assert!(chunk_len <= max_chunk, "chunk above the limit");
        prop_assert!(u64::from(chunk_len) <= block_len, "chunk beyond its block");
    }
    Ok(())
}

/// The header properties: no panic, canonical, bounded.
fn check_header((bytes, max_chunk): ([u8; HEADER_LEN], u32)) -> TestCaseResult {
    if let Ok(header) = Header::decode(&bytes, max_chunk) {
        prop_assert_eq!(header.encode(), bytes, "not the canonical encoding");
        check_bounded(&header, max_chunk)?;
    }
    Ok(())
}

/// A connection's stream of headers as a writer's [`Context`] encodes them
/// (few groups and values, so that many are short), with 0–8 bytes xor-ed,
/// and the receiver's chunk limit.
fn stream_input() -> impl Strategy<Value = (Vec<u8>, u32)> {
    let header = any_header_of(|| prop_oneof![word(), 0..3u64]);
    let stream = proptest::collection::vec(header, 0..24).prop_map(|headers| {
        let mut context = Context::default();
        let mut bytes = Vec::new();
        for h in &headers {
            bytes.extend_from_slice(context.encode(h).as_slice());
        }
        bytes
    });
    let edits = proptest::collection::vec((any::<prop::sample::Index>(), 1..=255u8), 0..=8);
    let max_chunk = prop_oneof![Just(0u32), Just(u32::MAX), 1..(1u32 << 24)];
    (stream, edits, max_chunk).prop_map(|(mut bytes, edits, max_chunk)| {
        if !bytes.is_empty() {
            for (at, mask) in edits {
                let at = at.index(bytes.len());
                bytes[at] ^= mask;
            }
        }
        (bytes, max_chunk)
    })
}

/// The stream properties: reading header after header as a link's reader
/// does never panics; every header that decodes is bounded, and means what
/// a writer in the same context would send for it (encoded there, it
/// decodes to the same header and leaves the same context).
fn check_stream((bytes, max_chunk): (Vec<u8>, u32)) -> TestCaseResult {
    let mut context = Context::default();
    let mut rest = &bytes[..];
    while let Some(&kind) = rest.first() {
        let len = Context::header_len(kind);
        if rest.len() < len {
            break;
        }
        let before = context;
        let Ok(header) = context.decode(&rest[..len], max_chunk) else {
            break;
        };
        rest = &rest[len..];
        check_bounded(&header, max_chunk)?;
        let mut writer = before;
        let ours = writer.encode(&header);
        let mut again = before;
        prop_assert_eq!(again.decode(ours.as_slice(), max_chunk), Ok(header));
        prop_assert_eq!(again, context, "the same header, another context");
    }
    Ok(())
}

/// A signal code with arguments, valid or not.
fn signal_input() -> impl Strategy<Value = (u8, u64, u64)> {
    prop_oneof![
        any_signal().prop_map(signal::encode),
        (any::<u8>(), word(), word()),
        (0..64u8, word(), word()),
    ]
}

/// The signal codec properties: no panic, and what decodes re-encodes to
/// the same code and arguments.
fn check_signal((code, a, b): (u8, u64, u64)) -> TestCaseResult {
    if let Ok(signal) = signal::decode(code, a, b) {
        prop_assert_eq!(signal::encode(signal), (code, a, b));
    }
    Ok(())
}

#[test]
fn frame_headers_from_strangers_never_panic_and_stay_bounded() {
    fuzz("frame header", 4_000, header_input(), check_header);
}

#[test]
fn header_streams_from_strangers_never_panic_and_stay_bounded() {
    fuzz("header stream", 2_000, stream_input(), check_stream);
}

#[test]
fn signal_codes_from_strangers_never_panic() {
    fuzz("signal codec", 2_000, signal_input(), check_signal);
}

#[test]
#[ignore = "long: millions of cases (RELIABILITY.md)"]
fn frame_headers_long_campaign() {
    fuzz("frame header", 4_000_000, header_input(), check_header);
}

#[test]
#[ignore = "long: millions of cases (RELIABILITY.md)"]
fn header_streams_long_campaign() {
    fuzz("header stream", 1_000_000, stream_input(), check_stream);
}

#[test]
#[ignore = "long: millions of cases (RELIABILITY.md)"]
fn signal_codes_long_campaign() {
    fuzz("signal codec", 2_000_000, signal_input(), check_signal);
}
