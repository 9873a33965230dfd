//! The announcement rules, member by member: one sender at a time or any
//! sender, announcements riding blocks to their sender, the early
//! announcement of the next sender while a block's last bytes arrive; and
//! the peers a member exchanges blocks with, and when it waits for their
//! ready-for-block.

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

use super::{ALGORITHMS, actions, config};
use crate::schedule::{Algorithm, NodeSchedule, Schedule};
use crate::{Action, Announce, Control, GroupMember, MemberConfig, READY_WINDOW, Rank};

/// Ready-for-blocks in `actions` (each must follow its receive's post).
fn announced(actions: &[Action]) -> usize {
    let (mut posted, mut ready) = (0, 0);
    for a in actions {
        match a {
            Action::PostRecv { .. } => posted += 1,
            Action::SendControl {
                control: Control::ReadyForBlock,
                ..
            } => {
                ready += 1;
                assert!(
                    ready <= posted,
                    "a ready-for-block before its receive: {actions:?}"
                );
            }
            _ => {}
        }
    }
    assert_eq!(
        ready, posted,
        "every receive posted is announced: {actions:?}"
    );
    ready
}

#[test]
fn any_sender_announces_in_batches_one_sender_block_by_block() {
    // Member 1 of a chain of 3 receiving a 40-block message from 0.
    let (blocks, size) = (40, 40 * 4);
    for announce in [Announce::OneSender, Announce::AnySender] {
        let config = config(Algorithm::Chain, 3, 1).with_announce(announce);
        let batch = config.announce_batch();
        let mut m = GroupMember::new(config).unwrap();
        actions(&mut m);
        m.handle_block(0, size, 4);
        let mut outstanding = announced(&actions(&mut m));
        assert_eq!(
            outstanding, READY_WINDOW,
            "{announce:?}: a full window at first"
        );
        let mut total = outstanding;
        for block in 1..blocks {
            m.handle_block(0, size, 4);
            outstanding -= 1;
            let unannounced = blocks - 1 - total;
            let now = announced(&actions(&mut m));
            outstanding += now;
            total += now;
            assert!(
                outstanding <= READY_WINDOW,
                "{announce:?}: beyond the window"
            );
            // Whatever remains of the message is announced once the window
            // falls to what a batch leaves.
            let left = blocks - 1 - block;
            assert!(
                outstanding >= left.min(READY_WINDOW - batch),
                "{announce:?}: block {block}"
            );
            match announce {
                Announce::OneSender => {
                    assert_eq!(
                        now,
                        usize::from(left >= READY_WINDOW),
                        "{announce:?}: block {block}"
                    )
                }
                _ => assert!(
                    now == 0 || now >= batch.min(unannounced),
                    "{announce:?}: {now} at block {block}"
                ),
            }
        }
        assert_eq!(
            total,
            blocks - 1,
            "{announce:?}: one receive per block after the first"
        );
        assert_eq!(outstanding, 0);
    }
}

/// A member's blocks arriving in its schedule's order (4-byte blocks of a
/// `size`-byte message), its peers ready at once for a window's worth.
struct Arrivals {
    incoming: Vec<Rank>,
    arrived: Vec<usize>,
    next: usize,
    size: u64,
}

impl Arrivals {
    fn new(m: &mut GroupMember, schedule: &NodeSchedule, blocks: usize) -> Self {
        // Every peer's receives stay announced: a window's worth, topped up per block.
        for peer in schedule.connections() {
            for _ in 0..READY_WINDOW {
                m.handle_control(peer, Control::ReadyForBlock);
            }
        }
        let incoming = (0..schedule.total_steps(blocks))
            .filter_map(|step| schedule.incoming(blocks, step).map(|t| t.peer))
            .collect();
        Arrivals {
            incoming,
            arrived: vec![0; schedule.group_size()],
            next: 0,
            size: (blocks * 4) as u64,
        }
    }

    /// The sender of the next block to arrive.
    fn next_from(&self) -> Option<Rank> {
        self.incoming.get(self.next).copied()
    }

    /// The first block, into the bounce buffer announced at creation (not
    /// among the counts).
    fn first(&mut self, m: &mut GroupMember) -> Vec<Action> {
        m.handle_block(self.incoming[0], self.size, 4);
        self.next = 1;
        actions(m)
    }

    /// The next block arrives.
    fn deliver(&mut self, m: &mut GroupMember) -> Vec<Action> {
        let from = self.incoming[self.next];
        m.handle_block(from, self.size, 4);
        self.arrived[from] += 1;
        self.next += 1;
        actions(m)
    }

    fn all_in(&self) -> bool {
        self.next == self.incoming.len()
    }

    /// The actions of the next round: some, or the member is stuck.
    fn going_on(&self, next: Vec<Action>, at: &str) -> Vec<Action> {
        assert!(
            !next.is_empty(),
            "{at}: stuck after {} blocks in",
            self.next
        );
        next
    }
}

/// Drives member `rank` of an `n`-member group through one `blocks`-block
/// message (4-byte blocks) with [`Announce::AnySender`], its peers ready
/// at once and its sends completing at once, each block arriving as soon
/// as the member announced it, in its schedule's order. Returns how many
/// ready-for-blocks went out in a pass of actions with no block to the
/// same peer after them (each a packet of its own over TCP), and checks
/// on the way that every one of the others rides a block to its peer and
/// that every receive posted is announced by the end.
fn drive_any_sender(algorithm: Algorithm, n: usize, rank: Rank, blocks: usize) -> usize {
    let schedule = NodeSchedule::new(algorithm, n, rank).unwrap();
    let mut m =
        GroupMember::new(config(algorithm, n, rank).with_announce(Announce::AnySender)).unwrap();
    let at = format!("{algorithm} n={n} rank={rank} k={blocks}");
    let mut arrivals = Arrivals::new(&mut m, &schedule, blocks);
    let (mut posted, mut announced) = (vec![0; n], vec![0; n]);
    let mut lone = 0;
    let mut pass = actions(&mut m);
    if rank != 0 && !arrivals.incoming.is_empty() {
        // The first block (announced at creation, before this loop).
        assert!(
            matches!(pass.as_slice(), [Action::PostFirstBlockRecv { .. }, ..]),
            "{at}"
        );
        pass = arrivals.first(&mut m);
    }
    if rank == 0 {
        m.submit(arrivals.size).unwrap();
        pass = actions(&mut m);
    }
    for _round in 0..100 * (blocks + n) {
        let mut sent_to = Vec::new();
        for (i, a) in pass.iter().enumerate() {
            match *a {
                Action::PostRecv { from, .. } => posted[from] += 1,
                Action::SendControl {
                    to,
                    control: Control::ReadyForBlock,
                } => {
                    announced[to] += 1;
                    assert!(announced[to] <= posted[to], "{at}: announced before posted");
                    let rides = pass[i + 1..]
                        .iter()
                        .any(|b| matches!(*b, Action::SendBlock { to: t, .. } if t == to));
                    lone += usize::from(!rides);
                }
                Action::SendBlock { to, .. } => sent_to.push(to),
                Action::MessageComplete { .. } => {
                    assert_eq!(posted, announced, "{at}: every receive announced");
                    assert!(arrivals.all_in(), "{at}");
                    return lone;
                }
                Action::Failed(ref f) => panic!("{at}: {f:?}"),
                _ => {}
            }
        }
        let mut next = Vec::new();
        for to in sent_to {
            m.handle_control(to, Control::ReadyForBlock);
            m.handle_send_complete(to);
            next.extend(actions(&mut m));
        }
        if let Some(from) = arrivals.next_from()
            && announced[from] > arrivals.arrived[from]
        {
            next.extend(arrivals.deliver(&mut m));
        }
        pass = arrivals.going_on(next, &at);
    }
    panic!("{at}: did not complete");
}

#[test]
fn any_sender_announcements_ride_the_next_block_to_their_sender() {
    // The binomial pipeline of four: the member the root never sends to
    // exchanges blocks with members 1 and 2 by turns. Its announcements
    // to the one it does not send to next used to go alone, about one in
    // four; now only the one to member 1 with its first block does (its
    // first block goes to member 2, and the next to 1 is that very step's).
    assert_eq!(drive_any_sender(Algorithm::BinomialPipeline, 4, 3, 64), 1);
    // Members 1 and 2 never send to the root, so what they announce to it
    // goes alone.
    for rank in [1, 2] {
        assert!(drive_any_sender(Algorithm::BinomialPipeline, 4, rank, 64) > 0);
    }
    // Sixteen members: every exchange partner comes round every four
    // steps. Only what the root's partners (1, 2, 4 and 8) announce to
    // senders they never send to goes alone after the start.
    for rank in 1..16 {
        let lone = drive_any_sender(Algorithm::BinomialPipeline, 16, rank, 200);
        if ![1, 2, 4, 8].contains(&rank) {
            assert!(lone <= 3, "rank {rank}: {lone} announcements alone");
        }
    }
    // A chain never sends back to its sender: nothing rides, all goes.
    assert!(drive_any_sender(Algorithm::Chain, 5, 2, 64) > 0);
}

proptest! {

    #![proptest_config(ProptestConfig { failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))), ..ProptestConfig::default() })]

    /// Whatever the schedule, a member whose announcements ride its blocks
    /// still completes every message with every receive announced.
    #[test]
    fn any_sender_riding_completes_every_schedule(
        algorithm in prop::sample::select(ALGORITHMS),
        n in 1usize..=20,
        rank in 0usize..20,
        blocks in 1usize..=40,
    ) {
        drive_any_sender(algorithm, n, rank % n, blocks);
    }
}

// ---- early announcement ----------------------------------------------------

/// Drives member `rank` of an `n`-member binomial pipeline through one
/// `blocks`-block message (4-byte blocks), its peers ready at once and its
/// sends completing at once, configured by `tune`. Before every block it
/// probes [`GroupMember::handle_block_progress`]:
///
/// - with `early` set (one sender at a time, that threshold), where the
///   block is the only one announced and the next comes from another
///   sender, nothing happens for one byte more than the threshold or for
///   the other sender, and the next sender's receive is posted and
///   announced at the threshold;
/// - otherwise, and where more than one block is announced, nothing
///   happens even with nothing left to come.
///
/// Returns how many receives were announced early.
fn drive_early(
    n: usize,
    rank: Rank,
    blocks: usize,
    tune: impl Fn(MemberConfig) -> MemberConfig,
    early: Option<u64>,
) -> usize {
    let algorithm = Algorithm::BinomialPipeline;
    let schedule = NodeSchedule::new(algorithm, n, rank).unwrap();
    let mut m = GroupMember::new(tune(config(algorithm, n, rank))).unwrap();
    let at = format!("n={n} rank={rank} k={blocks}");
    let mut arrivals = Arrivals::new(&mut m, &schedule, blocks);
    assert!(!arrivals.incoming.is_empty(), "{at}: a receiver");
    actions(&mut m);
    let mut pass = arrivals.first(&mut m);
    let mut posted = vec![0usize; n];
    let mut announced_early = 0;
    for _round in 0..100 * (blocks + n) {
        let mut next = Vec::new();
        for a in &pass {
            match *a {
                Action::PostRecv { from, .. } => posted[from] += 1,
                Action::SendBlock { to, .. } => {
                    m.handle_control(to, Control::ReadyForBlock);
                    m.handle_send_complete(to);
                    next.extend(actions(&mut m));
                }
                Action::MessageComplete { .. } => {
                    assert!(arrivals.all_in(), "{at}");
                    return announced_early;
                }
                Action::Failed(ref f) => panic!("{at}: {f:?}"),
                _ => {}
            }
        }
        if let Some(from) = arrivals.next_from()
            && posted[from] > arrivals.arrived[from]
        {
            let arrived = &arrivals.arrived;
            let outstanding: usize = (0..n).map(|p| posted[p] - arrived[p]).sum();
            let after = (arrivals.incoming.get(arrivals.next + 1).copied())
                .filter(|&b| b != from && posted[b] == arrived[b]);
            let block = arrivals.next;
            match (early, after) {
                (Some(threshold), Some(b)) if outstanding == 1 => {
                    m.handle_block_progress(from, threshold + 1);
                    assert_eq!(actions(&mut m), [], "{at}: a byte too many left");
                    m.handle_block_progress(b, threshold);
                    assert_eq!(actions(&mut m), [], "{at}: not the block announced");
                    m.handle_block_progress(from, threshold);
                    let now = actions(&mut m);
                    let posts = now
                        .iter()
                        .any(|a| matches!(*a, Action::PostRecv { from: f, .. } if f == b));
                    let ready = now.iter().any(|a| {
                        matches!(*a, Action::SendControl { to, control: Control::ReadyForBlock } if to == b)
                    });
                    assert!(posts && ready, "{at}: block {block}: {now:?}");
                    announced_early += 1;
                    next.extend(now);
                }
                _ => {
                    m.handle_block_progress(from, 0);
                    assert_eq!(actions(&mut m), [], "{at}: block {block}");
                }
            }
            next.extend(arrivals.deliver(&mut m));
        }
        pass = arrivals.going_on(next, &at);
    }
    panic!("{at}: did not complete");
}

#[test]
fn early_announce_posts_the_next_senders_receive_when_the_lone_block_is_nearly_in() {
    let one_sender = |threshold| {
        move |c: MemberConfig| {
            c.with_announce(Announce::OneSender)
                .with_early_announce(threshold)
        }
    };
    for (n, rank) in [(4, 3), (4, 1), (8, 5), (16, 11)] {
        // Member 3 of four exchanges blocks with 1 and 2 by turns: every
        // change of sender is announced early.
        let early = drive_early(n, rank, 24, one_sender(Some(3)), Some(3));
        assert!(early > 0, "n={n} rank={rank}: never early");
        // Without a threshold, or announcing to any sender, it never is.
        assert_eq!(drive_early(n, rank, 24, one_sender(None), None), 0);
        let any = |c: MemberConfig| {
            c.with_announce(Announce::AnySender)
                .with_early_announce(Some(3))
        };
        assert_eq!(drive_early(n, rank, 24, any, None), 0);
    }
}

#[test]
fn early_announce_is_ignored_with_a_window_of_blocks_announced_and_after_a_failure() {
    // A chain member announces a window of blocks to its one sender.
    let tuned = config(Algorithm::Chain, 3, 1).with_early_announce(Some(100));
    let mut m = GroupMember::new(tuned).unwrap();
    actions(&mut m);
    m.handle_block(0, 40, 4);
    assert!(!actions(&mut m).is_empty());
    m.handle_block_progress(0, 0);
    assert_eq!(actions(&mut m), []);
    // A member that failed mid-message ignores it.
    let tuned = config(Algorithm::BinomialPipeline, 4, 3).with_early_announce(Some(100));
    let mut m = GroupMember::new(tuned).unwrap();
    actions(&mut m);
    let schedule = NodeSchedule::new(Algorithm::BinomialPipeline, 4, 3).unwrap();
    let first = (0..schedule.total_steps(10))
        .find_map(|step| schedule.incoming(10, step))
        .expect("a receiver")
        .peer;
    m.handle_block(first, 40, 4);
    assert!(!actions(&mut m).is_empty());
    m.handle_peer_failure(Some(0));
    assert!(m.is_finished());
    actions(&mut m);
    for from in 0..4 {
        m.handle_block_progress(from, 0);
    }
    assert_eq!(actions(&mut m), []);
}

// ---- whom a member exchanges blocks with, and when it waits for them -------

#[test]
fn a_members_connections_are_the_peers_its_schedule_exchanges_blocks_with() {
    for &algorithm in ALGORITHMS {
        for n in 1..=9 {
            for rank in 0..n {
                let m = GroupMember::new(config(algorithm, n, rank)).unwrap();
                let s = NodeSchedule::new(algorithm, n, rank).unwrap();
                let mut peers: Vec<Rank> = (1..=6)
                    .flat_map(|k| (0..s.total_steps(k)).map(move |step| (k, step)))
                    .flat_map(|(k, step)| [s.incoming(k, step), s.outgoing(k, step)])
                    .flatten()
                    .map(|t| t.peer)
                    .collect();
                peers.sort_unstable();
                peers.dedup();
                let at = format!("{algorithm} n={n} rank={rank}");
                assert_eq!(m.connections(), peers, "{at}");
                assert_eq!(m.is_root(), rank == 0, "{at}");
                assert_eq!(m.config().rank, rank, "{at}");
            }
        }
    }
}

#[test]
fn waiting_for_ready_means_holding_the_next_block_with_no_ready_for_it() {
    // Member 1 of a chain of three, a two-block message on its way.
    let mut m = GroupMember::new(config(Algorithm::Chain, 3, 1)).unwrap();
    actions(&mut m);
    assert!(!m.waiting_for_ready(), "no message yet");
    m.handle_block(0, 8, 4);
    actions(&mut m);
    assert!(m.waiting_for_ready(), "block 0 here, member 2 not ready");
    m.handle_control(2, Control::ReadyForBlock);
    actions(&mut m);
    assert!(!m.waiting_for_ready(), "block 0 on its way");
    m.handle_send_complete(2);
    actions(&mut m);
    assert!(!m.waiting_for_ready(), "block 1 not here yet");
    assert_eq!(m.completed(), 0);
    m.handle_block(0, 8, 4);
    actions(&mut m);
    assert!(m.waiting_for_ready(), "block 1 here, member 2 not ready");
    m.handle_control(2, Control::ReadyForBlock);
    m.handle_send_complete(2);
    actions(&mut m);
    assert_eq!(m.completed(), 1, "both blocks here and passed on");
    // The root holds every block: it waits only for the ready.
    let mut root = GroupMember::new(config(Algorithm::Chain, 3, 0)).unwrap();
    actions(&mut root);
    root.submit(8).unwrap();
    actions(&mut root);
    assert!(root.waiting_for_ready());
    root.handle_control(1, Control::ReadyForBlock);
    actions(&mut root);
    assert!(!root.waiting_for_ready());
}

#[test]
fn any_sender_announces_half_its_window_at_once() {
    let c = config(Algorithm::Chain, 3, 1);
    assert_eq!(c.announce_batch(), READY_WINDOW / 2);
    for (window, batch) in [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (8, 4)] {
        let c = config(Algorithm::Chain, 3, 1).with_ready_window(window);
        assert_eq!(c.announce_batch(), batch, "window {window}");
    }
}
