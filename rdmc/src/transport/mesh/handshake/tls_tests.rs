//! Tests of the handshake with per-node identities: honest nodes, a node
//! holding another node's valid certificate (accepting and dialling), a
//! certificate from another authority, a node without an identity, and the
//! raw bytes that follow the handshake on the same socket.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::transport::mesh::identity::IdentityError;

/// Members of the test cluster.
const MEMBERS: [&str; 4] = [
    "10.0.0.1:4000",
    "10.0.0.2:4000",
    "10.0.0.3:4000",
    "10.0.0.4:4000",
];

/// A certificate authority of the tests: its certificate (PEM) and issuer.
struct Authority {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Authority {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Authority {
            pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// Credentials of node `id`, trusting `trusted`'s certificate.
    fn identity_for(&self, id: u32, trusted: &Authority) -> NodeIdentity {
        let mut params =
            CertificateParams::new(vec![NodeIdentity::subject_name(NodeId(id))]).unwrap();
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        NodeIdentity::from_pem(
            trusted.pem.as_bytes(),
            cert.pem().as_bytes(),
            key.serialize_pem().as_bytes(),
        )
        .unwrap()
    }

    /// Credentials of node `id`.
    fn identity(&self, id: u32) -> NodeIdentity {
        self.identity_for(id, self)
    }
}

/// Node `me` of [`MEMBERS`] proving itself with `identity` (if any).
fn node(me: u32, identity: Option<NodeIdentity>) -> Handshake {
    let key = ClusterKey::from_bytes(vec![7; 32]).unwrap();
    Handshake::new(key, ClusterDigest::of_members(&MEMBERS), NodeId(me), 4)
        .with_identity(identity)
        .with_timeout(Duration::from_secs(10))
}

/// A connected pair of TCP sockets on loopback.
async fn sockets() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (dialled, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
    (dialled.unwrap(), accepted.unwrap().0)
}

/// Runs `initiator` dialling `expected` against `acceptor` over TCP; on
/// success each end then writes raw bytes and reads the other's, as a link
/// does after the handshake.
async fn run(
    initiator: &Handshake,
    expected: u32,
    acceptor: &Handshake,
) -> (
    Result<Authenticated, HandshakeError>,
    Result<Authenticated, HandshakeError>,
) {
    let (a, b) = sockets().await;
    let raw = |mut stream: TcpStream, ours: &'static [u8]| async move {
        stream.write_all(ours).await.unwrap();
        let mut theirs = vec![0; 16];
        stream.read_exact(&mut theirs).await.unwrap();
        theirs
    };
    // Each end drops its socket as soon as its side fails, as a real
    // caller does.
    let (dialled, accepted) = tokio::join!(
        async move {
            let mut a = a;
            let done = initiator.initiate_keyed(&mut a, NodeId(expected)).await;
            done.map(|auth| (auth, a))
        },
        async move {
            let mut b = b;
            let done = acceptor.accept_keyed(&mut b).await;
            done.map(|auth| (auth, b))
        },
    );
    let (dialled, accepted) = match (dialled, accepted) {
        (Ok((dialled, a)), Ok((accepted, b))) => {
            // Raw frames right after the handshake reach the other end whole:
            // TLS took in nothing past its last record.
            let (at_a, at_b) =
                tokio::join!(raw(a, b"from the dialler"), raw(b, b"from the acceptr"));
            assert_eq!(at_a, b"from the acceptr");
            assert_eq!(at_b, b"from the dialler");
            (Ok(dialled), Ok(accepted))
        }
        (dialled, accepted) => (dialled.map(|d| d.0), accepted.map(|a| a.0)),
    };
    (dialled, accepted)
}

#[tokio::test]
async fn nodes_with_their_own_certificates_connect_and_share_fresh_keys() {
    let authority = Authority::new("rdmc test authority");
    let (one, three) = (
        node(1, Some(authority.identity(1))),
        node(3, Some(authority.identity(3))),
    );
    let (dialled, accepted) = run(&three, 1, &one).await;
    let (dialled, accepted) = (dialled.unwrap(), accepted.unwrap());
    assert_eq!(dialled.peer, NodeId(1));
    assert_eq!(accepted.peer, NodeId(3));
    // Both ends derive the same secrets from the TLS session, and they
    // differ from those of the next connection.
    assert_eq!(dialled.key.0, accepted.key.0);
    assert_eq!(dialled.link_secret, accepted.link_secret);
    assert!(dialled.link_secret.is_some());
    assert_ne!(dialled.link_secret, Some(dialled.key.0));
    let (again, _) = run(&three, 1, &one).await;
    assert_ne!(again.unwrap().link_secret, dialled.link_secret);
    // Without identities there is no link secret (the cluster key keys
    // the frames).
    let (plain, _) = run(&node(3, None), 1, &node(1, None)).await;
    assert_eq!(plain.unwrap().link_secret, None);
}

#[tokio::test]
async fn a_node_holding_another_nodes_certificate_cannot_claim_its_id() {
    let authority = Authority::new("rdmc test authority");
    let one = node(1, Some(authority.identity(1)));
    // Node 2's valid credentials, claiming to be node 3 (up or down makes
    // no difference: the acceptor checks the certificate against the
    // claim), dialling node 1: refused, naming both.
    let impostor = node(3, Some(authority.identity(2)));
    let (dialled, accepted) = run(&impostor, 1, &one).await;
    let err = accepted.unwrap_err();
    assert!(
        matches!(&err, HandshakeError::NotCertified { claimed: 3, presented }
            if presented == "node-2.rdmc.internal"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "peer claims to be node 3, but its certificate is for node-2.rdmc.internal"
    );
    assert!(dialled.is_err());
    // Accepting as node 1 with node 2's certificate: whoever dials node 1
    // refuses it.
    let impostor = node(1, Some(authority.identity(2)));
    let three = node(3, Some(authority.identity(3)));
    let (dialled, accepted) = run(&three, 1, &impostor).await;
    let err = dialled.unwrap_err();
    assert!(
        matches!(&err, HandshakeError::NotCertified { claimed: 1, presented }
            if presented == "node-2.rdmc.internal"),
        "{err:?}"
    );
    assert!(accepted.is_err());
}

#[tokio::test]
async fn a_certificate_from_another_authority_is_refused_both_ways() {
    let (ours, theirs) = (Authority::new("ours"), Authority::new("theirs"));
    let one = node(1, Some(ours.identity(1)));
    // Issued by another authority, although it names node 3 and trusts ours.
    let stranger = node(3, Some(theirs.identity_for(3, &ours)));
    let (dialled, accepted) = run(&stranger, 1, &one).await;
    let err = accepted.unwrap_err();
    assert!(
        matches!(&err, HandshakeError::Tls(m) if m.contains("UnknownIssuer")),
        "{err:?}"
    );
    assert!(dialled.is_err());
    let (dialled, accepted) = run(&one, 3, &stranger).await;
    let err = dialled.unwrap_err();
    assert!(
        matches!(&err, HandshakeError::Tls(m) if m.contains("UnknownIssuer")),
        "{err:?}"
    );
    assert!(accepted.is_err());
}

#[tokio::test]
async fn a_node_without_an_identity_and_one_with_do_not_connect() {
    let authority = Authority::new("rdmc test authority");
    let with = node(1, Some(authority.identity(1)));
    let without = node(3, None);
    let (dialled, accepted) = run(&without, 1, &with).await;
    assert!(
        dialled.is_err() && accepted.is_err(),
        "{dialled:?} {accepted:?}"
    );
    let (dialled, accepted) = run(&with, 3, &without).await;
    assert!(
        dialled.is_err() && accepted.is_err(),
        "{dialled:?} {accepted:?}"
    );
}

#[test]
fn an_identity_names_its_node_and_bad_pem_is_refused() {
    let authority = Authority::new("rdmc test authority");
    let identity = authority.identity(2);
    assert_eq!(identity.check_names(NodeId(2)), Ok(()));
    let err = identity.check_names(NodeId(3)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the certificate is for node-2.rdmc.internal, not node 3 (want the name node-3.rdmc.internal)"
    );
    assert!(format!("{identity:?}").contains("node-2.rdmc.internal"));
    let garbage = NodeIdentity::from_pem(b"garbage", b"garbage", b"garbage").unwrap_err();
    assert!(
        matches!(
            garbage,
            IdentityError::BadPem {
                what: "authority certificate",
                ..
            }
        ),
        "{garbage:?}"
    );
    // A key that is not the certificate's.
    let other = KeyPair::generate().unwrap().serialize_pem();
    let params = CertificateParams::new(vec![NodeIdentity::subject_name(NodeId(1))]).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &authority.issuer).unwrap().pem();
    let mismatch =
        NodeIdentity::from_pem(authority.pem.as_bytes(), cert.as_bytes(), other.as_bytes());
    assert!(
        matches!(mismatch, Err(IdentityError::Unusable(_))),
        "{mismatch:?}"
    );
}

/// What the members say of a node claiming node 3 with node 2's
/// certificate.
const REFUSAL: &str = "peer claims to be node 3, but its certificate is for node-2.rdmc.internal";

/// Four listeners on loopback, and their addresses.
fn bound() -> (Vec<std::net::TcpListener>, Vec<std::net::SocketAddr>) {
    let listeners: Vec<_> = (0..4)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    (listeners, addrs)
}

/// A process holding node 2's valid credentials claims to be node 3: it
/// dials each of `targets` at `members` with the cluster key and the right
/// member list; every attempt must fail.
async fn impostor(authority: &Authority, members: &[std::net::SocketAddr], targets: &[u32]) {
    let entries: Vec<String> = members
        .iter()
        .map(|m| crate::transport::mesh::MeshPurpose::Tcp.digest_entry(m))
        .collect();
    let handshake = Handshake::new(
        ClusterKey::from_bytes(vec![9; 32]).unwrap(),
        ClusterDigest::of_members(&entries),
        NodeId(3),
        members.len(),
    )
    .with_identity(Some(authority.identity(2)));
    for &target in targets {
        let mut stream = TcpStream::connect(members[target as usize]).await.unwrap();
        let outcome = handshake.initiate_keyed(&mut stream, NodeId(target)).await;
        assert!(outcome.is_err(), "node {target} let the impostor in");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_refuse_a_node_with_another_nodes_certificate_whether_it_is_up_or_down() {
    use crate::{Node, NodeConfig, TcpConfig};
    let authority = Authority::new("rdmc test authority");
    let key = ClusterKey::from_bytes(vec![9; 32]).unwrap();
    let start = |id: u32, listener, members: &Vec<std::net::SocketAddr>, wait: u64| {
        let config = TcpConfig::new(members.clone(), NodeId(id), key.clone())
            .with_listener(listener)
            .with_identity(authority.identity(id))
            .with_connect_timeout(Duration::from_secs(wait));
        tokio::spawn(Node::tcp(config, NodeConfig::new()))
    };

    // Node 3 down: nodes 0-2 wait for it; the impostor is refused by each,
    // and each one's start fails naming the refusal.
    let (listeners, members) = bound();
    let starting: Vec<_> = listeners
        .into_iter()
        .take(3)
        .zip(0..)
        .map(|(l, id)| start(id, l, &members, 3))
        .collect();
    impostor(&authority, &members, &[0, 1, 2]).await;
    for (id, node) in starting.into_iter().enumerate() {
        let err = node.await.unwrap().expect_err("no node 3 came");
        assert!(err.to_string().contains(REFUSAL), "node {id}: {err}");
    }

    // Node 3 up: the cluster forms; the impostor is refused, and node 3's
    // run stays the one every member knows.
    let (listeners, members) = bound();
    let starting: Vec<_> = listeners
        .into_iter()
        .zip(0..)
        .map(|(l, id)| start(id, l, &members, 20))
        .collect();
    let mut nodes = Vec::new();
    for node in starting {
        nodes.push(node.await.unwrap().unwrap());
    }
    let before = nodes[0].peers().await.unwrap();
    impostor(&authority, &members, &[0, 1, 2]).await;
    let after = nodes[0].peers().await.unwrap();
    assert_eq!(before, after);
    assert!(after.iter().all(|p| p.up), "{after:?}");
    for node in nodes {
        node.shutdown().await;
    }
}

/// An inner stream that hands out its bytes in the given pieces, at most
/// one piece per read.
struct Pieces(std::collections::VecDeque<Vec<u8>>);

impl AsyncRead for Pieces {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        if let Some(mut piece) = self.0.pop_front() {
            let n = piece.len().min(buf.remaining());
            buf.put_slice(&piece[..n]);
            if n < piece.len() {
                self.0.push_front(piece.split_off(n));
            }
        }
        std::task::Poll::Ready(Ok(()))
    }
}

/// TLS reads through [`tls::RecordBounded`] never take a byte past a
/// record, however the socket hands the bytes over (a header in parts, two
/// records and what follows in one piece): the bytes after the last record
/// stay in the socket for the frames.
#[tokio::test]
async fn tls_reads_stop_at_each_record_s_end() {
    let record = |len: u16| {
        let mut r = vec![23, 3, 3];
        r.extend_from_slice(&len.to_be_bytes());
        r.extend((0..len).map(|i| i as u8));
        r
    };
    let records: Vec<u8> = [record(3), record(300), record(0), record(70)].concat();
    let after = b"the first frame".to_vec();
    let whole: Vec<u8> = [records.clone(), after.clone()].concat();
    // Each way of cutting the bytes: all at once, byte by byte, and cut
    // inside each header and body.
    let cuts: Vec<Vec<usize>> = vec![
        vec![],
        (1..whole.len()).collect(),
        vec![2, 6, 9, 12, 100, 313, 316, 330],
    ];
    for cut in cuts {
        let mut pieces = std::collections::VecDeque::new();
        let mut from = 0;
        for &to in cut.iter().chain([&whole.len()]) {
            pieces.push_back(whole[from..to].to_vec());
            from = to;
        }
        let mut bounded = tls::RecordBounded::new(Pieces(pieces));
        let mut read = Vec::new();
        let mut ends = Vec::new();
        while read.len() < records.len() {
            let mut buf = [0; 4096];
            let n = bounded.read(&mut buf).await.unwrap();
            assert!(n > 0, "cut {cut:?}: the stream ended early");
            read.extend_from_slice(&buf[..n]);
            ends.push(read.len());
        }
        assert_eq!(read, records, "cut {cut:?}: read past the last record");
        // No read spans a record's header and body.
        for end in [5, 8, 13, 313, 318, 323] {
            assert!(
                ends.contains(&end),
                "cut {cut:?}: a read crossed byte {end}"
            );
        }
        let mut rest = Vec::new();
        bounded.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, after, "cut {cut:?}");
    }
}

/// Writes through [`tls::RecordBounded`] reach the inner stream, and so do
/// its flushes and its shutdown (here a buffered writer that sends nothing
/// until flushed).
#[tokio::test(start_paused = true)]
async fn tls_writes_flush_and_shut_down_through_the_record_bound() {
    use std::time::Duration;
    let (a, mut b) = tokio::io::duplex(1024);
    let mut bounded = tls::RecordBounded::new(tokio::io::BufWriter::new(a));
    let mut buf = [0; 5];
    bounded.write_all(b"hello").await.unwrap();
    let early = tokio::time::timeout(Duration::from_secs(1), b.read_exact(&mut buf)).await;
    assert!(early.is_err(), "the writer buffers until flushed");
    bounded.flush().await.unwrap();
    tokio::time::timeout(Duration::from_secs(1), b.read_exact(&mut buf))
        .await
        .expect("flushed")
        .unwrap();
    assert_eq!(&buf, b"hello");
    bounded.write_all(b"bye").await.unwrap();
    bounded.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(1), b.read_to_end(&mut rest))
        .await
        .expect("flushed and shut down")
        .unwrap();
    assert_eq!(rest, b"bye");
}
