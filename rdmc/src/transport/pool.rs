//! A node's pool of message buffers, used by every transport through
//! [`Transport::alloc_buffer`](super::Transport::alloc_buffer).
//!
//! Receiving into fresh memory makes the kernel fault in and zero every page
//! first, which can cost more CPU than the network stack. So a message
//! buffer the application drops (with the last [`Message`](crate::Message)
//! holding it) goes back to its node's pool, and the next message of a size
//! in the same class reuses it, already mapped. A transport that registers
//! memory with its NIC (`ofi`) stores the registration in the buffer
//! ([`MessageBuffer::registration`]); the pool keeps it with the memory, so
//! a stream of messages is registered (on hardware: pinned) once, not per
//! message.
//!
//! Sizes are rounded up to a class: a power of two up to 2 MiB, a multiple
//! of 2 MiB above (the huge-page size large buffers are mapped with). The
//! pool keeps at most its budget of bytes; a buffer dropped beyond it is
//! freed (and deregistered). Buffers still in use when the pool's node is
//! gone are freed when dropped.

use std::sync::{Arc, Mutex};

use super::buffer::{AllocError, Home, MAPPING_UNIT, MessageBuffer, Spare};
use crate::collections::HashMap;

/// Default most bytes of spare buffers a node keeps.
pub(crate) const DEFAULT_BUDGET: usize = 512 << 20;

/// Below this, buffers are not pooled (fresh ones are cheap).
const MIN_POOLED: usize = 4096;

/// A node's pool of spare message buffers. Cloning gives another handle to
/// the same pool.
#[derive(Clone, Debug)]
pub(crate) struct BufferPool {
    spares: Arc<Spares>,
}

/// The spare buffers of a pool, by capacity, within its budget. Dropped
/// buffers find their way back here through a weak reference.
#[derive(Debug)]
struct Spares {
    budget: usize,
    state: Mutex<SparesState>,
}

#[derive(Debug, Default)]
struct SparesState {
    /// Bytes held in `by_capacity`.
    held: usize,
    by_capacity: HashMap<usize, Vec<Spare>>,
}

/// The capacity a pooled buffer of `len` bytes is allocated with.
fn class(len: usize) -> usize {
    if len <= MAPPING_UNIT {
        len.next_power_of_two()
    } else {
        len.div_ceil(MAPPING_UNIT).saturating_mul(MAPPING_UNIT)
    }
}

impl BufferPool {
    /// A pool keeping at most `budget` bytes of spare buffers (0: none).
    pub(crate) fn new(budget: usize) -> Self {
        BufferPool {
            spares: Arc::new(Spares {
                budget,
                state: Mutex::new(SparesState::default()),
            }),
        }
    }

    /// A buffer of `len` bytes for a message that receives will fill
    /// completely: a spare of its class (whose bytes are an earlier
    /// message's until written), or a new one that comes back here when
    /// dropped. An error if new memory is needed and cannot be had.
    pub(crate) fn try_alloc(&self, len: usize) -> Result<Arc<MessageBuffer>, AllocError> {
        if len < MIN_POOLED || self.spares.budget == 0 {
            return MessageBuffer::try_new(len);
        }
        let capacity = class(len);
        let spare = self.spares.take(capacity);
        if spare.is_none() {
            tracing::debug!(capacity, "no spare buffer: mapping fresh memory");
        }
        let home: std::sync::Weak<dyn Home> = Arc::downgrade(&self.spares) as _;
        MessageBuffer::pooled(spare, len, capacity, home)
    }

    /// [`try_alloc`](Self::try_alloc), for tests whose buffers fit.
    #[cfg(test)]
    pub(crate) fn alloc(&self, len: usize) -> Arc<MessageBuffer> {
        self.try_alloc(len).expect("test buffers fit in memory")
    }

    /// Bytes held in spares.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.spares.lock().held
    }
}

impl Spares {
    fn lock(&self) -> std::sync::MutexGuard<'_, SparesState> {
        // A panic while holding the lock leaves plain data behind.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A spare of exactly `capacity` bytes, if there is one.
    fn take(&self, capacity: usize) -> Option<Spare> {
        let mut state = self.lock();
        let spare = state.by_capacity.get_mut(&capacity).and_then(Vec::pop)?;
        state.held -= capacity;
        Some(spare)
    }
}

impl Home for Spares {
    /// Keep `spare` (memory and registration) for reuse, or free it if the
    /// budget is spent.
    fn take_back(&self, spare: Spare) {
        let capacity = spare.capacity();
        let mut state = self.lock();
        if state.held.saturating_add(capacity) > self.budget {
            drop(state);
            tracing::debug!(capacity, "pool full: freeing a buffer");
            drop(spare); // freed (and deregistered)
            return;
        }
        state.held += capacity;
        state.by_capacity.entry(capacity).or_default().push(spare);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::buffer::HUGE_THRESHOLD;

    #[test]
    fn classes_round_up() {
        assert_eq!(class(4096), 4096);
        assert_eq!(class(5000), 8192);
        assert_eq!(class(2 << 20), 2 << 20);
        assert_eq!(class((2 << 20) + 1), 4 << 20);
        assert_eq!(class((256 << 20) - 7), 256 << 20);
    }

    #[test]
    fn buffers_are_reused_within_the_budget() {
        let pool = BufferPool::new(3 << 20);
        let a = pool.alloc(1 << 20);
        let ptr = a.as_ptr();
        drop(a);
        assert_eq!(pool.held(), 1 << 20);
        let b = pool.alloc((1 << 20) - 100);
        assert_eq!(b.as_ptr(), ptr, "the spare of the same class is reused");
        assert_eq!(pool.held(), 0);
        // Over budget: freed, not kept.
        let big = pool.alloc(4 << 20);
        drop(big);
        assert_eq!(pool.held(), 0);
        drop(b);
        assert_eq!(pool.held(), 1 << 20);
        // Small buffers are not pooled.
        drop(pool.alloc(100));
        assert_eq!(pool.held(), 1 << 20);
    }

    #[test]
    fn dropped_message_buffers_are_reused_for_messages_that_fit() {
        let pool = BufferPool::new(DEFAULT_BUDGET);
        let len = HUGE_THRESHOLD + 777;
        let first = pool.alloc(len);
        first.region(0, 4).write(b"old!");
        let addr = first.as_ptr();
        // The application drops the message: the buffer goes back.
        drop(first.into_bytes());
        let again = pool.alloc(len - 100);
        assert_eq!(again.as_ptr(), addr, "the dropped mapping is reused");
        assert!(again.capacity() >= len);
        // Recycled, not zeroed: the bytes are the last message's until
        // written.
        assert_eq!(again.block(0, 4).as_slice(), b"old!");
        assert_eq!(again.into_bytes().len(), len - 100);
        // Far smaller messages do not take a big mapping.
        let small = pool.alloc(HUGE_THRESHOLD);
        assert!(small.capacity() <= 2 * HUGE_THRESHOLD);
        assert_ne!(small.as_ptr(), addr);
        // Zeroed buffers are always fresh.
        let fresh = MessageBuffer::new(len);
        assert!(fresh.block(0, 4).as_slice() == [0, 0, 0, 0]);
    }

    #[test]
    fn a_zero_budget_keeps_nothing() {
        let pool = BufferPool::new(0);
        let a = pool.alloc(1 << 20);
        assert_eq!(a.capacity(), 1 << 20);
        drop(a);
        assert_eq!(pool.held(), 0);
    }

    #[test]
    fn dropped_pooled_buffers_come_back_with_their_registration() {
        for len in [HUGE_THRESHOLD + 5, 5000] {
            let pool = BufferPool::new(DEFAULT_BUDGET);
            let buf = pool.alloc(len);
            // Large buffers are mapped in whole huge pages.
            assert!(buf.capacity() >= len);
            assert_eq!(buf.capacity(), class(len));
            let capacity = buf.capacity();
            buf.registration().set(Box::new(42u32)).unwrap();
            buf.region(0, 5).write(b"hello");
            let ptr = buf.as_ptr();
            let bytes = buf.into_bytes();
            assert_eq!(bytes.len(), len);
            drop(bytes);
            // Back in the pool, registration included; reused as is.
            assert_eq!(pool.held(), capacity);
            let again = pool.alloc(len - 1);
            assert_eq!(again.as_ptr(), ptr);
            assert_eq!(again.capacity(), capacity);
            assert_eq!(
                again.registration().get().unwrap().downcast_ref::<u32>(),
                Some(&42)
            );
            assert_eq!(again.block(0, 5).as_slice(), b"hello");
            assert_eq!(again.clone().into_bytes().len(), len - 1);
            drop(again);
            assert_eq!(pool.held(), capacity);
        }
        // With the pool gone, a pooled buffer is simply freed (and its
        // registration dropped).
        let pool = BufferPool::new(DEFAULT_BUDGET);
        let orphan = pool.alloc(5000);
        orphan.registration().set(Box::new(7u32)).unwrap();
        drop(pool);
        drop(orphan);
    }

    #[test]
    fn registrations_are_dropped_with_memory_the_budget_frees() {
        struct Counted(Arc<std::sync::atomic::AtomicUsize>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let pool = BufferPool::new(8192);
        let (a, b) = (pool.alloc(8192), pool.alloc(8192));
        for buf in [&a, &b] {
            let reg = Box::new(Counted(Arc::clone(&dropped)));
            assert!(buf.registration().set(reg).is_ok());
        }
        drop(a); // kept, registered
        assert_eq!(dropped.load(std::sync::atomic::Ordering::SeqCst), 0);
        drop(b); // over budget: freed and deregistered
        assert_eq!(dropped.load(std::sync::atomic::Ordering::SeqCst), 1);
        drop(pool); // the spare goes too
        assert_eq!(dropped.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    /// What the pool does to a buffer, in a generated sequence.
    #[derive(Clone, Debug)]
    enum Step {
        Alloc(usize),
        Drop(usize),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            (0usize..(6 << 20)).prop_map(Step::Alloc),
            (0usize..(64 << 10)).prop_map(Step::Alloc),
            any::<usize>().prop_map(Step::Drop),
        ]
    }

    proptest::proptest! {
        /// Against a model of its spares, the pool keeps exactly what fits
        /// its budget, hands out buffers of their class, and reuses a
        /// spare of the class whenever it has one.
        #[test]
        fn the_pool_keeps_what_fits_its_budget(
            budget in 0usize..(16 << 20),
            steps in proptest::collection::vec(step(), 1..40),
        ) {
            let pool = BufferPool::new(budget);
            let mut live: Vec<(Arc<MessageBuffer>, bool)> = Vec::new();
            // The model: capacities of the spares (as addresses), bytes held.
            let mut spares: Vec<(usize, *mut u8)> = Vec::new();
            for step in steps {
                match step {
                    Step::Alloc(len) => {
                        let buf = pool.alloc(len);
                        let pooled = len >= MIN_POOLED && budget > 0;
                        if pooled {
                            proptest::prop_assert_eq!(buf.capacity(), class(len));
                            if let Some(i) = spares.iter().position(|s| s.0 == class(len)) {
                                let reused = spares.iter().any(|s| s.1 == buf.as_ptr());
                                proptest::prop_assert!(reused, "a spare of the class is reused");
                                let at = spares.iter().position(|s| s.1 == buf.as_ptr());
                                spares.swap_remove(at.unwrap_or(i));
                            }
                        } else {
                            proptest::prop_assert!(buf.capacity() >= len);
                        }
                        live.push((buf, pooled));
                    }
                    Step::Drop(i) if !live.is_empty() => {
                        let (buf, pooled) = live.swap_remove(i % live.len());
                        let (capacity, ptr) = (buf.capacity(), buf.as_ptr());
                        drop(buf);
                        let held: usize = spares.iter().map(|s| s.0).sum();
                        if pooled && held + capacity <= budget {
                            spares.push((capacity, ptr));
                        }
                    }
                    Step::Drop(_) => {}
                }
                let held: usize = spares.iter().map(|s| s.0).sum();
                proptest::prop_assert_eq!(pool.held(), held);
                proptest::prop_assert!(held <= budget);
            }
        }
    }
}
