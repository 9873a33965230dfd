//! File-backed message buffers: a receiver's file target and a root's
//! file source, mapped shared, whose pages leave the process's memory once
//! the member is done with them.

use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

#[cfg(target_os = "linux")]
use self::direct::Direct;
#[cfg(target_os = "linux")]
use self::write_behind::WriteBehind;
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

/// What a writable file mapping (a receiver's target) keeps beside it.
#[derive(Debug, Default)]
pub(super) struct Writable {
    /// The count of bytes released since the last write-behind request.
    #[cfg(target_os = "linux")]
    behind: WriteBehind,
    /// Blocks received into recycled memory and written to the file past
    /// its page cache, where the file and the block size allow it.
    #[cfg(target_os = "linux")]
    direct: Option<Direct>,
}

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
        Self::map_file_with(file, len, writable, None)
    }

    /// A receiver's file target ([`map_file`](Self::map_file), writable)
    /// received into memory recycled from message to message, a chunk at
    /// a time, each written to the file directly (`O_DIRECT`) once the
    /// member is done with it, where the file system allows it (else
    /// through the mapping): a file's fresh page-cache pages cost a first
    /// touch each,
    /// which on a machine returning freed memory to its hypervisor costs
    /// far more than the copy. [`when_written`](Self::when_written) says
    /// when the bytes are in the file. Blocking: call it off the async
    /// threads.
    #[cfg(target_os = "linux")]
    pub(crate) fn map_file_direct(file: std::fs::File, len: usize) -> std::io::Result<Arc<Self>> {
        let direct = Direct::open(&file);
        Self::map_file_with(file, len, true, direct)
    }

    #[cfg(target_os = "linux")]
    fn map_file_with(
        file: std::fs::File,
        len: usize,
        writable: bool,
        direct: Option<Direct>,
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
        let writable = writable.then(|| Writable {
            behind: WriteBehind::default(),
            direct,
        });
        Ok(Arc::new(MessageBuffer {
            ptr,
            len,
            capacity: len,
            backing: Backing::File(Arc::new(file), writable),
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

    /// Whether this buffer's bytes are written to its file past the
    /// mapping ([`map_file_direct`](Self::map_file_direct)): then its
    /// bytes are all in the file only once [`when_written`](Self::when_written)
    /// says so.
    pub(crate) fn writes_directly(&self) -> bool {
        #[cfg(target_os = "linux")]
        if let Backing::File(
            _,
            Some(Writable {
                direct: Some(_), ..
            }),
        ) = &self.backing
        {
            return true;
        }
        false
    }

    /// Get `offset..offset + len` ready to be received into: a block of a
    /// buffer written directly gets recycled memory there (when there is
    /// some to spare; else it stays the file's mapping).
    pub(super) fn prepare_region(&self, offset: usize, len: usize) {
        #[cfg(target_os = "linux")]
        if let Backing::File(
            _,
            Some(Writable {
                direct: Some(direct),
                ..
            }),
        ) = &self.backing
        {
            // SAFETY: the region is inside the mapping (checked by the
            // caller) and nothing reads or writes it yet: it is about to
            // be received into.
            unsafe { direct.prepare(self.ptr, self.len, offset, len) };
        }
        let _ = (offset, len);
    }

    /// `done` is called, on another thread or at once, when every block
    /// of this buffer is in its file, with the first error writing one:
    /// blocks written directly and not released yet are written first.
    /// For other buffers, at once.
    pub(crate) fn when_written(
        self: &Arc<Self>,
        done: Box<dyn FnOnce(std::io::Result<()>) + Send>,
    ) {
        #[cfg(target_os = "linux")]
        if let Backing::File(
            _,
            Some(Writable {
                direct: Some(direct),
                ..
            }),
        ) = &self.backing
        {
            return direct.when_written(self, done);
        }
        done(Ok(()));
    }

    /// Drop this process's memory of bytes `offset..offset + len` of a
    /// file-backed buffer (the whole pages inside the range), once nothing
    /// reads or writes them any more: they stay in the file (its page
    /// cache, written to the disk behind the transfers for a writable one;
    /// written to the file directly from recycled memory for a block of a
    /// buffer that [`writes_directly`](Self::writes_directly)), and a later
    /// read of them faults them back in from there. Other buffers keep
    /// their memory.
    pub(crate) fn release(self: &Arc<Self>, offset: usize, len: usize) {
        #[cfg(target_os = "linux")]
        if let Backing::File(file, writable) = &self.backing
            && len > 0
        {
            if let Some(Writable { behind, direct }) = writable {
                behind.released(file, len);
                // Lent chunks are written from their memory once whole
                // (and the file's mapping comes back under them).
                if direct
                    .as_ref()
                    .is_some_and(|d| d.release(self, offset, len))
                {
                    return;
                }
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

#[cfg(target_os = "linux")]
mod direct {
    //! Direct writes for file targets. A block received into a file's
    //! mapping lands in page-cache pages the kernel must find, zero and
    //! later write back: a first touch of fresh memory per page, which is
    //! most of a receiver's work on a machine that returns freed memory to
    //! its hypervisor. Instead, the buffer is received in chunks of
    //! [`CHUNK`] bytes of memory lent from a per-process pool (a `memfd`
    //! whose pages stay the process's from one message to the next),
    //! mapped over the chunk's part of the file's mapping; once the member
    //! is done with every byte of a chunk, a writer thread writes it to the
    //! file with `O_DIRECT`, puts the file's mapping back under it and the
    //! memory back in the pool. A chunk for which no memory is spare (more
    //! than [`LENT_MAX`] bytes lent) is received into the file's mapping as
    //! before.

    use std::collections::{HashMap, HashSet};
    use std::io;
    use std::os::fd::{AsRawFd, RawFd};
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    use std::ptr::NonNull;
    use std::sync::mpsc::Sender;
    use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

    use super::super::{Backing, MessageBuffer};
    use super::{Writable, page_size};

    /// The unit of lent memory and of direct writes.
    const CHUNK: usize = 1 << 20;
    /// Memory lent to chunks, at most, per process.
    const LENT_MAX: usize = 32 * CHUNK;
    /// Threads writing chunks.
    const WRITERS: usize = 2;
    /// What `O_DIRECT` transfers are aligned to: offset, length, memory.
    const ALIGN: usize = 4096;

    type Done = Box<dyn FnOnce(io::Result<()>) + Send>;

    /// A receiver's file target written directly.
    pub(in crate::transport::buffer) struct Direct {
        /// The file, opened again with `O_DIRECT`.
        fd: std::fs::File,
        state: Mutex<State>,
    }

    #[derive(Default)]
    struct State {
        /// Chunks in lent memory, by index.
        lent: HashMap<usize, Lent>,
        /// Chunks received (partly) into the file's mapping: never lent.
        mapped: HashSet<usize>,
        /// Chunks queued for writing or being written.
        writing: usize,
        /// The first error writing a chunk.
        error: Option<io::Error>,
        /// Called once nothing is left to write.
        done: Option<Done>,
    }

    /// A chunk's lent memory.
    struct Lent {
        /// Its offset in the pool's `memfd`.
        at: usize,
        /// Bytes of the chunk the member is done with.
        released: usize,
        /// Whether the chunk is queued for writing.
        queued: bool,
    }

    impl std::fmt::Debug for Direct {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Direct").finish_non_exhaustive()
        }
    }

    fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The chunks `offset..offset + len` overlaps.
    fn chunks(offset: usize, len: usize) -> std::ops::Range<usize> {
        offset / CHUNK..(offset + len).div_ceil(CHUNK)
    }

    /// Chunk `chunk`'s bytes in a buffer of `buf_len`; the mapping it
    /// covers (to the end of the mapping's last page).
    fn extent(chunk: usize, buf_len: usize) -> (usize, usize, usize) {
        let start = chunk * CHUNK;
        let end = buf_len.min(start + CHUNK);
        (start, end, end.next_multiple_of(page_size()))
    }

    impl Direct {
        /// Direct writes for `file`, if it can be opened with `O_DIRECT`
        /// (not, for example, on tmpfs).
        pub(in crate::transport::buffer) fn open(file: &std::fs::File) -> Option<Direct> {
            if !CHUNK.is_multiple_of(page_size()) || !page_size().is_multiple_of(ALIGN) {
                return None;
            }
            let fd = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC)
                .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
                .ok()?;
            Some(Direct {
                fd,
                state: Mutex::default(),
            })
        }

        /// Lend memory to the chunks `offset..offset + len` of a mapping
        /// at `base` of `buf_len` bytes overlaps that have none, if memory
        /// is spare.
        ///
        /// # Safety
        /// The range is inside the mapping, nothing reads or writes it, and
        /// the bytes of its chunks outside it are not received yet.
        pub(in crate::transport::buffer) unsafe fn prepare(
            &self,
            base: NonNull<u8>,
            buf_len: usize,
            offset: usize,
            len: usize,
        ) {
            let mut state = lock(&self.state);
            for chunk in chunks(offset, len) {
                if state.lent.contains_key(&chunk) || state.mapped.contains(&chunk) {
                    continue;
                }
                let (start, _, mapped_end) = extent(chunk, buf_len);
                let Some((memfd, at)) = pool::lend() else {
                    state.mapped.insert(chunk);
                    continue;
                };
                // SAFETY: maps the pool's memory over the chunk's whole
                // pages of the buffer's mapping (the caller's promise:
                // nothing uses them).
                let mapped = unsafe {
                    libc::mmap(
                        base.as_ptr().add(start).cast(),
                        mapped_end - start,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_SHARED | libc::MAP_FIXED | libc::MAP_POPULATE,
                        memfd,
                        at as libc::off_t,
                    )
                };
                if mapped == libc::MAP_FAILED {
                    pool::give_back(at);
                    state.mapped.insert(chunk);
                    continue;
                }
                let lent = Lent {
                    at,
                    released: 0,
                    queued: false,
                };
                state.lent.insert(chunk, lent);
            }
        }

        /// The member is done with `offset..offset + len` of `buf`: queue
        /// the chunks it completes for writing. Whether every chunk it
        /// overlaps is lent (else its bytes there are in the mapping).
        pub(in crate::transport::buffer) fn release(
            &self,
            buf: &Arc<MessageBuffer>,
            offset: usize,
            len: usize,
        ) -> bool {
            let mut state = lock(&self.state);
            let mut all_lent = true;
            let mut complete = Vec::new();
            for chunk in chunks(offset, len) {
                let (start, end, _) = extent(chunk, buf.len);
                let Some(lent) = state.lent.get_mut(&chunk) else {
                    all_lent = false;
                    continue;
                };
                lent.released += (offset + len).min(end) - offset.max(start);
                if lent.released >= end - start && !lent.queued {
                    lent.queued = true;
                    complete.push(chunk);
                }
            }
            state.writing += complete.len();
            drop(state);
            for chunk in complete {
                writer::queue(Arc::clone(buf), chunk);
            }
            all_lent
        }

        /// Call `done` once every byte of `buf` is in the file (queue the
        /// chunks still in lent memory first).
        pub(in crate::transport::buffer) fn when_written(
            &self,
            buf: &Arc<MessageBuffer>,
            done: Done,
        ) {
            let mut state = lock(&self.state);
            let mut unqueued = Vec::new();
            for (&chunk, lent) in &mut state.lent {
                if !lent.queued {
                    lent.queued = true;
                    unqueued.push(chunk);
                }
            }
            state.writing += unqueued.len();
            if state.writing == 0 {
                let result = first_error(&state);
                drop(state);
                return done(result);
            }
            state.done = Some(done);
            drop(state);
            for chunk in unqueued {
                writer::queue(Arc::clone(buf), chunk);
            }
        }

        /// Write chunk `chunk` of the mapping at `base` (of `buf_len`
        /// bytes of `file`) to the file, put the file's mapping back under
        /// it and its memory back in the pool; then, if it was the last
        /// chunk left to write, call back whoever waits for that.
        fn write(&self, base: NonNull<u8>, buf_len: usize, file: &std::fs::File, chunk: usize) {
            let (start, end, mapped_end) = extent(chunk, buf_len);
            // SAFETY: the chunk is inside the mapping, received, and
            // released: nothing writes it any more.
            let bytes =
                unsafe { std::slice::from_raw_parts(base.as_ptr().add(start), end - start) };
            let (head, tail) = bytes.split_at(bytes.len() / ALIGN * ALIGN);
            let mut result = match self.fd.write_all_at(head, start as u64) {
                // Memory or a device the kernel will not write directly.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    file.write_all_at(head, start as u64)
                }
                other => other,
            };
            if result.is_ok() {
                result = file.write_all_at(tail, (start + head.len()) as u64);
            }
            // SAFETY: the file's shared mapping again over the chunk, as
            // `map_file` made it (nothing uses it).
            let mapped = unsafe {
                libc::mmap(
                    base.as_ptr().add(start).cast(),
                    mapped_end - start,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    file.as_raw_fd(),
                    start as libc::off_t,
                )
            };
            let mut state = lock(&self.state);
            // Memory still mapped stays lent until the buffer goes.
            if mapped != libc::MAP_FAILED
                && let Some(lent) = state.lent.remove(&chunk)
            {
                pool::give_back(lent.at);
            }
            if let Err(e) = result {
                state.error.get_or_insert(e);
            }
            state.writing -= 1;
            let done = if state.writing == 0 {
                state.done.take()
            } else {
                None
            };
            let result = first_error(&state);
            drop(state);
            if let Some(done) = done {
                done(result);
            }
        }
    }

    /// The first error writing a chunk, as a result (kept for later calls).
    fn first_error(state: &State) -> io::Result<()> {
        match &state.error {
            Some(e) => Err(io::Error::new(e.kind(), e.to_string())),
            None => Ok(()),
        }
    }

    impl Drop for Direct {
        fn drop(&mut self) {
            // The buffer's mapping is gone (dropped before its backing):
            // its lent memory is mapped nowhere.
            for lent in lock(&self.state).lent.values() {
                pool::give_back(lent.at);
            }
        }
    }

    mod pool {
        //! The memory lent to chunks: one `memfd`, in chunks.

        use std::os::fd::{AsRawFd, FromRawFd};

        use super::{CHUNK, LENT_MAX, Mutex, OnceLock, RawFd, lock};

        struct Pool {
            memfd: std::fs::File,
            made: usize,
            free: Vec<usize>,
        }

        /// The pool, made on first use (`None` if no `memfd` can be had).
        fn pool() -> Option<&'static Mutex<Pool>> {
            static POOL: OnceLock<Option<Mutex<Pool>>> = OnceLock::new();
            POOL.get_or_init(|| {
                // SAFETY: a plain system call with a NUL-terminated name.
                let fd = unsafe { libc::memfd_create(c"rdmc-chunks".as_ptr(), libc::MFD_CLOEXEC) };
                // SAFETY: `fd` is a new descriptor this file now owns.
                (fd >= 0).then(|| {
                    Mutex::new(Pool {
                        memfd: unsafe { std::fs::File::from_raw_fd(fd) },
                        made: 0,
                        free: Vec::new(),
                    })
                })
            })
            .as_ref()
        }

        /// A chunk of memory to map: the `memfd` and the offset in it;
        /// `None` if [`LENT_MAX`] bytes are lent already.
        pub(super) fn lend() -> Option<(RawFd, usize)> {
            let mut pool = lock(pool()?);
            if let Some(at) = pool.free.pop() {
                return Some((pool.memfd.as_raw_fd(), at));
            }
            if (pool.made + 1) * CHUNK > LENT_MAX {
                return None;
            }
            let at = pool.made * CHUNK;
            pool.memfd.set_len((at + CHUNK) as u64).ok()?;
            pool.made += 1;
            Some((pool.memfd.as_raw_fd(), at))
        }

        /// A chunk [`lend`] gave, mapped nowhere any more.
        pub(super) fn give_back(at: usize) {
            if let Some(pool) = pool() {
                lock(pool).free.push(at);
            }
        }
    }

    mod writer {
        //! The threads writing released chunks.

        use super::{Arc, Backing, MessageBuffer, OnceLock, Sender, Writable};

        struct Job {
            buf: Arc<MessageBuffer>,
            chunk: usize,
        }

        /// Write chunk `chunk` of `buf` on a writer thread (here, if none
        /// could be started).
        pub(super) fn queue(buf: Arc<MessageBuffer>, chunk: usize) {
            static QUEUE: OnceLock<Option<Sender<Job>>> = OnceLock::new();
            let queue = QUEUE.get_or_init(|| {
                let (tx, rx) = std::sync::mpsc::channel::<Job>();
                let rx = Arc::new(std::sync::Mutex::new(rx));
                let mut started = false;
                for i in 0..super::WRITERS {
                    let rx = Arc::clone(&rx);
                    let thread = std::thread::Builder::new()
                        .name(format!("rdmc-writer-{i}"))
                        .spawn(move || {
                            loop {
                                // The queue's lock only while taking a job.
                                let job = super::lock(&rx).recv();
                                let Ok(job) = job else { break };
                                run(job);
                            }
                        });
                    started |= thread.is_ok();
                }
                started.then_some(tx)
            });
            let job = Job { buf, chunk };
            match queue {
                Some(tx) => {
                    if let Err(e) = tx.send(job) {
                        run(e.0);
                    }
                }
                None => run(job),
            }
        }

        fn run(job: Job) {
            let buf = &job.buf;
            if let Backing::File(
                file,
                Some(Writable {
                    direct: Some(direct),
                    ..
                }),
            ) = &buf.backing
            {
                direct.write(buf.ptr, buf.len, file, job.chunk);
            }
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod direct_tests {
    use std::sync::Arc;

    use super::MessageBuffer;

    /// A buffer of `len` bytes written directly into a file of its own,
    /// with the file's path; `None` where the temporary directory's file
    /// system refuses `O_DIRECT` (tmpfs).
    fn direct(name: &str, len: usize) -> Option<(Arc<MessageBuffer>, std::path::PathBuf)> {
        let path = std::env::temp_dir().join(format!("rdmc-direct-{}-{name}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let buf = MessageBuffer::map_file_direct(file, len).unwrap();
        if !buf.writes_directly() {
            eprintln!("no O_DIRECT in {}: nothing to test", path.display());
            std::fs::remove_file(&path).unwrap();
            return None;
        }
        Some((buf, path))
    }

    /// Receive `len` bytes in blocks of `block` into a direct buffer,
    /// blocks arriving in a shuffled order (`seed`) and released a few
    /// arrivals later (the last `unreleased` never): the file and the
    /// mapping read back every byte once `when_written` says so.
    fn receive(name: &str, len: usize, block: usize, seed: u64, unreleased: usize) {
        let Some((buf, path)) = direct(name, len) else {
            return;
        };
        let payload: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4093) as u8).collect();
        let mut order: Vec<usize> = (0..len.div_ceil(block)).collect();
        let mut state = seed | 1;
        for i in (1..order.len()).rev() {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            order.swap(i, (state >> 33) as usize % (i + 1));
        }
        let mut held = Vec::new();
        for &b in &order {
            let (offset, n) = (b * block, block.min(len - b * block));
            buf.region(offset, n).write(&payload[offset..offset + n]);
            held.push((offset, n));
            if held.len() > 3 {
                let (offset, n) = held.remove((state >> 40) as usize % held.len());
                buf.release(offset, n);
            }
        }
        while held.len() > unreleased {
            let (offset, n) = held.remove(0);
            buf.release(offset, n);
        }
        let (tx, rx) = std::sync::mpsc::channel();
        buf.when_written(Box::new(move |result| tx.send(result).unwrap()));
        let written = rx.recv_timeout(std::time::Duration::from_secs(30));
        written.expect("told").expect("written");
        assert!(
            buf.block(0, len).as_slice() == payload,
            "the mapping differs"
        );
        drop(buf);
        let copy = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(copy == payload, "the file differs");
    }

    #[test]
    fn blocks_not_aligned_to_pages_in_any_order_land_whole() {
        for seed in 0..4 {
            receive(&format!("odd-{seed}"), (3 << 20) + 4321, 49_129, seed, 0);
        }
    }

    #[test]
    fn blocks_never_released_are_written_when_asked() {
        receive("unreleased", (2 << 20) + 1, 1 << 18, 7, 3);
    }

    #[test]
    fn more_than_the_memory_lent_goes_through_the_mapping() {
        // 40 MiB received before anything is released: more chunks than
        // the pool lends, the rest received into the file's mapping.
        let len = 40 << 20;
        let Some((buf, path)) = direct("lent-out", len) else {
            return;
        };
        let payload: Vec<u8> = (0..len).map(|i| (i / 1000) as u8).collect();
        let block = 1 << 20;
        for offset in (0..len).step_by(block) {
            buf.region(offset, block)
                .write(&payload[offset..offset + block]);
        }
        for offset in (0..len).step_by(block) {
            buf.release(offset, block);
        }
        let (tx, rx) = std::sync::mpsc::channel();
        buf.when_written(Box::new(move |result| tx.send(result).unwrap()));
        let written = rx.recv_timeout(std::time::Duration::from_secs(60));
        written.expect("told").expect("written");
        drop(buf);
        let copy = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(copy == payload, "the file differs");
    }
}
