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

#![allow(unsafe_code)]

use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

/// One heap allocation holding a message, shared by the transfers filling it.
pub(crate) struct MessageBuffer {
    ptr: NonNull<u8>,
    len: usize,
    /// Whether the bytes are an `mmap`ed region (else a boxed slice).
    mapped: bool,
    /// The mapping's length (at least `len`), when `mapped`.
    capacity: usize,
}

/// Buffers at least this large are mapped with huge pages where possible.
const HUGE_THRESHOLD: usize = 4 << 20;

/// Mappings are made in multiples of this (the huge page size).
const MAPPING_UNIT: usize = 2 << 20;

/// At most this many bytes of freed mappings are kept for reuse.
const POOL_BYTES: usize = 512 << 20;

/// At most this many freed mappings are kept for reuse.
const POOL_ENTRIES: usize = 8;

/// Freed mappings kept for the next messages, as (address, capacity).
///
/// Receiving into fresh memory makes the kernel fault in and zero every page
/// first — on this crate's benchmark machine that zeroing took more CPU than
/// the network stack. A message buffer dropped by its user is kept here
/// (bounded by [`POOL_BYTES`] and [`POOL_ENTRIES`]) and handed to the next
/// message that fits, already mapped: the way RDMA stacks reuse registered
/// memory.
static POOL: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

fn pool() -> std::sync::MutexGuard<'static, Vec<(usize, usize)>> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

// SAFETY: the buffer owns its allocation; all access to its bytes goes through
// `RecvRegion::write`/`BlockRef::as_slice`/`into_bytes`, whose contracts make
// concurrent accesses touch disjoint regions (see the module documentation).
unsafe impl Send for MessageBuffer {}
// SAFETY: as for `Send`.
unsafe impl Sync for MessageBuffer {}

impl MessageBuffer {
    /// A zeroed buffer of `len` bytes (large ones come lazily zeroed from the OS).
    pub(crate) fn new(len: usize) -> Arc<Self> {
        if let Some(buffer) = Self::huge(len) {
            return Arc::new(buffer);
        }
        let boxed: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        let ptr = NonNull::new(Box::into_raw(boxed).cast::<u8>()).expect("Box is never null");
        Arc::new(MessageBuffer {
            ptr,
            len,
            mapped: false,
            capacity: len,
        })
    }

    /// A buffer of `len` bytes for a message that receives will fill
    /// completely: its contents are unspecified (a recycled buffer keeps an
    /// earlier message's bytes) until written.
    pub(crate) fn for_message(len: usize) -> Arc<Self> {
        if len >= HUGE_THRESHOLD
            && let Some(buffer) = Self::recycled(len)
        {
            return Arc::new(buffer);
        }
        Self::new(len)
    }

    /// The smallest pooled mapping that holds `len` bytes without wasting
    /// more than half of itself.
    fn recycled(len: usize) -> Option<Self> {
        let mut pool = pool();
        let (index, &(addr, capacity)) = pool
            .iter()
            .enumerate()
            .filter(|(_, (_, cap))| *cap >= len && *cap / 2 <= len)
            .min_by_key(|(_, (_, cap))| *cap)?;
        pool.swap_remove(index);
        Some(MessageBuffer {
            ptr: NonNull::new(addr as *mut u8)?,
            len,
            mapped: true,
            capacity,
        })
    }

    /// A large buffer straight from the kernel, asking for transparent huge
    /// pages: a message's first touch then faults in 2 MiB at a time instead
    /// of 4 KiB, which is most of the cost of receiving into fresh memory.
    #[cfg(target_os = "linux")]
    fn huge(len: usize) -> Option<Self> {
        if len < HUGE_THRESHOLD {
            return None;
        }
        let capacity = len.checked_next_multiple_of(MAPPING_UNIT)?;
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
            return None;
        }
        // SAFETY: `ptr..ptr+capacity` is the mapping just made; the advice
        // is a hint whose failure changes nothing.
        unsafe { libc::madvise(ptr, capacity, libc::MADV_HUGEPAGE) };
        Some(MessageBuffer {
            ptr: NonNull::new(ptr.cast::<u8>())?,
            len,
            mapped: true,
            capacity,
        })
    }

    #[cfg(not(target_os = "linux"))]
    fn huge(_len: usize) -> Option<Self> {
        None
    }

    /// The region `offset..offset + len`, to be filled by one receive.
    ///
    /// # Panics
    /// If the region is out of bounds.
    pub(crate) fn region(self: &Arc<Self>, offset: usize, len: usize) -> RecvRegion {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len));
        RecvRegion {
            buf: Arc::clone(self),
            offset,
            len,
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

    /// The whole buffer as [`Bytes`], without copying. Call only once every
    /// receive into the buffer has completed (no region is written afterwards).
    pub(crate) fn into_bytes(self: Arc<Self>) -> Bytes {
        Bytes::from_owner(Complete(self))
    }
}

impl Drop for MessageBuffer {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if self.mapped {
            let mut pool = pool();
            let pooled: usize = pool.iter().map(|(_, cap)| cap).sum();
            if pool.len() < POOL_ENTRIES && pooled + self.capacity <= POOL_BYTES {
                // No reference into the buffer outlives it: the mapping is
                // free for the next message.
                pool.push((self.ptr.as_ptr() as usize, self.capacity));
                return;
            }
            drop(pool);
            // SAFETY: `ptr`/`capacity` are a mapping made in `huge`, unmapped
            // only here, once (it is not in the pool); no reference into it
            // outlives the buffer.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.capacity) };
            return;
        }
        let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
        // SAFETY: `ptr`/`len` came from `Box::into_raw` of a `Box<[u8]>` of this
        // length in `new`, and are freed only here, once.
        drop(unsafe { Box::from_raw(slice) });
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
}

impl RecvRegion {
    /// Capacity in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
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
    Bytes(Bytes),
    Buffer {
        buf: Arc<MessageBuffer>,
        offset: usize,
        len: usize,
    },
}

impl BlockRef {
    /// A block of the root's message.
    pub(crate) fn from_bytes(bytes: Bytes) -> Self {
        BlockRef(BlockInner::Bytes(bytes))
    }

    /// The block's bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        match &self.0 {
            BlockInner::Bytes(b) => b,
            // SAFETY: in bounds (checked in `MessageBuffer::block`); the region
            // was completely written before this handle was made (a member only
            // forwards received blocks) and is never written again.
            BlockInner::Buffer { buf, offset, len } => unsafe {
                std::slice::from_raw_parts(buf.ptr.as_ptr().add(*offset), *len)
            },
        }
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        match &self.0 {
            BlockInner::Bytes(b) => b.len(),
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
        assert_eq!(buf.mapped, cfg!(target_os = "linux"));
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
    fn dropped_message_buffers_are_reused_for_messages_that_fit() {
        let len = HUGE_THRESHOLD + 777;
        let first = MessageBuffer::for_message(len);
        first.region(0, 4).write(b"old!");
        let addr = first.ptr.as_ptr() as usize;
        drop(first.into_bytes());
        // Other tests run in parallel and may take it first: look for it
        // among a few buffers taken at once.
        let taken: Vec<_> = (0..POOL_ENTRIES + 1)
            .map(|_| MessageBuffer::for_message(len - 100))
            .collect();
        if cfg!(target_os = "linux") {
            let again = taken.iter().find(|b| b.ptr.as_ptr() as usize == addr);
            let again = again.expect("the dropped mapping is reused");
            assert_eq!(again.len, len - 100);
            assert!(again.capacity >= len);
        }
        // Far smaller messages do not take a big mapping.
        drop(taken);
        let small = MessageBuffer::for_message(HUGE_THRESHOLD);
        assert!(small.capacity <= 2 * HUGE_THRESHOLD);
        // Zeroed buffers are always fresh.
        let fresh = MessageBuffer::new(len);
        assert!(fresh.block(0, 4).as_slice() == [0, 0, 0, 0]);
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
