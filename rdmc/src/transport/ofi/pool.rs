//! The node's pool of registered receive buffers: a message's buffer,
//! registered when its first receive was posted, goes back here when the
//! application drops the message, and the next message of a size in the
//! same class reuses it — memory and registration — so a stream of large
//! messages is registered (on hardware: pinned) once, not per message.
//!
//! Sizes are rounded up to a class: a power of two up to 2 MiB, a multiple
//! of 2 MiB above (the huge-page size the buffers are mapped with). The
//! pool keeps at most its budget of bytes; what does not fit is freed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::transport::MessageBuffer;
use crate::transport::buffer::{Recycle, Spare};

/// Below this, buffers are not pooled (registration is cheap for them).
const MIN_POOLED: usize = 4096;
/// Large classes are multiples of this.
const LARGE_STEP: usize = 2 << 20;

/// A node's pool of spare registered buffers.
#[derive(Debug)]
pub(crate) struct BufferPool {
    budget: usize,
    state: Mutex<PoolState>,
}

#[derive(Debug, Default)]
struct PoolState {
    held: usize,
    spares: HashMap<usize, Vec<Spare>>,
}

/// The capacity a buffer of `len` bytes is allocated with.
pub(crate) fn class(len: usize) -> usize {
    if len <= LARGE_STEP {
        len.next_power_of_two()
    } else {
        len.div_ceil(LARGE_STEP).saturating_mul(LARGE_STEP)
    }
}

impl BufferPool {
    /// A pool keeping at most `budget` bytes of spare buffers.
    pub(crate) fn new(budget: usize) -> Arc<Self> {
        Arc::new(BufferPool {
            budget,
            state: Mutex::new(PoolState::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A buffer of `len` bytes: a spare of its class, or a new one that
    /// comes back here when dropped.
    pub(crate) fn alloc(self: &Arc<Self>, len: usize) -> Arc<MessageBuffer> {
        if len < MIN_POOLED || self.budget == 0 {
            return MessageBuffer::new(len);
        }
        let capacity = class(len);
        let spare = {
            let mut state = self.lock();
            let spare = state.spares.get_mut(&capacity).and_then(Vec::pop);
            if spare.is_some() {
                state.held -= capacity;
            }
            spare
        };
        let me: Arc<dyn Recycle> = self.clone();
        MessageBuffer::pooled(spare, len, capacity, Arc::downgrade(&me))
    }

    /// Bytes held in spares.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.lock().held
    }
}

impl Recycle for BufferPool {
    fn recycle(&self, spare: Spare) {
        let capacity = spare.capacity();
        let mut state = self.lock();
        if state.held.saturating_add(capacity) > self.budget {
            drop(state);
            drop(spare); // freed (and deregistered)
            return;
        }
        state.held += capacity;
        state.spares.entry(capacity).or_default().push(spare);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
