//! A test's scratch directory: removed when the test passes, kept when it
//! fails, with its path printed, to look at what the test left. `common`
//! has it as `common::scratch`; a test file without `common` includes this
//! file alone (`#[path = "common/scratch.rs"] mod scratch;`).

use std::hash::{BuildHasher, RandomState};
use std::ops::Deref;
use std::path::{Path, PathBuf};

/// A fresh directory `rdmc-<what>-<pid>-<random>` under the system's
/// temporary directory (tests run in parallel, in several processes),
/// removed on drop unless the thread is panicking (a failed assertion, a
/// timeout): then it stays, and its path is printed with the test's
/// output. Dereferences to its path.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// Create it (and panic if that fails).
    pub fn new(what: &str) -> Self {
        let unique = RandomState::new().hash_one(std::time::SystemTime::now());
        let dir =
            std::env::temp_dir().join(format!("rdmc-{what}-{}-{unique:x}", std::process::id()));
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
