//! The root's side of the files: find them (directories recursively), check
//! and hash every one before anything is sent, and read them back message
//! by message while the push runs. All of it blocking: callers run it
//! before the runtime starts or on a blocking thread.

use std::collections::HashSet;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::manifest::{FileEntry, Manifest, Segment};
use rdmc_cli::cluster::kind_of;

/// A file to send: where it is here and the relative path it gets there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Source {
    pub(crate) path: PathBuf,
    pub(crate) rel: String,
    pub(crate) size: u64,
}

/// Every regular file named by `paths` or found under the directories
/// among them (in name order), with its relative path: the argument's own
/// name, then the path below it. Symbolic links to files are followed;
/// other kinds of files, links to directories, names that are not UTF-8
/// and two arguments of the same name are refused.
pub(crate) fn collect(paths: &[PathBuf]) -> Result<Vec<Source>, String> {
    let mut sources = Vec::new();
    let mut names = HashSet::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let absolute = std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let name = lexical_name(&absolute).ok_or_else(|| {
            format!(
                "{}: has no name to give it at the receivers",
                path.display()
            )
        })?;
        let name = utf8(&name, path)?;
        if !names.insert(name.clone()) {
            return Err(format!(
                "{}: a second argument named {name:?}; the receivers would get one over the other",
                path.display()
            ));
        }
        if meta.is_file() {
            sources.push(Source {
                path: path.clone(),
                rel: name,
                size: meta.len(),
            });
        } else if meta.is_dir() {
            walk(path, &name, &mut sources)?;
        } else {
            return Err(format!(
                "{}: is {}; only regular files and directories can be pushed",
                path.display(),
                kind_of(meta.file_type())
            ));
        }
    }
    Ok(sources)
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

fn utf8(name: &std::ffi::OsStr, path: &Path) -> Result<String, String> {
    name.to_str().map(str::to_owned).ok_or_else(|| {
        format!(
            "{}: the name is not UTF-8; rename it to push it",
            path.display()
        )
    })
}

/// Add every file under `dir` (relative path `rel`), in name order.
fn walk(dir: &Path, rel: &str, sources: &mut Vec<Source>) -> Result<(), String> {
    let named = |e: std::io::Error| format!("{}: {e}", dir.display());
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
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let meta = if kind.is_symlink() {
            std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?
        } else {
            entry
                .metadata()
                .map_err(|e| format!("{}: {e}", path.display()))?
        };
        if meta.is_file() {
            sources.push(Source {
                path,
                rel: child,
                size: meta.len(),
            });
        } else if meta.is_dir() && !kind.is_symlink() {
            walk(&path, &child, sources)?;
        } else {
            let what = if meta.is_dir() {
                "a symbolic link to a directory (not followed)"
            } else {
                kind_of(meta.file_type())
            };
            return Err(format!(
                "{}: is {what}; only regular files and directories can be pushed",
                path.display()
            ));
        }
    }
    Ok(())
}

/// Open a source for reading and check, on the open handle, that it is
/// still a regular file of the expected size. Opened without blocking (a
/// file replaced by a FIFO would block until a writer came).
fn open_checked(source: &Source) -> Result<File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let named = |e: std::io::Error| format!("{}: {e}", source.path.display());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&source.path)
        .map_err(named)?;
    let meta = file.metadata().map_err(named)?;
    if !meta.is_file() {
        return Err(format!(
            "{}: is {}; only regular files can be pushed",
            source.path.display(),
            kind_of(meta.file_type())
        ));
    }
    if meta.len() != source.size {
        return Err(changed(source, meta.len()));
    }
    Ok(file)
}

fn changed(source: &Source, now: u64) -> String {
    format!(
        "{}: changed while being pushed (was {} bytes, now {now})",
        source.path.display(),
        source.size
    )
}

/// Lowercase hex of a digest.
pub(crate) fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// Read every source whole and build the manifest: each file's SHA-256,
/// reading it as it is now. `hashed` is told of every run of bytes read.
/// A file that cannot be opened or read fails here, before anything is
/// sent.
pub(crate) fn hash_all(
    sources: &[Source],
    (chunk_size, batch_limit): (u64, u64),
    hashed: &dyn Fn(u64),
) -> Result<Manifest, String> {
    let mut buffer = vec![0u8; 1 << 20];
    let files = sources
        .iter()
        .map(|source| {
            let mut file = open_checked(source)?;
            let mut hash = Sha256::new();
            let mut total = 0u64;
            loop {
                let n = file
                    .read(&mut buffer)
                    .map_err(|e| format!("reading {}: {e}", source.path.display()))?;
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
            Ok(FileEntry {
                path: source.rel.clone(),
                size: source.size,
                sha256: hex(&hash.finalize()),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Manifest {
        format: super::manifest::FORMAT.to_owned(),
        chunk_size,
        batch_limit,
        files,
    })
}

/// Reads the sources piece by piece, in plan order, hashing each file again
/// as it goes: a file that changed since the manifest was made fails the
/// push here, at the root, rather than at every receiver.
pub(crate) struct PieceReader<'a> {
    sources: &'a [Source],
    manifest: &'a Manifest,
    /// The file being read: its index, handle, hash so far.
    open: Option<(usize, File, Sha256)>,
}

impl<'a> PieceReader<'a> {
    pub(crate) fn new(sources: &'a [Source], manifest: &'a Manifest) -> Self {
        PieceReader {
            sources,
            manifest,
            open: None,
        }
    }

    /// The bytes of one message.
    pub(crate) fn read(&mut self, piece: &[Segment]) -> Result<Vec<u8>, String> {
        let len = super::manifest::piece_len(piece) as usize;
        let mut data = Vec::new();
        data.try_reserve_exact(len)
            .map_err(|_| format!("cannot allocate a message of {len} bytes"))?;
        for segment in piece {
            if self.open.as_ref().map(|(i, _, _)| *i) != Some(segment.file) {
                let file = open_checked(&self.sources[segment.file])?;
                self.open = Some((segment.file, file, Sha256::new()));
            }
            let source = &self.sources[segment.file];
            let (_, file, hash) = self.open.as_mut().expect("opened above");
            let start = data.len();
            let got = file
                .take(segment.len)
                .read_to_end(&mut data)
                .map_err(|e| format!("reading {}: {e}", source.path.display()))?;
            if got as u64 != segment.len {
                return Err(changed(source, segment.offset + got as u64));
            }
            hash.update(&data[start..]);
            if segment.offset + segment.len == source.size {
                let (_, _, hash) = self.open.take().expect("opened above");
                if hex(&hash.finalize()) != self.manifest.files[segment.file].sha256 {
                    return Err(format!(
                        "{}: changed while being pushed (its SHA-256 differs from the manifest's)",
                        source.path.display()
                    ));
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
        let rels: Vec<_> = got.iter().map(|s| (s.rel.as_str(), s.size)).collect();
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
    }

    #[test]
    fn what_cannot_be_pushed_is_refused_by_name() {
        let dir = ScratchDir::new("push-inputs");
        let tree = dir.join("tree");
        std::fs::create_dir_all(tree.join("sub")).unwrap();
        std::os::unix::fs::symlink(tree.join("sub"), tree.join("dirlink")).unwrap();
        let err = collect(std::slice::from_ref(&tree)).unwrap_err();
        assert!(
            err.contains("dirlink: is a symbolic link to a directory"),
            "{err}"
        );
        let other = dir.join("other/tree");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::remove_file(tree.join("dirlink")).unwrap();
        let err = collect(&[tree, other]).unwrap_err();
        assert!(err.contains("a second argument named \"tree\""), "{err}");
        let err = collect(&[PathBuf::from("/dev/null")]).unwrap_err();
        assert!(err.contains("is a character device"), "{err}");
        let err = collect(&[PathBuf::from("/")]).unwrap_err();
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
        // The SHA-256 of "abc" (FIPS 180-2, appendix B.1).
        assert_eq!(
            manifest.files[0].sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let plan = manifest.plan();
        let mut reader = PieceReader::new(&sources, &manifest);
        assert_eq!(reader.read(&plan[0]).unwrap(), b"ab");
        assert_eq!(reader.read(&plan[1]).unwrap(), b"c");
        std::fs::write(&path, b"abd").unwrap();
        let mut reader = PieceReader::new(&sources, &manifest);
        reader.read(&plan[0]).unwrap();
        let err = reader.read(&plan[1]).unwrap_err();
        assert!(err.contains("SHA-256 differs"), "{err}");
        std::fs::write(&path, b"abcd").unwrap();
        let err = PieceReader::new(&sources, &manifest)
            .read(&plan[0])
            .unwrap_err();
        assert!(err.contains("was 3 bytes, now 4"), "{err}");
    }
}
