//! The receiver's side of the files: written into a uniquely named staging
//! directory inside the output directory, every file checked against the
//! manifest's BLAKE3 and flushed to disk, and moved into place only once
//! every file of the push is there and checked. On any error — or if the
//! push fails — the staging directory and everything in it are removed:
//! the output directory then holds what it held before, never a mix of an
//! earlier run's files and this one's, nor a partial file. Files the output
//! directory holds intact already are neither written nor touched
//! ([`sync`]). Files get the
//! sender's permissions and modification times; directories (empty ones
//! too) theirs once everything is in place; links are made last, so that
//! nothing is ever written through one.
//!
//! Blocking: run it on a blocking thread. Today it is given each message's
//! bytes in memory ([`Staging::write_piece`]); a receiver that lets the
//! network write into the files directly would keep the checking and the
//! final move as they are.

use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail};

use super::inputs::Blake3;
use super::manifest::{Manifest, Segment, piece_len};
use super::sync::FileSet;
use rdmc_cli::cluster::without_path;

mod direct;
mod resume;
mod sync;

use direct::{FileWriter, start_writeback};

#[cfg(test)]
pub(crate) use sync::holds;
use sync::refuse_differing;
pub(crate) use sync::{held_files, holds_all};

/// Prefix of the staging directories (hidden).
const STAGING_PREFIX: &str = ".rdmc-receive.";
/// In a staging directory: the pushed trees as they are written.
const STAGED_TREE: &str = "tree";
/// In a staging directory: the manifest it is for (a receiver of the same
/// push run again resumes from what it holds: see [`Staging::resume`]).
const STAGED_MANIFEST: &str = "manifest.json";
/// Threads flushing the received files at the commit.
const FLUSHERS: usize = 8;

/// A push being written.
pub(crate) struct Staging {
    out: PathBuf,
    manifest: Manifest,
    /// The files the output directory holds intact: not written, not
    /// touched.
    held: FileSet,
    /// Removed (with its contents) when dropped: after the commit moved
    /// everything out of it, or on any error.
    dir: StagingDir,
    /// The file being written: its index, writer and hash so far.
    open: Option<(usize, FileWriter, Blake3)>,
    /// The files complete and checked, not yet flushed to disk (their
    /// writeback started): flushed together by the commit
    /// ([`Staging::flush_files`]).
    unflushed: Vec<usize>,
}

/// A staging directory, locked (`flock`) for as long as this receiver
/// writes it — the lock goes with the process, however it ends — and
/// removed with everything in it when dropped.
struct StagingDir {
    path: PathBuf,
    _lock: File,
    /// Whether dropping it removes it (not one left for another push).
    remove: bool,
}

impl StagingDir {
    /// Lock the staging directory at `path`, or `None` if another process
    /// holds it (a receiver still running there).
    fn lock(path: PathBuf) -> std::io::Result<Option<Self>> {
        use std::os::fd::AsRawFd;
        let lock = File::open(&path)?;
        // SAFETY: flock on a descriptor this function owns.
        let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            Ok(Some(StagingDir {
                path,
                _lock: lock,
                remove: true,
            }))
        } else {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EWOULDBLOCK) => Ok(None),
                _ => Err(e),
            }
        }
    }

    /// Where the pushed trees are written.
    fn tree(&self) -> PathBuf {
        self.path.join(STAGED_TREE)
    }

    /// Unlock it and leave it where it is.
    fn leave(mut self) {
        self.remove = false;
    }
}

impl Drop for StagingDir {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Staging directories in `dir`: left by a receiver that was killed (or
/// belonging to one still running there).
pub(crate) fn leftover_staging(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(STAGING_PREFIX))
        .collect();
    names.sort();
    names
}

impl Staging {
    /// Start writing `manifest`'s files under `out`, which holds those in
    /// `held` intact: refuse if it holds any other entry of the push that
    /// differs (unless the push replaces: nothing is overwritten), create
    /// the staging directory, and create the empty files (they take no
    /// message).
    pub(crate) fn begin(out: &Path, manifest: Manifest, held: FileSet) -> anyhow::Result<Self> {
        refuse_differing(out, &manifest, &held)?;
        let made = |e: std::io::Error| {
            anyhow!(
                "creating a staging directory in {}: {}",
                out.display(),
                without_path(e)
            )
        };
        let path = tempfile::Builder::new()
            .prefix(STAGING_PREFIX)
            .tempdir_in(out)
            .map_err(made)?
            .keep();
        let dir = StagingDir::lock(path.clone())
            .map_err(made)?
            .ok_or_else(|| anyhow!("{}: locked by another process", path.display()))?;
        std::fs::create_dir(dir.tree()).map_err(made)?;
        std::fs::write(dir.path.join(STAGED_MANIFEST), manifest.to_bytes()).map_err(made)?;
        let mut staging = Staging::new(out, manifest, held, dir);
        staging.make_dirs_and_empty_files()?;
        Ok(staging)
    }

    /// A staging in `dir`, nothing written yet.
    fn new(out: &Path, manifest: Manifest, held: FileSet, dir: StagingDir) -> Self {
        Staging {
            out: out.to_owned(),
            manifest,
            held,
            dir,
            open: None,
            unflushed: Vec::new(),
        }
    }

    /// Make every directory of the manifest in the staging tree, and every
    /// empty file (they take no message).
    fn make_dirs_and_empty_files(&mut self) -> anyhow::Result<()> {
        for dir in &self.manifest.dirs {
            std::fs::create_dir_all(self.dir.tree().join(&dir.path))
                .map_err(|e| anyhow!("creating {}: {e}", dir.path))?;
        }
        for index in 0..self.manifest.files.len() {
            if self.manifest.files[index].size == 0 && !self.held.contains(index) {
                let _ =
                    std::fs::remove_file(self.dir.tree().join(&self.manifest.files[index].path));
                let file = self.create(index)?.into_file();
                self.finish_file(index, file, Blake3::new())?;
            }
        }
        Ok(())
    }

    /// The manifest being written.
    pub(crate) fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The files the output directory holds intact (not written).
    pub(crate) fn held(&self) -> &FileSet {
        &self.held
    }

    /// Create file `index` (and its parent directories) in the staging
    /// directory; a file sent in pieces of its own is written past the
    /// page cache ([`FileWriter`]).
    fn create(&self, index: usize) -> anyhow::Result<FileWriter> {
        let entry = &self.manifest.files[index];
        let rel = &entry.path;
        let path = self.dir.tree().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| anyhow!("creating {rel}: {e}"))?;
        }
        let direct = self.manifest.chunks_of(entry.size) > 0;
        FileWriter::create(&path, direct).map_err(|e| anyhow!("creating {rel}: {e}"))
    }

    /// Write one message: `data` holds `piece`'s segments back to back;
    /// those of files the output directory holds intact are passed over.
    /// Returns the indices of the files it completed (each checked; flushed
    /// to disk by the commit).
    pub(crate) fn write_piece(
        &mut self,
        piece: &[Segment],
        data: &[u8],
    ) -> anyhow::Result<Vec<usize>> {
        if data.len() as u64 != piece_len(piece) {
            bail!(
                "a message of {} bytes where the manifest says {}",
                data.len(),
                piece_len(piece)
            );
        }
        let mut done = Vec::new();
        let mut at = 0usize;
        for segment in piece {
            let bytes = &data[at..at + segment.len as usize];
            at += segment.len as usize;
            if self.held.contains(segment.file) {
                continue;
            }
            if self.open.as_ref().map(|(i, _, _)| *i) != Some(segment.file) {
                if segment.offset > 0 {
                    bail!(
                        "{}: a message from byte {} of it, before its start came",
                        self.manifest.files[segment.file].path,
                        segment.offset
                    );
                }
                let file = self.create(segment.file)?;
                self.open = Some((segment.file, file, Blake3::new()));
            }
            let (_, file, hash) = self.open.as_mut().expect("opened above");
            let rel = &self.manifest.files[segment.file].path;
            file.write_at(bytes, segment.offset)
                .map_err(|e| anyhow!("writing {rel}: {e}"))?;
            hash.update(bytes);
            if segment.offset + segment.len == self.manifest.files[segment.file].size {
                let (index, file, hash) = self.open.take().expect("opened above");
                self.finish_file(index, file.into_file(), hash)?;
                done.push(index);
            }
        }
        Ok(done)
    }

    /// Check a complete file's BLAKE3 against the manifest's, give it the
    /// sender's permissions and modification time, and start writing it
    /// back (the commit flushes it).
    fn finish_file(&mut self, index: usize, file: File, hash: Blake3) -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let entry = &self.manifest.files[index];
        let got = hash.hex();
        if got != entry.blake3 {
            bail!(
                "{}: BLAKE3 mismatch: received {got}, the sender's is {}",
                entry.path,
                entry.blake3
            );
        }
        let named = |e: std::io::Error| anyhow!("{}: {e}", entry.path);
        file.set_times(std::fs::FileTimes::new().set_modified(system_time(entry.mtime_ns)))
            .map_err(named)?;
        file.set_permissions(std::fs::Permissions::from_mode(entry.mode))
            .map_err(named)?;
        start_writeback(&file);
        self.unflushed.push(index);
        Ok(())
    }

    /// Flush every file complete and not yet flushed to disk, from
    /// [`FLUSHERS`] threads at once: a journaling filesystem commits the
    /// flushes that wait together in one journal write (on the lab, the end
    /// of a 1,000-file push 0.455 s against 0.534 s one after another).
    fn flush_files(&mut self) -> anyhow::Result<()> {
        let unflushed = std::mem::take(&mut self.unflushed);
        let (tree, files) = (self.dir.tree(), &self.manifest.files);
        let next = std::sync::atomic::AtomicUsize::new(0);
        let flush = || -> anyhow::Result<()> {
            loop {
                let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&index) = unflushed.get(at) else {
                    return Ok(());
                };
                let rel = &files[index].path;
                File::open(tree.join(rel))
                    .and_then(|file| file.sync_all())
                    .map_err(|e| anyhow!("flushing {rel}: {}", without_path(e)))?;
            }
        };
        std::thread::scope(|scope| {
            let threads = FLUSHERS.min(unflushed.len());
            let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(flush)).collect();
            let mine = flush();
            helpers
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow!("a flushing thread panicked")))
                })
                .fold(mine, |first, r| first.and(r))
        })
    }

    /// Every file is written and checked: flush the staging directories,
    /// move each top-level entry into the output directory (never over an
    /// existing one), flush the output directory. If a move fails, the
    /// entries already moved are moved back and everything is removed.
    /// When the output directory holds some of the push already (or with
    /// `--force`), each entry lacked is put in place on its own instead
    /// ([`place_each`](Self::place_each)).
    pub(crate) fn commit(mut self) -> anyhow::Result<()> {
        if let Some((index, _, _)) = self.open.take() {
            bail!(
                "{}: the push ended before the whole file came",
                self.manifest.files[index].path
            );
        }
        // Every file lacked came (a file is created at its first byte and
        // checked at its last).
        let files = self.manifest.files.iter().enumerate();
        if let Some((_, missing)) = files
            .filter(|&(i, _)| !self.held.contains(i))
            .find(|(_, f)| self.dir.tree().join(&f.path).symlink_metadata().is_err())
        {
            bail!("{}: the push ended before it came", missing.path);
        }
        for link in &self.manifest.links {
            let at = self.dir.tree().join(&link.path);
            if let Some(parent) = at.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| anyhow!("creating {}: {e}", link.path))?;
            }
            std::os::unix::fs::symlink(&link.target, &at)
                .map_err(|e| anyhow!("making the link {}: {e}", link.path))?;
        }
        self.flush_files()?;
        sync_tree(&self.dir.tree()).map_err(|e| anyhow!("flushing the received files: {e}"))?;
        let names: Vec<String> = self
            .manifest
            .top_level_names()
            .into_iter()
            .map(str::to_owned)
            .collect();
        if self.manifest.replace
            || names
                .iter()
                .any(|n| self.out.join(n).symlink_metadata().is_ok())
        {
            return self.place_each();
        }
        let mut moved = Vec::new();
        for name in &names {
            let (from, to) = (self.dir.tree().join(name), self.out.join(name));
            if let Err(e) = rename_noreplace(&from, &to) {
                for back in moved.iter().rev() {
                    let _ = rename_noreplace(&self.out.join(back), &self.dir.tree().join(back));
                }
                bail!("moving {} into place: {e}", to.display());
            }
            moved.push(name);
        }
        self.apply_dir_attributes()?;
        File::open(&self.out)
            .and_then(|d| d.sync_all())
            .map_err(|e| anyhow!("flushing {}: {}", self.out.display(), without_path(e)))
    }
}

impl Staging {
    /// Give every directory, in place, the sender's modification time and
    /// permissions: the deepest first, so that setting one touches no
    /// other's time, and after the move (a directory without write
    /// permission could not be moved).
    fn apply_dir_attributes(&self) -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let mut dirs: Vec<_> = self.manifest.dirs.iter().collect();
        dirs.sort_by_key(|d| std::cmp::Reverse(d.path.matches('/').count()));
        for dir in dirs {
            let path = self.out.join(&dir.path);
            let named = |e: std::io::Error| anyhow!("{}: {e}", path.display());
            File::open(&path)
                .and_then(|d| {
                    d.set_times(std::fs::FileTimes::new().set_modified(system_time(dir.mtime_ns)))
                })
                .map_err(named)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(dir.mode))
                .map_err(named)?;
        }
        Ok(())
    }
}

/// Make sure the directory `rel` under `out` (`""`: `out` itself) and every
/// one on the way to it are directories (made where missing; a link or a
/// file there is refused, so that nothing is written through a link);
/// returns its path.
fn real_dir(out: &Path, rel: &str) -> anyhow::Result<PathBuf> {
    let mut dir = out.to_path_buf();
    for part in rel.split('/').filter(|part| !part.is_empty()) {
        dir.push(part);
        match dir.symlink_metadata() {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => bail!(
                "{} is not a directory (a link or a file): the push does not write through it",
                dir.display()
            ),
            Err(_) => std::fs::create_dir(&dir)
                .map_err(|e| anyhow!("creating {}: {}", dir.display(), without_path(e)))?,
        }
    }
    Ok(dir)
}

/// The time `ns` nanoseconds from the Unix epoch (before it if negative).
fn system_time(ns: i64) -> std::time::SystemTime {
    let epoch = std::time::UNIX_EPOCH;
    let offset = std::time::Duration::from_nanos(ns.unsigned_abs());
    if ns >= 0 {
        epoch + offset
    } else {
        epoch - offset
    }
}

/// Flush every file's directory entry: each directory under `dir`, and
/// `dir` itself.
fn sync_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())?;
        }
    }
    File::open(dir)?.sync_all()
}

/// Rename `from` to `to` unless `to` exists (atomically: `renameat2` with
/// `RENAME_NOREPLACE`).
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
    };
    let (from, to) = (c(from)?, c(to)?);
    // SAFETY: two valid NUL-terminated paths, relative to the current
    // directory.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::super::inputs::{Collected, PieceReader, Source, collect, hash_all};
    use super::*;
    use crate::scratch::ScratchDir;

    /// A manifest of files with these contents, cut in `chunk`-byte pieces.
    pub(super) fn manifest_of(files: &[(&str, &[u8])], chunk: u64) -> (Manifest, ScratchDir) {
        let src = ScratchDir::new("push-sources");
        let sources: Vec<Source> = files
            .iter()
            .enumerate()
            .map(|(i, (rel, data))| {
                let path = src.join(i.to_string());
                std::fs::write(&path, data).unwrap();
                Source {
                    path,
                    rel: (*rel).to_owned(),
                    size: data.len() as u64,
                }
            })
            .collect();
        (
            hash_all(
                &Collected {
                    files: sources,
                    ..Collected::default()
                },
                (chunk, chunk / 2),
                &|_| {},
            )
            .unwrap(),
            src,
        )
    }

    pub(super) fn pieces_of(
        manifest: &Manifest,
        files: &[(&str, &[u8])],
    ) -> Vec<(Vec<Segment>, Vec<u8>)> {
        manifest
            .plan()
            .into_iter()
            .map(|piece| {
                let data = piece
                    .iter()
                    .flat_map(|s| {
                        files[s.file].1[s.offset as usize..(s.offset + s.len) as usize].to_vec()
                    })
                    .collect();
                (piece, data)
            })
            .collect()
    }

    /// Start a staging as a receiver does: knowing what `out` holds.
    pub(super) fn begin(out: &Path, manifest: Manifest) -> anyhow::Result<Staging> {
        let held = held_files(out, &manifest);
        Staging::begin(out, manifest, held)
    }

    /// Resume a staging as a receiver does: knowing what `out` holds.
    pub(super) fn resume(out: &Path, manifest: Manifest) -> anyhow::Result<(Staging, usize)> {
        let held = held_files(out, &manifest);
        Staging::resume(out, manifest, held)
    }

    fn staged(out: &Path) -> Vec<String> {
        std::fs::read_dir(out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }

    pub(super) const FILES: &[(&str, &[u8])] = &[
        ("d/a", b"hello"),
        ("d/e/empty", b""),
        ("d/big", b"0123456789abcdef0123"),
        ("top", b"t"),
    ];

    #[test]
    fn a_complete_push_lands_whole_and_checked() {
        let out = ScratchDir::new("push-output");
        std::fs::write(out.join("unrelated"), b"kept").unwrap();
        let (manifest, _src) = manifest_of(FILES, 8);
        let mut staging = begin(&out, manifest.clone()).unwrap();
        let mut done = Vec::new();
        for (piece, data) in pieces_of(&manifest, FILES) {
            done.extend(staging.write_piece(&piece, &data).unwrap());
            // Nothing is visible before the commit.
            let mut names = staged(&out);
            names.sort();
            assert_eq!(names.len(), 2, "{names:?}");
        }
        done.sort();
        assert_eq!(done, [0, 2, 3]);
        staging.commit().unwrap();
        for (rel, data) in FILES {
            assert_eq!(&std::fs::read(out.join(rel)).unwrap()[..], *data);
        }
        let mut names = staged(&out);
        names.sort();
        assert_eq!(names, ["d", "top", "unrelated"]);
    }

    #[test]
    fn a_directory_holds_a_push_only_when_every_entry_is_identical() {
        use std::os::unix::fs::PermissionsExt;
        let out = ScratchDir::new("push-output-holds");
        let (manifest, _src) = manifest_of(FILES, 8);
        assert!(!holds(&out, &manifest), "an empty directory");
        let mut staging = begin(&out, manifest.clone()).unwrap();
        for (piece, data) in pieces_of(&manifest, FILES) {
            staging.write_piece(&piece, &data).unwrap();
        }
        staging.commit().unwrap();
        assert!(holds(&out, &manifest));
        // The same size, one byte flipped.
        std::fs::write(out.join("d/big"), b"0123456789abcdef0124").unwrap();
        assert!(!holds(&out, &manifest));
        std::fs::write(out.join("d/big"), FILES[2].1).unwrap();
        assert!(holds(&out, &manifest));
        // Other permissions.
        let mode = std::fs::metadata(out.join("top"))
            .unwrap()
            .permissions()
            .mode();
        std::fs::set_permissions(
            out.join("top"),
            std::fs::Permissions::from_mode(mode ^ 0o100),
        )
        .unwrap();
        assert!(!holds(&out, &manifest));
        std::fs::set_permissions(out.join("top"), std::fs::Permissions::from_mode(mode)).unwrap();
        // A file missing.
        std::fs::remove_file(out.join("d/a")).unwrap();
        assert!(!holds(&out, &manifest));
    }

    #[test]
    fn staging_left_by_a_killed_receiver_is_found() {
        let out = ScratchDir::new("push-output");
        let (manifest, _src) = manifest_of(FILES, 8);
        let staging = begin(&out, manifest).unwrap();
        let found = leftover_staging(&out);
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with(".rdmc-receive."));
        // A killed process runs no destructor: the directory stays.
        std::mem::forget(staging);
        assert_eq!(leftover_staging(&out), found);
    }

    #[test]
    fn a_corrupt_or_failed_push_leaves_nothing_behind() {
        let out = ScratchDir::new("push-output");
        let (manifest, _src) = manifest_of(FILES, 8);
        let pieces = pieces_of(&manifest, FILES);
        let mut staging = begin(&out, manifest.clone()).unwrap();
        let err = pieces
            .iter()
            .enumerate()
            .try_for_each(|(i, (piece, data))| {
                let mut data = data.clone();
                if i == 1 {
                    data[0] ^= 1;
                }
                staging.write_piece(piece, &data).map(drop)
            });
        assert!(
            err.unwrap_err()
                .to_string()
                .contains("d/big: BLAKE3 mismatch")
        );
        drop(staging);
        assert!(staged(&out).is_empty());
        // A push cut short: the half-written file is never committed.
        let mut staging = begin(&out, manifest.clone()).unwrap();
        staging.write_piece(&pieces[0].0, &pieces[0].1).unwrap();
        staging.write_piece(&pieces[1].0, &pieces[1].1).unwrap();
        assert!(staging.commit().unwrap_err().to_string().contains("d/big"));
        assert!(staged(&out).is_empty());
    }

    impl Staging {
        /// As a receiver killed now leaves it: the directory stays, its
        /// lock goes with the process.
        pub(super) fn killed(self) {
            let Staging { dir, .. } = self;
            dir.leave();
        }
    }

    /// A push of FILES cut after `kept` pieces, its staging left, then run
    /// again (`flip`: one staged byte of the big file changed meanwhile).
    fn resumed_after(kept: usize, flip: Option<u64>) -> (ScratchDir, usize) {
        let out = ScratchDir::new("push-output-resume");
        let (manifest, _src) = manifest_of(FILES, 8);
        let pieces = pieces_of(&manifest, FILES);
        let mut staging = begin(&out, manifest.clone()).unwrap();
        for (piece, data) in &pieces[..kept] {
            staging.write_piece(piece, data).unwrap();
        }
        staging.killed();
        if let Some(at) = flip {
            let big = out.join(&leftover_staging(&out)[0]).join("tree/d/big");
            let mut bytes = std::fs::read(&big).unwrap();
            if let Some(b) = bytes.get_mut(at as usize) {
                *b ^= 1;
                std::fs::write(&big, bytes).unwrap();
            }
        }
        let (mut staging, held) = resume(&out, manifest).unwrap();
        for (piece, data) in &pieces[held..] {
            staging.write_piece(piece, data).unwrap();
        }
        staging.commit().unwrap();
        for (rel, data) in FILES {
            assert_eq!(&std::fs::read(out.join(rel)).unwrap()[..], *data, "{rel}");
        }
        assert!(leftover_staging(&out).is_empty());
        (out, held)
    }

    #[test]
    fn a_push_run_again_resumes_from_the_checked_pieces_a_killed_receiver_kept() {
        // d/a alone, d/big in three pieces (8, 8, 4 bytes), top batched.
        let (manifest, _src) = manifest_of(FILES, 8);
        assert_eq!(manifest.plan().len(), 5);
        for kept in 0..=5 {
            assert_eq!(resumed_after(kept, None).1, kept);
        }
        // A changed byte in d/big's second piece: kept up to the first.
        assert_eq!(resumed_after(4, Some(9)).1, 2);
        assert_eq!(resumed_after(4, Some(0)).1, 1);
        // Past what was written: the pieces written stand.
        assert_eq!(resumed_after(2, Some(12)).1, 2);
    }

    #[test]
    fn another_push_s_or_a_running_receiver_s_staging_is_left_alone() {
        let out = ScratchDir::new("push-output-resume-other");
        let (manifest, _src) = manifest_of(FILES, 8);
        let (other, _other_src) = manifest_of(&[("top", b"u")], 8);
        begin(&out, other).unwrap().killed();
        let running = begin(&out, manifest.clone()).unwrap();
        let (staging, held) = resume(&out, manifest).unwrap();
        assert_eq!(held, 0);
        assert_eq!(leftover_staging(&out).len(), 3);
        drop((staging, running));
        assert_eq!(leftover_staging(&out).len(), 1, "the other push's stays");
    }

    fn write_all_and_commit(out: &Path, manifest: &Manifest) -> anyhow::Result<()> {
        let mut staging = begin(out, manifest.clone())?;
        for (piece, data) in pieces_of(manifest, FILES) {
            staging.write_piece(&piece, &data)?;
        }
        staging.commit()
    }

    #[test]
    fn with_force_differing_entries_are_replaced_and_nothing_is_deleted() {
        let out = ScratchDir::new("push-output-replace");
        std::fs::create_dir_all(out.join("d")).unwrap();
        std::fs::write(out.join("d/a"), b"older").unwrap();
        std::fs::write(out.join("d/kept"), b"not in the push").unwrap();
        std::fs::write(out.join("top"), b"x").unwrap();
        let (mut manifest, _src) = manifest_of(FILES, 8);
        assert!(begin(&out, manifest.clone()).is_err());
        manifest.replace = true;
        write_all_and_commit(&out, &manifest).unwrap();
        for (rel, data) in FILES {
            assert_eq!(&std::fs::read(out.join(rel)).unwrap()[..], *data, "{rel}");
        }
        assert_eq!(
            std::fs::read(out.join("d/kept")).unwrap(),
            b"not in the push"
        );
        assert!(holds(&out, &manifest));
        assert!(leftover_staging(&out).is_empty());
    }

    #[test]
    fn force_never_writes_through_a_link_nor_replaces_a_directory() {
        let out = ScratchDir::new("push-output-replace-link");
        let elsewhere = ScratchDir::new("push-output-elsewhere");
        std::os::unix::fs::symlink(&*elsewhere, out.join("d")).unwrap();
        let (mut manifest, _src) = manifest_of(FILES, 8);
        manifest.replace = true;
        let err = write_all_and_commit(&out, &manifest)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not a directory"), "{err}");
        assert!(std::fs::read_dir(&*elsewhere).unwrap().next().is_none());
        std::fs::remove_file(out.join("d")).unwrap();
        std::fs::create_dir(out.join("top")).unwrap();
        let err = write_all_and_commit(&out, &manifest)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is a directory"), "{err}");
        assert!(out.join("top").is_dir());
        assert!(leftover_staging(&out).is_empty());
    }

    #[test]
    fn existing_outputs_are_never_overwritten() {
        let out = ScratchDir::new("push-output");
        std::fs::write(out.join("top"), b"an earlier run").unwrap();
        let (manifest, _src) = manifest_of(FILES, 8);
        let err = begin(&out, manifest).err().unwrap().to_string();
        assert!(err.contains("top exists"), "{err}");
        assert_eq!(staged(&out), ["top"]);
    }

    #[test]
    fn modes_times_empty_directories_and_links_arrive_as_sent() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
        let src = ScratchDir::new("push-fidelity-src");
        let root = src.join("tree");
        std::fs::create_dir_all(root.join("empty")).unwrap();
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::write(root.join("bin/tool"), b"#!/bin/sh\n").unwrap();
        std::fs::write(root.join("data"), vec![7u8; 5000]).unwrap();
        symlink("../data", root.join("bin/data-link")).unwrap();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(&root.join("bin/tool"), 0o755);
        mode(&root.join("data"), 0o600);
        mode(&root.join("empty"), 0o700);
        // A directory without write permission: made once its files are in.
        mode(&root.join("bin"), 0o555);
        let old = std::time::UNIX_EPOCH + std::time::Duration::new(1_600_000_000, 123_456_789);
        let times = std::fs::FileTimes::new().set_modified(old);
        for p in ["data", "empty", "bin", "."] {
            File::open(root.join(p)).unwrap().set_times(times).unwrap();
        }
        let found = collect(std::slice::from_ref(&root)).unwrap();
        let manifest = hash_all(&found, (1024, 512), &|_| {}).unwrap();
        let out = ScratchDir::new("push-fidelity-out");
        let mut staging = begin(&out, manifest.clone()).unwrap();
        let mut reader = PieceReader::new(&found.files, &manifest);
        for piece in manifest.plan() {
            let data = reader.read(&piece).unwrap();
            staging.write_piece(&piece, &data).unwrap();
        }
        staging.commit().unwrap();
        let got = out.join("tree");
        for (rel, want) in [
            ("bin/tool", 0o755),
            ("data", 0o600),
            ("empty", 0o700),
            ("bin", 0o555),
        ] {
            let meta = std::fs::metadata(got.join(rel)).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, want, "{rel}");
        }
        for rel in ["data", "empty", "bin", "."] {
            let meta = std::fs::metadata(got.join(rel)).unwrap();
            assert_eq!(
                (meta.mtime(), meta.mtime_nsec()),
                (1_600_000_000, 123_456_789),
                "{rel}"
            );
        }
        assert!(
            std::fs::read_dir(got.join("empty"))
                .unwrap()
                .next()
                .is_none()
        );
        let link = got.join("bin/data-link");
        assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("../data"));
        assert_eq!(std::fs::read(&link).unwrap(), vec![7u8; 5000]);
        // The test's own clean-up needs to write into the tree again.
        mode(&got.join("bin"), 0o755);
        mode(&root.join("bin"), 0o755);
    }
}
