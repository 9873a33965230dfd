//! `rdmc keygen FILE`: write a new random cluster key, readable by its
//! owner only. Every member of a cluster is then given the same file
//! (`--key-file`); rdmc has no default key.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::Args;

/// Random bytes in a new key (written as hex: twice as many characters).
const KEY_BYTES: usize = 32;

/// Arguments of `rdmc keygen`.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// The key file to create (mode 0600). An existing file is never
    /// overwritten.
    #[arg(required_unless_present = "authority", conflicts_with = "authority")]
    file: Option<PathBuf>,
    /// Per-node identities: create a certificate authority in the new
    /// directory DIR (`authority.pem`, and `authority.key` readable by you
    /// only: keep it off the cluster's hosts); with `--node`, the
    /// authority to issue from.
    #[arg(long, value_name = "DIR")]
    authority: Option<PathBuf>,
    /// Issue node N's identity from `--authority` into the new directory
    /// `--out` (`authority.pem`, `node.pem`, `node.key`); give that
    /// directory to node N only, as `--identity DIR`.
    #[arg(long, value_name = "N", requires_all = ["authority", "out"])]
    node: Option<u32>,
    /// With `--node`: the identity directory to create.
    #[arg(long, value_name = "DIR", requires = "node")]
    out: Option<PathBuf>,
}

/// Create the key file, the authority or a node's identity, and say how to
/// use it.
pub fn run(args: &KeygenArgs) -> anyhow::Result<()> {
    match (&args.file, &args.authority, args.node, &args.out) {
        (Some(file), None, None, None) => {
            write_key(file)?;
            println!(
                "wrote a new cluster key to {} (readable by you only); copy it to every host \
                 and give every member --key-file {}",
                file.display(),
                file.display()
            );
        }
        (None, Some(authority), None, None) => {
            crate::identity::create_authority(authority)?;
            println!(
                "created a certificate authority in {}; issue each node's identity with \
                 `rdmc keygen --authority {} --node N --out DIR` (keep authority.key off the \
                 cluster's hosts)",
                authority.display(),
                authority.display()
            );
        }
        (None, Some(authority), Some(node), Some(out)) => {
            crate::identity::issue(authority, node, out)?;
            println!(
                "wrote node {node}'s identity to {}; copy it to node {node}'s host only and \
                 give that member --identity {}",
                out.display(),
                out.display()
            );
        }
        _ => bail!("give a key FILE, or --authority DIR [--node N --out DIR]"),
    }
    Ok(())
}

/// Write `KEY_BYTES` fresh random bytes (aws-lc-rs's CSPRNG, seeded by the
/// operating system), as hex and a newline, to a new file of mode 0600,
/// flushed to disk.
pub fn write_key(path: &Path) -> anyhow::Result<()> {
    let mut random = [0u8; KEY_BYTES];
    if aws_lc_rs::rand::fill(&mut random).is_err() {
        bail!("the random number generator failed");
    }
    let mut text = hex::encode(random);
    text.push('\n');
    random.fill(0);
    write_secret(path, text.as_bytes())
}

/// Write `key` to a new file of mode 0600 (readable by its owner only),
/// flushed to disk; an existing file is never overwritten.
pub fn write_secret(path: &Path, key: &[u8]) -> anyhow::Result<()> {
    let named = || path.display().to_string();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(named)?;
    let written = file.write_all(key).and_then(|()| file.sync_all());
    if let Err(e) = written {
        let _ = std::fs::remove_file(path);
        return Err(e).with_context(named);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn keys_are_new_private_random_and_loadable() {
        let dir = crate::scratch::ScratchDir::new("keygen");
        let (a, b) = (dir.join("a"), dir.join("b"));
        write_key(&a).unwrap();
        write_key(&b).unwrap();
        let mode = std::fs::metadata(&a).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let (ka, kb) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        assert_eq!(ka.len(), 2 * KEY_BYTES + 1);
        assert_ne!(ka, kb);
        rdmc::ClusterKey::from_file(&a).unwrap();
        let err = format!("{:#}", write_key(&a).unwrap_err());
        assert!(err.contains("exists"), "{err}");
        assert_eq!(std::fs::read(&a).unwrap(), ka, "never overwritten");
    }
}
