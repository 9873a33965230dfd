//! Message buffers that several transfers fill and read at once.
//!
//! A receiver's message buffer is written block by block — each block exactly
//! once, by whichever transport completes the receive posted for it — while
//! the same member forwards blocks it already holds from that buffer. The
//! regions are disjoint and the protocol orders each region's write before
//! any read of it (a member only sends a block it has received, and a
//! receive's completion reaches the member through a channel, which
//! synchronizes). [`MessageBuffer`] captures exactly that: it hands out
//! [`RecvRegion`]s (write once) and [`BlockRef`]s (read) over one allocation,
//! and becomes an ordinary [`Bytes`] when the message is complete.
//!
//! A buffer taken from a node's buffer pool goes back there — memory and
//! registration — when its last user drops it: to its [`Home`], which the
//! pool implements.

#![allow(unsafe_code)]

use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock, Weak};

use bytes::Bytes;

mod file;

/// A transport's registration of a buffer's memory (the `ofi` transport's
/// memory region), kept with the buffer and dropped before its memory.
pub(crate) type Registration = Box<dyn std::any::Any + Send + Sync>;

/// Where a pooled buffer's memory goes when the buffer is dropped (a node's
/// pool of spare buffers), instead of back to the allocator.
pub(crate) trait Home: Send + Sync {
    /// Keep `spare` (memory and registration) for reuse, or free it.
    fn take_back(&self, spare: Spare);
}

/// One heap allocation holding a message, shared by the transfers filling it.
pub(crate) struct MessageBuffer {
    ptr: NonNull<u8>,
    /// The message's length: what `into_bytes` exposes.
    len: usize,
    /// The allocation's length (at least `len`; more for a recycled buffer).
    capacity: usize,
    /// What holds the bytes.
    backing: Backing,
    /// The pool the memory goes back to when the buffer is dropped, instead
    /// of back to the allocator (while that pool lives).
    home: Option<Weak<dyn Home>>,
    /// A transport's registration of the bytes, made once (the `ofi`
    /// transport's, before the first receive into the buffer is posted),
    /// kept while the memory is recycled, and released before the memory
    /// is freed.
    registration: OnceLock<Registration>,
}

/// What holds a buffer's bytes, and so how they are freed.
#[derive(Debug)]
enum Backing {
    /// A boxed slice of `capacity` bytes.
    Heap,
    /// An anonymous `mmap`ed region of `capacity` bytes.
    Anonymous,
    /// An application's `Vec<u8>` of `capacity` bytes' capacity, given
    /// back to the allocator as that vector.
    Vec,
    /// A shared mapping of the first `capacity` bytes of this file: what
    /// the transfers write lands in the file's page cache, and is written
    /// behind when the mapping is writable.
    File(Arc<std::fs::File>, Option<file::Writable>),
}

/// Buffers at least this large are mapped with huge pages where possible.
pub(super) const HUGE_THRESHOLD: usize = 4 << 20;

/// Mappings are made in multiples of this (the huge page size).
pub(super) const MAPPING_UNIT: usize = 2 << 20;

// SAFETY: the buffer owns its allocation; all access to its bytes goes through
// `RecvRegion::write`/`BlockRef::as_slice`/`into_bytes`, whose contracts make
// concurrent accesses touch disjoint regions (see the module documentation).
unsafe impl Send for MessageBuffer {}
// SAFETY: as for `Send`.
unsafe impl Sync for MessageBuffer {}

/// The memory for a message buffer could not be had: the allocator or the
/// kernel refused it (an address-space limit, overcommit refused, or no
/// memory left). Never an abort: the group fails with this as its cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot allocate {len} bytes for a message buffer")]
pub(crate) struct AllocError {
    /// The bytes asked for.
    pub(crate) len: usize,
}

impl MessageBuffer {
    /// A zeroed buffer of `len` bytes (large ones come lazily zeroed from the OS).
    #[cfg(test)]
    pub(crate) fn new(len: usize) -> Arc<Self> {
        Self::try_new(len).expect("test buffers fit in memory")
    }

    /// A zeroed buffer of `len` bytes (large ones come lazily zeroed from
    /// the OS), or an error if the memory cannot be had: allocated
    /// fallibly, never through an allocation failure that aborts.
    pub(crate) fn try_new(len: usize) -> Result<Arc<Self>, AllocError> {
        Ok(Arc::new(Self::alloc(len)?))
    }

    fn alloc(len: usize) -> Result<Self, AllocError> {
        if let Some(mapped) = Self::huge(len) {
            return mapped;
        }
        let ptr = if len == 0 {
            NonNull::dangling()
        } else {
            let layout = std::alloc::Layout::array::<u8>(len).map_err(|_| AllocError { len })?;
            // SAFETY: `layout` has a non-zero size. Freed in `drop` as the
            // `Box<[u8]>` of `len` bytes it is laid out as.
            NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).ok_or(AllocError { len })?
        };
        Ok(MessageBuffer {
            ptr,
            len,
            capacity: len,
            backing: Backing::Heap,
            home: None,
            registration: OnceLock::new(),
        })
    }

    /// A buffer over the application's `vec`, resized to `len` bytes (it
    /// reallocates only if its capacity is smaller); its memory goes back
    /// to the allocator as a vector when the buffer is dropped, or becomes
    /// the message's [`Bytes`] without a copy.
    pub(crate) fn from_vec(mut vec: Vec<u8>, len: usize) -> Arc<Self> {
        vec.resize(len, 0);
        let mut vec = std::mem::ManuallyDrop::new(vec);
        let capacity = vec.capacity();
        let ptr = NonNull::new(vec.as_mut_ptr()).expect("a vector's pointer is not null");
        Arc::new(MessageBuffer {
            ptr,
            len,
            capacity,
            backing: Backing::Vec,
            home: None,
            registration: OnceLock::new(),
        })
    }

    /// A large buffer straight from the kernel, asking for transparent huge
    /// pages: a message's first touch then faults in 2 MiB at a time instead
    /// of 4 KiB, which is most of the cost of receiving into fresh memory.
    /// `None` for a buffer too small to map; an error if the kernel refuses
    /// the mapping (no fallback to the heap, which would be refused too).
    #[cfg(target_os = "linux")]
    fn huge(len: usize) -> Option<Result<Self, AllocError>> {
        if len < HUGE_THRESHOLD {
            return None;
        }
        let Some(capacity) = len.checked_next_multiple_of(MAPPING_UNIT) else {
            return Some(Err(AllocError { len }));
        };
        // SAFETY: an anonymous private mapping of `capacity` bytes, no fixed
        // address: it aliases nothing, and is zero-filled by the kernel.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                capacity,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            tracing::warn!(
                len,
                error = %std::io::Error::last_os_error(),
                "cannot map a message buffer"
            );
            return Some(Err(AllocError { len }));
        }
        // SAFETY: `ptr..ptr+capacity` is the mapping just made; the advice
        // is a hint whose failure changes nothing.
        unsafe { libc::madvise(ptr, capacity, libc::MADV_HUGEPAGE) };
        let ptr = NonNull::new(ptr.cast::<u8>()).expect("a successful mmap is not null");
        Some(Ok(MessageBuffer {
            ptr,
            len,
            capacity,
            backing: Backing::Anonymous,
            home: None,
            registration: OnceLock::new(),
        }))
    }

    #[cfg(not(target_os = "linux"))]
    fn huge(_len: usize) -> Option<Result<Self, AllocError>> {
        None
    }

    /// The region `offset..offset + len`, to be filled by one receive.
    ///
    /// # Panics
    /// If the region is out of bounds.
    pub(crate) fn region(self: &Arc<Self>, offset: usize, len: usize) -> RecvRegion {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len));
        self.prepare_region(offset, len);
        RecvRegion {
            buf: Arc::clone(self),
            offset,
            len,
            then: None,
        }
    }

    /// A handle to the bytes `offset..offset + len`, which must already have
    /// been written (a member only forwards blocks it has received).
    ///
    /// # Panics
    /// If the region is out of bounds.
    pub(crate) fn block(self: &Arc<Self>, offset: usize, len: usize) -> BlockRef {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len));
        BlockRef(BlockInner::Buffer {
            buf: Arc::clone(self),
            offset,
            len,
        })
    }

    /// The buffer's first byte, for handing to a NIC (`ofi`).
    #[cfg_attr(not(any(feature = "ofi", feature = "rdma", test)), allow(dead_code))]
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The message's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// This buffer as one of its first `len` bytes, if nothing else holds
    /// it: the bytes stay where they are (a message received whole into a
    /// group's first-block buffer becomes the message without a copy), and
    /// the memory goes back to the pool whole. Else the buffer, unchanged.
    pub(crate) fn into_prefix(self: Arc<Self>, len: usize) -> Result<Arc<Self>, Arc<Self>> {
        if len > self.len {
            return Err(self);
        }
        let mut buf = Arc::try_unwrap(self)?;
        // Dropping frees (or pools) `capacity` bytes, whatever `len` says.
        buf.len = len;
        Ok(Arc::new(buf))
    }

    /// Length of the allocation in bytes (what a registration covers).
    #[cfg_attr(not(any(feature = "ofi", feature = "rdma", test)), allow(dead_code))]
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// A buffer of `len` bytes that goes back to `home` when dropped: made
    /// from `spare` (a buffer taken back earlier, with at least `len` bytes
    /// and its registration) or, without one, newly allocated with
    /// `capacity` bytes. A recycled buffer's bytes are not zeroed: every
    /// byte of a message is written by its blocks before it is delivered.
    ///
    /// # Panics
    /// If `spare` is shorter than `len` or `capacity` is.
    pub(super) fn pooled(
        spare: Option<Spare>,
        len: usize,
        capacity: usize,
        home: Weak<dyn Home>,
    ) -> Result<Arc<Self>, AllocError> {
        let mut buf = match spare {
            Some(Spare(buf)) => buf,
            None => {
                assert!(capacity >= len);
                MessageBuffer::alloc(capacity)?
            }
        };
        assert!(buf.capacity >= len);
        buf.len = len;
        buf.home = Some(home);
        Ok(Arc::new(buf))
    }

    /// The transport's registration of this buffer (set once, kept while
    /// the buffer is recycled).
    #[cfg_attr(not(any(feature = "ofi", feature = "rdma", test)), allow(dead_code))]
    pub(crate) fn registration(&self) -> &OnceLock<Registration> {
        &self.registration
    }

    /// The whole buffer as [`Bytes`], without copying. Call only once every
    /// receive into the buffer has completed (no region is written afterwards).
    pub(crate) fn into_bytes(self: Arc<Self>) -> Bytes {
        Bytes::from_owner(Complete(self))
    }
}

impl Drop for MessageBuffer {
    fn drop(&mut self) {
        if let Some(home) = self.home.take().and_then(|h| h.upgrade()) {
            // Hand the memory (and its registration) over whole: this
            // buffer no longer owns it.
            let spare = MessageBuffer {
                ptr: self.ptr,
                len: self.capacity,
                capacity: self.capacity,
                backing: std::mem::replace(&mut self.backing, Backing::Heap),
                home: None,
                registration: std::mem::take(&mut self.registration),
            };
            self.ptr = NonNull::dangling();
            self.capacity = 0;
            home.take_back(Spare(spare));
            return;
        }
        // Deregister before the memory goes.
        drop(self.registration.take());
        match self.backing {
            #[cfg(target_os = "linux")]
            Backing::Anonymous | Backing::File(..) => {
                if self.capacity > 0 {
                    // SAFETY: `ptr`/`capacity` are a mapping made in `huge`
                    // or `map_file`, unmapped only here, once; no reference
                    // into it outlives the buffer (a recycled one was
                    // handed over above, with a dangling pointer).
                    unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.capacity) };
                }
                return;
            }
            Backing::Vec => {
                // SAFETY: `ptr`/`capacity` are the parts of the vector
                // `from_vec` took apart; its bytes are initialized.
                drop(unsafe {
                    Vec::from_raw_parts(self.ptr.as_ptr(), self.capacity, self.capacity)
                });
                return;
            }
            _ => {}
        }
        let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.capacity);
        // SAFETY: `ptr`/`capacity` came from `alloc_zeroed` with the layout
        // of a `[u8]` of this length in `alloc` (or are dangling with
        // capacity 0), and are freed only here, once (a buffer
        // whose memory was handed over has a dangling pointer and capacity
        // 0: an empty box, which frees nothing).
        drop(unsafe { Box::from_raw(slice) });
    }
}

/// Memory taken back from a dropped buffer (with its registration), for
/// reuse by [`MessageBuffer::pooled`]; freed if dropped.
#[derive(Debug)]
pub(crate) struct Spare(MessageBuffer);

impl Spare {
    /// Bytes of memory it holds.
    pub(super) fn capacity(&self) -> usize {
        self.0.capacity
    }
}

impl fmt::Debug for MessageBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MessageBuffer")
            .field("len", &self.len)
            .finish()
    }
}

/// A completed buffer, readable as a whole.
struct Complete(Arc<MessageBuffer>);

impl AsRef<[u8]> for Complete {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: a `Complete` is only made by `into_bytes`, whose caller
        // guarantees that no region is written any more.
        unsafe { std::slice::from_raw_parts(self.0.ptr.as_ptr(), self.0.len) }
    }
}

/// A region of a [`MessageBuffer`] that one posted receive fills.
#[derive(Debug)]
pub(crate) struct RecvRegion {
    buf: Arc<MessageBuffer>,
    offset: usize,
    len: usize,
    /// For a bounce region: the region its bytes are copied on to once
    /// they landed (see [`via`](Self::via)).
    #[cfg_attr(not(any(feature = "ofi", feature = "rdma")), allow(dead_code))]
    then: Option<Box<RecvRegion>>,
}

impl RecvRegion {
    /// Whether the region is part of a file's mapping: memory a transport
    /// that registers memory with its NIC should not register (pinning a
    /// file's pages would hold the whole file in memory), and receive
    /// through a bounce region instead ([`via`](Self::via)).
    #[cfg(any(feature = "ofi", feature = "rdma"))]
    pub(crate) fn is_file(&self) -> bool {
        self.buf.file().is_some()
    }

    /// A region of `bounce` (at least as long as this one) to receive
    /// into instead of this one: [`landed`](Self::landed) copies what
    /// arrived on to here.
    #[cfg(any(feature = "ofi", feature = "rdma"))]
    pub(crate) fn via(self, bounce: &Arc<MessageBuffer>) -> RecvRegion {
        let mut region = bounce.region(0, self.len);
        region.then = Some(Box::new(self));
        region
    }

    /// The receive into this region completed with `len` bytes: for a
    /// bounce region, copy them on to the region it stands in for.
    #[cfg(any(feature = "ofi", feature = "rdma"))]
    pub(crate) fn landed(mut self, len: usize) {
        if let Some(target) = self.then.take() {
            let len = len.min(self.len);
            target.write(&self.as_mut_slice()[..len]);
        }
    }

    /// Capacity in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The buffer the region is part of.
    #[cfg(any(feature = "ofi", feature = "rdma"))]
    pub(crate) fn buffer(&self) -> &Arc<MessageBuffer> {
        &self.buf
    }

    /// Where the region starts in its buffer.
    #[cfg(any(feature = "ofi", feature = "rdma"))]
    pub(crate) fn offset(&self) -> usize {
        self.offset
    }

    /// The region's bytes, to be filled by the receive that owns it (in
    /// one go or in parts). Each region is written by its owner only.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: in bounds (checked in `region`). Regions handed out for one
        // buffer are disjoint, and `&mut self` makes this the only access to
        // this one: nobody reads a region before its receive completed.
        unsafe { std::slice::from_raw_parts_mut(self.buf.ptr.as_ptr().add(self.offset), self.len) }
    }

    /// Fill the start of the region with `src`, consuming the region.
    ///
    /// # Panics
    /// If `src` is longer than the region.
    pub(crate) fn write(mut self, src: &[u8]) {
        assert!(src.len() <= self.len, "receive overrun");
        self.as_mut_slice()[..src.len()].copy_from_slice(src);
    }
}

/// Bytes to send: a slice of the root's [`Bytes`] or of a relay's buffer.
#[derive(Clone, Debug)]
pub(crate) struct BlockRef(BlockInner);

#[derive(Clone, Debug)]
enum BlockInner {
    /// `offset..offset + len` of a root's message.
    Bytes {
        message: Bytes,
        offset: usize,
        len: usize,
    },
    Buffer {
        buf: Arc<MessageBuffer>,
        offset: usize,
        len: usize,
    },
}

impl BlockRef {
    /// A whole message as one block.
    #[cfg(test)]
    pub(crate) fn from_bytes(bytes: Bytes) -> Self {
        let len = bytes.len();
        Self::from_message(bytes, 0, len)
    }

    /// Block `offset..offset + len` of a root's message.
    ///
    /// # Panics
    /// If the range is out of bounds.
    pub(crate) fn from_message(message: Bytes, offset: usize, len: usize) -> Self {
        assert!(
            offset
                .checked_add(len)
                .is_some_and(|end| end <= message.len())
        );
        BlockRef(BlockInner::Bytes {
            message,
            offset,
            len,
        })
    }

    /// The root's whole message the block is part of (`None` for a relay's
    /// buffer).
    #[cfg(any(feature = "ofi", feature = "rdma"))]
    pub(crate) fn message(&self) -> Option<&Bytes> {
        match &self.0 {
            BlockInner::Bytes { message, .. } => Some(message),
            BlockInner::Buffer { .. } => None,
        }
    }

    /// The block's bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        match &self.0 {
            BlockInner::Bytes {
                message,
                offset,
                len,
            } => &message[*offset..*offset + *len],
            // SAFETY: in bounds (checked in `MessageBuffer::block`); the region
            // was completely written before this handle was made (a member only
            // forwards received blocks) and is never written again.
            BlockInner::Buffer { buf, offset, len } => unsafe {
                std::slice::from_raw_parts(buf.ptr.as_ptr().add(*offset), *len)
            },
        }
    }

    /// Whether the block's bytes are a file's mapping (see
    /// [`RecvRegion::is_file`]).
    #[cfg(any(feature = "ofi", feature = "rdma"))]
    pub(crate) fn is_file(&self) -> bool {
        self.buffer().is_some_and(|b| b.file().is_some())
    }

    /// The relay buffer the block is part of (`None` for a root's bytes).
    #[cfg(any(feature = "ofi", feature = "rdma"))]
    pub(crate) fn buffer(&self) -> Option<&Arc<MessageBuffer>> {
        match &self.0 {
            BlockInner::Bytes { .. } => None,
            BlockInner::Buffer { buf, .. } => Some(buf),
        }
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        match &self.0 {
            BlockInner::Bytes { len, .. } => *len,
            BlockInner::Buffer { len, .. } => *len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_fill_the_buffer_and_blocks_read_them_back() {
        let buf = MessageBuffer::new(10);
        buf.region(4, 6).write(b"world!");
        buf.region(0, 4).write(b"hey ");
        assert_eq!(buf.block(4, 6).as_slice(), b"world!");
        assert_eq!(buf.into_bytes(), Bytes::from_static(b"hey world!"));
    }

    #[test]
    fn a_short_write_leaves_the_rest_zeroed() {
        let buf = MessageBuffer::new(4);
        buf.region(0, 4).write(b"ab");
        assert_eq!(&buf.into_bytes()[..], b"ab\0\0");
    }

    #[test]
    fn large_buffers_are_mapped_zeroed_and_work_the_same() {
        let len = HUGE_THRESHOLD + 12_345;
        let buf = MessageBuffer::new(len);
        assert_eq!(
            matches!(buf.backing, Backing::Anonymous),
            cfg!(target_os = "linux")
        );
        buf.region(len - 3, 3).write(b"end");
        buf.region(0, 5).write(b"start");
        assert_eq!(buf.block(len - 3, 3).as_slice(), b"end");
        let bytes = buf.into_bytes();
        assert_eq!(bytes.len(), len);
        assert_eq!(&bytes[..5], b"start");
        assert!(bytes[5..len - 3].iter().all(|&b| b == 0));
        assert_eq!(&bytes[len - 3..], b"end");
    }

    #[test]
    #[should_panic(expected = "receive overrun")]
    fn an_overrun_is_refused() {
        MessageBuffer::new(4).region(0, 2).write(b"abc");
    }

    #[test]
    #[should_panic]
    fn an_out_of_bounds_region_is_refused() {
        let _ = MessageBuffer::new(4).region(3, 2);
    }
}
