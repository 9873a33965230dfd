//! rdmc-sim: a deterministic, virtual-time simulator of rdmc multicasts at
//! scales no lab reaches (thousands of members), with slow hosts, slow
//! links, jitter and racks behind oversubscribed uplinks.
//!
//! It drives the crate's real sans-IO protocol core — one
//! [`rdmc_proto::GroupMember`] per member, with the real schedules — over
//! a modelled network ([`Network`]): every NIC full duplex at its rate,
//! blocks in flight sharing ports max-min fairly, a latency per link. No
//! threads, no async runtime, no wall clock: the same inputs (and seed)
//! give the same result, bit for bit.
//!
//! The experiments it exists for are the RDMC paper's scale results ("RDMC:
//! A Reliable RDMA Multicast for Large Objects", Behrens, Jha, Birman,
//! Tremel: Fig. 8, a 256 MB object to hundreds of receivers, and the
//! robustness analysis of Sec. 4.5) and the two-level topologies of
//! "Pushing Bytes: Cloud-Scale Data Replication with RDMC".
//!
//! ```
//! use rdmc_proto::Algorithm;
//! use rdmc_sim::{Multicast, Network, simulate};
//!
//! // 64 MiB from the root to 15 receivers on the lab's 250 Mbit/s links,
//! // one receive announced at a time as in the original RDMC.
//! let multicast = Multicast::new(Algorithm::BinomialPipeline, 16, 64 << 20)
//!     .with_ready_window(1);
//! let outcome = simulate(&multicast, &Network::lab())?;
//! // Every receiver has the message within a few percent of one unicast.
//! assert!(outcome.ratio_to_unicast() < 1.05);
//! assert_eq!(outcome.receivers().len(), 15);
//! # Ok::<(), rdmc_sim::SimError>(())
//! ```
//!
//! Where the model is simpler than a real network: control messages take
//! the latency but no bandwidth (over TCP a ready-for-block can queue
//! behind bulk data), a host's CPU is never the bottleneck, and a flow gets
//! its fair share at once (no slow start, no queues filling up).

#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]
#![deny(unsafe_code)]

mod engine;
mod error;
mod fabric;
mod network;
mod outcome;
pub mod stats;

pub use error::SimError;
pub use network::{LAB_LATENCY, LAB_RATE_BPS, Network, Placement, Racks, SlowHost, SlowLink};
pub use outcome::Outcome;

use rdmc_proto::schedule::{Algorithm, BlockSize, NodeSchedule, Topology};
use rdmc_proto::{Announce, MemberConfig, READY_WINDOW};

/// One multicast to simulate: an algorithm, a group and one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Multicast {
    /// The multicast algorithm every member runs.
    pub algorithm: Algorithm,
    /// Group size, the root included (member `r` runs on host `r`).
    pub nodes: usize,
    /// Message size in bytes.
    pub size: u64,
    /// How the message is cut into blocks (by default the library's
    /// automatic choice, as a group created with default settings).
    pub block_size: BlockSize,
    /// Most receives a member keeps posted and announced ahead, `1..=`
    /// [`READY_WINDOW`] (the default, what the library's groups use): the
    /// members' own ready window (`MemberConfig::ready_window`). 1 is the
    /// original RDMC's one receive posted at a time.
    pub ready_window: usize,
    /// The racks (and slow members) the schedule is told of, as a group
    /// configured with `GroupConfig::with_racks` / `with_slow_members`: what
    /// the hybrid schedule places blocks by. `None`: one rack.
    pub topology: Option<Topology>,
    /// Announce the next sender's receive once the current block has at
    /// most this many bytes left to arrive (the library's early
    /// announcement over TCP, `MemberConfig::early_announce`): receivers
    /// then take blocks from one sender at a time, except for those last
    /// bytes. `None`: as the library's transports do without it (one
    /// sender at a time without a send buffer, any sender with one).
    pub early_announce: Option<u64>,
}

impl Multicast {
    /// A `size`-byte message to `nodes` members with `algorithm`, in the
    /// library's automatic block size.
    pub fn new(algorithm: Algorithm, nodes: usize, size: u64) -> Self {
        Multicast {
            algorithm,
            nodes,
            size,
            block_size: BlockSize::AUTOMATIC,
            ready_window: READY_WINDOW,
            topology: None,
            early_announce: None,
        }
    }

    /// The same with a fixed block size in bytes.
    pub fn with_block_size(self, bytes: usize) -> Self {
        Multicast {
            block_size: BlockSize::Fixed(bytes),
            ..self
        }
    }

    /// The same with at most `window` ready-for-blocks outstanding per
    /// receiver (see [`Multicast::ready_window`]).
    pub fn with_ready_window(self, window: usize) -> Self {
        Multicast {
            ready_window: window,
            ..self
        }
    }

    /// The same with the schedule told of `topology` (see
    /// [`Multicast::topology`]).
    pub fn with_topology(self, topology: Topology) -> Self {
        Multicast {
            topology: Some(topology),
            ..self
        }
    }

    /// The same with early announcement at `bytes` (see
    /// [`Multicast::early_announce`]).
    pub fn with_early_announce(self, bytes: Option<u64>) -> Self {
        Multicast {
            early_announce: bytes,
            ..self
        }
    }

    /// The block size the message is cut into, in bytes.
    pub fn block_bytes(&self) -> Result<usize, SimError> {
        let schedule = match &self.topology {
            Some(topology) => NodeSchedule::with_topology(self.algorithm, topology, 0)?,
            None => NodeSchedule::new(self.algorithm, self.nodes, 0)?,
        };
        let buffered = self.topology.as_ref().is_some_and(|t| t.buffered_sends());
        Ok(self
            .block_size
            .for_message_over(&schedule, self.size, buffered))
    }

    /// The protocol configuration of member `rank`: no message size limit,
    /// no receive window, no progress timeout (virtual time never stalls);
    /// receives announced as the library's transports do: to one sender at
    /// a time where a send completes when its bytes have left (no send
    /// buffer), to any sender where it completes once buffered (TCP).
    fn member_config(&self, rank: usize, network: &Network) -> MemberConfig {
        MemberConfig::new(self.algorithm, self.nodes, rank, self.block_size)
            .with_topology(self.topology.clone())
            .with_early_announce(self.early_announce)
            .with_ready_window(self.ready_window)
            .with_announce(
                if network.send_buffer == 0 || self.early_announce.is_some() {
                    Announce::OneSender
                } else {
                    Announce::AnySender
                },
            )
    }
}

/// Simulate `multicast` on `network`: every member is created, arms for
/// the first message, and (once nothing is in flight) the root sends the
/// message at time 0; the run ends when every member completed it, and the
/// group is then closed, which must succeed at every member.
///
/// Errors: a network or group that makes no sense ([`SimError::BadRate`],
/// [`SimError::NoSuchHost`], ...), and — never expected — a protocol that
/// breaks the transport contract, fails or deadlocks.
pub fn simulate(multicast: &Multicast, network: &Network) -> Result<Outcome, SimError> {
    if multicast.block_size.largest() == 0
        || matches!(multicast.block_size, BlockSize::Automatic { min: 0, .. })
    {
        return Err(SimError::ZeroBlockSize);
    }
    if !(1..=READY_WINDOW).contains(&multicast.ready_window) {
        return Err(SimError::BadReadyWindow {
            window: multicast.ready_window,
        });
    }
    let block_size = multicast.block_bytes()?;
    let mut engine =
        engine::Engine::new(multicast.nodes, multicast.early_announce, network, |rank| {
            multicast.member_config(rank, network)
        })?;
    let start = engine.now();
    engine.multicast(multicast.size)?;
    let events = engine.events;
    let most_inbound = engine.most_inbound;
    let most_overlap = engine.most_overlap;
    let (completed, last_block) = engine
        .times()
        .map(|(c, l)| (c - start, (l - start).max(0.0)))
        .unzip();
    engine.close()?;
    Ok(Outcome {
        algorithm: multicast.algorithm,
        nodes: multicast.nodes,
        size: multicast.size,
        block_size,
        completed,
        last_block,
        unicast: network.unicast_seconds(multicast.size),
        events,
        most_inbound,
        most_overlap,
    })
}
