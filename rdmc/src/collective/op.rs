//! Reduction operators over byte buffers of numbers.

use std::fmt;
use std::sync::Arc;

/// The element type of a buffer reduced by a built-in [`ReduceOp`].
///
/// Elements are read and written in the host's byte order: every member
/// must share it.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// `i32`.
    I32,
    /// `i64`.
    I64,
    /// `u32`.
    U32,
    /// `u64`.
    U64,
}

impl DType {
    /// The size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Builtin {
    Sum,
    Min,
    Max,
}

/// A custom reduction: `f(accumulator, incoming)` combines `incoming` into
/// `accumulator`; both have the same length, a multiple of the element size.
pub type CustomReduce = dyn Fn(&mut [u8], &[u8]) + Send + Sync;

/// How an allreduce combines the members' buffers, element by element.
///
/// Integer sums wrap on overflow; float `min`/`max` follow
/// [`f32::min`]/[`f32::max`] (a NaN loses to a number). The members'
/// buffers are combined in a fixed order — each tree node's own buffer,
/// then its children's subtrees in rank order — so a run is
/// deterministic, and an operator that is not associative or commutative
/// (a float sum) gives the same bits on every member.
#[derive(Clone)]
pub struct ReduceOp {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    Builtin(Builtin, DType),
    Custom {
        element: usize,
        f: Arc<CustomReduce>,
    },
}

impl fmt::Debug for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Builtin(op, dtype) => write!(f, "ReduceOp::{op:?}({dtype:?})"),
            Inner::Custom { element, .. } => write!(f, "ReduceOp::Custom(element = {element})"),
        }
    }
}

macro_rules! combine {
    ($acc:expr, $inc:expr, $t:ty, $f:expr) => {{
        const N: usize = std::mem::size_of::<$t>();
        for (a, b) in $acc.chunks_exact_mut(N).zip($inc.chunks_exact(N)) {
            let x = <$t>::from_ne_bytes(a.try_into().expect("element"));
            let y = <$t>::from_ne_bytes(b.try_into().expect("element"));
            let f: fn($t, $t) -> $t = $f;
            a.copy_from_slice(&f(x, y).to_ne_bytes());
        }
    }};
}

macro_rules! by_op {
    ($op:expr, $acc:expr, $inc:expr, $t:ty, int) => {
        match $op {
            Builtin::Sum => combine!($acc, $inc, $t, |x, y| x.wrapping_add(y)),
            Builtin::Min => combine!($acc, $inc, $t, |x, y| x.min(y)),
            Builtin::Max => combine!($acc, $inc, $t, |x, y| x.max(y)),
        }
    };
    ($op:expr, $acc:expr, $inc:expr, $t:ty, float) => {
        match $op {
            Builtin::Sum => combine!($acc, $inc, $t, |x, y| x + y),
            Builtin::Min => combine!($acc, $inc, $t, |x, y| x.min(y)),
            Builtin::Max => combine!($acc, $inc, $t, |x, y| x.max(y)),
        }
    };
}

impl ReduceOp {
    /// Element-wise sum.
    pub fn sum(dtype: DType) -> Self {
        ReduceOp {
            inner: Inner::Builtin(Builtin::Sum, dtype),
        }
    }

    /// Element-wise minimum.
    pub fn min(dtype: DType) -> Self {
        ReduceOp {
            inner: Inner::Builtin(Builtin::Min, dtype),
        }
    }

    /// Element-wise maximum.
    pub fn max(dtype: DType) -> Self {
        ReduceOp {
            inner: Inner::Builtin(Builtin::Max, dtype),
        }
    }

    /// A custom operator on elements of `element` bytes (at least 1):
    /// `f(accumulator, incoming)`. Buffers are cut into chunks on element
    /// boundaries, so `f` sees whole elements.
    ///
    /// # Panics
    /// If `element` is 0.
    pub fn custom(element: usize, f: impl Fn(&mut [u8], &[u8]) + Send + Sync + 'static) -> Self {
        assert!(
            element > 0,
            "a reduction's element size must be at least 1 byte"
        );
        ReduceOp {
            inner: Inner::Custom {
                element,
                f: Arc::new(f),
            },
        }
    }

    /// The size of one element in bytes: a buffer's length must be a
    /// multiple of it.
    pub fn element_size(&self) -> usize {
        match &self.inner {
            Inner::Builtin(_, dtype) => dtype.size(),
            Inner::Custom { element, .. } => *element,
        }
    }

    /// Combine `incoming` into `accumulator`, element by element.
    ///
    /// # Panics
    /// If the lengths differ or are not a multiple of the element size.
    pub fn apply(&self, accumulator: &mut [u8], incoming: &[u8]) {
        assert_eq!(
            accumulator.len(),
            incoming.len(),
            "reduce of unequal lengths"
        );
        assert_eq!(
            accumulator.len() % self.element_size(),
            0,
            "partial element"
        );
        match &self.inner {
            Inner::Builtin(op, dtype) => match dtype {
                DType::F32 => by_op!(op, accumulator, incoming, f32, float),
                DType::F64 => by_op!(op, accumulator, incoming, f64, float),
                DType::I32 => by_op!(op, accumulator, incoming, i32, int),
                DType::I64 => by_op!(op, accumulator, incoming, i64, int),
                DType::U32 => by_op!(op, accumulator, incoming, u32, int),
                DType::U64 => by_op!(op, accumulator, incoming, u64, int),
            },
            Inner::Custom { f, .. } => f(accumulator, incoming),
        }
    }
}
