//! The authenticated connection handshake of the TCP mesh.
//!
//! Right after a TCP connection between two members is established, both ends
//! run this handshake: the end that dialled calls [`Handshake::initiate_keyed`]
//! (it knows whom it dialled), the end that accepted calls
//! [`Handshake::accept_keyed`] (it learns who connected). Only when the handshake
//! succeeds may the connection carry cluster traffic; on failure the caller
//! drops the connection and logs the reason, for example
//! `warn!("dropped peer {addr}: {err}")` — every [`HandshakeError`] reads as
//! one line.
//!
//! # Threat model
//!
//! Protects against:
//! - **strangers**: only a party holding the pre-shared [`ClusterKey`] can
//!   produce a valid proof, so nobody else is let in, and a stranger that
//!   connects to a member learns nothing keyed — the acceptor proves itself
//!   only after the initiator has;
//! - **replay**: both ends contribute a fresh 32-byte random nonce, and each
//!   proof covers both, so a proof recorded from an earlier handshake is
//!   useless;
//! - **reflection**: each proof is bound to the prover's role, so echoing the
//!   peer's own proof back to it fails;
//! - **confusion**: the proofs cover both node ids and the cluster digest, so a
//!   member with another member list, or a connection that reached the wrong
//!   node, is refused with a clear reason;
//! - **garbage and stalling**: every message has a fixed size (no length comes
//!   from the peer), every field is checked before anything else is read, and
//!   the whole handshake runs under a timeout, so a garbage-speaking,
//!   slow-loris or silent client costs one task for at most that long and
//!   never crashes or stalls the member.
//!
//! Known limitations:
//! - **later traffic is protected by the transport, not here**: the
//!   handshake authenticates the connection's two ends at its start. On
//!   `tcp`, every frame after it carries a MAC (or is encrypted) under keys
//!   derived from the cluster key and fresh nonces of both ends, per
//!   connection and direction (`WireSecurity`); with
//!   `WireSecurity::None`, and on the `ofi` rendezvous connection (which
//!   only swaps fabric addresses), an attacker on the path who relays a
//!   genuine handshake can inject or alter what follows.
//! - **one key for the whole cluster**, unless nodes have identities: any
//!   key holder can claim any member id; the key authenticates membership
//!   of the cluster, not a particular rank. With a [`NodeIdentity`] per
//!   node, the exchange below runs inside TLS 1.3 (rustls) in which both
//!   ends present a certificate of the cluster's authority: the dialling
//!   end checks that the acceptor's names the node it dialled, the
//!   accepting end that the initiator's names the node its hello claims,
//!   and the session key and the frame keys' secret are exported from the
//!   TLS session (bound to both hellos), so that only the two certified
//!   ends know them. The connection then leaves TLS ([`tls`]).
//! - the cluster digest is sent in the clear (it is a hash of the member
//!   list, not a secret).
//!
//! # Wire format (version 9)
//!
//! Integers are big-endian. `I` is the initiator (the end that dialled), `A`
//! the acceptor.
//!
//! ```text
//! 1. I -> A  Hello   (110 bytes)
//! 2. A -> I  Hello   (110 bytes)  only if A accepts I's hello
//! 3. I -> A  Proof   (32 bytes)
//! 4. A -> I  Proof   (32 bytes)   only if A accepts I's proof
//!
//! Hello:
//!   offset size field
//!        0    8 magic      b"RDMC-HS\0"
//!        8    2 version    9
//!       10    1 role       1 = initiator, 2 = acceptor
//!       11    4 from       the sender's node id
//!       15    4 to         the node id the sender believes it talks to
//!       19   32 digest     the cluster digest (see ClusterDigest)
//!       51   32 nonce      fresh random bytes from a CSPRNG
//!       83    8 incarnation the sender's incarnation (see below)
//!       91    1 family     of the sender's listening address: 0 = none
//!                          told, 4 = IPv4, 6 = IPv6
//!       92   16 ip         the address (IPv4: the first 4 bytes, then zeros)
//!      108    2 port       its port
//!
//! Proof = HMAC-SHA256(cluster key,
//!                     b"rdmc handshake v1 proof" || role || hello_I || hello_A)
//! ```
//!
//! where `role` is the prover's role byte and `hello_I`, `hello_A` are the two
//! hellos exactly as sent. A receiver reads the magic and version first and
//! stops there if they are wrong (so a future version may change the rest);
//! it then checks the role, that `from` is a member other than itself (for
//! the initiator: the node it dialled; with open membership any other id),
//! that `to` is itself, and the digest, before it answers. Proofs are compared in constant time. A rejecting end
//! just closes the connection; the other end sees [`HandshakeError::Closed`].
//!
//! A node's *incarnation* tells its runs apart: a node that restarts comes
//! back with a higher one, so that its peers can tell the new run from a
//! late connection of the old one. The proofs cover it, so only a key
//! holder can claim one.
//!
//! The *listening address* is where the sender takes connections, as its
//! configuration says (its entry in its member list). With *open
//! membership* the member lists may differ — a node may join that is not in
//! the others' lists, or come back at another address — so the digest
//! covers no list, and a peer learns the address from here (covered by the
//! proofs like the rest of the hello).
//!
//! After both proofs, each end derives the connection's session key,
//! `HMAC-SHA256(cluster key, b"rdmc handshake v1 session" || hello_I ||
//! hello_A)`, which authenticates the mesh's formation messages that follow
//! ([`SessionKey`]).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::identity::NodeIdentity;
use super::key::{ClusterDigest, ClusterKey};
use crate::ids::NodeId;
use crate::transport::crypto::{self, HmacSha256};

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
mod tls;
#[cfg(test)]
mod tls_tests;

/// The protocol magic that opens every hello.
pub(crate) const MAGIC: [u8; 8] = *b"RDMC-HS\0";
/// The protocol version this build speaks: the handshake's and that of the
/// frames after it, so that a peer speaking older frames is refused at the
/// handshake instead of failing its first frame. Version 2 tagged
/// authenticated frames with AES-256-GCM (version 1 used keyed BLAKE3);
/// version 3 adds the short frame headers; version 4 evens out the
/// automatic block size (members computing the old sizes would refuse
/// each other's blocks); version 5 adds the sender's incarnation; version
/// 6 carries the cause of a failure in its report (a code per failure
/// kind), and the rendezvous says what differs (a fingerprint of the
/// settings before each join) and refuses an id in use; version 7 adds
/// the goodbye frame of a node that shuts down; version 8 the relayed
/// signals and the idle close of connections made on demand, and the
/// sender's listening address in the hello; version 9 the receivers'
/// counts of messages persisted.
pub(crate) const VERSION: u16 = 9;
/// Size of a hello message in bytes.
pub(crate) const HELLO_LEN: usize = 110;
/// Size of a proof message in bytes (one HMAC-SHA256 tag).
pub(crate) const PROOF_LEN: usize = 32;
/// How long a handshake may take unless configured otherwise.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Domain separation for the session key.
const SESSION_LABEL: &[u8] = b"rdmc handshake v1 session";

/// The secret of one authenticated connection, derived by both ends from
/// the cluster key and the two hellos (`HMAC-SHA256(cluster key, b"rdmc
/// handshake v1 session" || hello_I || hello_A)`): what authenticates the
/// mesh's own messages after the handshake
/// ([`formation`](super::formation)). Never shown by `Debug`.
#[cfg_attr(not(any(feature = "ofi", feature = "rdma")), allow(dead_code))]
#[derive(Clone)]
pub(crate) struct SessionKey([u8; 32]);

#[cfg_attr(not(any(feature = "ofi", feature = "rdma")), allow(dead_code))]
impl SessionKey {
    /// A MAC keyed with this key.
    pub(super) fn mac(&self) -> HmacSha256 {
        HmacSha256::new(&self.0)
    }

    /// A key from its bytes, for tests.
    #[cfg(test)]
    pub(crate) fn for_tests(bytes: [u8; 32]) -> Self {
        SessionKey(bytes)
    }
}

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKey(<redacted>)")
    }
}

/// Size of the magic plus the version: what is read before anything else.
const HEADER_LEN: usize = 10;
/// Domain separation for the proofs.
const PROOF_LABEL: &[u8] = b"rdmc handshake v1 proof";

/// Why a handshake failed. Each message fits a one-line log entry such as
/// `dropped peer 10.0.0.7:4000: <reason>`.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandshakeError {
    /// The peer does not speak this protocol.
    #[error("not an rdmc handshake (bad magic)")]
    BadMagic,
    /// The peer speaks another version of the handshake.
    #[error("unsupported handshake version {theirs} (we speak {ours})")]
    UnsupportedVersion {
        /// Our version.
        ours: u16,
        /// The peer's version.
        theirs: u16,
    },
    /// The peer's hello has the wrong role: it is not an initiator talking to
    /// an acceptor or the other way round (for example a reflected hello).
    #[error("peer sent a hello with the wrong role byte {0}")]
    WrongRole(u8),
    /// The peer's hello names its listening address in an unknown family.
    #[error("peer sent a hello with an unknown address family {0}")]
    BadAddress(u8),
    /// The peer claims a node id that is not in the cluster.
    #[error("peer claims node id {claimed}, but the cluster has {members} members")]
    UnknownNode {
        /// The id the peer claims.
        claimed: u32,
        /// The number of members.
        members: usize,
    },
    /// The peer claims to be this node.
    #[error("peer claims our own node id {0}")]
    ImpersonatesUs(NodeId),
    /// We dialled one member, but another one answered.
    #[error("dialled node {expected}, but the peer claims to be node {claimed}")]
    UnexpectedPeer {
        /// The node we dialled.
        expected: NodeId,
        /// The id the peer claims.
        claimed: u32,
    },
    /// The peer believes it talks to another node.
    #[error("peer meant to reach node {intended}, but this is node {me}")]
    Misdirected {
        /// The node the peer wanted.
        intended: u32,
        /// This node.
        me: NodeId,
    },
    /// The peer has another cluster digest: another member list or
    /// configuration.
    #[error(
        "cluster digest mismatch: the peer is configured with another member list (or one of \
         the two has open membership and the other not)"
    )]
    DigestMismatch,
    /// The peer's proof is wrong: it does not hold the cluster key.
    #[error("peer failed to prove it holds the cluster key")]
    BadProof,
    /// With per-node identities: the TLS handshake failed (a certificate
    /// the cluster's authority did not issue, a refusal by the peer).
    #[error("TLS handshake failed: {0}")]
    Tls(String),
    /// With per-node identities: the peer's certificate does not name the
    /// node it claims to be (or, dialling, the node dialled).
    #[error("peer claims to be node {claimed}, but its certificate is for {presented}")]
    NotCertified {
        /// The node claimed (or dialled).
        claimed: u32,
        /// The names its certificate carries.
        presented: String,
    },
    /// This end does not let the peer's run in (see [`Vet`]).
    #[error("refused: {0}")]
    Refused(String),
    /// The handshake did not complete in time.
    #[error("handshake not completed within {0:?}")]
    TimedOut(Duration),
    /// The peer closed the connection mid-handshake (it may have rejected us).
    #[error("peer closed the connection during the handshake (it may have rejected us)")]
    Closed,
    /// Another I/O error.
    #[error("I/O error during the handshake: {0}")]
    Io(#[source] io::Error),
}

impl From<io::Error> for HandshakeError {
    fn from(error: io::Error) -> Self {
        use io::ErrorKind::*;
        match error.kind() {
            UnexpectedEof | BrokenPipe | ConnectionReset | ConnectionAborted => {
                HandshakeError::Closed
            }
            _ => HandshakeError::Io(error),
        }
    }
}

/// Which end of the connection a message comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Role {
    /// The end that dialled.
    Initiator = 1,
    /// The end that accepted.
    Acceptor = 2,
}

/// The first message of each end, decoded.
#[derive(Clone, Debug)]
struct Hello {
    /// The sender's role byte.
    role: u8,
    /// The sender's node id.
    from: u32,
    /// The node id the sender believes it talks to.
    to: u32,
    /// The sender's cluster digest.
    digest: [u8; 32],
    /// The sender's nonce.
    nonce: [u8; 32],
    /// The sender's incarnation.
    incarnation: u64,
    /// Where the sender takes connections, if it says.
    listen: Option<SocketAddr>,
}

impl Hello {
    /// A hello from `from` in `role` to `to`, with a fresh nonce.
    fn new(
        role: Role,
        (from, incarnation): (NodeId, u64),
        to: NodeId,
        digest: ClusterDigest,
    ) -> Self {
        let nonce = crypto::random();
        Hello {
            role: role as u8,
            from: from.0,
            to: to.0,
            digest: digest.0,
            nonce,
            incarnation,
            listen: None,
        }
    }

    /// The wire form.
    fn encode(&self) -> [u8; HELLO_LEN] {
        let mut buf = [0; HELLO_LEN];
        buf[0..8].copy_from_slice(&MAGIC);
        buf[8..10].copy_from_slice(&VERSION.to_be_bytes());
        buf[10] = self.role;
        buf[11..15].copy_from_slice(&self.from.to_be_bytes());
        buf[15..19].copy_from_slice(&self.to.to_be_bytes());
        buf[19..51].copy_from_slice(&self.digest);
        buf[51..83].copy_from_slice(&self.nonce);
        buf[83..91].copy_from_slice(&self.incarnation.to_be_bytes());
        match self.listen {
            None => {}
            Some(SocketAddr::V4(addr)) => {
                buf[91] = 4;
                buf[92..96].copy_from_slice(&addr.ip().octets());
            }
            Some(SocketAddr::V6(addr)) => {
                buf[91] = 6;
                buf[92..108].copy_from_slice(&addr.ip().octets());
            }
        }
        if let Some(addr) = self.listen {
            buf[108..110].copy_from_slice(&addr.port().to_be_bytes());
        }
        buf
    }

    /// Decodes the fields after the header (magic and version) of `buf`.
    fn decode(buf: &[u8; HELLO_LEN]) -> Result<Self, HandshakeError> {
        let u32_at = |at: usize| u32::from_be_bytes(buf[at..at + 4].try_into().unwrap());
        let port = u16::from_be_bytes([buf[108], buf[109]]);
        let listen = match buf[91] {
            0 => None,
            4 => {
                let ip: [u8; 4] = buf[92..96].try_into().unwrap();
                Some(SocketAddr::from((ip, port)))
            }
            6 => {
                let ip: [u8; 16] = buf[92..108].try_into().unwrap();
                Some(SocketAddr::from((ip, port)))
            }
            family => return Err(HandshakeError::BadAddress(family)),
        };
        Ok(Hello {
            role: buf[10],
            from: u32_at(11),
            to: u32_at(15),
            digest: buf[19..51].try_into().unwrap(),
            nonce: buf[51..83].try_into().unwrap(),
            incarnation: u64::from_be_bytes(buf[83..91].try_into().unwrap()),
            listen,
        })
    }
}

/// Reads one hello: the magic and version first, rejecting a wrong one
/// before reading on, then the rest. Returns the decoded hello and its bytes.
async fn read_hello<S>(stream: &mut S) -> Result<(Hello, [u8; HELLO_LEN]), HandshakeError>
where
    S: AsyncRead + Unpin,
{
    let mut buf = [0; HELLO_LEN];
    stream.read_exact(&mut buf[..HEADER_LEN]).await?;
    if buf[..8] != MAGIC {
        return Err(HandshakeError::BadMagic);
    }
    let version = u16::from_be_bytes([buf[8], buf[9]]);
    if version != VERSION {
        return Err(HandshakeError::UnsupportedVersion {
            ours: VERSION,
            theirs: version,
        });
    }
    stream.read_exact(&mut buf[HEADER_LEN..]).await?;
    Ok((Hello::decode(&buf)?, buf))
}

/// Writes `bytes` and flushes them.
async fn send<S>(stream: &mut S, bytes: &[u8]) -> Result<(), HandshakeError>
where
    S: AsyncWrite + Unpin,
{
    stream.write_all(bytes).await?;
    stream.flush().await?;
    Ok(())
}

/// Reads a proof.
async fn read_proof<S>(stream: &mut S) -> Result<[u8; PROOF_LEN], HandshakeError>
where
    S: AsyncRead + Unpin,
{
    let mut proof = [0; PROOF_LEN];
    stream.read_exact(&mut proof).await?;
    Ok(proof)
}

/// What the hellos and proofs established: the peer, and the two hellos
/// (the initiator's first) that a TLS session's keys are bound to.
struct Exchanged {
    done: Authenticated,
    hellos: Option<([u8; HELLO_LEN], [u8; HELLO_LEN])>,
}

/// One member's side of the handshake: its key, identity and view of the
/// cluster. Share it (in an `Arc`) among the tasks that handle connections.
pub(crate) struct Handshake {
    /// The cluster key.
    key: ClusterKey,
    /// What the members must agree on.
    digest: ClusterDigest,
    /// This node.
    me: NodeId,
    /// The number of members; valid ids are `0..members` (any id, with
    /// open membership).
    members: usize,
    /// Whether nodes beyond this node's member list may connect.
    open: bool,
    /// Where this node takes connections, told to every peer.
    listen: Option<SocketAddr>,
    /// The limit on one whole handshake.
    timeout: Duration,
    /// This node's incarnation, told to every peer.
    incarnation: u64,
    /// Whether a peer's run may connect at all.
    vet: Option<Vet>,
    /// This node's certificate, when nodes prove which node they are.
    identity: Option<NodeIdentity>,
}

/// Whether a peer's run (its id and incarnation, from its hello) may
/// connect: asked before this end proves itself, so that a refused peer's
/// handshake fails (the connection closes) rather than succeeding on one end
/// only. `Err` says why not.
pub(crate) type Vet = std::sync::Arc<dyn Fn(NodeId, u64) -> Result<(), String> + Send + Sync>;

impl std::fmt::Debug for Handshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handshake")
            .field("me", &self.me)
            .field("members", &self.members)
            .field("incarnation", &self.incarnation)
            .finish_non_exhaustive()
    }
}

/// The far end of a connection whose handshake succeeded.
#[derive(Debug)]
pub(crate) struct Authenticated {
    /// The peer's node id.
    pub(crate) peer: NodeId,
    /// The peer's incarnation.
    pub(crate) incarnation: u64,
    /// Where the peer takes connections, as it says.
    pub(crate) listen: Option<SocketAddr>,
    /// The connection's session key.
    #[cfg_attr(not(any(feature = "ofi", feature = "rdma")), allow(dead_code))]
    pub(crate) key: SessionKey,
    /// With per-node identities: the secret the connection's frame keys
    /// are derived from, exported from its TLS session (without: the
    /// cluster key).
    pub(crate) link_secret: Option<[u8; 32]>,
}

impl Handshake {
    /// The handshake of node `me` in a cluster of `members` nodes, with the
    /// [`DEFAULT_TIMEOUT`].
    ///
    /// # Panics
    ///
    /// If `me` is not below `members` (a configuration bug of the caller).
    pub(crate) fn new(key: ClusterKey, digest: ClusterDigest, me: NodeId, members: usize) -> Self {
        assert!(
            me.index() < members,
            "node {me} is not in a cluster of {members}"
        );
        Handshake {
            key,
            digest,
            me,
            members,
            open: false,
            listen: None,
            timeout: DEFAULT_TIMEOUT,
            incarnation: 0,
            vet: None,
            identity: None,
        }
    }

    /// The same, proving this node's identity with `identity` (TLS 1.3
    /// with certificates first) and asking the peer's.
    pub(crate) fn with_identity(mut self, identity: Option<NodeIdentity>) -> Self {
        self.identity = identity;
        self
    }

    /// The same, letting in any node id but this node's own (open
    /// membership: nodes beyond the member list may join).
    pub(crate) fn with_open_membership(mut self, open: bool) -> Self {
        self.open = open;
        self
    }

    /// The same, telling every peer that this node takes connections at
    /// `listen`.
    pub(crate) fn with_listen(mut self, listen: SocketAddr) -> Self {
        self.listen = Some(listen);
        self
    }

    /// The same, asking `vet` whether each peer's run may connect.
    pub(crate) fn with_vet(mut self, vet: Vet) -> Self {
        self.vet = Some(vet);
        self
    }

    fn vet(&self, peer: NodeId, incarnation: u64) -> Result<(), HandshakeError> {
        match &self.vet {
            Some(vet) => vet(peer, incarnation).map_err(HandshakeError::Refused),
            None => Ok(()),
        }
    }

    /// The limit on one whole handshake.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The same with this node's incarnation (0 unless set).
    pub(crate) fn with_incarnation(mut self, incarnation: u64) -> Self {
        self.incarnation = incarnation;
        self
    }

    /// The same with another limit on the duration of one handshake.
    pub(crate) fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// [`Handshake::initiate_keyed`] without the session key.
    #[cfg(test)]
    pub(crate) async fn initiate<S>(
        &self,
        stream: &mut S,
        expected_peer: NodeId,
    ) -> Result<(), HandshakeError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        self.initiate_keyed(stream, expected_peer).await.map(drop)
    }

    /// Runs the dialling side over `stream`, a fresh connection to
    /// `expected_peer`. Succeeds once both ends have proven they hold the
    /// cluster key, with the peer's incarnation and the connection's
    /// [`SessionKey`]; the stream then carries cluster traffic.
    ///
    /// Cancel-safe in the sense that dropping the future leaves nothing
    /// behind; the stream must be dropped too, as it is mid-handshake.
    pub(crate) async fn initiate_keyed<S>(
        &self,
        stream: &mut S,
        expected_peer: NodeId,
    ) -> Result<Authenticated, HandshakeError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        self.timed(async {
            let Some(identity) = &self.identity else {
                return self.initiate_exchange(stream, expected_peer).await;
            };
            let mut tls = tls::connect(identity, stream, expected_peer).await?;
            let mut auth = self.initiate_exchange(&mut tls, expected_peer).await?;
            let hellos = auth.hellos.take().expect("set by the exchange");
            tls::bind(&mut auth.done, tls.get_ref().1, (&hellos.0, &hellos.1))?;
            Ok(auth)
        })
        .await
        .map(|auth| auth.done)
    }

    /// The dialling side's hellos and proofs over `stream`.
    async fn initiate_exchange<S>(
        &self,
        stream: &mut S,
        expected_peer: NodeId,
    ) -> Result<Exchanged, HandshakeError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        {
            let ours = self.hello(Role::Initiator, expected_peer).encode();
            send(stream, &ours).await?;

            let (theirs, theirs_bytes) = read_hello(stream).await?;
            if theirs.role != Role::Acceptor as u8 {
                return Err(HandshakeError::WrongRole(theirs.role));
            }
            if theirs.from != expected_peer.0 {
                return Err(HandshakeError::UnexpectedPeer {
                    expected: expected_peer,
                    claimed: theirs.from,
                });
            }
            self.check_addressed_to_me(&theirs)?;
            self.vet(expected_peer, theirs.incarnation)?;

            let proof = self.proof(Role::Initiator, &ours, &theirs_bytes);
            send(stream, &proof).await?;
            let their_proof = read_proof(stream).await?;
            self.verify(Role::Acceptor, &ours, &theirs_bytes, &their_proof)?;
            Ok(Exchanged {
                done: Authenticated {
                    peer: expected_peer,
                    incarnation: theirs.incarnation,
                    listen: theirs.listen,
                    key: self.session(&ours, &theirs_bytes),
                    link_secret: None,
                },
                hellos: Some((ours, theirs_bytes)),
            })
        }
    }

    /// [`Handshake::accept_keyed`] without the session key.
    #[cfg(test)]
    pub(crate) async fn accept<S>(&self, stream: &mut S) -> Result<NodeId, HandshakeError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        self.accept_keyed(stream).await.map(|a| a.peer)
    }

    /// Runs the listening side over `stream`, a freshly accepted connection.
    /// Returns the member that connected, once it has proven it holds the
    /// cluster key: its id and incarnation, and the connection's
    /// [`SessionKey`]. Cancel-safe like [`Handshake::initiate_keyed`].
    pub(crate) async fn accept_keyed<S>(
        &self,
        stream: &mut S,
    ) -> Result<Authenticated, HandshakeError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        self.timed(async {
            let Some(identity) = &self.identity else {
                return self.accept_exchange(stream, None).await;
            };
            let (mut tls, certificate) = tls::accept(identity, stream).await?;
            let mut auth = self.accept_exchange(&mut tls, Some(&certificate)).await?;
            let hellos = auth.hellos.take().expect("set by the exchange");
            tls::bind(&mut auth.done, tls.get_ref().1, (&hellos.0, &hellos.1))?;
            Ok(auth)
        })
        .await
        .map(|auth| auth.done)
    }

    /// The listening side's hellos and proofs over `stream`; the peer must
    /// be the node `certificate` names, if there is one.
    async fn accept_exchange<S>(
        &self,
        stream: &mut S,
        certificate: Option<&rustls::pki_types::CertificateDer<'static>>,
    ) -> Result<Exchanged, HandshakeError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        {
            let (theirs, theirs_bytes) = read_hello(stream).await?;
            if theirs.role != Role::Initiator as u8 {
                return Err(HandshakeError::WrongRole(theirs.role));
            }
            if !self.open && theirs.from as usize >= self.members {
                return Err(HandshakeError::UnknownNode {
                    claimed: theirs.from,
                    members: self.members,
                });
            }
            let peer = NodeId(theirs.from);
            if peer == self.me {
                return Err(HandshakeError::ImpersonatesUs(self.me));
            }
            if let Some(certificate) = certificate {
                tls::check_certified(certificate, theirs.from)?;
            }
            self.check_addressed_to_me(&theirs)?;
            self.vet(peer, theirs.incarnation)?;

            let ours = self.hello(Role::Acceptor, peer).encode();
            send(stream, &ours).await?;

            let their_proof = read_proof(stream).await?;
            self.verify(Role::Initiator, &theirs_bytes, &ours, &their_proof)?;
            let proof = self.proof(Role::Acceptor, &theirs_bytes, &ours);
            send(stream, &proof).await?;
            Ok(Exchanged {
                done: Authenticated {
                    peer,
                    incarnation: theirs.incarnation,
                    listen: theirs.listen,
                    key: self.session(&theirs_bytes, &ours),
                    link_secret: None,
                },
                hellos: Some((theirs_bytes, ours)),
            })
        }
    }

    /// This node's hello as `role` to `to`, with a fresh nonce.
    fn hello(&self, role: Role, to: NodeId) -> Hello {
        Hello {
            listen: self.listen,
            ..Hello::new(role, (self.me, self.incarnation), to, self.digest)
        }
    }

    /// Runs `handshake` under the timeout.
    async fn timed<T>(
        &self,
        handshake: impl Future<Output = Result<T, HandshakeError>>,
    ) -> Result<T, HandshakeError> {
        tokio::time::timeout(self.timeout, handshake)
            .await
            .unwrap_or(Err(HandshakeError::TimedOut(self.timeout)))
    }

    /// Checks the `to` and digest fields of the peer's hello.
    fn check_addressed_to_me(&self, hello: &Hello) -> Result<(), HandshakeError> {
        if hello.to != self.me.0 {
            return Err(HandshakeError::Misdirected {
                intended: hello.to,
                me: self.me,
            });
        }
        if hello.digest != self.digest.0 {
            return Err(HandshakeError::DigestMismatch);
        }
        Ok(())
    }

    /// The MAC over the transcript, keyed and labelled, for the prover `role`.
    fn transcript_mac(
        &self,
        role: Role,
        initiator_hello: &[u8; HELLO_LEN],
        acceptor_hello: &[u8; HELLO_LEN],
    ) -> HmacSha256 {
        self.key
            .mac()
            .chain_update(PROOF_LABEL)
            .chain_update([role as u8])
            .chain_update(initiator_hello)
            .chain_update(acceptor_hello)
    }

    /// The proof that the `role` end holds the key.
    fn proof(
        &self,
        role: Role,
        initiator_hello: &[u8; HELLO_LEN],
        acceptor_hello: &[u8; HELLO_LEN],
    ) -> [u8; PROOF_LEN] {
        self.transcript_mac(role, initiator_hello, acceptor_hello)
            .finalize()
    }

    /// The connection's session key: a MAC over both hellos, so fresh for
    /// every connection (both nonces) and known only to key holders.
    fn session(
        &self,
        initiator_hello: &[u8; HELLO_LEN],
        acceptor_hello: &[u8; HELLO_LEN],
    ) -> SessionKey {
        SessionKey(
            self.key
                .mac()
                .chain_update(SESSION_LABEL)
                .chain_update(initiator_hello)
                .chain_update(acceptor_hello)
                .finalize(),
        )
    }

    /// Checks, in constant time, the proof of the `role` end.
    fn verify(
        &self,
        role: Role,
        initiator_hello: &[u8; HELLO_LEN],
        acceptor_hello: &[u8; HELLO_LEN],
        proof: &[u8; PROOF_LEN],
    ) -> Result<(), HandshakeError> {
        self.transcript_mac(role, initiator_hello, acceptor_hello)
            .verify_slice(proof)
            .map_err(|_| HandshakeError::BadProof)
    }
}
