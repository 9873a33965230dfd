//! The root's side of the files: find them (directories recursively), check
//! and hash every one before anything is sent, and read them back message
//! by message while the push runs. All of it blocking: callers run it
//! before the runtime starts or on a blocking thread.

use std::collections::HashSet;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail};

use super::manifest::{DirEntry, FileEntry, LinkEntry, MODE_BITS, Manifest, Segment, resolve_link};
use rdmc_cli::cluster::kind_of;

/// A file to send: where it is here and the relative path it gets there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Source {
    pub(crate) path: PathBuf,
    pub(crate) rel: String,
    pub(crate) size: u64,
}

/// What a push sends: its files, and the directories and links of the
/// trees they are in.
#[derive(Debug, Default)]
pub(crate) struct Collected {
    pub(crate) files: Vec<Source>,
    pub(crate) dirs: Vec<DirEntry>,
    pub(crate) links: Vec<LinkEntry>,
}

/// Every regular file named by `paths` or found under the directories
/// among them (in name order), with its relative path: the argument's own
/// name, then the path below it; and every directory (empty ones too).
/// A symbolic link whose text leads, as written, to a file of the same
/// tree is kept as a link; other links to files are followed. Other kinds
/// of files, links to directories, names that are not UTF-8 and two
/// arguments of the same name are refused.
pub(crate) fn collect(paths: &[PathBuf]) -> anyhow::Result<Collected> {
    let mut found = Collected::default();
    let mut linked = Vec::new();
    let mut names = HashSet::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        let absolute = std::path::absolute(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        let name = lexical_name(&absolute).ok_or_else(|| {
            anyhow!(
                "{}: has no name to give it at the receivers",
                path.display()
            )
        })?;
        let name = utf8(&name, path)?;
        if !names.insert(name.clone()) {
            bail!(
                "{}: a second argument named {name:?}; the receivers would get one over the other",
                path.display()
            );
        }
        if meta.is_file() {
            found.files.push(Source {
                path: path.clone(),
                rel: name,
                size: meta.len(),
            });
        } else if meta.is_dir() {
            found.dirs.push(dir_entry(&name, &meta));
            walk(path, &name, (&mut found, &mut linked))?;
        } else {
            bail!(
                "{}: is {}; only regular files and directories can be pushed",
                path.display(),
                kind_of(meta.file_type())
            );
        }
    }
    // A link is kept when it leads to a file of the push that is not a
    // link itself; else it stays a file (the link followed).
    let links: HashSet<&str> = linked.iter().map(|l| l.path.as_str()).collect();
    let files: HashSet<&str> = found
        .files
        .iter()
        .map(|s| s.rel.as_str())
        .filter(|rel| !links.contains(rel))
        .collect();
    let kept: HashSet<String> = linked
        .iter()
        .filter(|l| resolve_link(&l.path, &l.target).is_some_and(|to| files.contains(to.as_str())))
        .map(|l| l.path.clone())
        .collect();
    found.files.retain(|s| !kept.contains(&s.rel));
    found.links = linked
        .into_iter()
        .filter(|l| kept.contains(&l.path))
        .collect();
    Ok(found)
}

/// The nanoseconds since the Unix epoch of a modification time.
fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    use std::os::unix::fs::MetadataExt;
    meta.mtime()
        .saturating_mul(1_000_000_000)
        .saturating_add(meta.mtime_nsec())
}

fn dir_entry(rel: &str, meta: &std::fs::Metadata) -> DirEntry {
    use std::os::unix::fs::PermissionsExt;
    DirEntry {
        path: rel.to_owned(),
        mode: meta.permissions().mode() & MODE_BITS,
        mtime_ns: mtime_ns(meta),
    }
}

/// The last name of `path` once `.` and `..` are resolved as written
/// (`dir/.` is `dir`, `a/b/..` is `a`); `None` for `/`.
fn lexical_name(path: &Path) -> Option<std::ffi::OsString> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in path.components() {
        match component {
            std::path::Component::Normal(name) => parts.push(name),
            std::path::Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    parts.last().map(|name| name.to_os_string())
}

fn utf8(name: &std::ffi::OsStr, path: &Path) -> anyhow::Result<String> {
    name.to_str().map(str::to_owned).ok_or_else(|| {
        anyhow!(
            "{}: the name is not UTF-8; rename it to push it",
            path.display()
        )
    })
}

/// Add every file and directory under `dir` (relative path `rel`), in
/// name order; a link to a file is added as the file it leads to, and to
/// `linked`, to be kept as a link instead once every file is known.
fn walk(
    dir: &Path,
    rel: &str,
    (found, linked): (&mut Collected, &mut Vec<LinkEntry>),
) -> anyhow::Result<()> {
    let named = |e: std::io::Error| anyhow!("{}: {e}", dir.display());
    let mut entries = std::fs::read_dir(dir)
        .map_err(named)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(named)?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let child = format!("{rel}/{}", utf8(&entry.file_name(), &path)?);
        let kind = entry
            .file_type()
            .map_err(|e| anyhow!("{}: {e}", path.display()))?;
        let meta = if kind.is_symlink() {
            std::fs::metadata(&path).map_err(|e| anyhow!("{}: {e}", path.display()))?
        } else {
            entry
                .metadata()
                .map_err(|e| anyhow!("{}: {e}", path.display()))?
        };
        if meta.is_file() {
            if kind.is_symlink()
                && let Ok(target) = std::fs::read_link(&path)
                && let Some(target) = target.to_str()
            {
                linked.push(LinkEntry {
                    path: child.clone(),
                    target: target.to_owned(),
                });
            }
            found.files.push(Source {
                path,
                rel: child,
                size: meta.len(),
            });
        } else if meta.is_dir() && !kind.is_symlink() {
            found.dirs.push(dir_entry(&child, &meta));
            walk(&path, &child, (found, linked))?;
        } else {
            let what = if meta.is_dir() {
                "a symbolic link to a directory (not followed)"
            } else {
                kind_of(meta.file_type())
            };
            bail!(
                "{}: is {what}; only regular files and directories can be pushed",
                path.display()
            );
        }
    }
    Ok(())
}

/// Open a source for reading and check, on the open handle, that it is
/// still a regular file of the expected size. Opened without blocking (a
/// file replaced by a FIFO would block until a writer came). Returns the
/// file and its metadata.
fn open_checked(source: &Source) -> anyhow::Result<(File, std::fs::Metadata)> {
    use std::os::unix::fs::OpenOptionsExt;
    let named = |e: std::io::Error| anyhow!("{}: {e}", source.path.display());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&source.path)
        .map_err(named)?;
    let meta = file.metadata().map_err(named)?;
    if !meta.is_file() {
        bail!(
            "{}: is {}; only regular files can be pushed",
            source.path.display(),
            kind_of(meta.file_type())
        );
    }
    if meta.len() != source.size {
        return Err(changed(source, meta.len()));
    }
    Ok((file, meta))
}

fn changed(source: &Source, now: u64) -> anyhow::Error {
    anyhow!(
        "{}: changed while being pushed (was {} bytes, now {now})",
        source.path.display(),
        source.size
    )
}

/// BLAKE3 of a file's bytes, fed in parts: the hash the library's message
/// digests use. Every byte of a push is hashed at the root (twice for a
/// file sent in pieces: whole and per piece) and at every receiver, so the
/// hash's speed is the push's: BLAKE3 takes 0.4 times SHA-256's time on a
/// CPU with SHA extensions and a ninth of it on one without (figures in
/// the library's manifest).
#[derive(Clone)]
pub(crate) struct Blake3(blake3::Hasher);

impl Blake3 {
    /// The hash of no bytes yet.
    pub(crate) fn new() -> Self {
        Blake3(blake3::Hasher::new())
    }

    /// Feeds the next bytes.
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The digest of the bytes fed, in lowercase hex (as in the manifest).
    pub(crate) fn hex(self) -> String {
        self.0.finalize().to_hex().to_string()
    }
}

/// The BLAKE3 of a whole file and, for a file sent in pieces of its own,
/// of each piece (every `chunk` bytes from its start), in one pass.
pub(crate) struct FileDigests {
    whole: Blake3,
    /// The piece size, the piece's hash so far and its bytes so far.
    piece: Option<(u64, Blake3, u64)>,
    pieces: Vec<String>,
}

impl FileDigests {
    /// Digests of a whole file; of its `chunk`-byte pieces too if given.
    pub(crate) fn new(chunk: Option<u64>) -> Self {
        FileDigests {
            whole: Blake3::new(),
            piece: chunk.map(|size| (size.max(1), Blake3::new(), 0)),
            pieces: Vec::new(),
        }
    }

    /// The file's next bytes.
    pub(crate) fn update(&mut self, mut bytes: &[u8]) {
        self.whole.update(bytes);
        let Some((size, hash, filled)) = &mut self.piece else {
            return;
        };
        while !bytes.is_empty() {
            let take = usize::try_from(*size - *filled)
                .unwrap_or(usize::MAX)
                .min(bytes.len());
            hash.update(&bytes[..take]);
            *filled += take as u64;
            bytes = &bytes[take..];
            if *filled == *size {
                self.pieces
                    .push(std::mem::replace(hash, Blake3::new()).hex());
                *filled = 0;
            }
        }
    }

    /// The whole file's digest and each piece's, in lowercase hex.
    pub(crate) fn finish(mut self) -> (String, Vec<String>) {
        if let Some((_, hash, filled)) = self.piece.take()
            && filled > 0
        {
            self.pieces.push(hash.hex());
        }
        (self.whole.hex(), self.pieces)
    }
}

/// Read every source whole and build the manifest: each file's BLAKE3,
/// reading it as it is now. `hashed` is told of every run of bytes read.
/// A file that cannot be opened or read fails here, before anything is
/// sent.
pub(crate) fn hash_all(
    found: &Collected,
    (chunk_size, batch_limit): (u64, u64),
    hashed: &dyn Fn(u64),
) -> anyhow::Result<Manifest> {
    use std::os::unix::fs::PermissionsExt;
    let mut buffer = vec![0u8; 1 << 20];
    let files = found
        .files
        .iter()
        .map(|source| {
            let (mut file, meta) = open_checked(source)?;
            let pieces = (source.size > batch_limit).then_some(chunk_size.max(1));
            let mut hash = FileDigests::new(pieces);
            let mut total = 0u64;
            loop {
                let n = file
                    .read(&mut buffer)
                    .map_err(|e| anyhow!("reading {}: {e}", source.path.display()))?;
                if n == 0 {
                    break;
                }
                hash.update(&buffer[..n]);
                total += n as u64;
                hashed(n as u64);
            }
            if total != source.size {
                return Err(changed(source, total));
            }
            let (blake3, chunk_blake3) = hash.finish();
            Ok(FileEntry {
                path: source.rel.clone(),
                size: source.size,
                blake3,
                mode: meta.permissions().mode() & MODE_BITS,
                mtime_ns: mtime_ns(&meta),
                chunk_blake3,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Manifest {
        format: super::manifest::FORMAT.to_owned(),
        chunk_size,
        batch_limit,
        files,
        dirs: found.dirs.clone(),
        links: found.links.clone(),
        replace: false,
    })
}

/// Reads the sources piece by piece, in plan order, hashing each file again
/// as it goes: a file that changed since the manifest was made fails the
/// push here, at the root, rather than at every receiver.
pub(crate) struct PieceReader<'a> {
    sources: &'a [Source],
    manifest: &'a Manifest,
    /// The file being read: its index, handle, hash so far.
    open: Option<(usize, File, Blake3)>,
}

impl<'a> PieceReader<'a> {
    pub(crate) fn new(sources: &'a [Source], manifest: &'a Manifest) -> Self {
        PieceReader {
            sources,
            manifest,
            open: None,
        }
    }

    /// Be ready to read `piece` next, after the reader stopped somewhere
    /// else (a push that goes on from a message sent before): a piece that
    /// starts inside a file has the file's bytes before it read and hashed
    /// again, so that the whole file's BLAKE3 is still checked.
    pub(crate) fn resume_at(&mut self, piece: &[Segment]) -> anyhow::Result<()> {
        self.open = None;
        let Some(first) = piece.first().filter(|s| s.offset > 0) else {
            return Ok(());
        };
        let source = &self.sources[first.file];
        let (mut file, _) = open_checked(source)?;
        let mut hash = Blake3::new();
        let mut buffer = vec![0; 1 << 20];
        let mut left = first.offset;
        while left > 0 {
            let want = buffer
                .len()
                .min(usize::try_from(left).unwrap_or(usize::MAX));
            let got = file
                .read(&mut buffer[..want])
                .map_err(|e| anyhow!("reading {}: {e}", source.path.display()))?;
            if got == 0 {
                return Err(changed(source, first.offset - left));
            }
            hash.update(&buffer[..got]);
            left -= got as u64;
        }
        self.open = Some((first.file, file, hash));
        Ok(())
    }

    /// The bytes of one message.
    pub(crate) fn read(&mut self, piece: &[Segment]) -> anyhow::Result<Vec<u8>> {
        let len = super::manifest::piece_len(piece) as usize;
        let mut data = Vec::new();
        data.try_reserve_exact(len)
            .map_err(|_| anyhow!("cannot allocate a message of {len} bytes"))?;
        for segment in piece {
            if self.open.as_ref().map(|(i, _, _)| *i) != Some(segment.file) {
                let (file, _) = open_checked(&self.sources[segment.file])?;
                self.open = Some((segment.file, file, Blake3::new()));
            }
            let source = &self.sources[segment.file];
            let (_, file, hash) = self.open.as_mut().expect("opened above");
            let start = data.len();
            let got = file
                .take(segment.len)
                .read_to_end(&mut data)
                .map_err(|e| anyhow!("reading {}: {e}", source.path.display()))?;
            if got as u64 != segment.len {
                return Err(changed(source, segment.offset + got as u64));
            }
            hash.update(&data[start..]);
            if segment.offset + segment.len == source.size {
                let (_, file, hash) = self.open.take().expect("opened above");
                // Grown meanwhile (an append): what was sent is a prefix.
                let now = file
                    .metadata()
                    .map_err(|e| anyhow!("{}: {e}", source.path.display()))?
                    .len();
                if now != source.size {
                    return Err(changed(source, now));
                }
                if hash.hex() != self.manifest.files[segment.file].blake3 {
                    bail!(
                        "{}: changed while being pushed (its BLAKE3 differs from the manifest's)",
                        source.path.display()
                    );
                }
            }
        }
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDir;

    /// The reference implementation's digests of "abc" (fed in parts) and
    /// of no bytes.
    #[test]
    fn blake3_matches_the_reference_digests() {
        let mut hash = Blake3::new();
        hash.update(b"a");
        hash.update(b"bc");
        assert_eq!(
            hash.hex(),
            "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
        );
        assert_eq!(
            Blake3::new().hex(),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
    }

    #[test]
    fn piece_digests_cover_each_chunk_however_the_bytes_come() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        let sha = |bytes: &[u8]| {
            let mut hash = Blake3::new();
            hash.update(bytes);
            hash.hex()
        };
        for chunk in [1u64, 7, 100, 999, 1000, 4096] {
            for step in [1usize, 13, 100, 1000] {
                let mut digests = FileDigests::new(Some(chunk));
                data.chunks(step).for_each(|run| digests.update(run));
                let (whole, pieces) = digests.finish();
                assert_eq!(whole, sha(&data));
                let want: Vec<String> = data.chunks(chunk as usize).map(sha).collect();
                assert_eq!(pieces, want, "chunk {chunk}, step {step}");
            }
        }
        let mut whole_only = FileDigests::new(None);
        whole_only.update(&data);
        assert_eq!(whole_only.finish(), (sha(&data), Vec::new()));
    }

    #[test]
    fn directories_are_walked_in_name_order_under_their_own_name() {
        let dir = ScratchDir::new("push-inputs");
        let root = dir.join("tree");
        std::fs::create_dir_all(root.join("b/c")).unwrap();
        std::fs::write(root.join("b/c/z"), b"zz").unwrap();
        std::fs::write(root.join("a"), b"a").unwrap();
        std::fs::write(root.join("b/y"), b"").unwrap();
        std::os::unix::fs::symlink(root.join("a"), root.join("link")).unwrap();
        let single = dir.join("single");
        std::fs::write(&single, b"123").unwrap();
        let got = collect(&[root.join("."), single]).unwrap();
        let rels: Vec<_> = got.files.iter().map(|s| (s.rel.as_str(), s.size)).collect();
        // A link by an absolute path is followed.
        assert_eq!(
            rels,
            [
                ("tree/a", 1),
                ("tree/b/c/z", 2),
                ("tree/b/y", 0),
                ("tree/link", 1),
                ("single", 3)
            ]
        );
        let dirs: Vec<_> = got.dirs.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(dirs, ["tree", "tree/b", "tree/b/c"]);
        assert!(got.links.is_empty());
    }

    #[test]
    fn links_within_the_tree_stay_links_and_others_are_followed() {
        use std::os::unix::fs::{PermissionsExt, symlink};
        let dir = ScratchDir::new("push-inputs");
        let root = dir.join("t");
        std::fs::create_dir_all(root.join("sub/empty")).unwrap();
        std::fs::write(root.join("f"), b"ff").unwrap();
        std::fs::set_permissions(root.join("f"), std::fs::Permissions::from_mode(0o751)).unwrap();
        std::fs::write(dir.join("outside"), b"out").unwrap();
        symlink("../f", root.join("sub/up")).unwrap();
        symlink(dir.join("outside"), root.join("abs")).unwrap();
        symlink("../outside", root.join("rel-out")).unwrap();
        symlink("sub/up", root.join("chain")).unwrap();
        let got = collect(std::slice::from_ref(&root)).unwrap();
        let files: Vec<_> = got.files.iter().map(|s| s.rel.as_str()).collect();
        // Followed: a link out of the tree (by an absolute or a relative
        // text) and a link to a link; kept: the link to a file.
        assert_eq!(files, ["t/abs", "t/chain", "t/f", "t/rel-out"]);
        let links: Vec<_> = got
            .links
            .iter()
            .map(|l| (l.path.as_str(), l.target.as_str()))
            .collect();
        assert_eq!(links, [("t/sub/up", "../f")]);
        let dirs: Vec<_> = got.dirs.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(dirs, ["t", "t/sub", "t/sub/empty"]);
        let manifest = hash_all(&got, (1 << 20, 1 << 10), &|_| {}).unwrap();
        let f = manifest.files.iter().find(|e| e.path == "t/f").unwrap();
        assert_eq!(f.mode, 0o751);
        let mtime = std::fs::metadata(root.join("f"))
            .unwrap()
            .modified()
            .unwrap();
        let ns = mtime
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i64;
        assert_eq!(f.mtime_ns, ns);
        // What a receiver checks, the sender's manifest passes.
        Manifest::from_bytes(&manifest.to_bytes()).unwrap();
    }

    #[test]
    fn what_cannot_be_pushed_is_refused_by_name() {
        let dir = ScratchDir::new("push-inputs");
        let tree = dir.join("tree");
        std::fs::create_dir_all(tree.join("sub")).unwrap();
        std::os::unix::fs::symlink(tree.join("sub"), tree.join("dirlink")).unwrap();
        let err = collect(std::slice::from_ref(&tree))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("dirlink: is a symbolic link to a directory"),
            "{err}"
        );
        let other = dir.join("other/tree");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::remove_file(tree.join("dirlink")).unwrap();
        let err = collect(&[tree, other]).unwrap_err().to_string();
        assert!(err.contains("a second argument named \"tree\""), "{err}");
        let err = collect(&[PathBuf::from("/dev/null")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("is a character device"), "{err}");
        let err = collect(&[PathBuf::from("/")]).unwrap_err().to_string();
        assert!(err.contains("has no name"), "{err}");
    }

    #[test]
    fn hashes_are_of_the_contents_and_changes_are_caught_while_reading() {
        let dir = ScratchDir::new("push-inputs");
        let path = dir.join("f");
        std::fs::write(&path, b"abc").unwrap();
        let sources = collect(std::slice::from_ref(&path)).unwrap();
        let seen = std::cell::Cell::new(0);
        let manifest = hash_all(&sources, (2, 1), &|n| seen.set(seen.get() + n)).unwrap();
        assert_eq!(seen.get(), 3);
        // The BLAKE3 of "abc" (the reference implementation's).
        assert_eq!(
            manifest.files[0].blake3,
            "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
        );
        let plan = manifest.plan();
        let mut reader = PieceReader::new(&sources.files, &manifest);
        assert_eq!(reader.read(&plan[0]).unwrap(), b"ab");
        assert_eq!(reader.read(&plan[1]).unwrap(), b"c");
        std::fs::write(&path, b"abd").unwrap();
        let mut reader = PieceReader::new(&sources.files, &manifest);
        reader.read(&plan[0]).unwrap();
        let err = reader.read(&plan[1]).unwrap_err().to_string();
        assert!(err.contains("BLAKE3 differs"), "{err}");
        std::fs::write(&path, b"abcd").unwrap();
        let err = PieceReader::new(&sources.files, &manifest)
            .read(&plan[0])
            .unwrap_err()
            .to_string();
        assert!(err.contains("was 3 bytes, now 4"), "{err}");
        // An append after the file was opened, before its last piece.
        std::fs::write(&path, b"abc").unwrap();
        let mut reader = PieceReader::new(&sources.files, &manifest);
        reader.read(&plan[0]).unwrap();
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut file, b"appended").unwrap();
        let err = reader.read(&plan[1]).unwrap_err().to_string();
        assert!(err.contains("was 3 bytes, now 11"), "{err}");
    }

    #[test]
    fn a_reader_resumed_inside_a_file_still_checks_the_whole_file() {
        let dir = ScratchDir::new("push-inputs-resume");
        let path = dir.join("f");
        std::fs::write(&path, b"abcde").unwrap();
        let sources = collect(std::slice::from_ref(&path)).unwrap();
        let manifest = hash_all(&sources, (2, 1), &|_| {}).unwrap();
        let plan = manifest.plan();
        assert_eq!(plan.len(), 3);
        // From the second and the third piece, after reading elsewhere.
        for from in [1, 2] {
            let mut reader = PieceReader::new(&sources.files, &manifest);
            reader.read(&plan[0]).unwrap();
            reader.resume_at(&plan[from]).unwrap();
            let rest: Vec<u8> = plan[from..]
                .iter()
                .flat_map(|p| reader.read(p).unwrap())
                .collect();
            assert_eq!(rest, &b"abcde"[from * 2..]);
        }
        // The bytes before the resumed piece changed: the file's hash
        // says so at its end.
        std::fs::write(&path, b"xbcde").unwrap();
        let mut reader = PieceReader::new(&sources.files, &manifest);
        reader.resume_at(&plan[1]).unwrap();
        reader.read(&plan[1]).unwrap();
        let err = reader.read(&plan[2]).unwrap_err().to_string();
        assert!(err.contains("BLAKE3 differs"), "{err}");
    }
}
