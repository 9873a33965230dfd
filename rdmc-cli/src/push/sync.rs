//! Per-file sync: which files of a push each receiver already holds, and
//! which messages the root therefore sends.
//!
//! Each receiver answers the manifest with the set of its files its output
//! directory already holds intact (a [`FileSet`]: one bit a file, in hex).
//! The root sends only the messages that carry at least one file some
//! receiver of the push lacks (the union over them: [`FileSet::lacking`]),
//! and announces that union in every epoch, so that every member computes
//! the same list of messages from it and the manifest ([`messages`]).
//! Message numbers stay those of the whole plan: a receiver resuming from a
//! staging directory and one syncing count alike.
//!
//! The unit is the message: a batch of small files goes whole when one of
//! them is lacked; a receiver writes only the files it lacks of it.

use anyhow::bail;
use serde::{Deserialize, Serialize};

use super::manifest::Piece;

/// The most files a push carries: its [`FileSet`] (two hex characters for
/// eight files, 512 KiB at most) fits in a report or an epoch with room
/// for the epoch's ranks.
pub(crate) const MAX_FILES: usize = 1 << 21;

/// A set of file indices of a manifest: a bitmap, file `i` in bit `i % 8`
/// of byte `i / 8`; as sent, lowercase hex (two characters for eight
/// files).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub(crate) struct FileSet(Vec<u8>);

impl From<FileSet> for String {
    fn from(set: FileSet) -> String {
        hex::encode(set.0)
    }
}

impl TryFrom<String> for FileSet {
    type Error = hex::FromHexError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        hex::decode(text).map(FileSet)
    }
}

impl FileSet {
    /// No file of a manifest of `files` files.
    pub(crate) fn none(files: usize) -> Self {
        FileSet(vec![0; files.div_ceil(8)])
    }

    /// Add file `index` (which must be below the manifest's file count).
    pub(crate) fn insert(&mut self, index: usize) {
        self.0[index / 8] |= 1 << (index % 8);
    }

    /// Whether file `index` is in the set (`false` past its end).
    pub(crate) fn contains(&self, index: usize) -> bool {
        self.0
            .get(index / 8)
            .is_some_and(|byte| byte & (1 << (index % 8)) != 0)
    }

    /// Check a set received for a manifest of `files` files: exactly its
    /// length, no index past its last file.
    pub(crate) fn check(&self, files: usize) -> anyhow::Result<()> {
        if self.0.len() != files.div_ceil(8) {
            bail!(
                "a file set of {} bytes for {files} files (want {})",
                self.0.len(),
                files.div_ceil(8)
            );
        }
        if (files..self.0.len() * 8).any(|i| self.contains(i)) {
            bail!("a file set naming files past the manifest's {files}");
        }
        Ok(())
    }

    /// The files of a manifest of `files` files that at least one of
    /// `held` (each checked with [`check`](Self::check)) lacks.
    pub(crate) fn lacking<'a>(files: usize, held: impl IntoIterator<Item = &'a FileSet>) -> Self {
        let mut lacking = FileSet::none(files);
        for held in held {
            for (byte, held) in lacking.0.iter_mut().zip(&held.0) {
                *byte |= !held;
            }
        }
        // Past the last file: nothing.
        if !files.is_multiple_of(8)
            && let Some(last) = lacking.0.last_mut()
        {
            *last &= (1u8 << (files % 8)) - 1;
        }
        lacking
    }
}

/// The messages of a push (their indices: the manifest is 0, piece `i` of
/// `plan` is `i + 1`) that carry at least one file of `needed`, in order.
pub(crate) fn messages(plan: &[Piece], needed: &FileSet) -> Vec<u64> {
    plan.iter()
        .enumerate()
        .filter(|(_, piece)| piece.iter().any(|s| needed.contains(s.file)))
        .map(|(i, _)| i as u64 + 1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::manifest::Segment;
    use super::*;

    fn set(files: usize, members: &[usize]) -> FileSet {
        let mut set = FileSet::none(files);
        members.iter().for_each(|&i| set.insert(i));
        set
    }

    #[test]
    fn file_sets_round_trip_and_bad_ones_are_refused() {
        let s = set(11, &[0, 3, 10]);
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(text, r#""0904""#);
        let back: FileSet = serde_json::from_str(&text).unwrap();
        assert_eq!(back, s);
        back.check(11).unwrap();
        assert!((0..11).all(|i| s.contains(i) == [0, 3, 10].contains(&i)));
        assert!(!s.contains(1000));
        // Too short, too long, a bit past the last file, not hex.
        assert!(set(8, &[]).check(11).is_err());
        assert!(set(17, &[]).check(11).is_err());
        assert!(set(16, &[12]).check(11).is_err());
        assert!(serde_json::from_str::<FileSet>(r#""0g""#).is_err());
        assert!(serde_json::from_str::<FileSet>(r#""090""#).is_err());
        FileSet::none(0).check(0).unwrap();
    }

    #[test]
    fn the_largest_file_set_fits_in_an_epoch_or_a_report() {
        let mut set = FileSet::none(MAX_FILES);
        (0..MAX_FILES).step_by(3).for_each(|i| set.insert(i));
        let text = serde_json::to_string(&set).unwrap();
        assert!(text.len() <= (1 << 19) + 2, "{}", text.len());
    }

    #[test]
    fn the_files_lacked_are_the_union_of_what_each_lacks() {
        let a = set(10, &[0, 1, 2, 3, 4, 5, 6, 7, 8]);
        let b = set(10, &[0, 2, 3, 4, 5, 6, 7, 8, 9]);
        let lacking = FileSet::lacking(10, [&a, &b]);
        assert_eq!(lacking, set(10, &[1, 9]));
        lacking.check(10).unwrap();
        assert_eq!(FileSet::lacking(10, []), FileSet::none(10));
        let all = set(10, &(0..10).collect::<Vec<_>>());
        assert_eq!(FileSet::lacking(10, [&all]), FileSet::none(10));
        assert_eq!(FileSet::lacking(10, [&FileSet::none(10)]), all);
    }

    #[test]
    fn only_messages_carrying_a_needed_file_are_sent() {
        let seg = |file, offset, len| Segment { file, offset, len };
        // A batch of files 0 and 1, file 2 in two pieces, file 3 alone.
        let plan = vec![
            vec![seg(0, 0, 1), seg(1, 0, 1)],
            vec![seg(2, 0, 8)],
            vec![seg(2, 8, 8)],
            vec![seg(3, 0, 1)],
        ];
        assert_eq!(messages(&plan, &set(4, &[1])), [1]);
        assert_eq!(messages(&plan, &set(4, &[2, 3])), [2, 3, 4]);
        assert_eq!(messages(&plan, &set(4, &[])), Vec::<u64>::new());
    }
}
