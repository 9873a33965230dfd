//! Write-behind for file targets: a receiver's message lands in the file's
//! page cache through the mapping, and the kernel would by default write it
//! to the disk only much later (or all at once when the application flushes
//! the file, after the whole message has arrived). Every
//! [`KICK_EVERY`] bytes the member is done with, the file's dirty pages are
//! handed to the disk instead (`sync_file_range(SYNC_FILE_RANGE_WRITE)`,
//! which starts the writes and waits for none), on a thread of its own so
//! that a busy disk never stalls the member: the disk writes while the
//! network delivers, and a flush once the message is delivered has little
//! left to do.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, OnceLock};

/// Released bytes between two write-behind requests.
pub(super) const KICK_EVERY: usize = 4 << 20;

/// A writable file mapping's count of bytes released since its last
/// write-behind request.
#[derive(Debug, Default)]
pub(in crate::transport::buffer) struct WriteBehind {
    unkicked: AtomicUsize,
}

impl WriteBehind {
    /// `len` more bytes of `file`'s mapping are done with: ask for the
    /// file's dirty pages to be written once [`KICK_EVERY`] have been.
    pub(in crate::transport::buffer) fn released(&self, file: &Arc<std::fs::File>, len: usize) {
        let unkicked = self.unkicked.fetch_add(len, Ordering::Relaxed) + len;
        if unkicked >= KICK_EVERY {
            self.unkicked.store(0, Ordering::Relaxed);
            kick(file);
        }
    }
}

/// Ask the write-behind thread (started on first use) to start writing
/// `file`'s dirty pages. Without the thread (it could not be started),
/// the kernel writes them when it would anyway.
fn kick(file: &Arc<std::fs::File>) {
    static THREAD: OnceLock<Option<Sender<Arc<std::fs::File>>>> = OnceLock::new();
    let sender = THREAD.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Arc<std::fs::File>>();
        std::thread::Builder::new()
            .name("rdmc-write-behind".into())
            .spawn(move || {
                for file in rx {
                    start_writeback(&file);
                }
            })
            .ok()
            .map(|_| tx)
    });
    if let Some(sender) = sender {
        let _ = sender.send(Arc::clone(file));
    }
}

/// Start writing every dirty page of `file` (errors show at the flush that
/// waits for them).
fn start_writeback(file: &std::fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain system call on an open descriptor.
    let _ = unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_goes_once_enough_is_released_and_the_count_restarts() {
        let behind = WriteBehind::default();
        let path = std::env::temp_dir().join(format!("rdmc-write-behind-{}", std::process::id()));
        let file = Arc::new(std::fs::File::create(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
        behind.released(&file, KICK_EVERY - 1);
        assert_eq!(behind.unkicked.load(Ordering::Relaxed), KICK_EVERY - 1);
        behind.released(&file, 2);
        assert_eq!(behind.unkicked.load(Ordering::Relaxed), 0);
        // The thread took the request: it holds the file only while it writes.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while Arc::strong_count(&file) > 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the request was not taken"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
