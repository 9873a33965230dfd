//! What can go wrong in a simulation.

use rdmc_proto::schedule::ScheduleError;

/// A simulation could not run, or the protocol misbehaved in it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// The group's schedule cannot be built (an empty group).
    #[error("no schedule for this group: {0}")]
    Schedule(#[from] ScheduleError),
    /// A rate is zero, negative or not a number.
    #[error("the {what} rate must be positive, got {bps} bit/s")]
    BadRate {
        /// Which rate.
        what: &'static str,
        /// The rate given, bits per second.
        bps: f64,
    },
    /// A slowdown factor is zero, negative or not a number.
    #[error("a slowdown factor must be positive, got {factor}")]
    BadFactor {
        /// The factor given.
        factor: f64,
    },
    /// A slow host or link names a host outside the group.
    #[error("host {host} does not exist (the group has hosts 0..{hosts})")]
    NoSuchHost {
        /// The host named.
        host: usize,
        /// Number of hosts.
        hosts: usize,
    },
    /// A slow link joins a host to itself.
    #[error("a link joins two different hosts, not host {host} to itself")]
    LinkToItself {
        /// The host named twice.
        host: usize,
    },
    /// A rack topology with no racks.
    #[error("a rack topology needs at least one rack")]
    NoRacks,
    /// The block size is zero.
    #[error("the block size must be at least 1 byte")]
    ZeroBlockSize,
    /// The ready window is outside `1..=READY_WINDOW`.
    #[error("the ready window must be 1..={max}, got {window}", max = rdmc_proto::READY_WINDOW)]
    BadReadyWindow {
        /// The window asked for.
        window: usize,
    },
    /// A member asked the network for something the transport contract
    /// forbids (a block sent with no receive posted for it, or into the
    /// wrong one): a bug in the protocol core or the simulator.
    #[error("rank {rank} broke the transport contract: {detail}")]
    Contract {
        /// The member that sent.
        rank: usize,
        /// What was wrong.
        detail: String,
    },
    /// A member reported the group failed.
    #[error("rank {rank} failed the group: {failure}")]
    Failed {
        /// The member reporting.
        rank: usize,
        /// Its failure, as it describes it.
        failure: String,
    },
    /// Nothing was left to happen, yet some members had not completed the
    /// message (or the close): the protocol deadlocked.
    #[error(
        "the simulation stalled: {incomplete} members never finished {phase}, rank {first} first"
    )]
    Stalled {
        /// The phase: "the message" or "the close".
        phase: &'static str,
        /// How many members did not finish.
        incomplete: usize,
        /// The lowest such rank.
        first: usize,
    },
}
