//! The result of one simulated multicast.

use rdmc_proto::schedule::Algorithm;

/// What one simulated multicast took, member by member.
///
/// Times are seconds of virtual time from the root's send.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The algorithm simulated.
    pub algorithm: Algorithm,
    /// Group size, the root included.
    pub nodes: usize,
    /// Message size, bytes.
    pub size: u64,
    /// The block size the message was cut into, bytes.
    pub block_size: usize,
    /// By rank: when the message was complete there — a receiver delivers
    /// it then (every block arrived and every block it relays was sent);
    /// for the root (rank 0), when its last send completed.
    pub completed: Vec<f64>,
    /// By rank: when the last block arrived there (0 for the root).
    pub last_block: Vec<f64>,
    /// The ideal unicast time of the message between two full-rate hosts
    /// (see [`Network::unicast_seconds`](crate::Network::unicast_seconds)).
    pub unicast: f64,
    /// Events the simulation processed.
    pub events: u64,
    /// Most blocks on the wire to one member at the same time, over the
    /// message (not the close): 1 when no member ever received two blocks
    /// at once (shared its port between two senders), 0 without blocks.
    pub most_inbound: usize,
    /// Most bytes a block on the wire to a member still had to leave its
    /// sender when another block to that member started (0 when no member
    /// ever received two blocks at once): with early announcement and no
    /// send buffer, at most the threshold.
    pub most_overlap: f64,
}

impl Outcome {
    /// The receivers' completion times (ranks 1..n).
    pub fn receivers(&self) -> &[f64] {
        self.completed.get(1..).unwrap_or(&[])
    }

    /// The whole multicast: when the last member completed.
    pub fn time(&self) -> f64 {
        self.completed.iter().copied().fold(0.0, f64::max)
    }

    /// The first receiver's completion (0 without receivers).
    pub fn min(&self) -> f64 {
        self.sorted_receivers().first().copied().unwrap_or(0.0)
    }

    /// The median receiver's completion (the mean of the middle two for an
    /// even count; 0 without receivers).
    pub fn median(&self) -> f64 {
        match self.receivers() {
            [] => 0.0,
            receivers => crate::stats::median(receivers),
        }
    }

    /// The last receiver's completion (0 without receivers).
    pub fn max(&self) -> f64 {
        self.receivers().iter().copied().fold(0.0, f64::max)
    }

    /// The last receiver's completion ÷ one unicast: 1.0 is the physical
    /// limit for full-rate receivers.
    pub fn ratio_to_unicast(&self) -> f64 {
        self.max() / self.unicast
    }

    /// Number of blocks the message was cut into.
    pub fn blocks(&self) -> usize {
        rdmc_proto::block_count(self.size, self.block_size)
    }

    fn sorted_receivers(&self) -> Vec<f64> {
        let mut sorted = self.receivers().to_vec();
        sorted.sort_by(f64::total_cmp);
        sorted
    }
}
