//! Per-file sync at a receiver (see [`crate::push::sync`]): which files of
//! a push the output directory holds intact already, the refusal of those
//! that exist and differ (unless `--force`), and the commit that puts in
//! place only what this receiver lacked, leaving what it held untouched.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::Path;

use anyhow::{anyhow, bail};

use super::{Staging, real_dir, rename_noreplace};
use crate::push::inputs::Blake3;
use crate::push::manifest::{LinkEntry, MODE_BITS, Manifest};
use crate::push::sync::FileSet;
use rdmc_cli::cluster::without_path;

/// The files of `manifest` that `out` holds intact: a regular file (not a
/// link) of the same size and permissions, whose BLAKE3 (read again) is
/// the manifest's. Blocking.
///
/// Every candidate is hashed: a file of the same size and modification
/// time can still differ (a clock, `touch`, a copy that kept times), and
/// the push's promise is that every file is checked; the survey reads what
/// the receiver holds once, which costs what reading it costs. Files whose
/// size or permissions differ are not read.
pub(crate) fn held_files(out: &Path, manifest: &Manifest) -> FileSet {
    use std::os::unix::fs::MetadataExt;
    let mut held = FileSet::none(manifest.files.len());
    for (index, file) in manifest.files.iter().enumerate() {
        let path = out.join(&file.path);
        let same = path.symlink_metadata().is_ok_and(|m| {
            m.is_file() && m.len() == file.size && m.mode() & MODE_BITS == file.mode
        });
        if same && blake3_of(&path).is_some_and(|h| h == file.blake3) {
            held.insert(index);
        }
    }
    held
}

/// Whether `out` holds every entry of `manifest`, identical, given the
/// files it holds intact (`held`): every file, each directory (not a link
/// to one), each link with its target. Extra entries in `out` do not
/// matter.
pub(crate) fn holds_all(out: &Path, manifest: &Manifest, held: &FileSet) -> bool {
    (0..manifest.files.len()).all(|i| held.contains(i))
        && manifest.dirs.iter().all(|d| {
            out.join(&d.path)
                .symlink_metadata()
                .is_ok_and(|m| m.is_dir())
        })
        && manifest.links.iter().all(|l| link_is(out, l))
}

/// Whether `out` holds every entry of `manifest`, identical. Blocking.
#[cfg(test)]
pub(crate) fn holds(out: &Path, manifest: &Manifest) -> bool {
    holds_all(out, manifest, &held_files(out, manifest))
}

/// Whether `out` holds `link`, with its target.
fn link_is(out: &Path, link: &LinkEntry) -> bool {
    std::fs::read_link(out.join(&link.path)).is_ok_and(|t| t == Path::new(&link.target))
}

/// Refuse, unless the push replaces (`--force`), if `out` holds an entry of
/// `manifest` that differs: a file not in `held` (the files it holds
/// intact), a link to elsewhere, a directory's name (listed, or on the
/// way to a file or link) taken by something else. Nothing is overwritten; entries it holds identical are fine.
pub(crate) fn refuse_differing(
    out: &Path,
    manifest: &Manifest,
    held: &FileSet,
) -> anyhow::Result<()> {
    if manifest.replace {
        return Ok(());
    }
    let exists = |rel: &str| out.join(rel).symlink_metadata().ok();
    let files = manifest.files.iter().enumerate();
    let files = files.filter(|&(i, f)| !held.contains(i) && exists(&f.path).is_some());
    let links = manifest.links.iter();
    let links = links.filter(|l| exists(&l.path).is_some() && !link_is(out, l));
    // Every directory of the push: those listed, and those files and
    // links are in (a link to a directory is not one).
    let leaves = manifest.files.iter().map(|f| f.path.as_str());
    let leaves = leaves.chain(manifest.links.iter().map(|l| l.path.as_str()));
    let parents = leaves.flat_map(|p| p.match_indices('/').map(move |(at, _)| &p[..at]));
    let dirs = manifest.dirs.iter().map(|d| d.path.as_str()).chain(parents);
    let dirs = dirs.filter(|d| exists(d).is_some_and(|m| !m.is_dir()));
    let differing = (files.map(|(_, f)| f.path.as_str()))
        .chain(links.map(|l| l.path.as_str()))
        .chain(dirs)
        .next();
    if let Some(rel) = differing {
        bail!(
            "{} exists and differs from the pushed one; rdmc receive never overwrites: \
             remove it, choose another --out, or push with --force to replace what differs",
            out.join(rel).display()
        );
    }
    Ok(())
}

/// The BLAKE3 of the file at `path`, in hex; `None` if it cannot be read.
fn blake3_of(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut file = File::open(path).ok()?;
    let mut hash = Blake3::new();
    let mut buffer = vec![0; 1 << 20];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => return Some(hash.hex()),
            Ok(n) => hash.update(&buffer[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

impl Staging {
    /// Put in place, one by one, every file this receiver lacked and every
    /// link it does not hold — each by a rename (over what is there with
    /// `--force`, atomic for each; otherwise never over an existing entry),
    /// each directory made where missing — then give the directories their
    /// attributes and flush every directory touched. Files it held intact
    /// are left untouched; nothing is deleted; nothing is written through
    /// a link (every directory on the way must be a directory); a directory
    /// is never replaced by a file.
    pub(super) fn place_each(self) -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let tree = self.dir.tree();
        let mut touched = BTreeSet::new();
        for dir in &self.manifest.dirs {
            let dir = real_dir(&self.out, &dir.path)?;
            // A directory the push made read-only is written into all the
            // same: its permissions are the manifest's again below.
            let mode = dir.symlink_metadata().map(|m| m.permissions().mode());
            if let Some(mode) = mode.ok().filter(|m| m & 0o700 != 0o700) {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode | 0o700))
                    .map_err(|e| anyhow!("{}: {}", dir.display(), without_path(e)))?;
            }
            touched.insert(dir);
        }
        let files = self.manifest.files.iter().enumerate();
        let files = files.filter(|&(i, _)| !self.held.contains(i));
        let links = self.manifest.links.iter();
        let links = links.filter(|l| !link_is(&self.out, l));
        for rel in files.map(|(_, f)| &f.path).chain(links.map(|l| &l.path)) {
            let parent = real_dir(&self.out, rel.rsplit_once('/').map_or("", |(dir, _)| dir))?;
            let to = self.out.join(rel);
            if to.symlink_metadata().is_ok_and(|m| m.is_dir()) {
                bail!(
                    "{} is a directory; --force replaces files and links, not directories",
                    to.display()
                );
            }
            let placed = match self.manifest.replace {
                true => std::fs::rename(tree.join(rel), &to),
                false => rename_noreplace(&tree.join(rel), &to),
            };
            placed
                .map_err(|e| anyhow!("putting {} in place: {}", to.display(), without_path(e)))?;
            touched.insert(parent);
        }
        self.apply_dir_attributes()?;
        touched.insert(self.out.clone());
        for dir in touched {
            File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| anyhow!("flushing {}: {}", dir.display(), without_path(e)))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::super::tests::{FILES, begin, manifest_of, pieces_of, resume};
    use super::*;
    use crate::push::sync::messages;
    use crate::scratch::ScratchDir;

    /// FILES pushed to a fresh `out`, in 8-byte messages: d/a alone, d/big
    /// in three, top batched.
    fn pushed(name: &str) -> (ScratchDir, Manifest, ScratchDir) {
        let out = ScratchDir::new(name);
        let (manifest, src) = manifest_of(FILES, 8);
        sync_once(&out, &manifest, None).unwrap();
        assert!(holds(&out, &manifest));
        (out, manifest, src)
    }

    /// Stage and commit `manifest` into `out` as a receiver does, given the
    /// messages the root sends (`needed`: the files some receiver lacks;
    /// `None`: those this one lacks); returns the messages written.
    fn sync_once(
        out: &Path,
        manifest: &Manifest,
        needed: Option<FileSet>,
    ) -> anyhow::Result<Vec<u64>> {
        let staging = begin(out, manifest.clone())?;
        let files = manifest.files.len();
        let needed = needed.unwrap_or_else(|| FileSet::lacking(files, [staging.held()]));
        let sent = messages(&manifest.plan(), &needed);
        write_and_commit(staging, &sent)?;
        Ok(sent)
    }

    /// Write the messages `sent` of FILES (indices in the push) and commit.
    fn write_and_commit(mut staging: Staging, sent: &[u64]) -> anyhow::Result<()> {
        let pieces = pieces_of(&staging.manifest().clone(), FILES);
        for &index in sent {
            let (piece, data) = &pieces[index as usize - 1];
            staging.write_piece(piece, data)?;
        }
        staging.commit()
    }

    fn inode(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().ino()
    }

    fn held_of(out: &Path, manifest: &Manifest) -> Vec<usize> {
        let held = held_files(out, manifest);
        (0..manifest.files.len())
            .filter(|&i| held.contains(i))
            .collect()
    }

    #[test]
    fn only_the_files_lacked_are_sent_and_written_the_others_untouched() {
        let (out, manifest, _src) = pushed("push-sync-lacked");
        assert_eq!(held_of(&out, &manifest), [0, 1, 2, 3]);
        let big = inode(&out.join("d/big"));
        std::fs::remove_file(out.join("d/a")).unwrap();
        std::fs::remove_file(out.join("d/e/empty")).unwrap();
        assert_eq!(held_of(&out, &manifest), [2, 3]);
        // Only d/a's message; the empty file takes none.
        assert_eq!(sync_once(&out, &manifest, None).unwrap(), [1]);
        assert!(holds(&out, &manifest));
        assert_eq!(inode(&out.join("d/big")), big, "held: untouched");
        // Messages carrying files held (another receiver lacks them) are
        // passed over; a file lacked whose message never came fails the
        // commit, which places nothing.
        std::fs::remove_file(out.join("top")).unwrap();
        let mut other = FileSet::none(4);
        other.insert(2);
        let err = sync_once(&out, &manifest, Some(other.clone()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("top: the push ended before it came"), "{err}");
        assert!(!out.join("top").exists());
        other.insert(3);
        assert_eq!(
            sync_once(&out, &manifest, Some(other)).unwrap(),
            [2, 3, 4, 5]
        );
        assert!(holds(&out, &manifest));
        assert_eq!(inode(&out.join("d/big")), big, "held: untouched");
        assert!(super::super::leftover_staging(&out).is_empty());
    }

    #[test]
    fn a_file_that_differs_is_refused_by_name_unless_forced() {
        let (out, mut manifest, _src) = pushed("push-sync-differs");
        let a = inode(&out.join("d/a"));
        // The same size, another byte.
        std::fs::write(out.join("d/big"), b"0123456789abcdef0124").unwrap();
        assert_eq!(held_of(&out, &manifest), [0, 1, 3]);
        let err = begin(&out, manifest.clone()).err().unwrap().to_string();
        assert!(err.contains("d/big exists and differs"), "{err}");
        assert!(err.contains("--force"), "{err}");
        assert_eq!(
            std::fs::read(out.join("d/big")).unwrap(),
            b"0123456789abcdef0124"
        );
        manifest.replace = true;
        assert_eq!(sync_once(&out, &manifest, None).unwrap(), [2, 3, 4]);
        assert!(holds(&out, &manifest));
        assert_eq!(inode(&out.join("d/a")), a, "held: untouched");
    }

    #[test]
    fn a_link_or_a_directory_in_the_way_is_refused_too() {
        let (out, manifest, _src) = pushed("push-sync-in-the-way");
        std::fs::remove_file(out.join("top")).unwrap();
        std::fs::create_dir(out.join("top")).unwrap();
        let err = begin(&out, manifest.clone()).err().unwrap().to_string();
        assert!(err.contains("top exists and differs"), "{err}");
        std::fs::remove_dir(out.join("top")).unwrap();
        std::fs::remove_dir_all(out.join("d/e")).unwrap();
        std::fs::write(out.join("d/e"), b"a file").unwrap();
        let err = begin(&out, manifest.clone()).err().unwrap().to_string();
        assert!(err.contains("d/e exists and differs"), "{err}");
    }

    #[test]
    fn a_killed_sync_resumes_counting_the_files_held_as_held() {
        let (out, manifest, _src) = pushed("push-sync-resume");
        // d/big lacked (its three messages, 2 to 4), the rest held.
        std::fs::remove_file(out.join("d/big")).unwrap();
        let mut staging = begin(&out, manifest.clone()).unwrap();
        let pieces = pieces_of(&manifest, FILES);
        for (piece, data) in &pieces[1..3] {
            staging.write_piece(piece, data).unwrap();
        }
        staging.killed();
        // d/a's message is held in the output, d/big's first two staged.
        let (staging, kept) = resume(&out, manifest.clone()).unwrap();
        assert_eq!(kept, 3);
        write_and_commit(staging, &[4]).unwrap();
        assert!(holds(&out, &manifest));
        assert!(super::super::leftover_staging(&out).is_empty());
    }
}
