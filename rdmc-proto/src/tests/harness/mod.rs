//! A deterministic whole-group harness for the sans-IO core (`Rendezvous`
//! and `GroupMember`).
//!
//! N nodes create one group through their rendezvous state machines and then
//! exchange blocks and signals (`Join`, `JoinRejected` and control messages)
//! over modelled links, with no runtime and no clock: time is a counter of
//! events, and when nothing else can happen it jumps to the next creation
//! deadline. The model follows the verbs contract the RDMA backend depends
//! on:
//!
//! * every directed link `a → b` is FIFO for data and, separately, FIFO for
//!   signals; links are independent of each other;
//! * a receive is posted on the link it expects data from (FIFO per link);
//!   delivering data consumes the head posted receive, and if there is none
//!   that is a receiver-not-ready error (the test fails);
//! * delivery copies the sender's real bytes into the posted region (the
//!   bounce buffer or the message buffer) after checking the length fits;
//! * the receive completion and the send completion are separate events,
//!   each picked later at random;
//! * a seeded RNG picks which pending event happens next, so every run is
//!   one random interleaving, replayable from its seed;
//! * each node drives its state machines as the runtime's actor does: a
//!   group's member runs from local creation on, its actions carried out
//!   after the rendezvous's `Join`s; the root's application acts only once
//!   the root's creation completed; a group whose creation failed is
//!   dropped (nothing reaches it any more).
//!
//! * each receiver's application is modelled too ([`App`]): it takes
//!   delivered messages and closes the group at random points, or
//!   misbehaves as told (never closes, leaves or crashes before closing,
//!   closes early); the root's `Closed` is checked to come only after
//!   every receiver's application took every message and closed;
//! * the members' progress timeouts run on the same clock (one tick is a
//!   nanosecond of their time), set to [`LONG_TIMEOUT`] ticks: they fire
//!   only when the run is stuck.
//!
//! Every action a member emits is checked against the model as it is
//! carried out (see [`Cluster::apply`]); the final outcome is checked by the
//! tests.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

use crate::schedule::{Algorithm, BlockSize, NodeSchedule, Schedule, Topology};
use crate::{
    Action, Announce, Control, CreateFailure, Failure, FailureReason, GroupMember, MemberConfig,
    READY_WINDOW, Rank, Rendezvous, RendezvousAction, SharedSettings, block_count, block_len,
    group_digest,
};
use crate::{GroupId, NodeId};

/// The one group every node of a [`Cluster`] creates.
pub(crate) const GROUP: GroupId = GroupId(1);

/// A creation deadline no run reaches by its events alone: the clock gets
/// there only by jumping when nothing else can happen.
pub(crate) const LONG_TIMEOUT: u64 = 1 << 40;

/// The members' progress timeout: [`LONG_TIMEOUT`] ticks.
pub(crate) const PROGRESS_TIMEOUT: Option<Duration> = Some(Duration::from_nanos(LONG_TIMEOUT));

/// How a receiver's application behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum App {
    /// Takes every message as it is delivered, and closes once its stream
    /// ended (every message delivered): a well-behaved application.
    Reader,
    /// Takes every message, never closes.
    NeverCloses,
    /// Takes every message, then leaves the group (drops it) instead of
    /// closing once its stream ended.
    LeavesBeforeClose,
    /// Takes every message, then its process dies (a crash every survivor
    /// is told of) once its stream ended, before it closes.
    CrashesBeforeClose,
    /// Closes once it has taken this many messages (or its stream ended),
    /// whatever comes after.
    ClosesAfter(u64),
}
/// When a node creates the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CreateAt {
    /// Before any event.
    Upfront,
    /// At a random point of the run (an event like any other).
    Later,
    /// Not during the run (see [`Cluster::create`]).
    Never,
}

/// A signal on a link: the rendezvous's, or a group's control message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Signal {
    Join(u128),
    JoinRejected(u128),
    Group(Control),
}

/// SplitMix64: tiny, seedable, good enough to pick events.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `num / den`.
    pub(crate) fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next_u64() % den < num
    }

    /// `len` random bytes.
    pub(crate) fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

/// An operation of the root's application, carried out as an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RootOp {
    /// `submit(size)` of the next message.
    Submit,
    /// `close()`.
    Close,
}

/// Which survivors the transport tells about a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Notify {
    /// Every survivor (the control-plane mesh sees the crash everywhere).
    AllSurvivors,
    /// The crashed member's link peers: its data neighbours plus the control
    /// links between the root and everyone.
    LinkPeers,
    /// Only one survivor (one still open when told); the rest must learn it
    /// from `Control::Failed` relays.
    OneSurvivor,
}

/// A crash to inject.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Crash {
    /// The member that crashes.
    pub(crate) victim: Rank,
    /// The number of events after which it crashes (if the run drains
    /// earlier, it crashes then).
    pub(crate) at_event: u64,
    /// Who is told.
    pub(crate) notify: Notify,
}

/// Where a posted receive lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Region {
    Bounce,
    Message { seq: u64, offset: usize, len: usize },
}

#[derive(Debug)]
struct Packet {
    seq: u64,
    offset: usize,
    bytes: Vec<u8>,
    immediate: u64,
}

#[derive(Debug)]
struct RecvDone {
    region: Region,
    immediate: u64,
    len: usize,
}

/// One directed link `from → to`.
#[derive(Debug, Default)]
struct Link {
    /// Data sent, not yet delivered.
    data: VecDeque<Packet>,
    /// Receives the receiver posted for data from this link.
    posted: VecDeque<Region>,
    /// Data delivered; the receiver's completion is pending.
    recv_done: VecDeque<RecvDone>,
    /// Data delivered; the sender's completion is pending.
    send_done: usize,
    /// Signals in flight.
    signals: VecDeque<Signal>,
    /// Receives ever posted by the receiver on this link.
    posted_total: u64,
    /// Ready-for-block ever sent by the receiver (`to`) to the sender (`from`).
    ready_sent: u64,
    /// Of those, how many reached the sender.
    ready_delivered: u64,
    /// Blocks ever sent on this link.
    sent_total: u64,
    /// Blocks whose arrival the receiver's member was told of (its receive
    /// completion was handled).
    arrived: u64,
}

/// A message buffer on a receiver.
#[derive(Debug)]
struct Buffer {
    data: Vec<u8>,
    /// Bytes whose receive completed (or that came from the bounce buffer).
    received: Vec<bool>,
    /// Bytes covered by a posted receive (completed or not).
    posted: Vec<bool>,
}

/// The harness's view of one node.
#[derive(Debug)]
struct Node {
    rendezvous: Rendezvous<u64>,
    /// The digest this node creates the group with.
    digest: u128,
    /// The group's member state machine, from local creation until the
    /// group is dropped here (its creation failed).
    member: Option<GroupMember>,
    /// Whether this node created the group.
    created: bool,
    /// Whether its creation completed (the application has the group).
    ready: bool,
    /// Why its creation failed in the rendezvous (a mismatch, a timeout).
    create_failure: Option<CreateFailure>,
    crashed: bool,
    bounce: Vec<u8>,
    /// A bounce-buffer receive is posted and not yet consumed.
    bounce_posted: bool,
    /// A block landed in the bounce buffer: (len, seq, offset) of what the
    /// sender sent; cleared by `BeginMessage`.
    bounce_landed: Option<(usize, u64, usize)>,
    buffers: BTreeMap<u64, Buffer>,
    /// Outstanding block sends, in posting order: (to, seq, offset).
    sends: Vec<(Rank, u64, usize)>,
    /// Blocks released (`ReleaseBlock`): (seq, offset).
    released: BTreeSet<(u64, usize)>,
    /// Root: messages announced as taken by every member (`MessageDelivered`).
    delivered: u64,
    /// Receivers: messages delivered (byte-exact, in order). Root: messages
    /// completed locally.
    completed: u64,
    closed: u32,
    failures: Vec<Failure>,
    /// Receivers: messages the application took.
    taken: u64,
    /// Receivers: the application's stream ended (`AllDelivered`).
    stream_ended: bool,
    /// Receivers: the application closed the group.
    app_closed: bool,
    /// The application's behaviour.
    app: App,
}

impl Node {
    fn terminal(&self) -> bool {
        self.closed > 0 || !self.failures.is_empty() || self.create_failure.is_some()
    }

    /// Created, and the creation neither completed nor failed.
    fn creating(&self) -> bool {
        self.created && !self.ready && self.member.is_some()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Data,
    RecvDone,
    SendDone,
    Signal,
}

const KINDS: [Kind; 4] = [Kind::Data, Kind::RecvDone, Kind::SendDone, Kind::Signal];

/// A group of members wired together by modelled links.
#[derive(Debug)]
pub(crate) struct Cluster {
    pub(crate) algorithm: Algorithm,
    pub(crate) n: usize,
    /// The group's racks and slow members (`None`: one rack, none slow).
    pub(crate) topology: Option<Topology>,
    /// The block size, or with `auto_min` the largest automatic one.
    pub(crate) block_size: usize,
    /// Automatic block sizes from this many bytes up to `block_size`
    /// ([`BlockSize::Automatic`]); `None`: every block `block_size`.
    pub(crate) auto_min: Option<usize>,
    /// Which receives the members announce at once: the seed's lowest bit
    /// chooses, so every property holds for both rules.
    pub(crate) announce: Announce,
    nodes: Vec<Node>,
    links: Vec<Link>,
    /// Event sources with something pending: ids `kind * n² + from * n + to`.
    active: Vec<usize>,
    pos: Vec<usize>,
    rng: Rng,
    /// Message bytes, per sequence number (generated up front).
    messages: Vec<Vec<u8>>,
    /// How many of them the root submitted.
    submitted: u64,
    close_called: bool,
    root_ops: VecDeque<RootOp>,
    /// Pending failure notifications: (member, suspect).
    notifications: Vec<(Rank, Rank)>,
    /// Notify::OneSurvivor notifications still to be placed: suspect.
    notify_one: Vec<Rank>,
    /// Ranks whose creation is a pending event.
    to_create: Vec<Rank>,
    /// The root's operations carried out as soon as its creation completes.
    at_ready: Vec<RootOp>,
    create_timeout: u64,
    /// Time: one tick per event, and jumps to the next deadline when
    /// nothing else can happen.
    clock: u64,
    /// `Join`s that reached a node before it created the group.
    early_joins: u64,
    /// Control messages that reached a node before it created the group.
    early_controls: u64,
    slow: Option<Rank>,
    crash: Option<Crash>,
    pub(crate) crashed: Option<Rank>,
    /// The deadline the clock last jumped to (to catch one that never goes).
    jumped_to: Option<u64>,
    /// Event index at which every member was found terminal for the first time.
    pub(crate) events: u64,
    trace: VecDeque<String>,
}

const TRACE: usize = 60;

/// The largest message every member accepts.
const MAX_MESSAGE_SIZE: u64 = 1 << 20;

/// One run: the group, the root's messages, and how its application acts.
#[derive(Clone, Debug)]
pub(crate) struct Scenario {
    pub(crate) algorithm: Algorithm,
    pub(crate) n: usize,
    /// The block size, or with `auto_min` the largest automatic one.
    pub(crate) block_size: usize,
    /// Automatic block sizes from this many bytes up to `block_size`.
    pub(crate) auto_min: Option<usize>,
    pub(crate) sizes: Vec<u64>,
    /// Whether the root calls `close()` after its last submit.
    pub(crate) close: bool,
    /// How many of the root's operations (submits, then close) happen as
    /// soon as it has the group; the rest happen at random points of the
    /// run.
    pub(crate) upfront: usize,
    /// A member whose events are picked with low probability.
    pub(crate) slow: Option<Rank>,
    /// The rack of each member (empty: one rack).
    pub(crate) racks: Vec<u32>,
    /// The members the configuration names slow.
    pub(crate) slow_members: Vec<usize>,
    pub(crate) seed: u64,
}

impl Scenario {
    /// The run's cluster, its nodes creating the group as `creation` says.
    pub(crate) fn build(&self, creation: &Creation) -> Cluster {
        let mut cluster = Cluster::with_topology(
            self.algorithm,
            self.n,
            self.block_size,
            self.auto_min,
            &self.sizes,
            self.seed,
            creation,
            (&self.racks, &self.slow_members),
        );
        cluster.set_slow(self.slow);
        let mut ops = vec![RootOp::Submit; self.sizes.len()];
        if self.close {
            ops.push(RootOp::Close);
        }
        let upfront = self.upfront.min(ops.len());
        for &op in &ops[..upfront] {
            cluster.root_op(op);
        }
        cluster.queue_root_ops(ops[upfront..].iter().copied());
        cluster
    }
}

/// How the nodes of a [`Cluster`] create the group.
#[derive(Clone, Debug)]
pub(crate) struct Creation {
    /// When each node creates it, by rank.
    pub(crate) at: Vec<CreateAt>,
    /// A node that creates it with a different configuration (another
    /// block size), so that its digest differs from everyone else's.
    pub(crate) odd: Option<Rank>,
    /// Ticks from a node's creation to its deadline.
    pub(crate) timeout: u64,
}

impl Creation {
    /// Every one of `n` nodes creates the group before any event, alike.
    pub(crate) fn upfront(n: usize) -> Self {
        Creation {
            at: vec![CreateAt::Upfront; n],
            odd: None,
            timeout: LONG_TIMEOUT,
        }
    }
}

impl Cluster {
    /// A group of `n` members created as `creation` says, whose root's
    /// messages have the given sizes: blocks of `block_size` bytes, or
    /// automatic sizes from `auto_min` to `block_size` if `auto_min` is
    /// given; racks (one per member, or none) and slow members.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn with_topology(
        algorithm: Algorithm,
        n: usize,
        block_size: usize,
        auto_min: Option<usize>,
        sizes: &[u64],
        seed: u64,
        creation: &Creation,
        (racks, slow): (&[u32], &[usize]),
    ) -> Self {
        assert_eq!(creation.at.len(), n, "one creation time per node");
        let mut rng = Rng::new(seed);
        let messages = sizes.iter().map(|&s| rng.bytes(s as usize)).collect();
        let members: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
        let mut topology = Topology::flat(n)
            .and_then(|t| t.with_slow_members(slow.iter().copied()))
            .expect("valid slow members");
        if !racks.is_empty() {
            topology = topology.with_racks(racks.to_vec()).expect("valid racks");
        }
        let topology = (!topology.is_flat()).then_some(topology);
        let shared = SharedSettings {
            algorithm,
            block_size: BlockSize::Fixed(block_size),
            max_message_size: MAX_MESSAGE_SIZE,
            message_digest: false,
            racks: (!racks.is_empty()).then_some(racks),
            slow_members: slow,
            max_batch: None,
        };
        let digest = group_digest(GROUP, &members, &shared);
        let odd_digest = group_digest(
            GROUP,
            &members,
            &SharedSettings {
                block_size: BlockSize::Fixed(block_size + 1),
                ..shared
            },
        );
        let nodes = (0..n)
            .map(|rank| Node {
                rendezvous: Rendezvous::new(NodeId(rank as u32)),
                digest: if creation.odd == Some(rank) {
                    odd_digest
                } else {
                    digest
                },
                member: None,
                created: false,
                ready: false,
                create_failure: None,
                crashed: false,
                bounce: vec![0; block_size],
                bounce_posted: false,
                bounce_landed: None,
                buffers: BTreeMap::new(),
                sends: Vec::new(),
                released: BTreeSet::new(),
                delivered: 0,
                completed: 0,
                closed: 0,
                failures: Vec::new(),
                taken: 0,
                stream_ended: false,
                app_closed: false,
                app: App::Reader,
            })
            .collect();
        let mut cluster = Cluster {
            algorithm,
            n,
            announce: if seed & 1 == 0 {
                Announce::OneSender
            } else {
                Announce::AnySender
            },
            topology,
            block_size,
            auto_min,
            nodes,
            links: (0..n * n).map(|_| Link::default()).collect(),
            active: Vec::new(),
            pos: vec![usize::MAX; KINDS.len() * n * n],
            rng,
            messages,
            submitted: 0,
            close_called: false,
            root_ops: VecDeque::new(),
            notifications: Vec::new(),
            notify_one: Vec::new(),
            to_create: (0..n)
                .filter(|&r| creation.at[r] == CreateAt::Later)
                .collect(),
            at_ready: Vec::new(),
            create_timeout: creation.timeout,
            clock: 0,
            early_joins: 0,
            early_controls: 0,
            slow: None,
            crash: None,
            crashed: None,
            jumped_to: None,
            events: 0,
            trace: VecDeque::new(),
        };
        for rank in 0..n {
            if creation.at[rank] == CreateAt::Upfront {
                cluster.create(rank);
            }
        }
        cluster
    }

    /// `rank` creates the group now, as the runtime's actor does: a member
    /// known to be down fails the new member at once; the rendezvous sends
    /// its `Join`s first, then hands over what came early; the member's
    /// actions follow.
    pub(crate) fn create(&mut self, rank: Rank) {
        if self.nodes[rank].crashed || self.nodes[rank].created {
            return;
        }
        self.log(format_args!("{rank}: create"));
        let block_size = self.block_policy();
        let node = &mut self.nodes[rank];
        node.created = true;
        let mut member = GroupMember::new(
            MemberConfig::new(self.algorithm, self.n, rank, block_size)
                .with_topology(self.topology.clone())
                .with_max_message_size(MAX_MESSAGE_SIZE)
                .with_announce(self.announce)
                .with_progress_timeout(PROGRESS_TIMEOUT),
        )
        .expect("valid member");
        if let Some(down) =
            (0..self.n).find(|&r| r != rank && node.rendezvous.is_down(NodeId(r as u32)))
        {
            member.handle_peer_failure(Some(down));
        }
        node.member = Some(member);
        let members = (0..self.n as u32).map(NodeId).collect();
        let deadline = self.clock.saturating_add(self.create_timeout);
        node.rendezvous
            .create(GROUP, members, node.digest, deadline);
        self.drive_rendezvous(rank);
        self.drain(rank);
    }

    /// Events of `rank` are picked with low probability.
    pub(crate) fn set_slow(&mut self, rank: Option<Rank>) {
        self.slow = rank;
    }

    /// How `rank`'s application behaves (a receiver's; default [`App::Reader`]).
    pub(crate) fn set_app(&mut self, rank: Rank, app: App) {
        assert!(
            rank > 0,
            "the root's application is driven by root operations"
        );
        self.nodes[rank].app = app;
    }

    /// Inject `crash` during [`run`](Self::run).
    pub(crate) fn set_crash(&mut self, crash: Crash) {
        self.crash = Some(crash);
    }

    /// Queue root operations, carried out as events at random points.
    pub(crate) fn queue_root_ops(&mut self, ops: impl IntoIterator<Item = RootOp>) {
        self.root_ops.extend(ops);
    }

    /// Carry out a root operation now, or as soon as the root's creation
    /// completes (the application has no group before).
    pub(crate) fn root_op(&mut self, op: RootOp) {
        if self.nodes[0].crashed {
            return;
        }
        if !self.nodes[0].ready {
            self.at_ready.push(op);
            return;
        }
        match op {
            RootOp::Submit => {
                let seq = self.submitted;
                let size = self.messages[seq as usize].len() as u64;
                self.log(format_args!("root submit #{seq} ({size} bytes)"));
                let root = self.nodes[0].member.as_mut().expect("a ready root");
                match root.submit(size) {
                    Ok(got) => {
                        assert_eq!(got, seq, "submit returned the wrong sequence number");
                        self.submitted += 1;
                    }
                    Err(e) => {
                        assert!(root.is_finished(), "submit refused on an open group: {e}");
                    }
                }
            }
            RootOp::Close => {
                self.log(format_args!("root close"));
                self.close_called = true;
                let root = self.nodes[0].member.as_mut().expect("a ready root");
                if let Err(e) = root.close() {
                    assert!(root.is_finished(), "close refused on an open group: {e}");
                }
            }
        }
        self.drain(0);
    }

    /// How the members cut messages into blocks.
    pub(crate) fn block_policy(&self) -> BlockSize {
        match self.auto_min {
            Some(min) => BlockSize::Automatic {
                min,
                max: self.block_size,
            },
            None => BlockSize::Fixed(self.block_size),
        }
    }

    /// The block size every member must use for a `size`-byte message.
    pub(crate) fn message_block_size(&self, size: u64) -> usize {
        self.block_policy().for_message(&self.schedule(0), size)
    }

    /// Member `rank`'s schedule.
    pub(crate) fn schedule(&self, rank: Rank) -> NodeSchedule {
        match &self.topology {
            Some(t) => NodeSchedule::with_topology(self.algorithm, t, rank),
            None => NodeSchedule::new(self.algorithm, self.n, rank),
        }
        .expect("valid schedule")
    }

    /// Sizes of the messages the root will submit.
    pub(crate) fn message_count(&self) -> u64 {
        self.messages.len() as u64
    }

    /// A rough upper bound on the events of a failure-free run.
    pub(crate) fn event_bound(&self) -> u64 {
        let n = self.n as u64;
        let transfers: u64 = self
            .messages
            .iter()
            .map(|m| {
                let size = m.len() as u64;
                block_count(size, self.message_block_size(size)) as u64 * (n - 1)
            })
            .sum();
        let m = self.message_count();
        // Per transfer: delivery, receive completion, send completion and its
        // ready-for-block. Per message and member: arming. Close: three
        // messages per member. Failure: notifications and relays. Creation:
        // one event per node, a Join per link, a refusal per link and its
        // relays.
        // Applications: a take per message and a close per receiver.
        4 * transfers
            + (n + 1) * (m + 2)
            + 3 * n
            + m
            + 1
            + 2 * n * n
            + 16
            + n
            + 3 * n * n
            + n * (m + 2)
            + n * m
    }

    fn log(&mut self, args: std::fmt::Arguments<'_>) {
        if self.trace.len() == TRACE {
            self.trace.pop_front();
        }
        self.trace.push_back(format!("[{}] {args}", self.events));
    }

    /// Panic with the context needed to understand a failed check.
    #[track_caller]
    fn bug(&self, what: std::fmt::Arguments<'_>) -> ! {
        let mut s = format!(
            "{what}\n  ({} n={} {:?} block_size={} sizes={:?})\n  last events:\n",
            self.algorithm,
            self.n,
            self.topology,
            self.block_size,
            self.messages.iter().map(Vec::len).collect::<Vec<_>>()
        );
        for line in &self.trace {
            let _ = writeln!(s, "    {line}");
        }
        panic!("{s}");
    }

    fn link(&self, from: Rank, to: Rank) -> usize {
        from * self.n + to
    }

    fn source(&self, kind: Kind, link: usize) -> usize {
        kind as usize * self.n * self.n + link
    }

    fn pending(&self, kind: Kind, link: usize) -> bool {
        let l = &self.links[link];
        match kind {
            Kind::Data => !l.data.is_empty(),
            Kind::RecvDone => !l.recv_done.is_empty(),
            Kind::SendDone => l.send_done > 0,
            Kind::Signal => !l.signals.is_empty(),
        }
    }

    /// Bring the active set up to date for one source.
    fn touch(&mut self, kind: Kind, link: usize) {
        let id = self.source(kind, link);
        let pending = self.pending(kind, link);
        let at = self.pos[id];
        if pending && at == usize::MAX {
            self.pos[id] = self.active.len();
            self.active.push(id);
        } else if !pending && at != usize::MAX {
            self.active.swap_remove(at);
            if let Some(&moved) = self.active.get(at) {
                self.pos[moved] = at;
            }
            self.pos[id] = usize::MAX;
        }
    }

    /// Drain `rank`'s actions, checking and carrying out each one.
    fn drain(&mut self, rank: Rank) {
        let now = Duration::from_nanos(self.clock);
        if let Some(member) = self.nodes[rank].member.as_mut() {
            member.handle_timeout(now);
        }
        while let Some(action) = self.nodes[rank]
            .member
            .as_mut()
            .and_then(GroupMember::poll_action)
        {
            self.apply(rank, action);
        }
        let node = &mut self.nodes[rank];
        if node.creating() && node.closed > 0 {
            // The group closed before the last Join arrived here.
            node.rendezvous.handle_group_closed(GROUP);
            self.drive_rendezvous(rank);
        } else if node.creating() && node.member.as_ref().is_some_and(GroupMember::is_finished) {
            // The group failed before every member joined: so does its
            // creation, and the node drops the group (as the runtime does).
            self.log(format_args!("{rank}: creation failed with the group"));
            self.drop_group(rank);
            self.nodes[rank].rendezvous.handle_group_ended(GROUP);
            self.drive_rendezvous(rank);
        }
    }

    /// `rank` drops the group: its member and posted receives are gone, and
    /// nothing of the group reaches it any more but its rendezvous's signals.
    fn drop_group(&mut self, rank: Rank) {
        self.nodes[rank].member = None;
        self.nodes[rank].bounce_posted = false;
        for peer in 0..self.n {
            let inbound = self.link(peer, rank);
            self.links[inbound].posted.clear();
        }
    }

    /// Carry out `rank`'s rendezvous actions, as the runtime's actor does.
    fn drive_rendezvous(&mut self, rank: Rank) {
        while let Some(action) = self.nodes[rank].rendezvous.poll_action() {
            self.log(format_args!("  {rank}: {action:?}"));
            match action {
                RendezvousAction::SendJoin { to, digest, .. } => {
                    self.send_signal(rank, to, Signal::Join(digest));
                }
                RendezvousAction::SendJoinRejected { to, digest, .. } => {
                    self.send_signal(rank, to, Signal::JoinRejected(digest));
                }
                RendezvousAction::SendControl { to, control, .. } => {
                    self.send_signal(rank, to, Signal::Group(control));
                }
                RendezvousAction::DeliverEarly { from, control, .. } => {
                    let from = self.rank_of(from);
                    if let Some(member) = self.nodes[rank].member.as_mut() {
                        member.handle_control(from, control);
                        self.drain(rank);
                    }
                }
                RendezvousAction::Ready { .. } => {
                    // The member's own actions first: it may have failed,
                    // which fails the creation instead.
                    self.drain(rank);
                    if self.nodes[rank].creating() {
                        self.nodes[rank].ready = true;
                        if rank == 0 {
                            for op in std::mem::take(&mut self.at_ready) {
                                self.root_op(op);
                            }
                        }
                    }
                }
                RendezvousAction::CreateFailed { failure, .. } => {
                    if !self.nodes[rank].creating() {
                        self.bug(format_args!(
                            "{rank}: creation failed ({failure:?}) while not in progress"
                        ));
                    }
                    self.nodes[rank].create_failure = Some(failure);
                    self.drop_group(rank);
                }
                RendezvousAction::PeerRefused { peer, .. } => {
                    let peer = self.rank_of(peer);
                    if let Some(member) = self.nodes[rank].member.as_mut() {
                        member.handle_peer_failure(Some(peer));
                        self.drain(rank);
                    }
                }
            }
        }
    }

    fn rank_of(&self, node: NodeId) -> Rank {
        let rank = node.0 as usize;
        if rank >= self.n {
            self.bug(format_args!("{node:?} is no member"));
        }
        rank
    }

    /// Put `signal` on the link `from → to`.
    fn send_signal(&mut self, from: Rank, to: NodeId, signal: Signal) {
        let to = self.rank_of(to);
        self.check_peer(from, to);
        let l = self.link(from, to);
        self.links[l].signals.push_back(signal);
        self.touch(Kind::Signal, l);
    }

    fn apply(&mut self, me: Rank, action: Action) {
        self.log(format_args!("  {me}: {action:?}"));
        if self.nodes[me].terminal() {
            self.bug(format_args!(
                "member {me} acted after its terminal event: {action:?}"
            ));
        }
        match action {
            Action::PostFirstBlockRecv { from } => {
                self.check_peer(me, from);
                let node = &mut self.nodes[me];
                if node.bounce_posted || node.bounce_landed.is_some() {
                    self.bug(format_args!(
                        "member {me} posted the bounce buffer while it is in use"
                    ));
                }
                node.bounce_posted = true;
                let l = self.link(from, me);
                self.links[l].posted.push_back(Region::Bounce);
                self.links[l].posted_total += 1;
            }
            Action::BeginMessage {
                seq,
                size,
                first_block,
                first_block_len,
                block_size,
                ..
            } => {
                let bs = self.message_block_size(size);
                if block_size != bs {
                    self.bug(format_args!(
                        "member {me} began #{seq} ({size} bytes) in blocks of {block_size}, \
                         the group's choice is {bs}"
                    ));
                }
                let node = &self.nodes[me];
                if me == 0 {
                    self.bug(format_args!("the root began a message"));
                }
                if seq != node.completed || node.buffers.contains_key(&seq) {
                    self.bug(format_args!(
                        "member {me} began message {seq} out of order (delivered {})",
                        node.completed
                    ));
                }
                let Some(true_size) = self.messages.get(seq as usize).map(|m| m.len() as u64)
                else {
                    self.bug(format_args!("member {me} began message {seq} never sent"));
                };
                if size != true_size || seq >= self.submitted {
                    self.bug(format_args!(
                        "member {me} began message {seq} with size {size}, root sent {true_size}"
                    ));
                }
                let offset = first_block * bs;
                let Some((len, pseq, poffset)) = node.bounce_landed else {
                    self.bug(format_args!(
                        "member {me} began a message with an empty bounce buffer"
                    ));
                };
                if len != first_block_len
                    || pseq != seq
                    || poffset != offset
                    || first_block_len != block_len(size, bs, first_block)
                    || first_block >= block_count(size, bs)
                {
                    self.bug(format_args!(
                        "member {me}: bounce buffer holds {len} bytes at {poffset} of #{pseq}, \
                         BeginMessage says block {first_block} ({first_block_len} bytes) of #{seq}"
                    ));
                }
                let size = size as usize;
                let mut buf = Buffer {
                    data: vec![0; size],
                    received: vec![false; size],
                    posted: vec![false; size],
                };
                let node = &mut self.nodes[me];
                buf.data[offset..offset + len].copy_from_slice(&node.bounce[..len]);
                buf.received[offset..offset + len].fill(true);
                buf.posted[offset..offset + len].fill(true);
                node.buffers.insert(seq, buf);
                node.bounce_landed = None;
            }
            Action::PostRecv {
                from,
                seq,
                offset,
                len,
            } => {
                self.check_peer(me, from);
                let Some(buf) = self.nodes[me].buffers.get(&seq) else {
                    self.bug(format_args!(
                        "member {me} posted a receive into message {seq}, which has no buffer"
                    ));
                };
                if offset + len > buf.data.len() || buf.posted[offset..offset + len].contains(&true)
                {
                    self.bug(format_args!(
                        "member {me} posted {offset}..{} of message {seq} ({} bytes): \
                         out of range or posted twice",
                        offset + len,
                        buf.data.len()
                    ));
                }
                let buf = self.nodes[me].buffers.get_mut(&seq).expect("checked");
                buf.posted[offset..offset + len].fill(true);
                let l = self.link(from, me);
                self.links[l]
                    .posted
                    .push_back(Region::Message { seq, offset, len });
                self.links[l].posted_total += 1;
            }
            Action::SendBlock {
                to,
                seq,
                offset,
                len,
                immediate,
            } => {
                self.check_peer(me, to);
                let bytes = if me == 0 {
                    if seq >= self.submitted {
                        self.bug(format_args!("the root sent message {seq}, never submitted"));
                    }
                    let msg = &self.messages[seq as usize];
                    if offset + len > msg.len() || immediate != msg.len() as u64 {
                        self.bug(format_args!(
                            "the root sent {offset}..{} of message {seq} ({} bytes) \
                             with immediate {immediate}",
                            offset + len,
                            msg.len()
                        ));
                    }
                    msg[offset..offset + len].to_vec()
                } else {
                    let Some(buf) = self.nodes[me].buffers.get(&seq) else {
                        self.bug(format_args!(
                            "member {me} sent from message {seq}, not held"
                        ));
                    };
                    if offset + len > buf.data.len() || immediate != buf.data.len() as u64 {
                        self.bug(format_args!(
                            "member {me} sent {offset}..{} of message {seq} ({} bytes) \
                             with immediate {immediate}",
                            offset + len,
                            buf.data.len()
                        ));
                    }
                    if buf.received[offset..offset + len].contains(&false) {
                        self.bug(format_args!(
                            "member {me} sent {offset}..{} of message {seq} before receiving it",
                            offset + len
                        ));
                    }
                    buf.data[offset..offset + len].to_vec()
                };
                if self.nodes[me].released.contains(&(seq, offset)) {
                    self.bug(format_args!(
                        "member {me} sent block {offset} of message {seq} after releasing it"
                    ));
                }
                self.nodes[me].sends.push((to, seq, offset));
                let l = self.link(me, to);
                if self.links[l].sent_total >= self.links[l].ready_delivered {
                    self.bug(format_args!(
                        "member {me} sent a block to {to} before {to} said it was ready"
                    ));
                }
                self.links[l].sent_total += 1;
                self.links[l].data.push_back(Packet {
                    seq,
                    offset,
                    bytes,
                    immediate,
                });
                self.touch(Kind::Data, l);
            }
            Action::SendControl { to, control } => {
                self.check_peer(me, to);
                if control == Control::ReadyForBlock {
                    // Every ready-for-block stands for one receive posted
                    // before it on the link it invites data on.
                    let inbound = self.link(to, me);
                    // One sender at a time holds the receiver's readiness:
                    // no block announced to another peer is still to come.
                    for other in (0..self.nodes.len()).filter(|&p| p != to && p != me) {
                        let link = &self.links[self.link(other, me)];
                        if self.announce == Announce::OneSender && link.ready_sent > link.arrived {
                            self.bug(format_args!(
                                "member {me} told {to} it is ready while {} block(s) it \
                                 announced to {other} have not arrived",
                                link.ready_sent - link.arrived
                            ));
                        }
                    }
                    // Whoever sends, never more than a window announced.
                    let outstanding: u64 = (0..self.nodes.len())
                        .filter(|&p| p != me)
                        .map(|p| {
                            let link = &self.links[self.link(p, me)];
                            link.ready_sent - link.arrived
                        })
                        .sum();
                    if outstanding >= READY_WINDOW as u64 {
                        self.bug(format_args!(
                            "member {me} told {to} it is ready with {outstanding} block(s) \
                             announced that have not arrived"
                        ));
                    }
                    let link = &mut self.links[inbound];
                    link.ready_sent += 1;
                    if link.ready_sent > link.posted_total {
                        self.bug(format_args!(
                            "member {me} told {to} it is ready before posting the receive"
                        ));
                    }
                }
                self.send_signal(me, NodeId(to as u32), Signal::Group(control));
            }
            Action::MessageComplete { seq } => {
                let node = &self.nodes[me];
                if seq != node.completed {
                    self.bug(format_args!(
                        "member {me} completed message {seq}, expected {}",
                        node.completed
                    ));
                }
                let bs = self.message_block_size(self.messages[seq as usize].len() as u64);
                let blocks = block_count(self.messages[seq as usize].len() as u64, bs);
                let released = node.released.range((seq, 0)..=(seq, usize::MAX)).count();
                if released != blocks {
                    self.bug(format_args!(
                        "member {me} completed message {seq} with {released} of its {blocks} \
                         blocks released"
                    ));
                }
                if node.sends.iter().any(|&(_, s, _)| s == seq) {
                    self.bug(format_args!(
                        "member {me} completed message {seq} with a send of it outstanding"
                    ));
                }
                if me != 0 {
                    let Some(buf) = self.nodes[me].buffers.remove(&seq) else {
                        self.bug(format_args!(
                            "member {me} delivered message {seq} it never began"
                        ));
                    };
                    if buf.received.contains(&false) || buf.posted.contains(&false) {
                        self.bug(format_args!(
                            "member {me} delivered message {seq} before all its bytes arrived"
                        ));
                    }
                    if buf.data != self.messages[seq as usize] {
                        self.bug(format_args!(
                            "member {me} delivered message {seq} with the wrong bytes"
                        ));
                    }
                }
                self.nodes[me].completed += 1;
            }
            Action::ReleaseBlock { seq, offset, len } => {
                let node = &self.nodes[me];
                let size = self.messages.get(seq as usize).map_or(0, Vec::len);
                let bs = self.message_block_size(size as u64);
                let here = if me == 0 {
                    seq < self.submitted
                } else {
                    node.buffers.get(&seq).is_some_and(|b| {
                        offset + len <= b.data.len()
                            && !b.received[offset..offset + len].contains(&false)
                    })
                };
                if !here || offset % bs != 0 || len != block_len(size as u64, bs, offset / bs) {
                    self.bug(format_args!(
                        "member {me} released {offset}..{} of message {seq}, not a block it holds",
                        offset + len
                    ));
                }
                if node.sends.iter().any(|&(_, s, o)| s == seq && o == offset) {
                    self.bug(format_args!(
                        "member {me} released block {offset} of message {seq} with a send of it \
                         outstanding"
                    ));
                }
                if !self.nodes[me].released.insert((seq, offset)) {
                    self.bug(format_args!(
                        "member {me} released block {offset} of message {seq} twice"
                    ));
                }
            }
            Action::MessageDelivered { seq } => {
                let node = &self.nodes[me];
                if me != 0 || seq != node.delivered || seq >= node.completed {
                    self.bug(format_args!(
                        "member {me}: MessageDelivered for {seq} (delivered {}, completed {})",
                        node.delivered, node.completed
                    ));
                }
                if let Some(rank) = (1..self.n).find(|&r| self.nodes[r].taken <= seq) {
                    self.bug(format_args!(
                        "the root announced message {seq} taken by everyone, member {rank}'s \
                         application took {}",
                        self.nodes[rank].taken
                    ));
                }
                self.nodes[0].delivered += 1;
            }
            Action::AllDelivered => {
                let node = &self.nodes[me];
                if me == 0 || node.stream_ended {
                    self.bug(format_args!(
                        "member {me}: AllDelivered twice or on the root"
                    ));
                }
                if !self.close_called || node.completed != self.submitted {
                    self.bug(format_args!(
                        "member {me}: AllDelivered with {} of {} messages (root closed: {})",
                        node.completed, self.submitted, self.close_called
                    ));
                }
                self.nodes[me].stream_ended = true;
            }
            Action::Closed => {
                for (rank, node) in self.nodes.iter().enumerate().skip(1) {
                    // "Closed" means every receiver's application took every
                    // message and closed: the root's vouches for everyone, a
                    // receiver's for itself.
                    if (me == 0 || rank == me) && (!node.app_closed || node.taken != self.submitted)
                    {
                        self.bug(format_args!(
                            "member {me} closed while the application of {rank} took {} of {} \
                             messages (closed: {})",
                            node.taken, self.submitted, node.app_closed
                        ));
                    }
                }
                if !self.close_called {
                    self.bug(format_args!(
                        "member {me} closed, but the root never closed"
                    ));
                }
                if me == 0 && self.nodes[0].delivered != self.submitted {
                    self.bug(format_args!(
                        "the root closed with {} of {} messages announced as taken by everyone",
                        self.nodes[0].delivered, self.submitted
                    ));
                }
                for (rank, node) in self.nodes.iter().enumerate() {
                    // The root's Closed vouches for everyone (a crashed member
                    // included: it acknowledged before it crashed); a
                    // receiver's for itself.
                    if (me == 0 || rank == me) && node.completed != self.submitted {
                        self.bug(format_args!(
                            "member {me} closed while member {rank} has {} of {} messages",
                            node.completed, self.submitted
                        ));
                    }
                }
                self.nodes[me].closed += 1;
            }
            Action::Failed(failure) => {
                self.nodes[me].failures.push(failure);
            }
        }
    }

    fn check_peer(&self, me: Rank, peer: Rank) {
        if peer == me || peer >= self.n {
            self.bug(format_args!("member {me} addressed rank {peer}"));
        }
    }

    /// Pick one pending event at random.
    fn pick(&mut self) -> Option<Event> {
        // The root's application acts only on a group it has.
        let root_op = !self.root_ops.is_empty() && self.nodes[0].ready;
        let apps: Vec<Rank> = (1..self.n).filter(|&r| self.app_can_act(r)).collect();
        let extra = usize::from(root_op)
            + apps.len()
            + self.to_create.len()
            + self.notifications.len()
            + self.notify_one.len();
        let total = self.active.len() + extra;
        if total == 0 {
            return None;
        }
        let mut tries = 0;
        loop {
            let mut i = self.rng.below(total);
            let event = if i < self.active.len() {
                let id = self.active[i];
                let nn = self.n * self.n;
                let (kind, link) = (KINDS[id / nn], id % nn);
                Event::Link(kind, link / self.n, link % self.n)
            } else {
                i -= self.active.len();
                if root_op {
                    if i == 0 {
                        return Some(Event::RootOp);
                    }
                    i -= 1;
                }
                if i < apps.len() {
                    return Some(Event::App(apps[i]));
                }
                i -= apps.len();
                if i < self.to_create.len() {
                    Event::Create(i)
                } else if i - self.to_create.len() < self.notifications.len() {
                    Event::Notify(i - self.to_create.len())
                } else {
                    i -= self.to_create.len();
                    Event::NotifyOne(i - self.notifications.len())
                }
            };
            tries += 1;
            if tries < 4
                && self.slow.is_some()
                && self.owner(event) == self.slow
                && self.rng.chance(7, 8)
            {
                continue;
            }
            return Some(event);
        }
    }

    /// The member that handles `event` (for slowing one member down).
    fn owner(&self, event: Event) -> Option<Rank> {
        match event {
            Event::Link(Kind::SendDone, from, _) => Some(from),
            Event::Link(_, _, to) => Some(to),
            Event::RootOp => Some(0),
            Event::App(rank) => Some(rank),
            Event::Create(i) => Some(self.to_create[i]),
            Event::Notify(_) | Event::NotifyOne(_) => None,
        }
    }

    /// Whether the application of `rank` (a receiver) takes the next
    /// delivered message now (rather than closing or leaving).
    fn app_takes(&self, rank: Rank) -> bool {
        let node = &self.nodes[rank];
        node.taken < node.completed
            && match node.app {
                App::ClosesAfter(k) => node.taken < k,
                _ => true,
            }
    }

    /// Whether the application of `rank` (a receiver) has something to do.
    fn app_can_act(&self, rank: Rank) -> bool {
        let node = &self.nodes[rank];
        let open = node.member.as_ref().is_some_and(|m| !m.is_finished());
        if node.crashed || !node.ready || node.app_closed || !open {
            return false;
        }
        if self.app_takes(rank) {
            return true;
        }
        match node.app {
            App::Reader | App::LeavesBeforeClose | App::CrashesBeforeClose => node.stream_ended,
            App::NeverCloses => false,
            App::ClosesAfter(k) => node.taken >= k || node.stream_ended,
        }
    }

    /// The application of `rank` takes a message, or closes, leaves or
    /// crashes as its [`App`] says.
    fn app_act(&mut self, rank: Rank) {
        if self.app_takes(rank) {
            let seq = self.nodes[rank].taken;
            self.log(format_args!("{rank}: app takes #{seq}"));
            self.nodes[rank].taken += 1;
            self.member_mut(rank).message_consumed();
            self.drain(rank);
            return;
        }
        match self.nodes[rank].app {
            App::Reader | App::ClosesAfter(_) => {
                self.log(format_args!("{rank}: app closes"));
                self.nodes[rank].app_closed = true;
                if let Err(e) = self.member_mut(rank).close() {
                    self.bug(format_args!("{rank}: close refused on an open group: {e}"));
                }
                self.drain(rank);
            }
            App::LeavesBeforeClose => self.shutdown(rank),
            App::CrashesBeforeClose => self.do_crash(Crash {
                victim: rank,
                at_event: 0,
                notify: Notify::AllSurvivors,
            }),
            App::NeverCloses => self.bug(format_args!("{rank}: an app that never closes acted")),
        }
    }

    /// Whether `rank` can still be told of a failure: alive, and its group
    /// not created yet or not finished.
    fn open(&self, rank: Rank) -> bool {
        let node = &self.nodes[rank];
        !node.crashed
            && match &node.member {
                Some(m) => !m.is_finished(),
                None => !node.created,
            }
    }

    /// Fail the creations whose deadline has come, and pass the time to
    /// the members whose progress deadline has come.
    fn fire_timeouts(&mut self) {
        for rank in 0..self.n {
            let now = self.clock;
            let node = &mut self.nodes[rank];
            if !node.crashed && node.rendezvous.poll_timeout().is_some_and(|t| t <= now) {
                node.rendezvous.handle_timeout(now);
                self.log(format_args!("{rank}: timeout at {now}"));
                self.drive_rendezvous(rank);
            }
            let node = &self.nodes[rank];
            let due = node.member.as_ref().and_then(GroupMember::poll_timeout);
            if !node.crashed && due.is_some_and(|t| ticks(t) <= now) {
                self.log(format_args!("{rank}: progress deadline at {now}"));
                self.drain(rank);
                self.drive_rendezvous(rank);
            }
        }
    }

    /// The earliest creation or progress deadline of a live node.
    fn next_deadline(&self) -> Option<u64> {
        self.nodes
            .iter()
            .filter(|n| !n.crashed)
            .flat_map(|n| {
                let progress = n.member.as_ref().and_then(GroupMember::poll_timeout);
                [n.rendezvous.poll_timeout(), progress.map(ticks)]
            })
            .flatten()
            .min()
    }

    /// Run until nothing is pending; panics if it takes more than `bound` events.
    pub(crate) fn run(&mut self, bound: u64) {
        self.run_until(bound, u64::MAX);
    }

    /// Run until nothing is pending or `stop` events have happened in all;
    /// panics if it takes more than `bound` events.
    pub(crate) fn run_until(&mut self, bound: u64, stop: u64) {
        while self.events < stop {
            if let Some(crash) = self.crash
                && self.events >= crash.at_event
            {
                self.do_crash(crash);
            }
            self.fire_timeouts();
            let Some(event) = self.pick() else {
                if let Some(crash) = self.crash {
                    self.do_crash(crash);
                    continue;
                }
                if let Some(deadline) = self.next_deadline() {
                    // Nothing else can happen: time passes.
                    if deadline <= self.clock && self.jumped_to == Some(deadline) {
                        self.bug(format_args!("a deadline at {deadline} does not go away"));
                    }
                    self.jumped_to = Some(deadline);
                    self.clock = self.clock.max(deadline);
                    continue;
                }
                break;
            };
            self.events += 1;
            self.clock += 1;
            if self.events > bound {
                self.bug(format_args!("no quiescence after {bound} events"));
            }
            self.step(event);
        }
    }

    fn step(&mut self, event: Event) {
        let bs = self.block_size;
        match event {
            Event::RootOp => {
                let op = self.root_ops.pop_front().expect("picked");
                self.root_op(op);
            }
            Event::App(rank) => self.app_act(rank),
            Event::Create(i) => {
                let rank = self.to_create.swap_remove(i);
                self.create(rank);
            }
            Event::Notify(i) => {
                let (rank, suspect) = self.notifications.swap_remove(i);
                self.log(format_args!("{rank}: peer failure {suspect}"));
                self.peer_down(rank, suspect);
            }
            Event::NotifyOne(i) => {
                let suspect = self.notify_one.swap_remove(i);
                let open: Vec<Rank> = (0..self.n).filter(|&r| self.open(r)).collect();
                if !open.is_empty() {
                    let rank = open[self.rng.below(open.len())];
                    self.log(format_args!(
                        "{rank}: peer failure {suspect} (only one told)"
                    ));
                    self.peer_down(rank, suspect);
                    // A member may judge the failure moot (for instance after
                    // the close barrier); then the root, which has a control
                    // link to everyone, finds out on its own.
                    if rank != 0 && !self.nodes[0].crashed && self.open(rank) {
                        self.notifications.push((0, suspect));
                    }
                }
            }
            Event::Link(Kind::Data, from, to) => {
                let l = self.link(from, to);
                let packet = self.links[l].data.pop_front().expect("picked");
                self.touch(Kind::Data, l);
                if self.nodes[to].crashed {
                    // Sent after the crash (on a ready-for-block the victim
                    // sent before it): nothing reaches a crashed member.
                    self.log(format_args!("drop {from}->{to}: the receiver crashed"));
                    return;
                }
                if self.nodes[to].member.is_none() {
                    // The receiver dropped the group (its creation failed):
                    // its receives are gone.
                    self.log(format_args!(
                        "drop {from}->{to}: the receiver dropped the group"
                    ));
                    return;
                }
                self.log(format_args!(
                    "deliver {from}->{to}: #{} {}..{} imm {}",
                    packet.seq,
                    packet.offset,
                    packet.offset + packet.bytes.len(),
                    packet.immediate
                ));
                let Some(region) = self.links[l].posted.pop_front() else {
                    self.bug(format_args!(
                        "RNR: a block from {from} reached {to} with no receive posted"
                    ));
                };
                let len = packet.bytes.len();
                let node = &mut self.nodes[to];
                match region {
                    Region::Bounce => {
                        if len > bs {
                            self.bug(format_args!(
                                "{from}->{to}: {len} bytes sent into a {bs}-byte bounce buffer"
                            ));
                        }
                        node.bounce_posted = false;
                        node.bounce[..len].copy_from_slice(&packet.bytes);
                        node.bounce_landed = Some((len, packet.seq, packet.offset));
                    }
                    Region::Message {
                        seq,
                        offset,
                        len: posted,
                    } => {
                        if len > posted {
                            self.bug(format_args!(
                                "{from}->{to}: {len} bytes sent into a {posted}-byte receive"
                            ));
                        }
                        if seq != packet.seq || offset != packet.offset {
                            self.bug(format_args!(
                                "{from}->{to}: block {}@#{} landed in the receive for {offset}@#{seq}",
                                packet.offset, packet.seq
                            ));
                        }
                        let buf = node.buffers.get_mut(&seq).expect("posted into a buffer");
                        buf.data[offset..offset + len].copy_from_slice(&packet.bytes);
                    }
                }
                let link = &mut self.links[l];
                link.recv_done.push_back(RecvDone {
                    region,
                    immediate: packet.immediate,
                    len,
                });
                if !self.nodes[from].crashed {
                    link.send_done += 1;
                }
                self.touch(Kind::RecvDone, l);
                self.touch(Kind::SendDone, l);
            }
            Event::Link(Kind::RecvDone, from, to) => {
                let l = self.link(from, to);
                let done = self.links[l].recv_done.pop_front().expect("picked");
                self.links[l].arrived += 1;
                self.touch(Kind::RecvDone, l);
                self.log(format_args!("{to}: recv completion from {from}"));
                if let Region::Message { seq, offset, .. } = done.region
                    && let Some(buf) = self.nodes[to].buffers.get_mut(&seq)
                {
                    buf.received[offset..offset + done.len].fill(true);
                }
                if let Some(member) = self.nodes[to].member.as_mut() {
                    member.handle_block(from, done.immediate, done.len);
                    self.drain(to);
                }
            }
            Event::Link(Kind::SendDone, from, to) => {
                let l = self.link(from, to);
                self.links[l].send_done -= 1;
                self.touch(Kind::SendDone, l);
                self.log(format_args!("{from}: send completion to {to}"));
                let sends = &mut self.nodes[from].sends;
                let Some(i) = sends.iter().position(|&(t, _, _)| t == to) else {
                    self.bug(format_args!(
                        "{from}: a send completed that was never posted"
                    ));
                };
                sends.remove(i);
                if let Some(member) = self.nodes[from].member.as_mut() {
                    member.handle_send_complete(to);
                    self.drain(from);
                }
            }
            Event::Link(Kind::Signal, from, to) => {
                let l = self.link(from, to);
                let signal = self.links[l].signals.pop_front().expect("picked");
                self.touch(Kind::Signal, l);
                if self.nodes[to].crashed {
                    self.log(format_args!("drop {from}->{to}: the receiver crashed"));
                    return;
                }
                self.log(format_args!("signal {from}->{to}: {signal:?}"));
                if !self.nodes[to].created {
                    match signal {
                        Signal::Join(_) => self.early_joins += 1,
                        Signal::Group(_) => self.early_controls += 1,
                        Signal::JoinRejected(_) => {}
                    }
                }
                let sender = NodeId(from as u32);
                match signal {
                    Signal::Join(digest) => {
                        self.nodes[to].rendezvous.handle_join(sender, GROUP, digest);
                    }
                    Signal::JoinRejected(digest) => {
                        self.nodes[to]
                            .rendezvous
                            .handle_join_rejected(sender, GROUP, digest);
                    }
                    Signal::Group(control) => {
                        if control == Control::ReadyForBlock {
                            let data_link = self.link(to, from);
                            self.links[data_link].ready_delivered += 1;
                        }
                        if let Some(member) = self.nodes[to].member.as_mut() {
                            member.handle_control(from, control);
                            self.drain(to);
                        } else {
                            self.nodes[to]
                                .rendezvous
                                .handle_early_control(sender, GROUP, control);
                        }
                    }
                }
                self.drive_rendezvous(to);
            }
        }
    }

    fn do_crash(&mut self, crash: Crash) {
        self.crash = None;
        let c = crash.victim;
        self.log(format_args!("CRASH {c}"));
        self.crashed = Some(c);
        self.nodes[c].crashed = true;
        if c == 0 {
            self.root_ops.clear();
            self.at_ready.clear();
        }
        self.to_create.retain(|&r| r != c);
        for peer in 0..self.n {
            // What it sent may be partly on the wire still: keep a random prefix.
            let out = self.link(c, peer);
            let keep = self.rng.below(self.links[out].data.len() + 1);
            self.links[out].data.truncate(keep);
            let keep = self.rng.below(self.links[out].signals.len() + 1);
            self.links[out].signals.truncate(keep);
            self.links[out].send_done = 0;
            // Nothing reaches it any more.
            let inbound = self.link(peer, c);
            self.links[inbound].data.clear();
            self.links[inbound].signals.clear();
            self.links[inbound].recv_done.clear();
            for kind in KINDS {
                self.touch(kind, out);
                self.touch(kind, inbound);
            }
        }
        let survivors = (0..self.n).filter(|&r| r != c);
        match crash.notify {
            Notify::AllSurvivors => self.notifications.extend(survivors.map(|r| (r, c))),
            Notify::LinkPeers => {
                let mut peers = self.schedule(c).connections();
                if c == 0 {
                    peers = (1..self.n).collect();
                } else if !peers.contains(&0) {
                    peers.push(0);
                }
                self.notifications.extend(peers.into_iter().map(|r| (r, c)));
            }
            Notify::OneSurvivor => self.notify_one.push(c),
        }
    }

    /// `rank` learns that `suspect` is gone: its rendezvous, and its group's
    /// member if it has one (as the runtime's actor does).
    fn peer_down(&mut self, rank: Rank, suspect: Rank) {
        let node = &mut self.nodes[rank];
        node.rendezvous.handle_peer_down(NodeId(suspect as u32));
        if let Some(member) = node.member.as_mut() {
            member.handle_peer_failure(Some(suspect));
            self.drain(rank);
        }
        self.drive_rendezvous(rank);
    }

    // ---- outcome queries -------------------------------------------------

    /// Whether `rank`'s creation completed.
    pub(crate) fn is_ready(&self, rank: Rank) -> bool {
        self.nodes[rank].ready
    }

    /// Why `rank`'s creation failed in the rendezvous, if it did.
    pub(crate) fn create_failure(&self, rank: Rank) -> Option<&CreateFailure> {
        self.nodes[rank].create_failure.as_ref()
    }

    /// `Join`s that reached a node before it created the group.
    pub(crate) fn early_joins(&self) -> u64 {
        self.early_joins
    }

    /// Control messages that reached a node before it created the group.
    pub(crate) fn early_controls(&self) -> u64 {
        self.early_controls
    }

    /// Messages the root submitted.
    pub(crate) fn submitted(&self) -> u64 {
        self.submitted
    }

    /// Messages completed (root) or delivered (receivers) by `rank`.
    pub(crate) fn completed(&self, rank: Rank) -> u64 {
        self.nodes[rank].completed
    }

    /// Number of `Closed` events of `rank`.
    pub(crate) fn closed(&self, rank: Rank) -> u32 {
        self.nodes[rank].closed
    }

    /// `Failed` events of `rank`.
    pub(crate) fn failures(&self, rank: Rank) -> &[Failure] {
        &self.nodes[rank].failures
    }

    /// Whether `rank` crashed.
    pub(crate) fn is_crashed(&self, rank: Rank) -> bool {
        self.nodes[rank].crashed
    }

    /// The member itself, for direct pokes.
    pub(crate) fn member_mut(&mut self, rank: Rank) -> &mut GroupMember {
        self.nodes[rank]
            .member
            .as_mut()
            .expect("the group exists here")
    }

    /// `rank` leaves the group now (`GroupMember::shutdown`), if it has it.
    pub(crate) fn shutdown(&mut self, rank: Rank) {
        self.log(format_args!("{rank}: shutdown"));
        if let Some(member) = self.nodes[rank].member.as_mut() {
            member.shutdown();
            self.drain(rank);
        }
    }

    /// Deliver `control` from `from` to `to` now (a forged message), if
    /// `to` has the group.
    pub(crate) fn inject_control(&mut self, from: Rank, to: Rank, control: Control) {
        self.log(format_args!("FORGED control {from}->{to}: {control:?}"));
        if let Some(member) = self.nodes[to].member.as_mut() {
            member.handle_control(from, control);
            self.drain(to);
        }
    }

    /// Nothing is in flight any more and no member has actions queued.
    pub(crate) fn assert_quiescent(&mut self) {
        if !self.active.is_empty() {
            self.bug(format_args!("events still pending"));
        }
        for rank in 0..self.n {
            if let Some(a) = self.nodes[rank]
                .member
                .as_mut()
                .and_then(GroupMember::poll_action)
            {
                self.bug(format_args!("member {rank} still had an action: {a:?}"));
            }
            if let Some(a) = self.nodes[rank].rendezvous.poll_action() {
                self.bug(format_args!("node {rank} still had an action: {a:?}"));
            }
            if !self.nodes[rank].crashed && self.nodes[rank].creating() {
                self.bug(format_args!("node {rank} is still creating the group"));
            }
        }
    }

    /// Check the outcome of a failure-free run: every creation completed,
    /// every message everywhere, and `Closed` exactly once on every member
    /// iff the root closed.
    #[track_caller]
    pub(crate) fn assert_clean_outcome(&self) {
        for rank in 0..self.n {
            let node = &self.nodes[rank];
            if !node.ready || node.create_failure.is_some() {
                self.bug(format_args!(
                    "node {rank}: creation not completed ({:?})",
                    node.create_failure
                ));
            }
            if !node.failures.is_empty() {
                self.bug(format_args!("member {rank} failed: {:?}", node.failures));
            }
            if node.completed != self.submitted {
                self.bug(format_args!(
                    "member {rank} has {} of {} messages after the run drained",
                    node.completed, self.submitted
                ));
            }
            let want = u32::from(self.close_called);
            if node.closed != want {
                self.bug(format_args!(
                    "member {rank} closed {} times (root closed: {})",
                    node.closed, self.close_called
                ));
            }
        }
    }

    /// Check the outcome of a run with one crash: every survivor reached
    /// exactly one terminal event; a failure names the crashed member and is
    /// not a protocol violation; no creation fails in the rendezvous (no
    /// mismatch, and the failure reaches every survivor before a deadline).
    #[track_caller]
    pub(crate) fn assert_crash_outcome(&self) {
        let c = self.crashed.expect("a crash happened");
        // A survivor that lost the crashed member's Join with the crash (a
        // random suffix of its signals is lost) never has the group: its
        // application cannot close it, so the group cannot close. Its
        // creation times out naming the crashed member; the root, waiting
        // on its close acknowledgement, times out on it (no progress) and
        // tells the others.
        let lost_join = |rank: Rank| {
            matches!(
                &self.nodes[rank].create_failure,
                Some(CreateFailure::TimedOut { missing }) if missing[..] == [NodeId(c as u32)]
            )
        };
        for rank in (0..self.n).filter(|&r| r != c) {
            let node = &self.nodes[rank];
            let terminals = node.closed as usize
                + node.failures.len()
                + usize::from(node.create_failure.is_some());
            if terminals != 1 {
                self.bug(format_args!(
                    "survivor {rank}: {} Closed, failures {:?}, creation failure {:?}",
                    node.closed, node.failures, node.create_failure
                ));
            }
            if let Some(f) = &node.create_failure {
                // Every failure is relayed to every member (a crashed
                // member's signals aside): nobody waits for a deadline,
                // but one whose Join from the crashed member was lost.
                if !lost_join(rank) {
                    self.bug(format_args!("survivor {rank}: creation failed with {f:?}"));
                }
            } else if let Some(f) = node.failures.first() {
                let reason_ok = matches!(
                    f.reason,
                    FailureReason::PeerUnreachable | FailureReason::Reported { .. }
                );
                let on_lost_join = f.suspect.is_some_and(lost_join)
                    && matches!(
                        f.reason,
                        FailureReason::NoProgress | FailureReason::Reported { .. }
                    );
                if !on_lost_join && (f.suspect != Some(c) || !reason_ok) {
                    self.bug(format_args!(
                        "survivor {rank} failed with {f:?}, expected suspect {c}"
                    ));
                }
            } else if node.completed != self.submitted {
                self.bug(format_args!("survivor {rank} closed without every message"));
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Event {
    Link(Kind, Rank, Rank),
    RootOp,
    /// `to_create[i]` creates the group.
    Create(usize),
    Notify(usize),
    NotifyOne(usize),
    /// A receiver's application acts.
    App(Rank),
}

/// A member's time (a `Duration` from the harness's origin) in ticks.
fn ticks(t: Duration) -> u64 {
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
}

/// The receivers' application behaviours other than [`App::Reader`].
pub(crate) const MISBEHAVING_APPS: [App; 4] = [
    App::NeverCloses,
    App::LeavesBeforeClose,
    App::CrashesBeforeClose,
    App::ClosesAfter(0),
];
