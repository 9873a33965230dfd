//! The unit tests' scratch directories: removed when the test passes, kept
//! when it fails, with the path printed, to look at what the test left.
//! (The integration tests have `tests/scratch_dir`.)

use std::path::Path;

/// A fresh directory `rdmc-<what>-<random>` under the system's temporary
/// directory, removed on drop unless the thread is panicking (a failed
/// assertion) or [`ScratchDir::keep`] was called.
pub(crate) struct ScratchDir(tempfile::TempDir);

impl ScratchDir {
    /// Create it (and panic if that fails).
    pub(crate) fn new(what: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("rdmc-{what}-"))
            .tempdir()
            .unwrap();
        ScratchDir(dir)
    }

    /// Its path.
    pub(crate) fn path(&self) -> &Path {
        self.0.path()
    }

    /// Keep it even if the test passes (and say where it is).
    pub(crate) fn keep(&mut self) {
        self.0.disable_cleanup(true);
        eprintln!("test files kept in {}", self.path().display());
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.disable_cleanup(true);
            eprintln!(
                "test failed: its files are kept in {}",
                self.path().display()
            );
        }
        // Otherwise the `TempDir` removes it.
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::ScratchDir;

    #[test]
    fn removed_when_the_test_passes_kept_when_it_fails() {
        let passed = {
            let dir = ScratchDir::new("scratch-passes");
            std::fs::write(dir.path().join("f"), b"passed").unwrap();
            dir.path().to_path_buf()
        };
        assert!(!passed.exists(), "{} was kept", passed.display());
        let failed = std::thread::spawn(|| {
            let dir = ScratchDir::new("scratch-fails");
            std::fs::write(dir.path().join("f"), b"failed").unwrap();
            std::panic::panic_any(dir.path().to_path_buf());
        })
        .join()
        .expect_err("the thread panics");
        let failed = *failed.downcast::<PathBuf>().unwrap();
        let kept = std::fs::read(failed.join("f"));
        let _ = std::fs::remove_dir_all(&failed);
        assert_eq!(kept.unwrap(), b"failed", "{} was removed", failed.display());
    }
}
