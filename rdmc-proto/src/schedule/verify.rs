//! Checks of the per-member schedule functions against each other: sends
//! match receives, the first block, the connection lists.

use super::{Algorithm, NodeSchedule, PlanError, Schedule, Topology, Transfer};

/// Check the per-member schedules of `algorithm` for `nodes` members and
/// `blocks` blocks against each other:
///
/// * every member agrees on [`Schedule::total_steps`], and nobody sends or
///   receives at steps `total_steps .. total_steps + 2`;
/// * `outgoing(r, t) = (d, b)` ⇔ `incoming(d, t) = (r, b)`;
/// * each member's first incoming transfer equals
///   [`Schedule::first_block_for`]`(blocks)`;
/// * every transfer uses a pair present in both members' connection lists;
/// * connection lists are duplicate-free, name only other members, are
///   symmetric, and can be built in list order by pairwise blocking
///   rendezvous without deadlock.
///
/// Costs `O(n · T · log n)`; meant for tests and tools.
pub fn verify_schedules(
    algorithm: Algorithm,
    group_size: usize,
    blocks: usize,
) -> Result<(), PlanError> {
    let topology = Topology::flat(group_size).map_err(|_| PlanError::EmptyGroup)?;
    verify_schedules_in(algorithm, &topology, blocks)
}

/// [`verify_schedules`] for the members of a group laid out as `topology`
/// says (see [`NodeSchedule::with_topology`]).
pub fn verify_schedules_in(
    algorithm: Algorithm,
    topology: &Topology,
    blocks: usize,
) -> Result<(), PlanError> {
    if blocks == 0 {
        return Err(PlanError::NoBlocks);
    }
    let schedules: Vec<NodeSchedule> = (0..topology.group_size())
        .map(|rank| {
            NodeSchedule::with_topology(algorithm, topology, rank).expect("rank < group_size")
        })
        .collect();
    check_members(&schedules, blocks)
}

/// The checks of [`verify_schedules`] over every member's schedule, rank
/// by rank.
fn check_members<S: Schedule>(schedules: &[S], blocks: usize) -> Result<(), PlanError> {
    let group_size = schedules.len();
    // Connection lists: in range, no self, no duplicates, symmetric.
    let connections: Vec<Vec<usize>> = schedules
        .iter()
        .enumerate()
        .map(|(node, s)| {
            let mut peers = s.connections();
            for &peer in &peers {
                if peer >= group_size || peer == node {
                    return Err(PlanError::BadConnection { node, peer });
                }
            }
            peers.sort_unstable();
            if let Some(w) = peers.windows(2).find(|w| w[0] == w[1]) {
                return Err(PlanError::BadConnection { node, peer: w[0] });
            }
            Ok(peers)
        })
        .collect::<Result<_, _>>()?;
    let connected = |a: usize, b: usize| connections[a].binary_search(&b).is_ok();
    for (node, peers) in connections.iter().enumerate() {
        for &peer in peers {
            if !connected(peer, node) {
                return Err(PlanError::AsymmetricConnection { node, peer });
            }
        }
    }

    let lists: Vec<Vec<usize>> = schedules.iter().map(Schedule::connections).collect();
    check_rendezvous(&lists)?;

    let steps = schedules[0].total_steps(blocks);
    for (node, s) in schedules.iter().enumerate() {
        let own = s.total_steps(blocks);
        if own != steps {
            return Err(PlanError::StepCountMismatch {
                node,
                steps: own,
                expected: steps,
            });
        }
    }

    let mut first: Vec<Option<Transfer>> = vec![None; group_size];
    for step in 0..steps + 2 {
        for (node, s) in schedules.iter().enumerate() {
            if let Some(out) = s.outgoing(blocks, step) {
                let to = out.peer;
                let unmatched = PlanError::UnmatchedTransfer {
                    step,
                    from: node,
                    to,
                    block: out.block,
                };
                if step >= steps || to >= group_size {
                    return Err(unmatched);
                }
                let back = schedules[to].incoming(blocks, step);
                if back
                    != Some(Transfer {
                        peer: node,
                        block: out.block,
                    })
                {
                    return Err(unmatched);
                }
                if !connected(node, to) || !connected(to, node) {
                    return Err(PlanError::NotConnected {
                        step,
                        from: node,
                        to,
                    });
                }
            }
            if let Some(inc) = s.incoming(blocks, step) {
                let from = inc.peer;
                let unmatched = PlanError::UnmatchedTransfer {
                    step,
                    from,
                    to: node,
                    block: inc.block,
                };
                if step >= steps || from >= group_size {
                    return Err(unmatched);
                }
                let forth = schedules[from].outgoing(blocks, step);
                if forth
                    != Some(Transfer {
                        peer: node,
                        block: inc.block,
                    })
                {
                    return Err(unmatched);
                }
                if first[node].is_none() {
                    first[node] = Some(inc);
                }
            }
        }
    }
    for (node, s) in schedules.iter().enumerate() {
        let expected = s.first_block_for(blocks);
        if expected != first[node] {
            return Err(PlanError::FirstBlockMismatch {
                node,
                expected,
                actual: first[node],
            });
        }
    }
    Ok(())
}

/// Simulate connection set-up as the original C++ RDMC does it: every member connects
/// to the peers of its list in order, and connecting to a peer blocks until
/// that peer has reached this member in its own list.
fn check_rendezvous(lists: &[Vec<usize>]) -> Result<(), PlanError> {
    let mut next = vec![0usize; lists.len()];
    loop {
        let mut progress = false;
        for a in 0..lists.len() {
            let Some(&b) = lists[a].get(next[a]) else {
                continue;
            };
            if lists[b].get(next[b]) == Some(&a) {
                next[a] += 1;
                next[b] += 1;
                progress = true;
            }
        }
        if !progress {
            break;
        }
    }
    match (0..lists.len()).find(|&a| next[a] < lists[a].len()) {
        Some(node) => Err(PlanError::ConnectionDeadlock {
            node,
            peer: lists[node][next[node]],
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member's schedule with one thing bent.
    struct Bent {
        inner: NodeSchedule,
        bend: Bend,
    }

    #[derive(Clone, Copy)]
    enum Bend {
        None,
        /// Its connection list names `peer` too.
        Connects(usize),
        /// It sends block 0 to `peer` at step `step` as well.
        SendsAt(usize, usize),
        /// It receives block 0 from `peer` at step `step` as well.
        ReceivesAt(usize, usize),
    }

    impl Schedule for Bent {
        fn group_size(&self) -> usize {
            self.inner.group_size()
        }
        fn rank(&self) -> usize {
            self.inner.rank()
        }
        fn total_steps(&self, blocks: usize) -> usize {
            self.inner.total_steps(blocks)
        }
        fn outgoing(&self, blocks: usize, step: usize) -> Option<Transfer> {
            match self.bend {
                Bend::SendsAt(peer, at) if at == step => Some(Transfer { peer, block: 0 }),
                _ => self.inner.outgoing(blocks, step),
            }
        }
        fn incoming(&self, blocks: usize, step: usize) -> Option<Transfer> {
            match self.bend {
                Bend::ReceivesAt(peer, at) if at == step => Some(Transfer { peer, block: 0 }),
                _ => self.inner.incoming(blocks, step),
            }
        }
        fn first_block(&self) -> Option<Transfer> {
            self.inner.first_block()
        }
        fn connections(&self) -> Vec<usize> {
            let mut peers = self.inner.connections();
            if let Bend::Connects(peer) = self.bend {
                peers.push(peer);
            }
            peers
        }
    }

    /// A sequential send to `n` members, member `rank` bent.
    fn sequential(n: usize, rank: usize, bend: Bend) -> Vec<Bent> {
        (0..n)
            .map(|r| Bent {
                inner: NodeSchedule::new(Algorithm::Sequential, n, r).unwrap(),
                bend: if r == rank { bend } else { Bend::None },
            })
            .collect()
    }

    #[test]
    fn bent_schedules_are_refused_with_the_right_error() {
        use PlanError::{BadConnection, UnmatchedTransfer};
        let unmatched = |step, from, to| UnmatchedTransfer {
            step,
            from,
            to,
            block: 0,
        };
        // Unbent, they pass. A sequential send of one block to 3 takes 2
        // steps (the root sends to 1, then to 2); to 2, one step.
        assert_eq!(check_members(&sequential(3, 0, Bend::None), 1), Ok(()));
        assert_eq!(check_members(&sequential(2, 0, Bend::None), 1), Ok(()));
        let cases = [
            // Connected to itself, or to a member outside the group.
            (3, 1, Bend::Connects(1), BadConnection { node: 1, peer: 1 }),
            (3, 1, Bend::Connects(3), BadConnection { node: 1, peer: 3 }),
            // A send at the step count, two past it, or out of the group.
            (3, 0, Bend::SendsAt(1, 2), unmatched(2, 0, 1)),
            (2, 0, Bend::SendsAt(1, 2), unmatched(2, 0, 1)),
            (3, 0, Bend::SendsAt(5, 0), unmatched(0, 0, 5)),
            // A receipt at the step count, or from out of the group.
            (3, 2, Bend::ReceivesAt(0, 2), unmatched(2, 0, 2)),
            (3, 2, Bend::ReceivesAt(5, 0), unmatched(0, 5, 2)),
        ];
        for (n, rank, bend, error) in cases {
            assert_eq!(check_members(&sequential(n, rank, bend), 1), Err(error));
        }
    }

    #[test]
    fn rendezvous_detects_a_cycle() {
        // 0 waits for 1, 1 waits for 2, 2 waits for 0.
        let lists = vec![vec![1, 2], vec![2, 0], vec![0, 1]];
        assert_eq!(
            check_rendezvous(&lists),
            Err(PlanError::ConnectionDeadlock { node: 0, peer: 1 })
        );
        let lists = vec![vec![1, 2], vec![0, 2], vec![0, 1]];
        assert_eq!(check_rendezvous(&lists), Ok(()));
        assert_eq!(check_rendezvous(&[vec![]]), Ok(()));
    }
}
