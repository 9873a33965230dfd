//! What a schedule may know about the network beyond the group size: the
//! rack of every member and the members known to be slow.
//!
//! A [`Topology`] is part of a group's identity: every member must build it
//! from the same configuration, since every member computes the whole
//! group's layout from it. [`Algorithm::Hybrid`](super::Algorithm::Hybrid)
//! uses the racks; the binomial pipeline and the hybrid use the slow members.

use std::sync::{Arc, OnceLock};

use super::hybrid::Layout;

/// The racks and slow members of a group of `group_size` members, by rank.
///
/// The default, [`Topology::flat`], is one rack and no slow member. Racks are
/// named by any `u32`; members of one rack need not be listed next to each
/// other (a placement service may hand them out interleaved). Cloning is
/// cheap: the derived layouts are computed once and shared.
#[derive(Clone)]
pub struct Topology {
    inner: Arc<Inner>,
}

struct Inner {
    group_size: usize,
    /// Rack of each rank; empty for one rack.
    racks: Vec<u32>,
    /// Slow ranks, sorted, without duplicates.
    slow: Vec<usize>,
    /// Whether the transport completes a send once it buffered it.
    buffered_sends: bool,
    /// The layout of the binomial pipeline: one rack.
    flat_layout: OnceLock<Arc<Layout>>,
    /// The layout of the hybrid: the racks.
    rack_layout: OnceLock<Arc<Layout>>,
}

/// A topology was given with impossible parameters.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// A group needs at least one member.
    #[error("a group needs at least one member")]
    EmptyGroup,
    /// The rack list does not name one rack per member.
    #[error(
        "{racks} racks given for a group of {group_size} members (one per member, in rank order)"
    )]
    RackCount {
        /// Entries in the rack list.
        racks: usize,
        /// The group size.
        group_size: usize,
    },
    /// A slow member is not in the group.
    #[error("slow member {rank} is not in a group of {group_size}")]
    SlowOutOfRange {
        /// The rank given.
        rank: usize,
        /// The group size.
        group_size: usize,
    },
}

impl Topology {
    /// One rack, no slow member.
    pub fn flat(group_size: usize) -> Result<Self, TopologyError> {
        Self::build(group_size, Vec::new(), Vec::new(), false)
    }

    /// Member `r` sits in rack `racks[r]`; one entry per member.
    pub fn with_racks(self, racks: Vec<u32>) -> Result<Self, TopologyError> {
        if racks.len() != self.inner.group_size {
            return Err(TopologyError::RackCount {
                racks: racks.len(),
                group_size: self.inner.group_size,
            });
        }
        Self::build(
            self.inner.group_size,
            racks,
            self.inner.slow.clone(),
            self.inner.buffered_sends,
        )
    }

    /// The members (ranks) known to be slow. The root always sends; a slow
    /// root is treated like any other root.
    pub fn with_slow_members(
        self,
        slow: impl IntoIterator<Item = usize>,
    ) -> Result<Self, TopologyError> {
        let group_size = self.inner.group_size;
        let mut slow: Vec<usize> = slow.into_iter().collect();
        if let Some(&rank) = slow.iter().find(|&&r| r >= group_size) {
            return Err(TopologyError::SlowOutOfRange { rank, group_size });
        }
        slow.sort_unstable();
        slow.dedup();
        Self::build(
            group_size,
            self.inner.racks.clone(),
            slow,
            self.inner.buffered_sends,
        )
    }

    /// Whether the group's transport completes a send once it has buffered
    /// the bytes (TCP's socket buffer) rather than once they have left (RDMA,
    /// the in-memory transport); `false` by default. In one rack it changes
    /// the binomial pipeline (and the hybrid) of a group with slow members
    /// or whose size is not a power of two: buffered sends let a sender run
    /// ahead into its next transfer, which a binomial pipeline whose size is
    /// not a power of two cannot absorb, so the (fast) members then form
    /// pipelines of power-of-two sizes, chained (see
    /// [`Hybrid`](super::Hybrid)). A group's runtime sets it from its
    /// transport, so every member of a group agrees.
    pub fn with_buffered_sends(self, buffered: bool) -> Self {
        Self::build(
            self.inner.group_size,
            self.inner.racks.clone(),
            self.inner.slow.clone(),
            buffered,
        )
        .expect("the same group as before")
    }

    /// Whether the transport completes a send once it buffered it
    /// ([`with_buffered_sends`](Self::with_buffered_sends)).
    pub fn buffered_sends(&self) -> bool {
        self.inner.buffered_sends
    }

    fn build(
        group_size: usize,
        racks: Vec<u32>,
        slow: Vec<usize>,
        buffered_sends: bool,
    ) -> Result<Self, TopologyError> {
        if group_size == 0 {
            return Err(TopologyError::EmptyGroup);
        }
        // One rack named the same for everyone is the flat topology.
        let racks = if racks.windows(2).all(|w| w[0] == w[1]) {
            Vec::new()
        } else {
            racks
        };
        Ok(Topology {
            inner: Arc::new(Inner {
                group_size,
                racks,
                slow,
                buffered_sends,
                flat_layout: OnceLock::new(),
                rack_layout: OnceLock::new(),
            }),
        })
    }

    /// Number of members.
    pub fn group_size(&self) -> usize {
        self.inner.group_size
    }

    /// The rack of each rank, or an empty slice when all share one rack.
    pub fn racks(&self) -> &[u32] {
        &self.inner.racks
    }

    /// The rack of `rank` (0 in a flat topology).
    pub fn rack_of(&self, rank: usize) -> u32 {
        self.inner.racks.get(rank).copied().unwrap_or(0)
    }

    /// The slow members, in rank order.
    pub fn slow_members(&self) -> &[usize] {
        &self.inner.slow
    }

    /// Whether `rank` is known to be slow.
    pub fn is_slow(&self, rank: usize) -> bool {
        self.inner.slow.binary_search(&rank).is_ok()
    }

    /// True for one rack and no slow member.
    pub fn is_flat(&self) -> bool {
        self.inner.racks.is_empty() && self.inner.slow.is_empty()
    }

    /// Whether the binomial pipeline of this group is laid out as the
    /// hybrid's chain ([`Hybrid`](super::Hybrid)) rather than being the plain
    /// one: with a slow member other than the root, or, where sends complete
    /// once buffered, in a group whose size is not a power of two (its
    /// fast members then form pipelines of power-of-two sizes).
    pub(crate) fn lays_out_pipeline(&self) -> bool {
        self.inner.slow.iter().any(|&r| r != 0)
            || (self.inner.buffered_sends && super::hybrid::runs_pay(self.inner.group_size))
    }

    /// The shared layout: racks in chain order if `by_rack`, else one rack.
    pub(crate) fn layout(&self, by_rack: bool) -> Arc<Layout> {
        let cell = if by_rack {
            &self.inner.rack_layout
        } else {
            &self.inner.flat_layout
        };
        cell.get_or_init(|| Arc::new(Layout::new(self, by_rack)))
            .clone()
    }
}

impl PartialEq for Topology {
    fn eq(&self, other: &Self) -> bool {
        self.inner.group_size == other.inner.group_size
            && self.inner.racks == other.inner.racks
            && self.inner.slow == other.inner.slow
            && self.inner.buffered_sends == other.inner.buffered_sends
    }
}

impl Eq for Topology {}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topology")
            .field("group_size", &self.inner.group_size)
            .field("racks", &self.inner.racks)
            .field("slow", &self.inner.slow)
            .field("buffered_sends", &self.inner.buffered_sends)
            .finish()
    }
}
