//! How a group's signals travel when nodes connect on demand
//! ([`Connections::OnDemand`](crate::Connections::OnDemand)): straight to
//! the members this one exchanges blocks with and to its neighbours in the
//! group's *relay tree*, hop by hop along that tree to every other member.
//!
//! The relay tree is the binomial tree over the group's ranks: the parent
//! of rank r > 0 is r with its highest set bit cleared. Every member
//! derives it from the member list alone, so both ends of an edge want the
//! connection; a member has at most ⌈log₂ n⌉ + 1 tree neighbours, and a
//! path between two members is at most 2⌈log₂ n⌉ hops. For a binomial
//! pipeline over a power of two its edges are edges of the schedule too:
//! no connection is added for it.
//!
//! A signal's route is fixed per (group, sender, receiver), so signals
//! between two members stay in order, as the rendezvous needs — but for
//! one change: once the first hop of a route is gone (a member that
//! crashed), signals to that member go straight from then on.

use std::collections::BTreeSet;

use crate::collections::HashMap;
use crate::ids::NodeId;
use crate::transport::frame::relay::Route;

/// Rank `rank`'s parent in the relay tree (rank 0 has none).
fn parent(rank: usize) -> Option<usize> {
    (rank > 0).then(|| rank & !(1 << (usize::BITS - 1 - rank.leading_zeros())))
}

/// Rank `rank`'s neighbours in the relay tree of a group of `size`.
pub(crate) fn tree_neighbours(rank: usize, size: usize) -> Vec<usize> {
    let children = (0..usize::BITS)
        .map(|k| 1usize << k)
        .skip_while(|&bit| rank != 0 && bit <= rank)
        .map_while(|bit| rank.checked_add(bit).filter(|&c| c < size));
    parent(rank).into_iter().chain(children).collect()
}

/// The ranks from `from` to `to` along the relay tree, both included.
pub(crate) fn tree_path(from: usize, to: usize) -> Vec<usize> {
    if from == to {
        return vec![from];
    }
    // The lowest common ancestor: the bits below the lowest one the two
    // ranks differ in (every ancestor of r is r with its high bits cleared).
    let ancestor = from & ((1usize << (from ^ to).trailing_zeros()) - 1);
    let climb = |mut r: usize| {
        let mut up = vec![r];
        while r != ancestor {
            r = parent(r).expect("the ancestor is above");
            up.push(r);
        }
        up
    };
    let mut path = climb(from);
    let mut down = climb(to);
    down.pop();
    path.extend(down.into_iter().rev());
    path
}

/// One group's routes, as this node (at `rank`) sends them.
#[derive(Debug)]
pub(crate) struct GroupRoute {
    members: Vec<NodeId>,
    rank: usize,
    rank_of: HashMap<NodeId, usize>,
    /// The members this node sends to straight: its schedule's partners
    /// and its relay-tree neighbours.
    direct: BTreeSet<NodeId>,
    /// The members this node's signals go to straight because the first
    /// hop of their route was gone ([`detour`](Self::detour)).
    detours: BTreeSet<NodeId>,
}

impl GroupRoute {
    /// The routes of a group of `members` (rank order), this node at
    /// `rank`, exchanging blocks with the ranks `partners`.
    pub(crate) fn new(members: &[NodeId], rank: usize, partners: &[usize]) -> Self {
        let direct = partners
            .iter()
            .copied()
            .chain(tree_neighbours(rank, members.len()))
            .filter_map(|r| members.get(r).copied())
            .collect();
        GroupRoute {
            members: members.to_vec(),
            rank,
            rank_of: members.iter().enumerate().map(|(r, &n)| (n, r)).collect(),
            direct,
            detours: BTreeSet::new(),
        }
    }

    /// From now on, signals to `to` go straight: the first hop of its
    /// route is gone (a member that crashed, say). Every later signal to
    /// `to` takes the same way, so they stay in order.
    pub(crate) fn detour(&mut self, to: NodeId) {
        self.detours.insert(to);
    }

    /// The members this node connects to for the group.
    pub(crate) fn direct(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.direct.iter().copied()
    }

    /// The members whose signals come through `peer`: those the route to
    /// which passes it (routes are the same both ways), and the root if
    /// its verdict does.
    pub(crate) fn cut_off_by(&self, peer: NodeId) -> Vec<NodeId> {
        let root = self.members[0];
        let verdict_via = |peer: NodeId| {
            tree_path(self.rank, 0)
                .iter()
                .any(|&r| self.members[r] == peer)
        };
        self.members
            .iter()
            .copied()
            .filter(|&m| m != peer)
            .filter(|&m| {
                self.route_to(m).is_some_and(|r| r.path.contains(&peer))
                    || (m == root && verdict_via(peer))
            })
            .collect()
    }

    /// How the root's verdict that the group closed goes to member `to`:
    /// along the relay tree even where a direct connection exists (a
    /// schedule partner; `None`: `to` is a tree neighbour, or not a
    /// member). The root sends the verdicts highest rank first, and every
    /// member's relay-tree ancestors have lower ranks: so each relay passes
    /// on the verdicts of the members below it before its own reaches it,
    /// and may leave as soon as its group closed without stranding theirs.
    pub(crate) fn tree_route_to(&self, to: NodeId) -> Option<Route> {
        if self.detours.contains(&to) {
            return None;
        }
        let &rank = self.rank_of.get(&to)?;
        let path = tree_path(self.rank, rank);
        if path.len() <= 2 {
            return None;
        }
        Route::new(path.into_iter().map(|r| self.members[r]).collect())
    }

    /// Whether the root's verdict reaches this member relayed (see
    /// [`tree_route_to`](Self::tree_route_to)): it is not a relay-tree
    /// child of the root.
    pub(crate) fn verdict_relayed(&self) -> bool {
        tree_path(0, self.rank).len() > 2
    }

    /// How a signal to member `to` goes: `None` straight (a direct peer,
    /// a [`detour`](Self::detour), or not a member: the caller's
    /// problem), else along the route.
    pub(crate) fn route_to(&self, to: NodeId) -> Option<Route> {
        if self.direct.contains(&to) || self.detours.contains(&to) {
            return None;
        }
        let &rank = self.rank_of.get(&to)?;
        let path = tree_path(self.rank, rank)
            .into_iter()
            .map(|r| self.members[r])
            .collect();
        Route::new(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_relay_tree_is_the_binomial_tree_over_ranks() {
        assert_eq!(tree_neighbours(0, 16), vec![1, 2, 4, 8]);
        assert_eq!(tree_neighbours(1, 16), vec![0, 3, 5, 9]);
        assert_eq!(tree_neighbours(6, 16), vec![2, 14]);
        assert_eq!(tree_neighbours(13, 16), vec![5]);
        assert_eq!(tree_neighbours(3, 6), vec![1]);
        assert_eq!(tree_neighbours(0, 1), Vec::<usize>::new());
        assert_eq!(tree_path(13, 6), vec![13, 5, 1, 0, 2, 6]);
        assert_eq!(tree_path(6, 2), vec![6, 2]);
        assert_eq!(tree_path(0, 7), vec![0, 1, 3, 7]);
    }

    #[test]
    fn signals_go_straight_to_partners_and_tree_neighbours_and_relay_otherwise() {
        let members: Vec<NodeId> = [40, 41, 42, 43, 44, 45, 46, 47].map(NodeId).to_vec();
        // Rank 5 (node 45), exchanging blocks with ranks 4 and 7.
        let route = GroupRoute::new(&members, 5, &[4, 7]);
        let direct: Vec<u32> = route.direct().map(|n| n.0).collect();
        assert_eq!(direct, vec![41, 44, 47]);
        assert_eq!(route.route_to(NodeId(44)), None);
        assert_eq!(route.route_to(NodeId(41)), None);
        let relayed = route.route_to(NodeId(42)).unwrap();
        assert_eq!(relayed.path, [45, 41, 40, 42].map(NodeId).to_vec());
        assert_eq!(relayed.here(), NodeId(41));
        // Not a member: the caller's problem.
        assert_eq!(route.route_to(NodeId(9)), None);
        // Losing node 41 (rank 1) cuts rank 5 off from ranks 0, 2, 3 and
        // 6 (its signals to them go up through rank 1); losing 44, a
        // partner only, cuts off nobody.
        let cut: Vec<u32> = route.cut_off_by(NodeId(41)).iter().map(|n| n.0).collect();
        assert_eq!(cut, vec![40, 42, 43, 46]);
        assert_eq!(route.cut_off_by(NodeId(44)), Vec::<NodeId>::new());
    }

    #[test]
    fn a_detour_sends_straight_from_then_on_and_cuts_nobody_off() {
        let members: Vec<NodeId> = [40, 41, 42, 43, 44, 45, 46, 47].map(NodeId).to_vec();
        // Rank 5 (node 45): node 42 is reached through 41 and 40.
        let mut route = GroupRoute::new(&members, 5, &[4, 7]);
        assert!(route.route_to(NodeId(42)).is_some());
        assert!(route.cut_off_by(NodeId(41)).contains(&NodeId(42)));
        route.detour(NodeId(42));
        assert_eq!(route.route_to(NodeId(42)), None);
        assert_eq!(route.tree_route_to(NodeId(42)), None);
        assert!(!route.cut_off_by(NodeId(41)).contains(&NodeId(42)));
        // The others still go along the tree; nothing joins the direct set.
        assert!(route.route_to(NodeId(43)).is_some());
        let direct: Vec<u32> = route.direct().map(|n| n.0).collect();
        assert_eq!(direct, vec![41, 44, 47]);
    }

    #[test]
    fn the_roots_verdict_goes_along_the_tree_even_to_a_partner() {
        let members: Vec<NodeId> = (0..16).map(NodeId).collect();
        // The root exchanging blocks with rank 5 (a schedule partner).
        let route = GroupRoute::new(&members, 0, &[1, 5]);
        assert_eq!(route.route_to(NodeId(5)), None, "other signals go straight");
        let verdict = route.tree_route_to(NodeId(5)).unwrap();
        assert_eq!(verdict.path, [0, 1, 5].map(NodeId).to_vec());
        let verdict = route.tree_route_to(NodeId(13)).unwrap();
        assert_eq!(verdict.path, [0, 1, 5, 13].map(NodeId).to_vec());
        // Tree neighbours straight; not a member: the caller's problem.
        assert_eq!(route.tree_route_to(NodeId(8)), None);
        assert_eq!(route.tree_route_to(NodeId(99)), None);
    }

    #[test]
    fn a_member_the_verdict_reaches_through_relays_is_cut_off_from_the_root_by_them() {
        let members: Vec<NodeId> = [40, 41, 42, 43, 44, 45].map(NodeId).to_vec();
        // Rank 3 (node 43), sent its blocks by the root (sequential): the
        // root is a partner, but its verdict comes through rank 1 (node 41).
        let route = GroupRoute::new(&members, 3, &[0]);
        assert!(route.verdict_relayed());
        assert_eq!(
            route.route_to(NodeId(40)),
            None,
            "other signals go straight"
        );
        // Losing rank 1 cuts it off from the root's verdict, as from the
        // members its other signals reach through rank 1.
        let cut: Vec<u32> = route.cut_off_by(NodeId(41)).iter().map(|n| n.0).collect();
        assert_eq!(cut, vec![40, 42, 44, 45]);
        // Rank 2 (node 42) is the root's child in the relay tree.
        let route = GroupRoute::new(&members, 2, &[0]);
        assert!(!route.verdict_relayed());
        assert_eq!(route.cut_off_by(NodeId(41)), [43, 45].map(NodeId).to_vec());
        // The root hears its own verdict from nobody.
        assert!(!GroupRoute::new(&members, 0, &[1, 2, 3]).verdict_relayed());
    }

    proptest! {
        /// Sent highest rank first along the tree, the root's verdicts
        /// reach every relay after those of every member whose route
        /// passes through it (each link keeps its order).
        #[test]
        fn a_relay_passes_on_the_verdicts_below_it_before_its_own(size in 2usize..300) {
            // The order verdicts cross each link (from, to) in.
            let mut crossings: HashMap<(usize, usize), Vec<usize>> = HashMap::default();
            for to in (1..size).rev() {
                for hop in tree_path(0, to).windows(2) {
                    crossings.entry((hop[0], hop[1])).or_default().push(to);
                }
            }
            for relay in 1..size {
                let below: Vec<usize> = (1..size)
                    .filter(|&m| m != relay && tree_path(0, m).contains(&relay))
                    .collect();
                let into = crossings[&(parent(relay).unwrap(), relay)].clone();
                let own = into.iter().position(|&m| m == relay).unwrap();
                prop_assert_eq!(own, into.len() - 1, "{}'s own verdict comes last", relay);
                for m in below {
                    prop_assert!(into.contains(&m));
                }
            }
        }

        /// Every path runs between its ends over tree edges, visits no
        /// node twice and is at most 2⌈log₂ n⌉ hops; tree neighbours are
        /// symmetric and at most ⌈log₂ n⌉ + 1.
        #[test]
        fn tree_paths_are_short_simple_and_over_tree_edges(size in 1usize..3000, a in any::<usize>(), b in any::<usize>()) {
            let (a, b) = (a % size, b % size);
            let log = usize::BITS - (size - 1).leading_zeros();
            let path = tree_path(a, b);
            prop_assert_eq!(path[0], a);
            prop_assert_eq!(*path.last().unwrap(), b);
            prop_assert!(path.len() - 1 <= 2 * log as usize);
            let mut seen = path.clone();
            seen.sort_unstable();
            seen.dedup();
            prop_assert_eq!(seen.len(), path.len());
            for w in path.windows(2) {
                prop_assert!(tree_neighbours(w[0], size).contains(&w[1]));
                prop_assert!(tree_neighbours(w[1], size).contains(&w[0]));
            }
            prop_assert!(tree_neighbours(a, size).len() <= log as usize + 1);
        }
    }
}
