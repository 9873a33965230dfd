//! The protocol core driven whole: a deterministic harness of many members
//! over modelled links ([`harness`]), and the tests it drives, with the
//! crate's internals (its tuning constants) in reach.

mod announce;
mod cluster;
mod delivery;
mod harness;
mod members;
mod rendezvous;
mod reports;

use crate::schedule::{Algorithm, BlockSize};
use crate::{Action, GroupMember, MemberConfig, Rank};

/// The algorithms the tests run over: all of them.
const ALGORITHMS: &[Algorithm] = &Algorithm::ALL;

/// Member `rank` of a group of `group_size` running `algorithm` in 4-byte
/// blocks, messages up to 1000 bytes, announcing one sender at a time.
fn config(algorithm: Algorithm, group_size: usize, rank: Rank) -> MemberConfig {
    MemberConfig::new(algorithm, group_size, rank, BlockSize::Fixed(4))
        .with_max_message_size(1000)
        .with_announce(crate::Announce::OneSender)
}

/// Every action `member` has for its driver now.
fn actions(member: &mut GroupMember) -> Vec<Action> {
    std::iter::from_fn(|| member.poll_action()).collect()
}
