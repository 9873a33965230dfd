//! A push run again after its receiver was killed: the staging directory
//! the killed receiver left (for the same manifest) is taken over, and
//! the pieces it holds — each checked against the manifest's BLAKE3 of
//! the piece or of the file — are not sent again.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use anyhow::anyhow;

use super::{FileWriter, STAGED_MANIFEST, Staging, StagingDir, leftover_staging, refuse_differing};
use crate::push::inputs::Blake3;
use crate::push::manifest::{Manifest, Segment};
use crate::push::sync::FileSet;

/// The largest staged manifest read back (the manifest itself is bounded
/// by the control groups' message size).
const STAGED_MANIFEST_LIMIT: u64 = 1 << 30;

impl Staging {
    /// Start writing `manifest`'s files under `out` (which holds those in
    /// `held` intact), from where an earlier receiver of the same push left
    /// off if it was killed there: returns the staging and how many pieces
    /// of the plan it holds already, checked (the segments of files in
    /// `held` count as held). A staging directory of another push, or one
    /// locked by a receiver still running, is left alone; with none to take
    /// over, as [`begin`](Self::begin). Blocking.
    pub(crate) fn resume(
        out: &Path,
        manifest: Manifest,
        held: FileSet,
    ) -> anyhow::Result<(Self, usize)> {
        refuse_differing(out, &manifest, &held)?;
        for name in leftover_staging(out) {
            let path = out.join(&name);
            let Ok(Some(dir)) = StagingDir::lock(path.clone()) else {
                continue;
            };
            if !staged_manifest_is(&path.join(STAGED_MANIFEST), &manifest) {
                // Another push's: not this one's to remove.
                dir.leave();
                continue;
            }
            let mut staging = Staging::new(out, manifest, held, dir);
            let kept = staging.take_over()?;
            return Ok((staging, kept));
        }
        Ok((Staging::begin(out, manifest, held)?, 0))
    }

    /// Check the staged files piece by piece in plan order, keep the
    /// pieces before the first that is missing or differs, and make the
    /// staging ready to go on from there; returns how many it kept.
    fn take_over(&mut self) -> anyhow::Result<usize> {
        let plan = self.manifest.plan();
        let mut check = Checking::default();
        let held = plan
            .iter()
            .take_while(|piece| check.piece(self, piece))
            .count();
        // The files before the first piece not kept are complete and
        // checked: give them their attributes (a killed receiver may not
        // have) and flush them.
        let next = plan.get(held).and_then(|piece| piece.first()).copied();
        let first_missing = next.map_or(self.manifest.files.len(), |s| s.file);
        for (index, hash) in check.complete {
            if index < first_missing {
                let file = File::open(self.dir.tree().join(&self.manifest.files[index].path))
                    .map_err(|e| anyhow!("{}: {e}", self.manifest.files[index].path))?;
                self.finish_file(index, file, hash)?;
            }
        }
        // The files from the first missing piece on are written again
        // (the one it starts inside of from its kept prefix).
        for index in first_missing..self.manifest.files.len() {
            if self.held.contains(index) {
                continue;
            }
            let path = self.dir.tree().join(&self.manifest.files[index].path);
            match next {
                Some(Segment { file, offset, .. }) if file == index && offset > 0 => {
                    let named =
                        |e: std::io::Error| anyhow!("{}: {e}", self.manifest.files[index].path);
                    let kept = std::fs::OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .map_err(named)?;
                    kept.set_len(offset).map_err(named)?;
                    let hash = check
                        .prefix
                        .take()
                        .filter(|(i, _)| *i == index)
                        .map(|(_, hash)| hash)
                        .ok_or_else(|| anyhow!("{}: no checked prefix", path.display()))?;
                    self.open = Some((index, FileWriter::buffered(kept), hash));
                }
                _ => {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        self.make_dirs_and_empty_files()?;
        Ok(held)
    }
}

/// Whether the staged manifest at `path` is `manifest`.
fn staged_manifest_is(path: &Path, manifest: &Manifest) -> bool {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|f| f.take(STAGED_MANIFEST_LIMIT).read_to_end(&mut bytes))
        .is_ok()
        && Manifest::from_bytes(&bytes).is_ok_and(|staged| staged == *manifest)
}

/// The check of staged pieces, in plan order.
#[derive(Default)]
struct Checking {
    /// Files checked whole: index and hash.
    complete: Vec<(usize, Blake3)>,
    /// The file checked up to the end of the last piece kept, if that is
    /// inside it: index and hash of its prefix.
    prefix: Option<(usize, Blake3)>,
}

impl Checking {
    /// Whether `staging` holds `piece`, checked; on `false`, nothing of
    /// the piece is kept.
    fn piece(&mut self, staging: &Staging, piece: &[Segment]) -> bool {
        let (complete, prefix) = (self.complete.len(), self.prefix.clone());
        let held = piece
            .iter()
            .all(|s| staging.held.contains(s.file) || self.segment(staging, s).unwrap_or(false));
        if !held {
            self.complete.truncate(complete);
            self.prefix = prefix;
        }
        held
    }

    /// Whether the staged file holds `segment`'s bytes, checked against the
    /// manifest's digest of the piece (a file sent in pieces) or of the
    /// whole file (when the segment ends it).
    fn segment(&mut self, staging: &Staging, segment: &Segment) -> std::io::Result<bool> {
        let manifest = &staging.manifest;
        let entry = &manifest.files[segment.file];
        let mut file = File::open(staging.dir.tree().join(&entry.path))?;
        if file.metadata()?.len() < segment.offset + segment.len {
            return Ok(false);
        }
        let mut whole = match self.prefix.take() {
            Some((index, hash)) if index == segment.file => hash,
            _ if segment.offset == 0 => Blake3::new(),
            _ => return Ok(false),
        };
        let mut piece = Blake3::new();
        file.seek(SeekFrom::Start(segment.offset))?;
        let mut left = segment.len;
        let mut buffer = vec![0u8; (1 << 20).min(segment.len.max(1) as usize)];
        while left > 0 {
            let n = buffer
                .len()
                .min(usize::try_from(left).unwrap_or(usize::MAX));
            file.read_exact(&mut buffer[..n])?;
            whole.update(&buffer[..n]);
            piece.update(&buffer[..n]);
            left -= n as u64;
        }
        if manifest.chunks_of(entry.size) > 0 {
            let chunk = (segment.offset / manifest.chunk_size.max(1)) as usize;
            if entry.chunk_blake3.get(chunk) != Some(&piece.hex()) {
                return Ok(false);
            }
        }
        if segment.offset + segment.len == entry.size {
            if whole.clone().hex() != entry.blake3 {
                return Ok(false);
            }
            self.complete.push((segment.file, whole));
        } else {
            self.prefix = Some((segment.file, whole));
        }
        Ok(true)
    }
}
