//! File-backed message buffers: a receiver's file target and a root's
//! file source, mapped shared, whose pages leave the process's memory once
//! the member is done with them.

use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

#[cfg(target_os = "linux")]
pub(super) use self::write_behind::WriteBehind;
use super::{Backing, MessageBuffer};

#[cfg(target_os = "linux")]
mod write_behind {
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
        let _ =
            unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_request_goes_once_enough_is_released_and_the_count_restarts() {
            let behind = WriteBehind::default();
            let path =
                std::env::temp_dir().join(format!("rdmc-write-behind-{}", std::process::id()));
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
}

/// Where the write-behind is not built: nothing to count.
#[cfg(not(target_os = "linux"))]
#[derive(Debug)]
pub(super) struct WriteBehind;

impl MessageBuffer {
    /// A buffer that is the first `len` bytes of `file`, mapped shared:
    /// the file is resized to `len` bytes and its blocks allocated
    /// (`posix_fallocate`, so that a full disk is an error here rather than
    /// a fault later), and `writable` says whether transfers may write the
    /// mapping (a receiver's target) or only read it (a root's source,
    /// which is not resized). Blocking: call it off the async threads.
    #[cfg(target_os = "linux")]
    pub(crate) fn map_file(
        file: std::fs::File,
        len: usize,
        writable: bool,
    ) -> std::io::Result<Arc<Self>> {
        use std::os::fd::AsRawFd;
        if writable {
            file.set_len(len as u64)?;
            if len > 0 {
                let off = libc::off_t::try_from(len).map_err(std::io::Error::other)?;
                // SAFETY: a plain system call on an open descriptor.
                let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, off) };
                // Some file systems cannot preallocate: then a full disk
                // shows only as writeback errors (or a fault).
                if rc != 0 && rc != libc::EOPNOTSUPP && rc != libc::EINVAL {
                    return Err(std::io::Error::from_raw_os_error(rc));
                }
            }
        } else if file.metadata()?.len() < len as u64 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the file is shorter than the message",
            ));
        }
        let ptr = if len == 0 {
            NonNull::dangling()
        } else {
            let prot = if writable {
                libc::PROT_READ | libc::PROT_WRITE
            } else {
                libc::PROT_READ
            };
            // SAFETY: a shared mapping of `len` bytes of an open file, no
            // fixed address: it aliases no Rust object.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    prot,
                    libc::MAP_SHARED,
                    file.as_raw_fd(),
                    0,
                )
            };
            if ptr == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            NonNull::new(ptr.cast::<u8>()).expect("a successful mmap is not null")
        };
        Ok(Arc::new(MessageBuffer {
            ptr,
            len,
            capacity: len,
            backing: Backing::File(Arc::new(file), writable.then(WriteBehind::default)),
            home: None,
            registration: OnceLock::new(),
        }))
    }

    /// The file a file-backed buffer maps.
    pub(crate) fn file(&self) -> Option<&Arc<std::fs::File>> {
        match &self.backing {
            Backing::File(file, _) => Some(file),
            _ => None,
        }
    }

    /// Drop this process's memory of bytes `offset..offset + len` of a
    /// file-backed buffer (the whole pages inside the range), once nothing
    /// reads or writes them any more: they stay in the file (its page
    /// cache, written to the disk behind the transfers for a writable one),
    /// and a later read of them faults them back in from there. Other
    /// buffers keep their memory.
    pub(crate) fn release(&self, offset: usize, len: usize) {
        #[cfg(target_os = "linux")]
        if let Backing::File(file, behind) = &self.backing
            && len > 0
        {
            if let Some(behind) = behind {
                behind.released(file, len);
            }
            let page = page_size();
            let start = offset.next_multiple_of(page);
            let end = (offset + len) / page * page;
            let end = if offset + len == self.len {
                offset + len
            } else {
                end
            };
            if end > start {
                // SAFETY: `start..end` is inside the mapping (checked by the
                // caller's block bounds); dropping pages of a shared file
                // mapping keeps their contents in the file.
                unsafe {
                    libc::madvise(
                        self.ptr.as_ptr().add(start).cast(),
                        end - start,
                        libc::MADV_DONTNEED,
                    )
                };
            }
        }
        let _ = (offset, len);
    }
}

/// The system's page size.
#[cfg(target_os = "linux")]
fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: a plain query.
    *PAGE.get_or_init(|| {
        usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
    })
}
