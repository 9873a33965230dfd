//! Tests of the cluster handshake: honest members, wrong keys, forged and
//! reflected messages, garbage and stalling clients, and a real TCP socket.

use std::sync::Arc;

use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};
use tokio::time::Instant;

use super::*;

/// Asserts that `$value` matches `$pattern`, showing the value if not.
macro_rules! assert_matches {
    ($value:expr, $pattern:pat) => {{
        let value = &$value;
        assert!(matches!(value, $pattern), "{value:?}");
    }};
}

/// Members of the test cluster.
const MEMBERS: [&str; 3] = ["10.0.0.1:4000", "10.0.0.2:4000", "10.0.0.3:4000"];

/// A 32-byte key of `byte`s.
fn key(byte: u8) -> ClusterKey {
    ClusterKey::from_bytes(vec![byte; 32]).unwrap()
}

/// The digest of [`MEMBERS`].
fn digest() -> ClusterDigest {
    ClusterDigest::of_members(&MEMBERS)
}

/// Node `me` of [`MEMBERS`], with the key of `key_byte`s.
fn node(me: u32, key_byte: u8) -> Handshake {
    Handshake::new(key(key_byte), digest(), NodeId(me), MEMBERS.len())
}

/// The proofs and the session key of a transcript, pinned: members of
/// other builds must compute the same bytes (from Python's hmac).
#[test]
fn proofs_and_session_keys_are_pinned() {
    let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let node = Handshake::new(key(0x11), digest(), NodeId(0), MEMBERS.len());
    let (initiator, acceptor) = ([1; HELLO_LEN], [2; HELLO_LEN]);
    assert_eq!(
        hex(&node.proof(Role::Initiator, &initiator, &acceptor)),
        "689d788ef11ea5ba566a983656fba06067c3843fcf316d35262f6c414f3aee15"
    );
    assert_eq!(
        hex(&node.proof(Role::Acceptor, &initiator, &acceptor)),
        "a0be136a358e1578df4802ac922361146dcc8e2a1097dbca907a4a079f823286"
    );
    assert_eq!(
        hex(&node.session(&initiator, &acceptor).0),
        "041fb7f917d992f478ad165b107846871cbbe659a4ed8fa3bbce89c3cfe86d9c"
    );
    // Never printed: a log line must not leak what authenticates the link.
    assert_eq!(
        format!("{:?}", node.session(&initiator, &acceptor)),
        "SessionKey(<redacted>)"
    );
    let proof = node.proof(Role::Acceptor, &initiator, &acceptor);
    assert!(
        node.verify(Role::Acceptor, &initiator, &acceptor, &proof)
            .is_ok()
    );
    assert!(
        node.verify(Role::Initiator, &initiator, &acceptor, &proof)
            .is_err()
    );
}

/// A connected pair of in-memory streams, roomy enough that no test write
/// blocks.
fn pipe() -> (DuplexStream, DuplexStream) {
    duplex(4096)
}

/// Runs `initiator` dialling `expected` against `acceptor`; each end drops
/// its stream as soon as its side is done, as a real caller would.
async fn run(
    initiator: &Handshake,
    expected: NodeId,
    acceptor: &Handshake,
) -> (Result<(), HandshakeError>, Result<NodeId, HandshakeError>) {
    let (mut a, mut b) = pipe();
    tokio::join!(
        async move { initiator.initiate(&mut a, expected).await },
        async move { acceptor.accept(&mut b).await },
    )
}

/// A well-formed hello, as `role` from `from` to `to`.
fn hello(role: Role, from: u32, to: u32, digest: ClusterDigest) -> [u8; HELLO_LEN] {
    Hello::new(role, (NodeId(from), 0), NodeId(to), digest).encode()
}

/// Feeds `transcript` to node 0's acceptor as a whole client, then closes
/// the client's end unless `keep_open`.
async fn accept_transcript(
    acceptor: &Handshake,
    transcript: &[u8],
    keep_open: bool,
) -> Result<NodeId, HandshakeError> {
    let (mut client, mut server) = pipe();
    client.write_all(transcript).await.unwrap();
    let kept = keep_open.then_some(client);
    let result = acceptor.accept(&mut server).await;
    drop(kept);
    result
}

/// A runtime with paused time, for the property tests.
fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

#[tokio::test]
async fn members_with_the_key_get_in_and_the_acceptor_learns_who() {
    let (initiated, accepted) = run(&node(2, 7), NodeId(0), &node(0, 7)).await;
    initiated.unwrap();
    assert_eq!(accepted.unwrap(), NodeId(2));
}

#[tokio::test]
async fn the_stream_carries_traffic_after_the_handshake() {
    let (initiator, acceptor) = (node(1, 7), node(2, 7));
    let (mut a, mut b) = pipe();
    let (initiated, accepted) = tokio::join!(
        initiator.initiate(&mut a, NodeId(2)),
        acceptor.accept(&mut b)
    );
    initiated.unwrap();
    assert_eq!(accepted.unwrap(), NodeId(1));
    a.write_all(b"block").await.unwrap();
    let mut buf = [0; 5];
    b.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"block");
}

#[tokio::test(start_paused = true)]
async fn a_wrong_key_is_refused_and_neither_end_hangs() {
    let start = Instant::now();
    let (initiated, accepted) = run(&node(1, 9), NodeId(0), &node(0, 7)).await;
    assert_matches!(accepted, Err(HandshakeError::BadProof));
    assert_matches!(initiated, Err(HandshakeError::Closed));
    assert!(start.elapsed() < DEFAULT_TIMEOUT);
}

#[tokio::test(start_paused = true)]
async fn an_acceptor_with_a_wrong_key_gets_no_proof_it_could_use() {
    // The acceptor (wrong key) rejects the initiator's proof before it
    // proves anything itself.
    let (initiated, accepted) = run(&node(1, 7), NodeId(0), &node(0, 9)).await;
    assert_matches!(accepted, Err(HandshakeError::BadProof));
    assert_matches!(initiated, Err(HandshakeError::Closed));
}

#[tokio::test(start_paused = true)]
async fn a_reflected_proof_is_refused() {
    // A stranger poses as node 1; node 0 dials it. The stranger answers with
    // a well-formed hello that even reuses the initiator's nonce, then echoes
    // the initiator's own proof back.
    let initiator = node(0, 7);
    let (mut a, mut stranger) = pipe();
    let fake_acceptor = async move {
        let mut theirs = [0; HELLO_LEN];
        stranger.read_exact(&mut theirs).await.unwrap();
        let mut ours = hello(Role::Acceptor, 1, 0, digest());
        ours[51..83].copy_from_slice(&theirs[51..83]);
        stranger.write_all(&ours).await.unwrap();
        let mut proof = [0; PROOF_LEN];
        stranger.read_exact(&mut proof).await.unwrap();
        stranger.write_all(&proof).await.unwrap();
        stranger
    };
    // The initiator drops its end when it is done, so a broken initiator
    // fails the stranger's reads instead of hanging the test.
    let initiating = async move { initiator.initiate(&mut a, NodeId(1)).await };
    let (initiated, _stranger) = tokio::join!(initiating, fake_acceptor);
    assert_matches!(initiated, Err(HandshakeError::BadProof));
}

#[tokio::test(start_paused = true)]
async fn a_reflected_hello_is_refused() {
    // The stranger echoes the initiator's hello as its own.
    let initiator = node(0, 7);
    let (mut a, mut stranger) = pipe();
    let fake_acceptor = async move {
        let mut theirs = [0; HELLO_LEN];
        stranger.read_exact(&mut theirs).await.unwrap();
        stranger.write_all(&theirs).await.unwrap();
        stranger
    };
    // The initiator drops its end when it is done, so a broken initiator
    // fails the stranger's reads instead of hanging the test.
    let initiating = async move { initiator.initiate(&mut a, NodeId(1)).await };
    let (initiated, _stranger) = tokio::join!(initiating, fake_acceptor);
    assert_matches!(initiated, Err(HandshakeError::WrongRole(1)));

    // And an acceptor refuses a hello in the acceptor's role.
    let transcript = hello(Role::Acceptor, 1, 0, digest());
    let accepted = accept_transcript(&node(0, 7), &transcript, false).await;
    assert_matches!(accepted, Err(HandshakeError::WrongRole(2)));
}

#[tokio::test]
async fn a_digest_mismatch_is_refused() {
    let other = ClusterDigest::of_members(&["10.0.0.1:4000", "10.0.0.2:4000", "10.0.0.9:4000"]);
    let initiator = Handshake::new(key(7), other, NodeId(1), 3);
    let (initiated, accepted) = run(&initiator, NodeId(0), &node(0, 7)).await;
    assert_matches!(accepted, Err(HandshakeError::DigestMismatch));
    assert_matches!(initiated, Err(HandshakeError::Closed));
}

#[tokio::test]
async fn ids_out_of_range_or_our_own_are_refused() {
    let acceptor = node(0, 7);
    let accepted =
        accept_transcript(&acceptor, &hello(Role::Initiator, 3, 0, digest()), false).await;
    assert_matches!(
        accepted,
        Err(HandshakeError::UnknownNode {
            claimed: 3,
            members: 3
        })
    );
    let far = hello(Role::Initiator, u32::MAX, 0, digest());
    let accepted = accept_transcript(&acceptor, &far, false).await;
    assert_matches!(accepted, Err(HandshakeError::UnknownNode { .. }));
    let accepted =
        accept_transcript(&acceptor, &hello(Role::Initiator, 0, 0, digest()), false).await;
    assert_matches!(accepted, Err(HandshakeError::ImpersonatesUs(NodeId(0))));
}

#[tokio::test]
async fn a_connection_that_reached_the_wrong_node_is_refused() {
    // Node 1 dials node 2's address but node 0 answers (stale address).
    let (initiated, accepted) = run(&node(1, 7), NodeId(2), &node(0, 7)).await;
    assert_matches!(
        accepted,
        Err(HandshakeError::Misdirected {
            intended: 2,
            me: NodeId(0)
        })
    );
    assert_matches!(initiated, Err(HandshakeError::Closed));

    // A peer answering with another id than the one dialled.
    let initiator = node(1, 7);
    let (mut a, mut stranger) = pipe();
    stranger
        .write_all(&hello(Role::Acceptor, 0, 1, digest()))
        .await
        .unwrap();
    let initiated = initiator.initiate(&mut a, NodeId(2)).await;
    assert_matches!(
        initiated,
        Err(HandshakeError::UnexpectedPeer {
            expected: NodeId(2),
            claimed: 0
        })
    );
}

#[tokio::test]
async fn bad_magic_and_other_versions_are_refused_after_the_header() {
    let acceptor = node(0, 7);
    // Only the 10-byte header is sent and the client stays: the verdict must
    // not wait for more.
    let accepted = accept_transcript(&acceptor, b"GET / HTTP", true).await;
    assert_matches!(accepted, Err(HandshakeError::BadMagic));

    for other in [1u16, 2, 3, 4, 5, 6, 7, 8, 10] {
        let mut hello = hello(Role::Initiator, 1, 0, digest());
        hello[8..10].copy_from_slice(&other.to_be_bytes());
        let accepted = accept_transcript(&acceptor, &hello[..HEADER_LEN], true).await;
        let expected = HandshakeError::UnsupportedVersion {
            ours: 9,
            theirs: other,
        };
        assert_eq!(
            accepted.err().map(|e| e.to_string()),
            Some(expected.to_string())
        );
    }
}

#[tokio::test]
async fn a_forged_proof_is_refused() {
    let mut transcript = hello(Role::Initiator, 1, 0, digest()).to_vec();
    transcript.extend_from_slice(&[0xAB; PROOF_LEN]);
    let accepted = accept_transcript(&node(0, 7), &transcript, true).await;
    assert_matches!(accepted, Err(HandshakeError::BadProof));
}

#[tokio::test(start_paused = true)]
async fn a_silent_client_times_out() {
    let start = Instant::now();
    let accepted = accept_transcript(&node(0, 7), b"", true).await;
    assert_matches!(accepted, Err(HandshakeError::TimedOut(DEFAULT_TIMEOUT)));
    assert_eq!(start.elapsed(), DEFAULT_TIMEOUT);
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stalls_mid_hello_times_out() {
    let half = hello(Role::Initiator, 1, 0, digest());
    let acceptor = node(0, 7).with_timeout(Duration::from_millis(300));
    let start = Instant::now();
    let accepted = accept_transcript(&acceptor, &half[..HELLO_LEN / 2], true).await;
    assert_matches!(accepted, Err(HandshakeError::TimedOut(_)));
    assert_eq!(start.elapsed(), Duration::from_millis(300));

    // Stalling before the proof is no better.
    let accepted = accept_transcript(&acceptor, &half, true).await;
    assert_matches!(accepted, Err(HandshakeError::TimedOut(_)));
}

#[tokio::test(start_paused = true)]
async fn a_silent_acceptor_times_the_initiator_out() {
    let (mut a, _silent) = pipe();
    let initiated = node(1, 7).initiate(&mut a, NodeId(0)).await;
    assert_matches!(initiated, Err(HandshakeError::TimedOut(_)));
}

#[tokio::test(start_paused = true)]
async fn a_stalled_client_does_not_hold_up_other_connections() {
    let acceptor = Arc::new(node(0, 7));
    let start = Instant::now();
    let (_silent_client, mut silent) = pipe();
    let stalled = tokio::spawn({
        let acceptor = acceptor.clone();
        async move { acceptor.accept(&mut silent).await }
    });
    let (initiated, accepted) = run(&node(2, 7), NodeId(0), &acceptor).await;
    initiated.unwrap();
    assert_eq!(accepted.unwrap(), NodeId(2));
    assert!(start.elapsed() < Duration::from_secs(1));
    assert!(!stalled.is_finished());
    let stalled = stalled.await.unwrap();
    assert_matches!(stalled, Err(HandshakeError::TimedOut(_)));
}

#[tokio::test]
async fn works_over_loopback_tcp() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (acceptor, initiator) = (node(1, 7), node(2, 7));
    let accepting = async {
        let (mut stream, _) = listener.accept().await.unwrap();
        let peer = acceptor.accept(&mut stream).await.unwrap();
        let mut buf = [0; 4];
        stream.read_exact(&mut buf).await.unwrap();
        (peer, buf)
    };
    let dialling = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        initiator.initiate(&mut stream, NodeId(1)).await.unwrap();
        stream.write_all(b"ping").await.unwrap();
    };
    let ((peer, buf), ()) = tokio::join!(accepting, dialling);
    assert_eq!(peer, NodeId(2));
    assert_eq!(&buf, b"ping");
}

#[tokio::test]
async fn a_stranger_over_loopback_tcp_is_dropped_with_a_reason() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = node(0, 7);
    let accepting = async {
        let (mut stream, _) = listener.accept().await.unwrap();
        acceptor.accept(&mut stream).await
    };
    let stranger = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03])
            .await
            .unwrap();
        let mut rest = Vec::new();
        // The member closes without answering.
        stream.read_to_end(&mut rest).await.unwrap();
        rest
    };
    let (accepted, answer) = tokio::join!(accepting, stranger);
    let reason = accepted.unwrap_err().to_string();
    assert_eq!(reason, "not an rdmc handshake (bad magic)");
    assert!(answer.is_empty());
}

#[test]
fn nonces_are_fresh_and_the_format_is_as_documented() {
    let one = hello(Role::Initiator, 1, 0, digest());
    let two = hello(Role::Initiator, 1, 0, digest());
    assert_ne!(one[51..83], two[51..83]);
    assert_eq!(one[..51], two[..51]);
    assert_eq!(one[83..], two[83..]);
    assert_eq!(&one[..8], b"RDMC-HS\0");
    assert_eq!(one[8..10], [0, 9]);
    assert_eq!(one[10], 1);
    assert_eq!(one[11..15], [0, 0, 0, 1]);
    assert_eq!(one[15..19], [0, 0, 0, 0]);
    assert_eq!(one[19..51], digest().0);
    let incarnation = Hello::new(
        Role::Initiator,
        (NodeId(1), 0x0102_0304_0506_0708),
        NodeId(0),
        digest(),
    );
    assert_eq!(incarnation.encode()[83..91], [1, 2, 3, 4, 5, 6, 7, 8]);
    // No listening address told: family 0, the rest zeros.
    assert_eq!(one[91..], [0; 19]);
    let v4 = Hello {
        listen: Some("10.1.2.3:4000".parse().unwrap()),
        ..Hello::new(Role::Initiator, (NodeId(1), 0), NodeId(0), digest())
    };
    let bytes = v4.encode();
    assert_eq!(bytes[91], 4);
    assert_eq!(bytes[92..96], [10, 1, 2, 3]);
    assert_eq!(bytes[96..108], [0; 12]);
    assert_eq!(bytes[108..110], 4000u16.to_be_bytes());
    assert_eq!(Hello::decode(&bytes).unwrap().listen, v4.listen);
    let v6 = Hello {
        listen: Some("[fe80::1:2]:65535".parse().unwrap()),
        ..v4
    };
    let bytes = v6.encode();
    assert_eq!(bytes[91], 6);
    assert_eq!(Hello::decode(&bytes).unwrap().listen, v6.listen);
    assert_eq!(one.len(), 110);
}

#[tokio::test]
async fn an_unknown_address_family_is_refused_before_an_answer() {
    let acceptor = node(0, 7);
    let mut hello = hello(Role::Initiator, 1, 0, digest());
    hello[91] = 5;
    let accepted = accept_transcript(&acceptor, &hello, true).await;
    assert_matches!(accepted, Err(HandshakeError::BadAddress(5)));
}

#[tokio::test]
async fn open_membership_lets_in_an_id_beyond_the_list_and_learns_its_address() {
    let open = |me: u32| {
        // Its own list reaches as far as itself.
        let listed = MEMBERS.len().max(me as usize + 1);
        Handshake::new(key(7), ClusterDigest::open(), NodeId(me), listed).with_open_membership(true)
    };
    let joining = open(9).with_listen("10.0.0.9:4000".parse().unwrap());
    let (mut a, mut b) = pipe();
    let acceptor = open(0);
    let (dialled, accepted) = tokio::join!(
        async move { joining.initiate_keyed(&mut a, NodeId(0)).await },
        async move { acceptor.accept_keyed(&mut b).await },
    );
    assert_eq!(dialled.unwrap().peer, NodeId(0));
    let accepted = accepted.unwrap();
    assert_eq!(accepted.peer, NodeId(9));
    assert_eq!(accepted.listen, Some("10.0.0.9:4000".parse().unwrap()));
    // Without open membership, the same id is refused; and an open node
    // and a closed one refuse each other whatever the ids.
    let (refused, accepted) = run(&open(9), NodeId(0), &node(0, 7)).await;
    assert!(refused.is_err());
    assert_matches!(
        accepted,
        Err(HandshakeError::UnknownNode { claimed: 9, .. })
    );
    let (refused, accepted) = run(&open(1), NodeId(0), &node(0, 7)).await;
    assert!(refused.is_err());
    assert_matches!(accepted, Err(HandshakeError::DigestMismatch));
}

/// A vetting end is asked about the peer's id and incarnation from its
/// hello before it proves anything: a refused run fails at both ends, a
/// let-in one gets in (its incarnation told).
#[tokio::test(start_paused = true)]
async fn a_vetted_run_is_refused_at_both_ends_before_any_proof() {
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let vet = |refuse_below: u64| -> Vet {
        let asked = asked.clone();
        Arc::new(move |peer: NodeId, incarnation: u64| {
            asked.lock().unwrap().push((peer, incarnation));
            if incarnation < refuse_below {
                Err(format!("run {incarnation} of {peer} has ended"))
            } else {
                Ok(())
            }
        })
    };
    // The acceptor refuses the initiator's old run.
    let old = node(1, 7).with_incarnation(3);
    let (initiated, accepted) = run(&old, NodeId(0), &node(0, 7).with_vet(vet(4))).await;
    assert_eq!(
        accepted.unwrap_err().to_string(),
        "refused: run 3 of 1 has ended"
    );
    assert_matches!(initiated, Err(HandshakeError::Closed));
    // The initiator refuses the acceptor's old run, after its hello and
    // before its proof: the acceptor never sees one.
    let (initiated, accepted) = run(
        &node(1, 7).with_vet(vet(6)),
        NodeId(0),
        &node(0, 7).with_incarnation(5),
    )
    .await;
    assert_matches!(initiated, Err(HandshakeError::Refused(_)));
    assert_matches!(accepted, Err(HandshakeError::Closed));
    // A run let in connects, and its incarnation is what the other end got.
    let (mut a, mut b) = pipe();
    let (initiator, acceptor) = (node(2, 7).with_incarnation(9), node(0, 7).with_vet(vet(4)));
    let (initiated, accepted) = tokio::join!(
        initiator.initiate_keyed(&mut a, NodeId(0)),
        acceptor.accept_keyed(&mut b)
    );
    assert_eq!(initiated.unwrap().incarnation, 0);
    assert_eq!(accepted.unwrap().incarnation, 9);
    assert_eq!(
        *asked.lock().unwrap(),
        [(NodeId(1), 3), (NodeId(0), 5), (NodeId(2), 9)]
    );
}

/// A handshake's `Debug` tells whose it is, never its key.
#[test]
fn a_handshake_prints_its_node_never_its_key() {
    let shown = format!("{:?}", node(2, 0xab).with_incarnation(4));
    assert_eq!(
        shown,
        "Handshake { me: NodeId(2), members: 3, incarnation: 4, .. }"
    );
}

#[test]
fn every_error_reads_as_one_line() {
    let errors = [
        HandshakeError::BadMagic,
        HandshakeError::UnsupportedVersion { ours: 1, theirs: 9 },
        HandshakeError::WrongRole(2),
        HandshakeError::UnknownNode {
            claimed: 9,
            members: 3,
        },
        HandshakeError::ImpersonatesUs(NodeId(0)),
        HandshakeError::UnexpectedPeer {
            expected: NodeId(1),
            claimed: 2,
        },
        HandshakeError::Misdirected {
            intended: 2,
            me: NodeId(0),
        },
        HandshakeError::DigestMismatch,
        HandshakeError::BadProof,
        HandshakeError::TimedOut(DEFAULT_TIMEOUT),
        HandshakeError::Closed,
        HandshakeError::Io(io::Error::other("boom")),
    ];
    for error in errors {
        let line = format!("dropped peer 10.0.0.7:4000: {error}");
        assert!(!line.contains('\n'), "{line}");
    }
}

proptest! {
    /// Any byte string as the whole client transcript ends in an error —
    /// never a panic, a success or a hang — whether or not the client then
    /// closes its end.
    #[test]
    fn garbage_is_refused(
        transcript in proptest::collection::vec(any::<u8>(), 0..300),
        keep_open: bool,
    ) {
        let accepted =
            paused_runtime().block_on(accept_transcript(&node(0, 7), &transcript, keep_open));
        prop_assert!(accepted.is_err());
    }

    /// A well-formed hello from a member followed by anything but the right
    /// proof is refused too.
    #[test]
    fn a_valid_hello_with_a_garbage_tail_is_refused(
        from in 1u32..3,
        tail in proptest::collection::vec(any::<u8>(), 0..100),
        keep_open: bool,
    ) {
        let mut transcript = hello(Role::Initiator, from, 0, digest()).to_vec();
        transcript.extend_from_slice(&tail);
        let accepted =
            paused_runtime().block_on(accept_transcript(&node(0, 7), &transcript, keep_open));
        // A client that left makes the acceptor's answer fail first; one that
        // stays gets its proof checked once it has sent enough bytes.
        match accepted {
            Err(HandshakeError::Closed) => prop_assert!(!keep_open),
            Err(HandshakeError::BadProof) => prop_assert!(keep_open && tail.len() >= PROOF_LEN),
            Err(HandshakeError::TimedOut(_)) => prop_assert!(keep_open && tail.len() < PROOF_LEN),
            other => prop_assert!(false, "unexpected {other:?}"),
        }
    }

    /// Garbage from a fake acceptor cannot crash or stall the initiator.
    #[test]
    fn an_initiator_refuses_a_garbage_acceptor(
        answer in proptest::collection::vec(any::<u8>(), 0..300),
        keep_open: bool,
    ) {
        let initiated = paused_runtime().block_on(async {
            let (mut a, mut stranger) = pipe();
            stranger.write_all(&answer).await.unwrap();
            let kept = keep_open.then_some(stranger);
            let initiated = node(1, 7).initiate(&mut a, NodeId(0)).await;
            drop(kept);
            initiated
        });
        prop_assert!(initiated.is_err());
    }
}
