//! The cluster key every member holds, and the digest of what the members
//! must agree on; both enter the mesh's handshake.

use std::io;
use std::path::{Path, PathBuf};

use crate::transport::crypto::{HmacSha256, Sha256};

/// The shortest cluster key accepted, in bytes.
pub(crate) const MIN_KEY_LEN: usize = 16;
/// The longest key file read ([`ClusterKey::from_file`]), in bytes: a key is
/// far shorter (`rdmc keygen` writes 65 bytes), so a longer file is not one.
pub const MAX_KEY_FILE_LEN: u64 = 4096;
/// Domain separation for the cluster digest.
const DIGEST_LABEL: &[u8] = b"rdmc cluster digest v1";

/// The pre-shared secret every member of a cluster holds.
///
/// Its `Debug` output never shows the key. On drop the bytes are overwritten
/// (best effort: copies the allocator or the HMAC state made are not).
#[derive(Clone)]
pub struct ClusterKey(Vec<u8>);

/// Why a cluster key could not be loaded.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ClusterKeyError {
    /// The key has no bytes.
    #[error("the cluster key is empty")]
    Empty,
    /// The key is shorter than the minimum (16 bytes).
    #[error("the cluster key is {len} bytes long; at least {min} are required")]
    TooShort {
        /// The key's length.
        len: usize,
        /// The minimum length.
        min: usize,
    },
    /// The key file could not be read.
    #[error("cannot read the cluster key file {}: {source}", path.display())]
    Read {
        /// The key file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: io::Error,
    },
    /// The key file is not a regular file (a FIFO, a device such as
    /// `/dev/urandom`, a directory, a socket): it is refused, not read.
    #[error("the cluster key file {} is not a regular file", path.display())]
    NotAFile {
        /// The path given.
        path: PathBuf,
    },
    /// The key file is longer than any key ([`MAX_KEY_FILE_LEN`]).
    #[error(
        "the cluster key file {} is {len} bytes long; a key file has at most {max}",
        path.display()
    )]
    FileTooLarge {
        /// The key file.
        path: PathBuf,
        /// Its length (at least; it is not read past the limit).
        len: u64,
        /// The limit.
        max: u64,
    },
}

impl ClusterKey {
    /// A key from its bytes; at least 16 of them.
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Result<Self, ClusterKeyError> {
        let bytes = bytes.into();
        match bytes.len() {
            0 => Err(ClusterKeyError::Empty),
            len if len < MIN_KEY_LEN => Err(ClusterKeyError::TooShort {
                len,
                min: MIN_KEY_LEN,
            }),
            _ => Ok(ClusterKey(bytes)),
        }
    }

    /// The key stored in the file at `path`, without one trailing newline
    /// (`\n` or `\r\n`), so a key written with `echo` or an editor works.
    ///
    /// Only a regular file of at most [`MAX_KEY_FILE_LEN`] bytes is read: a
    /// FIFO, a device (`/dev/zero`, `/dev/urandom`) or a large file is
    /// refused at once, without blocking or reading it.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ClusterKeyError> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let path = path.as_ref();
        let read = |source| ClusterKeyError::Read {
            path: path.to_owned(),
            source,
        };
        let too_large = |len| ClusterKeyError::FileTooLarge {
            path: path.to_owned(),
            len,
            max: MAX_KEY_FILE_LEN,
        };
        // Opened without blocking: a FIFO without a writer is refused below,
        // not waited on.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(read)?;
        let meta = file.metadata().map_err(read)?;
        if !meta.is_file() {
            return Err(ClusterKeyError::NotAFile {
                path: path.to_owned(),
            });
        }
        if meta.len() > MAX_KEY_FILE_LEN {
            return Err(too_large(meta.len()));
        }
        let mut bytes = Vec::new();
        file.take(MAX_KEY_FILE_LEN + 1)
            .read_to_end(&mut bytes)
            .map_err(read)?;
        if bytes.len() as u64 > MAX_KEY_FILE_LEN {
            // It grew since.
            return Err(too_large(bytes.len() as u64));
        }
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
        }
        Self::from_bytes(bytes)
    }

    /// A 32-byte key for another purpose, named by `label`, derived from
    /// this one (HMAC-SHA256 of the label under the cluster key): an
    /// application can authenticate its own messages among the members
    /// without handling the cluster key itself. Different labels give
    /// unrelated keys.
    pub fn derive(&self, label: &[u8]) -> [u8; 32] {
        self.mac().chain_update(label).finalize()
    }

    /// The key's bytes, as input to the `tcp` frame key derivation.
    pub(crate) fn secret(&self) -> &[u8] {
        &self.0
    }

    /// A MAC keyed with this key.
    pub(super) fn mac(&self) -> HmacSha256 {
        HmacSha256::new(&self.0)
    }
}

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterKey(<{} bytes, redacted>)", self.0.len())
    }
}

impl Drop for ClusterKey {
    fn drop(&mut self) {
        self.0.fill(0);
        // Keep the compiler from dropping the overwrite as a dead store.
        std::hint::black_box(&self.0);
    }
}

/// A digest of what the members must agree on (at least the member list), so
/// that members configured differently refuse each other instead of
/// misbehaving later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClusterDigest(pub(crate) [u8; 32]);

impl ClusterDigest {
    /// The digest of a cluster with open membership, whose member lists may
    /// differ: it covers no list, only that the membership is open (so
    /// that a node with open membership and one without refuse each other).
    pub(crate) fn open() -> Self {
        let mut hash = Sha256::new();
        hash.update(DIGEST_LABEL);
        hash.update(b"open membership");
        ClusterDigest(hash.finalize())
    }

    /// The digest of a member list: `members[i]` is the address (`host:port`)
    /// of node `i`. SHA-256 over a label, the member count, and each address
    /// prefixed with its length.
    pub(crate) fn of_members<S: AsRef<str>>(members: &[S]) -> Self {
        let mut hash = Sha256::new();
        hash.update(DIGEST_LABEL);
        hash.update((members.len() as u64).to_be_bytes());
        for member in members {
            let member = member.as_ref().as_bytes();
            hash.update((member.len() as u64).to_be_bytes());
            hash.update(member);
        }
        ClusterDigest(hash.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_loaded_and_never_printed() {
        assert!(matches!(
            ClusterKey::from_bytes(b""),
            Err(ClusterKeyError::Empty)
        ));
        assert!(matches!(
            ClusterKey::from_bytes(&b"fifteen bytes.."[..]),
            Err(ClusterKeyError::TooShort { len: 15, min: 16 })
        ));
        let key = ClusterKey::from_bytes(&b"sixteen bytes..."[..]).unwrap();
        let shown = format!("{key:?}");
        assert!(!shown.contains("sixteen"), "{shown}");
        assert_eq!(shown, "ClusterKey(<16 bytes, redacted>)");

        let dir = std::env::temp_dir().join(format!("rdmc-handshake-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, contents, len) in [
            ("lf", &b"0123456789abcdef0123\n"[..], 20),
            ("crlf", b"0123456789abcdef0123\r\n", 20),
            ("bare", b"0123456789abcdef0123", 20),
            (
                "binary",
                &[0u8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
                17,
            ),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, contents).unwrap();
            let key = ClusterKey::from_file(&path).unwrap();
            assert_eq!(key.0.len(), len, "{name}");
            assert_eq!(&key.0[..], &contents[..len], "{name}");
        }
        let short = dir.join("short");
        std::fs::write(&short, b"short\n").unwrap();
        assert!(matches!(
            ClusterKey::from_file(&short),
            Err(ClusterKeyError::TooShort { len: 5, .. })
        ));
        let empty = dir.join("empty");
        std::fs::write(&empty, b"\n").unwrap();
        assert!(matches!(
            ClusterKey::from_file(&empty),
            Err(ClusterKeyError::Empty)
        ));
        let missing = dir.join("missing");
        let error = ClusterKey::from_file(&missing).unwrap_err();
        assert!(matches!(error, ClusterKeyError::Read { .. }));
        assert!(error.to_string().contains("missing"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A FIFO, a device, a directory or a file longer than any key is
    /// refused at once, unread (a FIFO without a writer would block a read
    /// forever, `/dev/zero` would fill memory).
    #[test]
    fn only_a_regular_file_of_a_key_s_size_is_read() {
        let dir = std::env::temp_dir().join(format!("rdmc-key-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success(), "mkfifo");
        for path in [
            fifo.as_path(),
            Path::new("/dev/zero"),
            Path::new("/dev/urandom"),
            &dir,
        ] {
            let started = std::time::Instant::now();
            let error = ClusterKey::from_file(path).unwrap_err();
            assert!(
                matches!(error, ClusterKeyError::NotAFile { .. }),
                "{}: {error}",
                path.display()
            );
            assert!(started.elapsed() < std::time::Duration::from_secs(1));
        }
        let at_most = dir.join("at_most");
        std::fs::write(&at_most, vec![b'k'; MAX_KEY_FILE_LEN as usize]).unwrap();
        assert!(ClusterKey::from_file(&at_most).is_ok());
        let large = dir.join("large");
        std::fs::File::create(&large)
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        let error = ClusterKey::from_file(&large).unwrap_err();
        assert!(
            matches!(error, ClusterKeyError::FileTooLarge { len, max: MAX_KEY_FILE_LEN, .. } if len == 1 << 30),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_digest_depends_on_every_member_in_order_unambiguously() {
        let base = ClusterDigest::of_members(&["a:1", "b:2"]);
        assert_eq!(
            base,
            ClusterDigest::of_members(&[String::from("a:1"), "b:2".into()])
        );
        assert_ne!(base, ClusterDigest::of_members(&["b:2", "a:1"]));
        assert_ne!(base, ClusterDigest::of_members(&["a:1", "b:3"]));
        assert_ne!(base, ClusterDigest::of_members(&["a:1", "b:2", "c:3"]));
        assert_ne!(
            ClusterDigest::of_members(&["ab", "c"]),
            ClusterDigest::of_members(&["a", "bc"])
        );
    }

    /// The digests and a derived key, pinned: members of other builds must
    /// compute the same bytes (values from Python's hashlib and hmac).
    #[test]
    fn digests_and_derived_keys_are_pinned() {
        let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(
            hex(&ClusterDigest::of_members(&["a:1", "b:2"]).0),
            "67d2109318e13f4d0180fff861af6dd34b87dfc00f3ac17b6986865024e008f9"
        );
        assert_eq!(
            hex(&ClusterDigest::open().0),
            "cf1be94b9b5213f13d70960e9cd99af9d46448f865c6bc8220582f02e43d67e8"
        );
        let key = ClusterKey::from_bytes(&b"sixteen bytes..."[..]).unwrap();
        assert_eq!(
            hex(&key.derive(b"rdmc bootstrap exchange v1")),
            "f8a8baa524a48c911fa2f471549f1dc6bac12078f9119c836f603f7b2afdd431"
        );
    }
}
