//! Per-node identities on the command line: `rdmc keygen --authority DIR`
//! makes a cluster's certificate authority, `rdmc keygen --authority DIR
//! --node N --out DIR2` issues node N's identity, and `--identity DIR2`
//! gives it to a member (`rdmc member`, `push`, `receive`).

use std::path::Path;

use anyhow::{Context as _, anyhow};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rdmc::{NodeId, NodeIdentity};

use crate::keygen::write_secret;

/// The authority's certificate, in the authority's and every identity's
/// directory.
pub const AUTHORITY_CERT: &str = "authority.pem";
/// The authority's private key, in the authority's directory only.
pub const AUTHORITY_KEY: &str = "authority.key";
/// A node's certificate, in its identity's directory.
pub const NODE_CERT: &str = "node.pem";
/// A node's private key, in its identity's directory.
pub const NODE_KEY: &str = "node.key";

/// The authority's name (its certificate's subject); issuing rebuilds it
/// from this and the key, so the issued certificates name it as issuer.
const AUTHORITY_NAME: &str = "rdmc cluster authority";

/// The authority's certificate parameters.
fn authority_params() -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("no names to check");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, AUTHORITY_NAME);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    params
}

/// Create a new directory `dir` holding a new authority: its certificate
/// and its private key (mode 0600).
pub fn create_authority(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir(dir).with_context(|| dir.display().to_string())?;
    let key = KeyPair::generate().context("generating a key")?;
    let cert = authority_params()
        .self_signed(&key)
        .context("making the authority's certificate")?;
    write_secret(&dir.join(AUTHORITY_KEY), key.serialize_pem().as_bytes())?;
    write_public(&dir.join(AUTHORITY_CERT), cert.pem().as_bytes())
}

/// Issue node `node`'s identity from the authority in `authority` into the
/// new directory `out`: the authority's certificate, the node's (naming
/// it as `NodeIdentity::subject_name`) and its private key (mode 0600).
pub fn issue(authority: &Path, node: u32, out: &Path) -> anyhow::Result<()> {
    let read = |name: &str| {
        let path = authority.join(name);
        std::fs::read_to_string(&path).with_context(|| path.display().to_string())
    };
    let (ca_cert, ca_key) = (read(AUTHORITY_CERT)?, read(AUTHORITY_KEY)?);
    let ca_key = KeyPair::from_pem(&ca_key)
        .with_context(|| authority.join(AUTHORITY_KEY).display().to_string())?;
    let issuer = Issuer::new(authority_params(), ca_key);
    let name = NodeIdentity::subject_name(NodeId(node));
    let mut params =
        CertificateParams::new(vec![name.clone()]).with_context(|| format!("the name {name}"))?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let key = KeyPair::generate().context("generating a key")?;
    let cert = params
        .signed_by(&key, &issuer)
        .with_context(|| format!("issuing node {node}'s certificate"))?;
    std::fs::create_dir(out).with_context(|| out.display().to_string())?;
    write_secret(&out.join(NODE_KEY), key.serialize_pem().as_bytes())?;
    write_public(&out.join(NODE_CERT), cert.pem().as_bytes())?;
    write_public(&out.join(AUTHORITY_CERT), ca_cert.as_bytes())?;
    // What the member will load must load.
    load(out).map(drop)
}

/// The identity in directory `dir` (made by [`issue`]).
pub fn load(dir: &Path) -> anyhow::Result<NodeIdentity> {
    NodeIdentity::from_files(
        dir.join(AUTHORITY_CERT),
        dir.join(NODE_CERT),
        dir.join(NODE_KEY),
    )
    // Its message only: it names its cause already.
    .map_err(|e| anyhow!("--identity {}: {e}", dir.display()))
}

/// Write a new, world-readable file, flushed to disk; an existing file is
/// never overwritten.
fn write_public(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let named = || path.display().to_string();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(named)?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .with_context(named)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn an_authority_issues_identities_that_name_their_node() {
        let dir = crate::scratch::ScratchDir::new("identity");
        let authority = dir.join("authority");
        create_authority(&authority).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&authority.join(AUTHORITY_KEY)), 0o600);
        let node3 = dir.join("node3");
        issue(&authority, 3, &node3).unwrap();
        assert_eq!(mode(&node3.join(NODE_KEY)), 0o600);
        let shown = format!("{:?}", load(&node3).unwrap());
        assert!(shown.contains("node-3.rdmc.internal"), "{shown}");
        // Never overwritten; a missing authority is named.
        let err = format!("{:#}", issue(&authority, 3, &node3).unwrap_err());
        assert!(err.contains("exists"), "{err}");
        let err = format!(
            "{:#}",
            issue(&dir.join("nowhere"), 1, &dir.join("n1")).unwrap_err()
        );
        assert!(err.contains("nowhere/authority.pem"), "{err}");
        let err = format!("{:#}", load(&dir.join("nowhere")).unwrap_err());
        assert!(err.starts_with("--identity "), "{err}");
    }
}
