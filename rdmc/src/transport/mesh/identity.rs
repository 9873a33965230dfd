//! Per-node identities: a certificate per node, issued by the cluster's own
//! authority, that names the node. With one, a node proves *which* node it
//! is in every connection handshake (TLS 1.3 with client certificates,
//! through rustls), not only that it holds the cluster key.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::ids::NodeId;

/// The largest PEM file [`NodeIdentity::from_files`] reads: certificates and
/// keys are a few KiB; anything far larger is not one.
pub const MAX_IDENTITY_FILE_LEN: u64 = 1 << 20;

/// The DNS-name suffix of node certificates: node 3's certificate carries
/// the subject alternative name `node-3.rdmc.internal`.
const NAME_SUFFIX: &str = ".rdmc.internal";

/// A node's credentials for per-node authentication: the cluster's
/// certificate authority, this node's certificate (issued by that
/// authority, naming the node with the DNS subject alternative name
/// [`NodeIdentity::subject_name`]) and its private key.
///
/// Give it to a transport's configuration (for example
/// [`TcpConfig::with_identity`](crate::TcpConfig::with_identity)) and every
/// connection handshake starts with TLS 1.3 in which both ends present
/// their certificates: a peer is let in only if its certificate chains to
/// the authority and names the node it claims to be, so a process holding
/// another node's valid credentials cannot take this node's place, whether
/// this node is up or down. The frame keys of each connection are then
/// derived from its TLS session. The cluster key is still required (it
/// keeps authenticating membership of the cluster, and the `ofi`/`rdma`
/// rendezvous messages).
///
/// `rdmc keygen --authority DIR` and `rdmc keygen --node N --authority DIR`
/// make an authority and node credentials; any X.509 authority works
/// (ECDSA P-256/P-384, Ed25519 or RSA keys).
#[derive(Clone)]
pub struct NodeIdentity {
    /// This node's certificate, first of its chain.
    certificate: CertificateDer<'static>,
    /// The dialling end's TLS configuration.
    pub(crate) client: Arc<ClientConfig>,
    /// The accepting end's TLS configuration.
    pub(crate) server: Arc<ServerConfig>,
}

impl std::fmt::Debug for NodeIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeIdentity")
            .field("names", &names_of(&self.certificate))
            .finish_non_exhaustive()
    }
}

/// Why node credentials could not be loaded or used: each reads as one line
/// naming the file or the problem.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// A file could not be read.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why not.
        reason: String,
    },
    /// A file is larger than [`MAX_IDENTITY_FILE_LEN`].
    #[error("{path} is {len} bytes, more than a certificate or key file can be")]
    FileTooLarge {
        /// The file.
        path: String,
        /// Its size.
        len: u64,
    },
    /// The PEM text of `what` holds nothing usable.
    #[error("no {what} found in the PEM text: {reason}")]
    BadPem {
        /// `authority certificate`, `node certificate` or `private key`.
        what: &'static str,
        /// What the parser said.
        reason: String,
    },
    /// TLS refused the credentials (for example: the private key is not
    /// the certificate's, or the authority certificate is unusable).
    #[error("the credentials are not usable: {0}")]
    Unusable(String),
    /// The certificate does not name the node it is used for.
    #[error("the certificate is for {names}, not node {node} (want the name {wanted})")]
    NotForNode {
        /// The node.
        node: NodeId,
        /// The names the certificate carries.
        names: String,
        /// The name it should carry.
        wanted: String,
    },
}

impl NodeIdentity {
    /// The DNS subject alternative name a certificate for node `id` carries:
    /// `node-<id>.rdmc.internal`. (`.internal` is reserved for private use,
    /// so it never names a public host.)
    pub fn subject_name(id: NodeId) -> String {
        format!("node-{}{NAME_SUFFIX}", id.0)
    }

    /// Credentials from PEM text: the cluster's authority certificate(s),
    /// this node's certificate chain (its own certificate first), and its
    /// private key (PKCS#8, PKCS#1 or SEC1).
    ///
    /// # Errors
    /// [`IdentityError::BadPem`] if a part is missing or malformed,
    /// [`IdentityError::Unusable`] if TLS refuses them (a key that is not
    /// the certificate's).
    pub fn from_pem(
        authority: &[u8],
        certificate: &[u8],
        private_key: &[u8],
    ) -> Result<Self, IdentityError> {
        let bad = |what| {
            move |e: rustls::pki_types::pem::Error| IdentityError::BadPem {
                what,
                reason: e.to_string(),
            }
        };
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(authority) {
            let cert = cert.map_err(bad("authority certificate"))?;
            roots
                .add(cert)
                .map_err(|e| IdentityError::Unusable(format!("authority certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(bad("authority certificate")(
                rustls::pki_types::pem::Error::NoItemsFound,
            ));
        }
        let chain = CertificateDer::pem_slice_iter(certificate)
            .collect::<Result<Vec<_>, _>>()
            .map_err(bad("node certificate"))?;
        let Some(first) = chain.first().cloned() else {
            return Err(bad("node certificate")(
                rustls::pki_types::pem::Error::NoItemsFound,
            ));
        };
        let key = PrivateKeyDer::from_pem_slice(private_key).map_err(bad("private key"))?;
        let unusable = |e: rustls::Error| IdentityError::Unusable(e.to_string());
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let roots = Arc::new(roots);
        let tls13 = &[&rustls::version::TLS13];
        let mut client = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(tls13)
            .map_err(unusable)?
            .with_root_certificates(Arc::clone(&roots))
            .with_client_auth_cert(chain.clone(), key.clone_key())
            .map_err(unusable)?;
        // No resumption: every connection authenticates both certificates.
        client.resumption = rustls::client::Resumption::disabled();
        let verifier = WebPkiClientVerifier::builder_with_provider(roots, Arc::clone(&provider))
            .build()
            .map_err(|e| IdentityError::Unusable(e.to_string()))?;
        let mut server = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(tls13)
            .map_err(unusable)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .map_err(unusable)?;
        // No tickets: the connection leaves TLS after the handshake (its
        // frames are keyed from the session), and nothing may follow then.
        server.send_tls13_tickets = 0;
        Ok(NodeIdentity {
            certificate: first,
            client: Arc::new(client),
            server: Arc::new(server),
        })
    }

    /// Credentials from PEM files (see [`NodeIdentity::from_pem`]): the
    /// authority's certificate, this node's certificate chain and its
    /// private key. Reads the files at once (call it before the runtime's
    /// hot path, as a configuration step); each must be a regular file of
    /// at most [`MAX_IDENTITY_FILE_LEN`] bytes.
    ///
    /// # Errors
    /// [`IdentityError::Read`] or [`IdentityError::FileTooLarge`] for a
    /// file, else as [`NodeIdentity::from_pem`].
    pub fn from_files(
        authority: impl AsRef<Path>,
        certificate: impl AsRef<Path>,
        private_key: impl AsRef<Path>,
    ) -> Result<Self, IdentityError> {
        Self::from_pem(
            &read_small(authority.as_ref())?,
            &read_small(certificate.as_ref())?,
            &read_small(private_key.as_ref())?,
        )
    }

    /// Fails unless this node's certificate names node `id`.
    pub(crate) fn check_names(&self, id: NodeId) -> Result<(), IdentityError> {
        certifies(&self.certificate, id).map_err(|names| IdentityError::NotForNode {
            node: id,
            names,
            wanted: Self::subject_name(id),
        })
    }

    /// The TLS server name of node `id`.
    pub(crate) fn server_name(id: NodeId) -> ServerName<'static> {
        ServerName::try_from(Self::subject_name(id)).expect("a valid DNS name")
    }
}

/// Reads a regular file of at most [`MAX_IDENTITY_FILE_LEN`] bytes.
fn read_small(path: &Path) -> Result<Vec<u8>, IdentityError> {
    use std::io::Read;
    let shown = path.display().to_string();
    let read = |e: std::io::Error| IdentityError::Read {
        path: shown.clone(),
        reason: e.to_string(),
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let meta = file.metadata().map_err(read)?;
    if !meta.is_file() {
        return Err(IdentityError::Read {
            path: shown,
            reason: "not a regular file".to_owned(),
        });
    }
    if meta.len() > MAX_IDENTITY_FILE_LEN {
        return Err(IdentityError::FileTooLarge {
            path: shown,
            len: meta.len(),
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_IDENTITY_FILE_LEN)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    Ok(bytes)
}

/// Whether `certificate` names node `id`; if not, the names it carries
/// instead (comma-separated; `no DNS names` or `an unreadable certificate`
/// when there are none).
pub(crate) fn certifies(certificate: &CertificateDer<'_>, id: NodeId) -> Result<(), String> {
    let name = NodeIdentity::server_name(id);
    match webpki::EndEntityCert::try_from(certificate) {
        Err(_) => Err("an unreadable certificate".to_owned()),
        Ok(cert) => cert
            .verify_is_valid_for_subject_name(&name)
            .map_err(|e| match e {
                webpki::Error::CertNotValidForName(context) => shown(&context.presented),
                other => other.to_string(),
            }),
    }
}

/// The names a certificate carries, for `Debug`.
fn names_of(certificate: &CertificateDer<'_>) -> String {
    // Node ids are u32; no certificate names `node-4294967296`.
    let nobody = NodeIdentity::server_name(NodeId(u32::MAX));
    match webpki::EndEntityCert::try_from(certificate) {
        Err(_) => "an unreadable certificate".to_owned(),
        Ok(cert) => match cert.verify_is_valid_for_subject_name(&nobody) {
            Err(webpki::Error::CertNotValidForName(context)) => shown(&context.presented),
            _ => NodeIdentity::subject_name(NodeId(u32::MAX)),
        },
    }
}

/// Presented names (as the certificate checks print them:
/// `DnsName("node-5.rdmc.internal")`), comma-separated, DNS names bare.
pub(crate) fn shown(presented: &[String]) -> String {
    if presented.is_empty() {
        return "no DNS names".to_owned();
    }
    let bare = |name: &String| {
        name.strip_prefix("DnsName(\"")
            .and_then(|n| n.strip_suffix("\")"))
            .map_or_else(|| name.clone(), str::to_owned)
    };
    presented.iter().map(bare).collect::<Vec<_>>().join(", ")
}
