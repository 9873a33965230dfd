//! The TLS 1.3 layer of the handshake with per-node identities
//! ([`NodeIdentity`]): both ends present certificates, the hellos and
//! proofs then travel inside TLS, and the connection's keys come from the
//! TLS session. After that the connection leaves TLS: its frames are
//! protected by the transport's own framing, keyed from the session.
//!
//! Leaving TLS on a live socket needs one care: TLS must not have read any
//! byte past its last record, or the first frames would be lost in its
//! buffer. [`RecordBounded`] hands TLS at most one record's bytes per read,
//! and the exchange inside TLS ends with a message each end waits for
//! before it sends anything else, so the last TLS record read is the last
//! one sent.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{Authenticated, HELLO_LEN, HandshakeError, SessionKey};
use crate::ids::NodeId;
use crate::transport::mesh::identity::{self, NodeIdentity};

/// A TLS record's header: type, version, length.
const RECORD_HEADER: usize = 5;
/// The exporter label of the connection's keys (RFC 8446 §7.5).
const EXPORTER_LABEL: &[u8] = b"EXPORTER-rdmc-connection-keys-v1";

/// A stream read at most one TLS record at a time, so that TLS never takes
/// in a byte after its last record.
pub(super) struct RecordBounded<S> {
    inner: S,
    /// The header of the record being read, so far.
    header: [u8; RECORD_HEADER],
    /// How much of the header has been read.
    header_len: usize,
    /// Bytes of the current record's body still to read.
    body_left: usize,
}

impl<S> RecordBounded<S> {
    pub(super) fn new(inner: S) -> Self {
        RecordBounded {
            inner,
            header: [0; RECORD_HEADER],
            header_len: 0,
            body_left: 0,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for RecordBounded<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let want = if this.body_left > 0 {
            this.body_left
        } else {
            RECORD_HEADER - this.header_len
        };
        let want = want.min(buf.remaining());
        let mut part = ReadBuf::new(buf.initialize_unfilled_to(want));
        ready!(Pin::new(&mut this.inner).poll_read(cx, &mut part))?;
        let got = part.filled().len();
        if this.body_left > 0 {
            this.body_left -= got;
        } else {
            this.header[this.header_len..this.header_len + got].copy_from_slice(part.filled());
            this.header_len += got;
            if this.header_len == RECORD_HEADER {
                this.body_left = usize::from(u16::from_be_bytes([this.header[3], this.header[4]]));
                this.header_len = 0;
            }
        }
        buf.advance(got);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for RecordBounded<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The dialling end's TLS over `stream`, to node `peer`: succeeds once the
/// peer's certificate chains to the authority and names `peer`.
pub(super) async fn connect<S>(
    identity: &NodeIdentity,
    stream: S,
    peer: NodeId,
) -> Result<tokio_rustls::client::TlsStream<RecordBounded<S>>, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let connector = tokio_rustls::TlsConnector::from(identity.client.clone());
    connector
        .connect(NodeIdentity::server_name(peer), RecordBounded::new(stream))
        .await
        .map_err(|e| tls_error(e, peer.0))
}

/// The accepting end's TLS over `stream`: succeeds once the peer's
/// certificate chains to the authority; returns that certificate too (the
/// node it names is checked against the hello).
pub(super) async fn accept<S>(
    identity: &NodeIdentity,
    stream: S,
) -> Result<
    (
        tokio_rustls::server::TlsStream<RecordBounded<S>>,
        CertificateDer<'static>,
    ),
    HandshakeError,
>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(identity.server.clone());
    let tls = acceptor
        .accept(RecordBounded::new(stream))
        .await
        .map_err(|e| tls_error(e, u32::MAX))?;
    let certificate = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first().cloned())
        .ok_or_else(|| HandshakeError::Tls("the peer presented no certificate".to_owned()))?;
    Ok((tls, certificate))
}

/// Fails unless `certificate` names node `claimed`.
pub(super) fn check_certified(
    certificate: &CertificateDer<'_>,
    claimed: u32,
) -> Result<(), HandshakeError> {
    identity::certifies(certificate, NodeId(claimed))
        .map_err(|presented| HandshakeError::NotCertified { claimed, presented })
}

/// Binds `auth` to the TLS session of `conn`: its session key and link
/// secret are exported from the session (RFC 8446 §7.5) with both hellos
/// as the context, so only the two ends of this TLS connection know them.
pub(super) fn bind<D>(
    auth: &mut Authenticated,
    conn: &rustls::ConnectionCommon<D>,
    hellos: (&[u8; HELLO_LEN], &[u8; HELLO_LEN]),
) -> Result<(), HandshakeError> {
    let mut context = [0u8; 2 * HELLO_LEN];
    context[..HELLO_LEN].copy_from_slice(hellos.0);
    context[HELLO_LEN..].copy_from_slice(hellos.1);
    let keys = conn
        .export_keying_material([0u8; 64], EXPORTER_LABEL, Some(&context))
        .map_err(|e| HandshakeError::Tls(e.to_string()))?;
    let (session, link) = keys.split_at(32);
    auth.key = SessionKey(session.try_into().expect("32 bytes"));
    auth.link_secret = Some(link.try_into().expect("32 bytes"));
    Ok(())
}

/// The handshake error of a failed TLS handshake: a certificate that names
/// another node than `dialled` (`u32::MAX` when accepting), one the
/// authority did not issue, a refusal by the peer, or the connection's end.
fn tls_error(error: io::Error, dialled: u32) -> HandshakeError {
    let Some(tls) = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    else {
        return HandshakeError::from(error);
    };
    match tls {
        rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForNameContext {
            presented,
            ..
        }) => HandshakeError::NotCertified {
            claimed: dialled,
            presented: identity::shown(presented),
        },
        rustls::Error::AlertReceived(alert) => {
            HandshakeError::Tls(format!("the peer refused the TLS handshake ({alert:?})"))
        }
        other => HandshakeError::Tls(other.to_string()),
    }
}
