//! What `rdmc push` sends first, and how the files' bytes are cut into
//! messages.
//!
//! The first message of a push is the [`Manifest`]: every file's relative
//! path, size and SHA-256, and the two numbers that cut the contents into
//! messages. Both sides compute the same [`plan`] from it, so the messages
//! after it carry file bytes only: small files are batched into one message
//! (up to `chunk_size` bytes), a larger file is cut into `chunk_size`
//! pieces, and empty files take no message at all.

use std::collections::{BTreeSet, HashSet};
use std::path::{Component, Path};

use serde::{Deserialize, Serialize};

/// The manifest format this build writes and reads.
pub(crate) const FORMAT: &str = "rdmc-push/1";

/// What a push carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Manifest {
    /// [`FORMAT`].
    pub(crate) format: String,
    /// The largest message of file bytes.
    pub(crate) chunk_size: u64,
    /// Files of at most this many bytes are batched with their neighbours.
    pub(crate) batch_limit: u64,
    /// Every file, in the order their bytes are sent.
    pub(crate) files: Vec<FileEntry>,
}

/// One file of a push.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FileEntry {
    /// Relative, `/`-separated, no `.`/`..` components.
    pub(crate) path: String,
    pub(crate) size: u64,
    /// Lowercase hex.
    pub(crate) sha256: String,
}

/// A run of one file's bytes inside a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Index into [`Manifest::files`].
    pub(crate) file: usize,
    /// Where in the file the run starts.
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

/// One message of file bytes: its segments, back to back.
pub(crate) type Piece = Vec<Segment>;

/// The bytes of a piece.
pub(crate) fn piece_len(piece: &[Segment]) -> u64 {
    piece.iter().map(|s| s.len).sum()
}

impl Manifest {
    /// The total bytes of every file.
    pub(crate) fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// The manifest as sent: JSON.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a manifest serializes")
    }

    /// Parse a received manifest and check it: the format, the cutting
    /// numbers, and every path ([`check_paths`]).
    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let manifest: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| format!("the first message is not a push manifest: {e}"))?;
        if manifest.format != FORMAT {
            return Err(format!(
                "the push manifest is in format {:?}; this rdmc reads {FORMAT:?}",
                manifest.format
            ));
        }
        if manifest.chunk_size == 0 || manifest.batch_limit > manifest.chunk_size {
            return Err(format!(
                "the push manifest cuts messages impossibly (chunk {} bytes, batch limit {} bytes)",
                manifest.chunk_size, manifest.batch_limit
            ));
        }
        for file in &manifest.files {
            let valid = file.sha256.len() == 64
                && file
                    .sha256
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            if !valid {
                return Err(format!(
                    "{}: not a SHA-256 digest in the manifest",
                    file.path
                ));
            }
        }
        check_paths(manifest.files.iter().map(|f| f.path.as_str()))?;
        Ok(manifest)
    }

    /// The messages of file bytes after the manifest, in order.
    pub(crate) fn plan(&self) -> Vec<Piece> {
        plan(self)
    }

    /// The first component of every path: what lands directly in the
    /// output directory.
    pub(crate) fn top_level_names(&self) -> BTreeSet<&str> {
        self.files
            .iter()
            .map(|f| f.path.split('/').next().unwrap_or(""))
            .collect()
    }
}

/// Cut the files' bytes into messages: files of at most `batch_limit`
/// bytes go into the current batch while it stays within `chunk_size`; a
/// larger file ends the batch and is sent in `chunk_size` pieces; empty
/// files take no bytes.
fn plan(manifest: &Manifest) -> Vec<Piece> {
    let chunk = manifest.chunk_size.max(1);
    let mut pieces = Vec::new();
    let mut batch: Piece = Vec::new();
    for (file, entry) in manifest.files.iter().enumerate() {
        if entry.size == 0 {
            continue;
        }
        if entry.size <= manifest.batch_limit {
            if piece_len(&batch) + entry.size > chunk {
                pieces.push(std::mem::take(&mut batch));
            }
            batch.push(Segment {
                file,
                offset: 0,
                len: entry.size,
            });
            continue;
        }
        if !batch.is_empty() {
            pieces.push(std::mem::take(&mut batch));
        }
        let mut offset = 0;
        while offset < entry.size {
            let len = chunk.min(entry.size - offset);
            pieces.push(vec![Segment { file, offset, len }]);
            offset += len;
        }
    }
    if !batch.is_empty() {
        pieces.push(batch);
    }
    pieces
}

/// Check received paths before anything is written: each relative, made
/// of plain names only (no `.`, `..`, empty or absolute parts), each file
/// once, and no file standing where another's directory must be. A path
/// that fails could write outside the output directory or clobber a file.
pub(crate) fn check_paths<'a>(paths: impl Iterator<Item = &'a str>) -> Result<(), String> {
    let mut files = HashSet::new();
    let mut dirs = HashSet::new();
    for path in paths {
        let plain = !path.is_empty()
            && path.split('/').all(|part| {
                !part.is_empty()
                    && part != "."
                    && part != ".."
                    && !part.contains('\0')
                    && matches!(
                        Path::new(part).components().collect::<Vec<_>>()[..],
                        [Component::Normal(_)]
                    )
            });
        if !plain {
            return Err(format!(
                "{path:?}: not a relative path of plain names; refusing to write it"
            ));
        }
        if !files.insert(path) {
            return Err(format!("{path:?} is listed twice"));
        }
        let mut end = 0;
        while let Some(slash) = path[end..].find('/') {
            end += slash;
            dirs.insert(&path[..end]);
            end += 1;
        }
    }
    if let Some(clash) = files.iter().find(|f| dirs.contains(*f)) {
        return Err(format!("{clash:?} is both a file and a directory"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn manifest(sizes: &[u64], chunk_size: u64, batch_limit: u64) -> Manifest {
        Manifest {
            format: FORMAT.to_owned(),
            chunk_size,
            batch_limit,
            files: sizes
                .iter()
                .enumerate()
                .map(|(i, &size)| FileEntry {
                    path: format!("d/f{i}"),
                    size,
                    sha256: "0".repeat(64),
                })
                .collect(),
        }
    }

    proptest! {
        /// Every byte of every file is in exactly one message, in file
        /// order; no message is empty or larger than a chunk; a message
        /// holding several segments holds whole small files only.
        #[test]
        fn the_plan_covers_every_byte_once_within_the_limits(
            sizes in proptest::collection::vec(
                prop_oneof![Just(0u64), 1u64..100, 100u64..5000], 0..40),
            chunk in 1u64..3000,
            batch_frac in 0u64..=100,
        ) {
            let batch_limit = chunk * batch_frac / 100;
            let m = manifest(&sizes, chunk, batch_limit);
            let pieces = m.plan();
            let mut next = vec![0u64; sizes.len()];
            let mut last_file = 0;
            for piece in &pieces {
                prop_assert!(!piece.is_empty());
                let len = piece_len(piece);
                prop_assert!(len > 0 && len <= chunk);
                for s in piece {
                    prop_assert!(s.file >= last_file);
                    prop_assert_eq!(s.offset, next[s.file]);
                    next[s.file] += s.len;
                    last_file = s.file;
                    if piece.len() > 1 {
                        prop_assert!(s.offset == 0 && s.len == sizes[s.file]);
                        prop_assert!(s.len <= batch_limit);
                    }
                }
            }
            prop_assert_eq!(next, sizes);
        }
    }

    #[test]
    fn small_files_share_a_message_and_large_ones_are_cut() {
        let m = manifest(&[10, 0, 20, 250, 5, 5], 100, 30);
        let pieces = m.plan();
        let seg = |file, offset, len| Segment { file, offset, len };
        assert_eq!(
            pieces,
            vec![
                vec![seg(0, 0, 10), seg(2, 0, 20)],
                vec![seg(3, 0, 100)],
                vec![seg(3, 100, 100)],
                vec![seg(3, 200, 50)],
                vec![seg(4, 0, 5), seg(5, 0, 5)],
            ]
        );
    }

    #[test]
    fn manifests_round_trip_and_bad_ones_are_refused() {
        let m = manifest(&[1, 2, 3], 1 << 20, 1 << 10);
        assert_eq!(Manifest::from_bytes(&m.to_bytes()).unwrap(), m);
        let mut bad = m.clone();
        bad.format = "rdmc-push/9".into();
        assert!(
            Manifest::from_bytes(&bad.to_bytes())
                .unwrap_err()
                .contains("format")
        );
        let mut bad = m.clone();
        bad.files[1].sha256 = "xyz".into();
        assert!(
            Manifest::from_bytes(&bad.to_bytes())
                .unwrap_err()
                .contains("SHA-256")
        );
        let mut bad = m.clone();
        bad.files[2].path = "../etc/passwd".into();
        assert!(
            Manifest::from_bytes(&bad.to_bytes())
                .unwrap_err()
                .contains("plain names")
        );
        assert!(Manifest::from_bytes(b"not json").is_err());
    }

    #[test]
    fn only_plain_relative_paths_pass() {
        for good in [&["a"][..], &["a/b", "a/c", "b"], &["x y/z.txt"]] {
            assert_eq!(check_paths(good.iter().copied()), Ok(()), "{good:?}");
        }
        for bad in [
            &["/etc/passwd"][..],
            &["a/../b"],
            &["./a"],
            &["a//b"],
            &["a/"],
            &[""],
            &[".."],
            &["a", "a"],
            &["a", "a/b"],
            &["a/b/c", "a/b"],
        ] {
            assert!(check_paths(bad.iter().copied()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn top_level_names_are_the_first_components() {
        let mut m = manifest(&[1, 1], 10, 5);
        m.files[1].path = "top.txt".into();
        assert_eq!(
            m.top_level_names().into_iter().collect::<Vec<_>>(),
            ["d", "top.txt"]
        );
    }
}
