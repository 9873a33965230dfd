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

mod actions;
mod events;
mod outcome;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

use crate::schedule::{Algorithm, BlockSize, NodeSchedule, Schedule, Topology};
use crate::{
    Action, Announce, Control, CreateFailure, Failure, FailureKind, GroupMember, GroupSummary,
    MemberConfig, READY_WINDOW, Rank, Rendezvous, RendezvousAction, SharedSettings, block_count,
    block_len,
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

/// A signal on a link: the rendezvous's, or a group's control message. A
/// `Join` or `JoinRejected` stands for the two signals a driver sends for
/// it (the fingerprint, then the signal), which a link keeps together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Signal {
    Join(GroupSummary),
    JoinRejected(GroupSummary),
    IdInUse,
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
    /// The summary of the group this node creates it with.
    summary: GroupSummary,
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
    /// Receivers: messages the application persisted (every other take,
    /// and all it took before it closes). Root: messages announced as
    /// persisted by every member (`MessagePersisted`).
    persisted: u64,
    /// Receivers: the application's stream ended (`AllDelivered`).
    stream_ended: bool,
    /// Receivers: the application closed the group.
    app_closed: bool,
    /// The application's behaviour.
    app: App,
}

impl Node {
    /// Node `rank`, before it creates the group (with `summary`), with a
    /// bounce buffer of `block_size` bytes.
    fn new(rank: Rank, summary: GroupSummary, block_size: usize) -> Self {
        Node {
            rendezvous: Rendezvous::new(NodeId(rank as u32)),
            summary,
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
            persisted: 0,
            stream_ended: false,
            app_closed: false,
            app: App::Reader,
        }
    }

    /// Whether the group ended here (closed or failed, or its creation
    /// failed).
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
        let mut cluster = Cluster::new(self, creation);
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
    /// The cluster of `scenario`'s group, its members created as `creation`
    /// says (the root's operations are the scenario's to queue).
    fn new(scenario: &Scenario, creation: &Creation) -> Self {
        let Scenario {
            algorithm,
            n,
            block_size,
            auto_min,
            seed,
            ..
        } = *scenario;
        let (racks, slow) = (&scenario.racks[..], &scenario.slow_members[..]);
        assert_eq!(creation.at.len(), n, "one creation time per node");
        let mut rng = Rng::new(seed);
        let messages = scenario
            .sizes
            .iter()
            .map(|&s| rng.bytes(s as usize))
            .collect();
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
        let summary = GroupSummary::new(GROUP, &members, &shared);
        let odd_summary = GroupSummary::new(
            GROUP,
            &members,
            &SharedSettings {
                block_size: BlockSize::Fixed(block_size + 1),
                ..shared
            },
        );
        let nodes = (0..n)
            .map(|rank| {
                let odd = creation.odd == Some(rank);
                Node::new(rank, if odd { odd_summary } else { summary }, block_size)
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
            .create(GROUP, members, node.summary, deadline);
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
}

/// The receivers' application behaviours other than [`App::Reader`].
pub(crate) const MISBEHAVING_APPS: [App; 4] = [
    App::NeverCloses,
    App::LeavesBeforeClose,
    App::CrashesBeforeClose,
    App::ClosesAfter(0),
];
