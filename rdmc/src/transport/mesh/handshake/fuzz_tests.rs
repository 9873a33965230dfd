//! Random and mutated inputs to the handshake state machine:
//!
//! - hostile transcripts (a genuine peer's bytes, recorded, then mutated:
//!   bytes flipped, dropped, inserted, the stream cut short) fed to an
//!   acceptor and to an initiator: neither ever panics or lets the peer in;
//! - two genuine members talking through a path that tampers with either
//!   direction: every tampering with a byte of the handshake keeps at least
//!   one end from succeeding, and an untouched path always succeeds.
//!
//! Messages have fixed sizes (no length comes from the peer), so nothing here
//! can make a member allocate by what it is sent. The small variants run with
//! every `cargo test`; the `#[ignore]`d ones are the long campaign (see the
//! frame decoder's fuzz tests for how to run them).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use proptest::prelude::*;
use proptest::test_runner::TestCaseResult;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf, duplex};

use super::*;
use crate::transport::frame::fuzz_tests::fuzz;

/// Members of the fuzzed cluster.
const MEMBERS: [&str; 3] = ["10.0.0.1:4000", "10.0.0.2:4000", "10.0.0.3:4000"];

/// Node `me` of [`MEMBERS`].
fn node(me: u32) -> Handshake {
    let key = ClusterKey::from_bytes(vec![7; 32]).expect("a valid key");
    Handshake::new(
        key,
        ClusterDigest::of_members(&MEMBERS),
        NodeId(me),
        MEMBERS.len(),
    )
}

/// A runtime whose clock moves on whenever every task waits, so a stalled
/// handshake reaches its timeout at once.
fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime")
}

/// One change to a byte stream, at an offset of the original stream.
#[derive(Clone, Copy, Debug)]
enum Edit {
    /// Xor the byte with a non-zero mask.
    Flip { at: usize, mask: u8 },
    /// Leave the byte out.
    Drop { at: usize },
    /// Put a byte before it.
    Insert { at: usize, byte: u8 },
    /// End the stream before it.
    Cut { at: usize },
}

impl Edit {
    fn at(self) -> usize {
        match self {
            Edit::Flip { at, .. }
            | Edit::Drop { at }
            | Edit::Insert { at, .. }
            | Edit::Cut { at } => at,
        }
    }
}

/// Up to three edits at offsets below `span`.
fn edits(span: usize) -> impl Strategy<Value = Vec<Edit>> {
    let edit = prop_oneof![
        4 => (0..span, 1..=255u8).prop_map(|(at, mask)| Edit::Flip { at, mask }),
        1 => (0..span).prop_map(|at| Edit::Drop { at }),
        1 => (0..span, any::<u8>()).prop_map(|(at, byte)| Edit::Insert { at, byte }),
        1 => (0..span).prop_map(|at| Edit::Cut { at }),
    ];
    prop_oneof![
        1 => Just(Vec::new()),
        4 => proptest::collection::vec(edit, 1..=3),
    ]
}

/// Applies edits to a stream byte by byte.
#[derive(Debug, Default)]
struct Editor {
    edits: Vec<Edit>,
    /// Offset of the next original byte.
    pos: usize,
    /// The stream has been cut.
    cut: bool,
}

impl Editor {
    fn new(edits: Vec<Edit>) -> Self {
        Editor {
            edits,
            ..Editor::default()
        }
    }

    /// Passes `original` (the next original byte) through, into `out`.
    fn push(&mut self, original: u8, out: &mut Vec<u8>) {
        let at = self.pos;
        self.pos += 1;
        if self.cut {
            return;
        }
        let mut byte = original;
        let mut keep = true;
        for edit in self.edits.iter().filter(|e| e.at() == at) {
            match *edit {
                Edit::Flip { mask, .. } => byte ^= mask,
                Edit::Drop { .. } => keep = false,
                Edit::Insert { byte: extra, .. } => out.push(extra),
                Edit::Cut { .. } => {
                    self.cut = true;
                    return;
                }
            }
        }
        if keep {
            out.push(byte);
        }
    }

    /// `bytes` with the edits applied.
    fn apply(mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for &b in bytes {
            self.push(b, &mut out);
        }
        out
    }
}

/// One end of a connection whose outgoing bytes pass an [`Editor`]; it
/// records what its owner wrote and what actually went out.
struct Tampered {
    inner: DuplexStream,
    editor: Editor,
    /// Edited bytes not yet written to `inner`.
    pending: Vec<u8>,
    /// Everything the owner wrote.
    written: Vec<u8>,
    /// Everything that went out, edited.
    sent: Vec<u8>,
}

impl Tampered {
    fn new(inner: DuplexStream, edits: Vec<Edit>) -> Self {
        Tampered {
            inner,
            editor: Editor::new(edits),
            pending: Vec::new(),
            written: Vec::new(),
            sent: Vec::new(),
        }
    }

    /// Whether the bytes the peer reads for the handshake (as many as the
    /// owner wrote) differ from what the owner wrote. Edits may cancel out
    /// (the same flip twice), or only add bytes after the handshake (an
    /// insertion before the last byte that repeats it).
    fn tampered(&self) -> bool {
        self.sent.get(..self.written.len()) != Some(&self.written[..])
    }

    /// Writes out what is pending; once the stream is cut, ends it.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.pending.is_empty() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending))?;
            self.pending.drain(..n);
        }
        if self.editor.cut {
            ready!(Pin::new(&mut self.inner).poll_shutdown(cx))?;
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for Tampered {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Tampered {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.drain(cx))?;
        let this = &mut *self;
        let before = this.pending.len();
        for &b in buf {
            this.editor.push(b, &mut this.pending);
        }
        this.written.extend_from_slice(buf);
        this.sent.extend_from_slice(&this.pending[before..]);
        // Whatever does not fit now goes out on the next write or flush.
        match this.drain(cx) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            _ => Poll::Ready(Ok(buf.len())),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What a run of two ends over a tampering path came to.
struct PathRun {
    initiated: Result<(), HandshakeError>,
    accepted: Result<NodeId, HandshakeError>,
    /// The handshake's bytes were changed, in either direction.
    tampered: bool,
    /// The bytes each end sent (edited): initiator, acceptor.
    sent: (Vec<u8>, Vec<u8>),
}

/// Node 2 dials node 0 over a path that edits each direction; each end
/// drops its stream as soon as its side is done, as a real caller would.
async fn over_path(to_acceptor: Vec<Edit>, to_initiator: Vec<Edit>) -> PathRun {
    let (initiator, acceptor) = (node(2), node(0));
    let (a, b) = duplex(1 << 16);
    let (mut a, mut b) = (
        Tampered::new(a, to_acceptor),
        Tampered::new(b, to_initiator),
    );
    let (initiated, accepted) = tokio::join!(
        async {
            let r = initiator.initiate(&mut a, NodeId(0)).await;
            drop(a.inner.shutdown().await);
            (r, a.tampered(), a.sent)
        },
        async {
            let r = acceptor.accept(&mut b).await;
            drop(b.inner.shutdown().await);
            (r, b.tampered(), b.sent)
        },
    );
    PathRun {
        tampered: initiated.1 || accepted.1,
        sent: (initiated.2, accepted.2),
        initiated: initiated.0,
        accepted: accepted.0,
    }
}

/// A genuine exchange between node 2 and node 0: the bytes each end sent.
fn genuine_transcripts(rt: &tokio::runtime::Runtime) -> (Vec<u8>, Vec<u8>) {
    let run = rt.block_on(over_path(Vec::new(), Vec::new()));
    run.initiated.expect("an honest initiator gets in");
    assert_eq!(run.accepted.expect("an honest acceptor"), NodeId(2));
    run.sent
}

/// Offsets an edit may land on: the handshake's bytes in one direction and
/// a little beyond (edits beyond it never take effect).
const SPAN: usize = HELLO_LEN + PROOF_LEN + 16;

fn path_input() -> impl Strategy<Value = (Vec<Edit>, Vec<Edit>)> {
    (edits(SPAN), edits(SPAN))
}

/// Tampering with a handshake byte never lets both ends through; an
/// untouched path always does.
fn check_path(rt: &tokio::runtime::Runtime, (up, down): (Vec<Edit>, Vec<Edit>)) -> TestCaseResult {
    let (run, took) = rt.block_on(async {
        let start = tokio::time::Instant::now();
        (over_path(up, down).await, start.elapsed())
    });
    prop_assert!(took <= AT_MOST, "took {took:?}");
    let both = run.initiated.is_ok() && run.accepted.is_ok();
    if run.tampered {
        prop_assert!(!both, "a tampered handshake succeeded on both ends");
    } else {
        prop_assert!(both, "{:?} / {:?}", run.initiated, run.accepted);
        prop_assert_eq!(run.accepted.ok(), Some(NodeId(2)));
    }
    Ok(())
}

/// A recorded transcript, edited, and whether the stranger then keeps the
/// connection open.
fn transcript_input(recorded: Vec<u8>) -> impl Strategy<Value = (Vec<u8>, bool)> {
    let len = recorded.len() + 16;
    (Just(recorded), edits(len), any::<bool>())
        .prop_map(|(bytes, edits, keep_open)| (Editor::new(edits).apply(&bytes), keep_open))
}

/// The longest a handshake may take on the paused clock: its timeout and
/// the timer's granularity.
const AT_MOST: Duration = DEFAULT_TIMEOUT.saturating_add(Duration::from_millis(5));

/// Feeds `transcript` to one end as a whole stranger (the stranger reads
/// nothing back): whether that end refused it, and how long it took (on the
/// paused clock).
async fn feed(transcript: &[u8], keep_open: bool, to_acceptor: bool) -> (bool, Duration) {
    let start = tokio::time::Instant::now();
    let (mut stranger, mut end) = duplex(1 << 16);
    stranger
        .write_all(transcript)
        .await
        .expect("room in the pipe");
    let kept = if keep_open {
        Some(stranger)
    } else {
        drop(stranger);
        None
    };
    let refused = if to_acceptor {
        node(0).accept(&mut end).await.is_err()
    } else {
        node(2).initiate(&mut end, NodeId(0)).await.is_err()
    };
    drop(kept);
    (refused, start.elapsed())
}

fn run_transcripts(cases: u32, to_acceptor: bool) {
    let rt = paused_runtime();
    let (from_initiator, from_acceptor) = genuine_transcripts(&rt);
    let recorded = if to_acceptor {
        from_initiator
    } else {
        from_acceptor
    };
    let name = if to_acceptor {
        "handshake: transcripts to an acceptor"
    } else {
        "handshake: transcripts to an initiator"
    };
    fuzz(
        name,
        cases,
        transcript_input(recorded),
        |(bytes, keep_open)| {
            // The recorded proof answered another session's nonce: a replay.
            let (refused, took) = rt.block_on(feed(&bytes, keep_open, to_acceptor));
            prop_assert!(refused, "a stranger got in");
            prop_assert!(took <= AT_MOST, "took {took:?}");
            Ok(())
        },
    );
}

fn run_paths(cases: u32) {
    let rt = paused_runtime();
    fuzz("handshake: tampering path", cases, path_input(), |input| {
        check_path(&rt, input)
    });
}

#[test]
fn stranger_transcripts_never_get_in() {
    run_transcripts(1_000, true);
    run_transcripts(1_000, false);
}

#[test]
fn a_tampering_path_never_lets_both_ends_through() {
    run_paths(1_500);
}

#[test]
#[ignore = "long: a million cases and more (RELIABILITY.md)"]
fn stranger_transcripts_long_campaign() {
    run_transcripts(500_000, true);
    run_transcripts(500_000, false);
}

#[test]
#[ignore = "long: millions of cases (RELIABILITY.md)"]
fn tampering_path_long_campaign() {
    run_paths(2_000_000);
}
