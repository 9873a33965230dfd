//! What `rdmc push` sends first, and how the files' bytes are cut into
//! messages.
//!
//! The first message of a push is the [`Manifest`]: every file's relative
//! path, size, BLAKE3, permissions and modification time, every directory
//! (empty ones too) and symbolic link of the pushed trees, and the two
//! numbers that cut the contents into messages. Both sides compute the same [`plan`] from it, so the messages
//! after it carry file bytes only: small files are batched into one message
//! (up to `chunk_size` bytes), a larger file is cut into `chunk_size`
//! pieces, and empty files take no message at all.

use std::collections::{BTreeSet, HashSet};
use std::path::{Component, Path};

use anyhow::{anyhow, bail};
use serde::{Deserialize, Serialize};

/// The manifest format this build writes and reads.
pub(crate) const FORMAT: &str = "rdmc-push/5";

/// The permission bits a push carries (no set-user-id, set-group-id or
/// sticky bit).
pub(crate) const MODE_BITS: u32 = 0o777;

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
    /// Every directory of the pushed trees, parents first.
    pub(crate) dirs: Vec<DirEntry>,
    /// Symbolic links to files of the push, kept as links.
    pub(crate) links: Vec<LinkEntry>,
    /// Receivers replace entries that exist and differ (`rdmc push
    /// --force`), each file atomically, deleting nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) replace: bool,
}

/// One file of a push.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FileEntry {
    /// Relative, `/`-separated, no `.`/`..` components.
    pub(crate) path: String,
    pub(crate) size: u64,
    /// Lowercase hex.
    pub(crate) blake3: String,
    /// Permission bits (within [`MODE_BITS`]).
    pub(crate) mode: u32,
    /// Modification time, nanoseconds since the Unix epoch.
    pub(crate) mtime_ns: i64,
    /// For a file sent in pieces (larger than the batch limit): the BLAKE3
    /// of each `chunk_size` piece, in order, lowercase hex — so that a
    /// receiver cut off mid-file can check the prefix it kept, piece by
    /// piece, and the push resume after it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) chunk_blake3: Vec<String>,
}

/// One directory of a push.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DirEntry {
    /// As [`FileEntry::path`].
    pub(crate) path: String,
    /// Permission bits (within [`MODE_BITS`]).
    pub(crate) mode: u32,
    /// Modification time, nanoseconds since the Unix epoch.
    pub(crate) mtime_ns: i64,
}

/// A symbolic link of a push, to a file of the same push.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LinkEntry {
    /// As [`FileEntry::path`].
    pub(crate) path: String,
    /// The link's text: a relative path from the link's directory to a
    /// file of the push.
    pub(crate) target: String,
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
    /// numbers, the modes, every path ([`check_paths`]) and every link's
    /// target ([`check_links`]).
    pub(crate) fn from_bytes(bytes: &[u8]) -> anyhow::Result<Self> {
        let manifest: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| anyhow!("the first message is not a push manifest: {e}"))?;
        if manifest.format != FORMAT {
            bail!(
                "the push manifest is in format {:?}; this rdmc reads {FORMAT:?}",
                manifest.format
            );
        }
        if manifest.chunk_size == 0 || manifest.batch_limit > manifest.chunk_size {
            bail!(
                "the push manifest cuts messages impossibly (chunk {} bytes, batch limit {} bytes)",
                manifest.chunk_size,
                manifest.batch_limit
            );
        }
        let digest = |d: &String| {
            d.len() == 64
                && d.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        for file in &manifest.files {
            if !digest(&file.blake3) || !file.chunk_blake3.iter().all(digest) {
                bail!("{}: not a BLAKE3 digest in the manifest", file.path);
            }
            if file.chunk_blake3.len() as u64 != manifest.chunks_of(file.size) {
                bail!(
                    "{}: {} piece digests in the manifest for {} pieces",
                    file.path,
                    file.chunk_blake3.len(),
                    manifest.chunks_of(file.size)
                );
            }
        }
        let modes = manifest.files.iter().map(|f| (&f.path, f.mode));
        let modes = modes.chain(manifest.dirs.iter().map(|d| (&d.path, d.mode)));
        if let Some((path, mode)) = modes.into_iter().find(|(_, m)| m & !MODE_BITS != 0) {
            bail!("{path}: mode {mode:o} in the manifest");
        }
        check_paths(
            manifest
                .files
                .iter()
                .map(|f| f.path.as_str())
                .chain(manifest.links.iter().map(|l| l.path.as_str())),
        )?;
        check_dirs(&manifest)?;
        check_links(&manifest)?;
        Ok(manifest)
    }

    /// How many pieces of their own a file of `size` bytes is sent in: 0
    /// for one batched with others (or empty).
    pub(crate) fn chunks_of(&self, size: u64) -> u64 {
        if size <= self.batch_limit {
            0
        } else {
            size.div_ceil(self.chunk_size.max(1))
        }
    }

    /// The messages of file bytes after the manifest, in order.
    pub(crate) fn plan(&self) -> Vec<Piece> {
        plan(self)
    }

    /// The first component of every path: what lands directly in the
    /// output directory.
    pub(crate) fn top_level_names(&self) -> BTreeSet<&str> {
        let files = self.files.iter().map(|f| f.path.as_str());
        let dirs = self.dirs.iter().map(|d| d.path.as_str());
        let links = self.links.iter().map(|l| l.path.as_str());
        files
            .chain(dirs)
            .chain(links)
            .map(|path| path.split('/').next().unwrap_or(""))
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

/// Whether `path` is relative and made of plain names only (no `.`, `..`,
/// empty or absolute parts).
fn plain(path: &str) -> bool {
    !path.is_empty()
        && path.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && !part.contains('\0')
                && matches!(
                    Path::new(part).components().collect::<Vec<_>>()[..],
                    [Component::Normal(_)]
                )
        })
}

/// Check received paths of files and links before anything is written:
/// each plain ([`plain`]), each once, and none standing where another's
/// directory must be. A path that fails could write outside the output
/// directory, clobber a file, or write through a link.
pub(crate) fn check_paths<'a>(paths: impl Iterator<Item = &'a str>) -> anyhow::Result<()> {
    let mut files = HashSet::new();
    let mut dirs = HashSet::new();
    for path in paths {
        if !plain(path) {
            bail!("{path:?}: not a relative path of plain names; refusing to write it");
        }
        if !files.insert(path) {
            bail!("{path:?} is listed twice");
        }
        dirs.extend(parents(path));
    }
    if let Some(clash) = files.iter().find(|f| dirs.contains(*f)) {
        bail!("{clash:?} is both a file and a directory");
    }
    Ok(())
}

/// The directories `path` is in: `a`, `a/b` for `a/b/c`.
fn parents(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/').map(move |(at, _)| &path[..at])
}

/// Check the directories of a manifest: plain paths, each once, none a
/// file or a link (or below one).
fn check_dirs(manifest: &Manifest) -> anyhow::Result<()> {
    let leaves: HashSet<&str> = manifest
        .files
        .iter()
        .map(|f| f.path.as_str())
        .chain(manifest.links.iter().map(|l| l.path.as_str()))
        .collect();
    let mut seen = HashSet::new();
    for dir in &manifest.dirs {
        let path = dir.path.as_str();
        if !plain(path) {
            bail!("{path:?}: not a relative path of plain names; refusing to write it");
        }
        if !seen.insert(path) {
            bail!("{path:?} is listed twice");
        }
        if let Some(clash) = std::iter::once(path)
            .chain(parents(path))
            .find(|p| leaves.contains(p))
        {
            bail!("{clash:?} is both a file and a directory");
        }
    }
    Ok(())
}

/// Where a link's `target` leads from the link at `path`, resolved as
/// written (`..` takes a name off): `None` if it leaves the push (above
/// its top-level entry) or is not a relative path.
pub(crate) fn resolve_link(path: &str, target: &str) -> Option<String> {
    if target.is_empty() || target.starts_with('/') || target.contains('\0') {
        return None;
    }
    let mut parts: Vec<&str> = path.split('/').collect();
    parts.pop();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                // Never above the link's top-level entry.
                if parts.len() <= 1 {
                    return None;
                }
                parts.pop();
            }
            name => parts.push(name),
        }
    }
    Some(parts.join("/"))
}

/// Check the links of a manifest: each leads (as written, see
/// [`resolve_link`]) to a file of the push, so that a receiver never makes
/// a link out of its output directory or to what the push did not bring.
fn check_links(manifest: &Manifest) -> anyhow::Result<()> {
    let files: HashSet<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    for link in &manifest.links {
        let leads = resolve_link(&link.path, &link.target);
        if !leads.as_deref().is_some_and(|to| files.contains(to)) {
            bail!(
                "{:?}: a link to {:?}, not to a file of the push; refusing to make it",
                link.path,
                link.target
            );
        }
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
                    blake3: "0".repeat(64),
                    mode: 0o644,
                    mtime_ns: 1_700_000_000_123_456_789,
                    chunk_blake3: if size > batch_limit {
                        vec!["0".repeat(64); size.div_ceil(chunk_size.max(1)) as usize]
                    } else {
                        Vec::new()
                    },
                })
                .collect(),
            dirs: vec![DirEntry {
                path: "d".into(),
                mode: 0o755,
                mtime_ns: 0,
            }],
            links: Vec::new(),
            replace: false,
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
            // A file sent in pieces of its own has one digest per piece.
            for (file, entry) in m.files.iter().enumerate() {
                let own = pieces
                    .iter()
                    .filter(|p| entry.size > batch_limit && p.iter().any(|s| s.file == file))
                    .count() as u64;
                prop_assert_eq!(own, m.chunks_of(entry.size));
                prop_assert_eq!(entry.chunk_blake3.len() as u64, own);
            }
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
                .to_string()
                .contains("format")
        );
        let mut bad = m.clone();
        bad.files[1].blake3 = "xyz".into();
        assert!(
            Manifest::from_bytes(&bad.to_bytes())
                .unwrap_err()
                .to_string()
                .contains("BLAKE3")
        );
        let mut bad = m.clone();
        bad.files[2].path = "../etc/passwd".into();
        assert!(
            Manifest::from_bytes(&bad.to_bytes())
                .unwrap_err()
                .to_string()
                .contains("plain names")
        );
        assert!(Manifest::from_bytes(b"not json").is_err());
        let mut bad = m.clone();
        bad.files[0].mode = 0o4755;
        assert!(
            Manifest::from_bytes(&bad.to_bytes())
                .unwrap_err()
                .to_string()
                .contains("mode 4755")
        );
    }

    #[test]
    fn links_lead_to_files_of_the_push_and_directories_hold_no_file() {
        let m = manifest(&[1, 2], 1 << 20, 1 << 10);
        let with_link = |path: &str, target: &str| {
            let mut m = m.clone();
            m.links.push(LinkEntry {
                path: path.into(),
                target: target.into(),
            });
            Manifest::from_bytes(&m.to_bytes())
        };
        assert!(with_link("d/l", "f0").is_ok());
        assert!(with_link("d/e/l", "../f1").is_ok());
        assert!(with_link("d/e/l", "./../f1").is_ok());
        for (path, target) in [
            ("d/l", "/etc/passwd"),
            ("d/l", "../d/f0"),
            ("d/l", "f9"),
            ("d/l", "../../x"),
            ("d/l", ""),
            ("d/f0", "f1"),
            ("../l", "d/f0"),
        ] {
            let err = with_link(path, target).unwrap_err().to_string();
            assert!(
                err.contains("refusing") || err.contains("twice"),
                "{path} -> {target}: {err}"
            );
        }
        // A directory where a file (or a link) is, or below one.
        for dir in ["d/f0", "d/f0/x", "d", "/abs"] {
            let mut bad = m.clone();
            bad.dirs.push(DirEntry {
                path: dir.into(),
                mode: 0o755,
                mtime_ns: 0,
            });
            let err = Manifest::from_bytes(&bad.to_bytes())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("both a file") || err.contains("twice") || err.contains("plain"),
                "{dir}: {err}"
            );
        }
        let mut linked = m.clone();
        linked.links.push(LinkEntry {
            path: "d/l".into(),
            target: "f0".into(),
        });
        linked.dirs.push(DirEntry {
            path: "d/l".into(),
            mode: 0o755,
            mtime_ns: 0,
        });
        assert!(Manifest::from_bytes(&linked.to_bytes()).is_err());
    }

    #[test]
    fn only_plain_relative_paths_pass() {
        for good in [&["a"][..], &["a/b", "a/c", "b"], &["x y/z.txt"]] {
            assert_eq!(
                check_paths(good.iter().copied()).map_err(|e| e.to_string()),
                Ok(()),
                "{good:?}"
            );
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
