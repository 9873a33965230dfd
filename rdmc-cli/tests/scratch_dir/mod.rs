//! One test's scratch directory under the target directory
//! (`CARGO_TARGET_TMPDIR`): emptied when the test starts, removed when the
//! test passes, kept when it fails (the failure's output names it), so a
//! whole run of the suite leaves no files behind unless something failed.

use std::ops::Deref;
use std::path::{Path, PathBuf};

/// The directory `CARGO_TARGET_TMPDIR/<name>`, removed on drop unless the
/// thread is panicking (a failed assertion); dereferences to its path.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// `CARGO_TARGET_TMPDIR/<name>`, empty: whatever an earlier run (a
    /// failed one) left there is removed first. `name` is the test's own,
    /// as tests run in parallel.
    pub fn new(name: &str) -> Self {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        ScratchDir(dir)
    }
}

impl Deref for ScratchDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("test failed: its files are kept in {}", self.0.display());
        } else if let Err(error) = std::fs::remove_dir_all(&self.0) {
            // Not a failure of what the test checks: say so and go on.
            eprintln!("could not remove {}: {error}", self.0.display());
        }
    }
}
