//! The simulated cluster of the whole-node simulator (`whole_node_sim.rs`):
//! the plan a seed draws (nodes, groups, messages, faults), what each node
//! does (start, play its part in its groups, shut down), and the record of
//! what happened, checked as it happens.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rdmc::{
    Algorithm, ClusterKey, CompletionMode, Connections, Error, GroupConfig, GroupId, Node,
    NodeConfig, NodeId, TcpConfig, WireSecurity,
};

// ---------------------------------------------------------------------------
// The plan a seed draws: the cluster, its groups and messages, the faults.

/// How long a silent peer is given (virtual time).
pub(crate) const FAILURE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a node waits for the others to connect at start.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a member waits for the others to create a group.
pub(crate) const CREATE_TIMEOUT: Duration = Duration::from_secs(5);
/// A crash or a cut link is reported to every member within the failure
/// timeout and this much more (and its application's pause between takes).
pub(crate) const REPORT_MARGIN: Duration = Duration::from_millis(700);
/// Every node that was not crashed has finished within this of the start.
pub(crate) const RUN_BOUND: Duration = Duration::from_secs(120);
/// The simulator's step.
pub(crate) const TICK: Duration = Duration::from_millis(1);
/// How long a stalled application stops taking messages: far beyond the
/// progress timeout of its group, short of the run's bound.
pub(crate) const STALL_FOR: Duration = Duration::from_secs(30);
/// The progress timeout of a group with a stalled member: above the plan's
/// longest pause and hold, so that only the stall trips it.
pub(crate) const STALL_PROGRESS_TIMEOUT: Duration = Duration::from_secs(4);
/// The port every node listens on (each host has its own address).
pub(crate) const PORT: u16 = 7000;

pub(crate) const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::Sequential,
    Algorithm::Chain,
    Algorithm::BinomialTree,
    Algorithm::BinomialPipeline,
];

/// One group of a plan: its members (the root first), how it sends, and
/// the sizes of the messages its root sends.
#[derive(Clone, Debug)]
pub(crate) struct GroupPlan {
    pub(crate) id: u32,
    pub(crate) members: Vec<NodeId>,
    pub(crate) algorithm: Algorithm,
    pub(crate) block_size: usize,
    pub(crate) messages: Vec<usize>,
    /// Small messages batched up to this many bytes (`None`: never).
    pub(crate) batching: Option<usize>,
    /// Messages a receiver may hold unread; messages in flight at the root.
    pub(crate) receive_window: Option<u64>,
    pub(crate) max_in_flight: Option<u64>,
    /// How long the root waits between sends (idle links, heartbeats), and
    /// a receiver's application after taking each message (windows full).
    pub(crate) send_pause: Duration,
    pub(crate) read_pause: Duration,
    /// Created after a restart: by the restarted node (its root) once it is
    /// back, by the others once their first groups are done.
    pub(crate) late: bool,
    /// The progress timeout, if not the default (30 s).
    pub(crate) progress_timeout: Option<Duration>,
    /// The receiver whose application stalls ([`Fault::Stall`]).
    pub(crate) stalls: Option<usize>,
}

impl GroupPlan {
    pub(crate) fn config(&self) -> GroupConfig {
        let config = GroupConfig::new();
        let config = match self.progress_timeout {
            Some(timeout) => config.with_progress_timeout(Some(timeout)),
            None => config,
        };
        config
            .with_algorithm(self.algorithm)
            .with_block_size(self.block_size)
            .with_small_message_batching(self.batching)
            .with_receive_window(self.receive_window)
            .with_max_in_flight(self.max_in_flight)
            // Below the connect timeout: connecting on demand, a member
            // waits that long for a peer to create a group and dial it.
            .with_create_timeout(CREATE_TIMEOUT)
    }
}

/// A fault, injected at `at` after every node has started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The node's host crashes: its tasks vanish, its connections break.
    Crash { node: usize, at: Duration },
    /// Nothing crosses between `a` and `b` for `lasting`, then everything
    /// held arrives, in order (a pause TCP would ride out).
    Hold {
        a: usize,
        b: usize,
        at: Duration,
        lasting: Duration,
    },
    /// Everything between `a` and `b` is lost from then on: their streams
    /// stall, as a partition that outlasts TCP's retransmissions does.
    Cut { a: usize, b: usize, at: Duration },
    /// The node's host crashes, and its software starts again `after`
    /// later: a new run of the node (its incarnation one higher), which
    /// then roots the plan's late group.
    Restart {
        node: usize,
        at: Duration,
        after: Duration,
    },
    /// The application of receiver `node` of group `group` stops taking
    /// messages (and closing) for [`STALL_FOR`]: it hangs, connected.
    Stall {
        node: usize,
        group: u32,
        at: Duration,
    },
    /// Nothing crosses between `node` and any other node for `lasting`
    /// (beyond the failure timeout), then everything held arrives: the
    /// others see what a stopped process (`SIGSTOP`) shows them. (Its own
    /// timers run on: it sees every peer silent.)
    Freeze {
        node: usize,
        at: Duration,
        lasting: Duration,
    },
}

impl Fault {
    pub(crate) fn at(&self) -> Duration {
        match *self {
            Fault::Crash { at, .. }
            | Fault::Hold { at, .. }
            | Fault::Cut { at, .. }
            | Fault::Restart { at, .. }
            | Fault::Stall { at, .. }
            | Fault::Freeze { at, .. } => at,
        }
    }

    /// The nodes it touches.
    pub(crate) fn nodes(&self) -> Vec<usize> {
        match *self {
            Fault::Crash { node, .. }
            | Fault::Restart { node, .. }
            | Fault::Stall { node, .. }
            | Fault::Freeze { node, .. } => vec![node],
            Fault::Hold { a, b, .. } | Fault::Cut { a, b, .. } => vec![a, b],
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) nodes: usize,
    pub(crate) security: WireSecurity,
    /// Connections made as groups need them and closed when idle this
    /// long, rather than all at start.
    pub(crate) on_demand: Option<Duration>,
    pub(crate) groups: Vec<GroupPlan>,
    pub(crate) faults: Vec<Fault>,
    /// Whether a node whose groups are done waits for every other node's
    /// before it shuts down (with a restart: the restarted node must find
    /// its peers), or leaves at once.
    pub(crate) linger: bool,
    pub(crate) latency: (Duration, Duration),
}

impl Plan {
    pub(crate) fn from_seed(seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let nodes = rng.random_range(3..=9);
        let security = [
            WireSecurity::None,
            WireSecurity::Authenticated,
            WireSecurity::Encrypted,
        ][rng.random_range(0..3)];
        let on_demand = rng
            .random_bool(0.3)
            .then(|| Duration::from_millis(rng.random_range(50..3000)));
        let groups = (0..rng.random_range(1..=3))
            .map(|g| {
                let size = rng.random_range(2..=nodes);
                let mut all: Vec<usize> = (0..nodes).collect();
                let mut members = Vec::with_capacity(size);
                for _ in 0..size {
                    members.push(NodeId(
                        all.swap_remove(rng.random_range(0..all.len())) as u32
                    ));
                }
                let block_size = [1 << 10, 8 << 10, 64 << 10, 1 << 20][rng.random_range(0..4)];
                let messages = (0..rng.random_range(1..=6))
                    .map(|_| match rng.random_range(0..10) {
                        0 => 0,
                        1 => rng.random_range(1..=64),
                        2 => block_size,
                        _ => rng.random_range(1..=256 << 10),
                    })
                    .collect();
                let pause = |rng: &mut StdRng, most: u64| match rng.random_range(0..4) {
                    0 => Duration::from_millis(rng.random_range(0..most)),
                    _ => Duration::ZERO,
                };
                GroupPlan {
                    id: g + 1,
                    members,
                    algorithm: ALGORITHMS[rng.random_range(0..ALGORITHMS.len())],
                    block_size,
                    messages,
                    batching: rng
                        .random_bool(0.5)
                        .then(|| rng.random_range(64..=32 << 10)),
                    receive_window: rng.random_bool(0.3).then(|| rng.random_range(1..=4)),
                    max_in_flight: rng.random_bool(0.3).then(|| rng.random_range(1..=4)),
                    send_pause: pause(&mut rng, 2500),
                    read_pause: pause(&mut rng, 300),
                    late: false,
                    progress_timeout: None,
                    stalls: None,
                }
            })
            .collect();
        let mut groups: Vec<GroupPlan> = groups;
        let mut faults = Vec::new();
        let at = |rng: &mut StdRng| Duration::from_millis(rng.random_range(0..400));
        let pair = |rng: &mut StdRng| {
            let a = rng.random_range(0..nodes);
            (a, (a + rng.random_range(1..nodes)) % nodes)
        };
        let crash = rng.random_bool(0.35).then(|| rng.random_range(0..nodes));
        if let Some(node) = crash {
            faults.push(Fault::Crash {
                node,
                at: at(&mut rng),
            });
        }
        if rng.random_bool(0.25) {
            let (a, b) = pair(&mut rng);
            let lasting = Duration::from_millis(rng.random_range(10..2500));
            faults.push(Fault::Hold {
                a,
                b,
                at: at(&mut rng),
                lasting,
            });
        }
        if rng.random_bool(0.1) {
            let (a, b) = pair(&mut rng);
            faults.push(Fault::Cut {
                a,
                b,
                at: at(&mut rng),
            });
        }
        faults.sort_by_key(Fault::at);
        let min = Duration::from_micros(rng.random_range(50..1000));
        let max = min + Duration::from_micros(rng.random_range(0..20_000));
        // Restarts draw from a stream of their own, so that the plans of
        // seeds drawn before restarts were simulated stay as they were.
        let mut rng = StdRng::seed_from_u64(seed ^ 0x7265_7374_6172_7473);
        let restart = rng.random_bool(0.2).then(|| rng.random_range(0..nodes));
        // Connected all to all, a node starts only once every member is
        // connected: a restart then needs every other member there.
        let can_restart =
            on_demand.is_some() || faults.iter().all(|f| matches!(f, Fault::Hold { .. }));
        if let Some(node) = restart.filter(|&r| Some(r) != crash && can_restart) {
            let after = Duration::from_millis(rng.random_range(1..1500));
            faults.push(Fault::Restart {
                node,
                at: at(&mut rng),
                after,
            });
            let mut others: Vec<usize> = (0..nodes).filter(|&n| n != node).collect();
            let mut members = vec![NodeId(node as u32)];
            for _ in 0..rng.random_range(1..=others.len().min(3)) {
                let other = others.swap_remove(rng.random_range(0..others.len()));
                members.push(NodeId(other as u32));
            }
            groups.push(GroupPlan {
                id: groups.len() as u32 + 1,
                members,
                algorithm: ALGORITHMS[rng.random_range(0..ALGORITHMS.len())],
                block_size: 8 << 10,
                messages: (0..rng.random_range(1..=3))
                    .map(|_| rng.random_range(0..=64 << 10))
                    .collect(),
                batching: None,
                receive_window: None,
                max_in_flight: None,
                send_pause: Duration::ZERO,
                read_pause: Duration::ZERO,
                late: true,
                progress_timeout: None,
                stalls: None,
            });
        }
        // Stalls draw from a stream of their own too: a receiver's
        // application hangs, and only its group's progress timeout finds
        // it (the transport sees nothing wrong).
        let mut rng = StdRng::seed_from_u64(seed ^ 0x7374_616c_6c73);
        let plan_groups = groups.iter().filter(|g| !g.late).count();
        if rng.random_bool(0.15) {
            let g = &mut groups[rng.random_range(0..plan_groups)];
            let node = g.members[rng.random_range(1..g.members.len())].index();
            g.progress_timeout = Some(STALL_PROGRESS_TIMEOUT);
            g.stalls = Some(node);
            faults.push(Fault::Stall {
                node,
                group: g.id,
                at: at(&mut rng),
            });
        }
        // Freezes too: a node's every link held beyond the failure timeout,
        // never one a hold or a cut of the plan touches (its release would
        // end the freeze there early).
        let mut rng = StdRng::seed_from_u64(seed ^ 0x6672_6565_7a65);
        if rng.random_bool(0.1) {
            let node = rng.random_range(0..nodes);
            let at = at(&mut rng);
            let lasting = FAILURE_TIMEOUT + Duration::from_millis(rng.random_range(500..3000));
            let linked = faults.iter().any(|f| {
                matches!(f, Fault::Hold { .. } | Fault::Cut { .. }) && f.nodes().contains(&node)
            });
            if !linked {
                faults.push(Fault::Freeze { node, at, lasting });
            }
        }
        faults.sort_by_key(Fault::at);
        let linger = groups.iter().any(|g| g.late);
        Plan {
            nodes,
            security,
            on_demand,
            groups,
            faults,
            linger,
            latency: (min, max),
        }
    }
}

/// Message `seq` of group `group`: `len` bytes no other message has.
pub(crate) fn payload(group: u32, seq: usize, len: usize) -> Bytes {
    let salt = (group as usize) * 131 + seq * 31;
    (0..len).map(|i| (i.wrapping_mul(7) ^ salt) as u8).collect()
}

pub(crate) fn host(i: usize) -> String {
    format!("node{i}")
}

pub(crate) fn key() -> ClusterKey {
    ClusterKey::from_bytes(b"rdmc simulated cluster key, 32 B".to_vec()).unwrap()
}

// ---------------------------------------------------------------------------
// What happened: written by the nodes as it happens, checked as it happens
// and at the end.

/// How one member's part in one group ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    /// The error's text, whether it is the group's failure (else: its
    /// creation refused, ...), the member it names, and when.
    Failed {
        error: String,
        group_failed: bool,
        suspect: Option<u32>,
        at: Duration,
    },
}

#[derive(Debug, Default)]
pub(crate) struct Record {
    /// Nodes that started, and nodes that finished (shut down).
    pub(crate) up: BTreeSet<usize>,
    pub(crate) done: BTreeSet<usize>,
    /// Runs of each node started, and nodes whose groups are all done.
    pub(crate) starts: BTreeMap<usize, u64>,
    pub(crate) parts_done: BTreeSet<usize>,
    /// Nodes crashed for good (not to be restarted).
    pub(crate) gone: BTreeSet<usize>,
    /// Nodes up again after a restart, and nodes whose first groups are
    /// done.
    pub(crate) back: BTreeSet<usize>,
    pub(crate) first_done: BTreeSet<usize>,
    /// Per (group, member): the sequence numbers its application took.
    pub(crate) taken: BTreeMap<(u32, usize), Vec<u64>>,
    /// Per group: when an application last took one of its messages (its
    /// data was still flowing).
    pub(crate) last_take: BTreeMap<u32, Duration>,
    pub(crate) outcomes: BTreeMap<(u32, usize), Outcome>,
    /// Receipts that resolved `Ok`, per group.
    pub(crate) delivered: BTreeMap<u32, BTreeSet<u64>>,
    /// The (group, member) whose application is stalled, and since when.
    pub(crate) stalled: BTreeMap<(u32, usize), Duration>,
    /// When a root's application, pausing between sends, first saw its
    /// group fail ([`rdmc::Sender::closed`]).
    pub(crate) noticed: BTreeMap<(u32, usize), Duration>,
    /// A digest of every take (when, by whom, what): two runs of one seed
    /// agree on it only if they took the same messages at the same times.
    pub(crate) trace: u64,
    pub(crate) broken: Vec<String>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Log(Arc<Mutex<Record>>);

impl Log {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Record> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn broken(&self, why: String) {
        self.lock().broken.push(why);
    }

    /// Member `me`'s application took `message` of group `plan`: in order,
    /// once, intact?
    pub(crate) fn took(&self, plan: &GroupPlan, me: usize, message: &rdmc::Message) {
        let id = plan.id;
        let mut record = self.lock();
        record.trace = mix(record.trace, &(now(), id, me, message.seq));
        record.last_take.insert(id, now());
        let taken = record.taken.entry((id, me)).or_default();
        let expected_seq = taken.len() as u64;
        taken.push(message.seq);
        let len = plan.messages.get(message.seq as usize).copied();
        let intact = len.is_some_and(|len| message.data == payload(id, message.seq as usize, len));
        if message.seq != expected_seq || message.group != GroupId(u64::from(id)) || !intact {
            record.broken.push(format!(
                "group {id} member {me}: took message {} ({} bytes, intact: {intact}) where message {expected_seq} was due",
                message.seq,
                message.data.len()
            ));
        }
    }

    pub(crate) fn outcome(&self, group: u32, member: usize, result: Result<(), Error>) {
        let outcome = match result {
            Ok(()) => Outcome::Ok,
            Err(error) => {
                let (group_failed, suspect) = match &error {
                    Error::GroupFailed { suspect, .. } => (true, suspect.map(|n| n.0)),
                    _ => (false, None),
                };
                Outcome::Failed {
                    error: error.to_string(),
                    group_failed,
                    suspect,
                    at: now(),
                }
            }
        };
        let mut record = self.lock();
        if let Some(old) = record.outcomes.insert((group, member), outcome) {
            record.broken.push(format!(
                "group {group} member {member}: a second outcome after {old:?}"
            ));
        }
    }
}

/// `digest` with `event` folded in.
pub(crate) fn mix(digest: u64, event: &impl std::hash::Hash) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one((digest, event))
}

/// The simulation's clock.
pub(crate) fn now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

// ---------------------------------------------------------------------------
// One node: start, play its part in each of its groups, shut down.

pub(crate) async fn node_main(plan: Arc<Plan>, log: Log, me: usize) -> turmoil::Result {
    let run = {
        let mut record = log.lock();
        let run = record.starts.entry(me).or_insert(0);
        *run += 1;
        *run
    };
    let addrs: Vec<SocketAddr> = (0..plan.nodes)
        .map(|i| SocketAddr::new(turmoil::lookup(host(i)), PORT))
        .collect();
    let config = TcpConfig::new(addrs, NodeId(me as u32), key())
        .with_failure_timeout(FAILURE_TIMEOUT)
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_incarnation(run)
        .with_wire_security(plan.security);
    let config = match plan.on_demand {
        Some(idle) => config
            .with_connections(Connections::OnDemand)
            .with_idle_timeout(Some(idle)),
        None => config,
    };
    let node_config = NodeConfig::new().with_completion_mode(CompletionMode::Interrupt);
    let node = match Node::tcp(config, node_config).await {
        Ok(node) => node,
        Err(e) => {
            log.broken(format!("node {me} (run {run}) did not start: {e}"));
            let mut record = log.lock();
            record.done.insert(me);
            record.parts_done.insert(me);
            return Ok(());
        }
    };
    {
        let mut record = log.lock();
        record.up.insert(me);
        if run > 1 {
            record.back.insert(me);
        }
    }
    let mine = |late: bool| {
        plan.groups
            .iter()
            .filter(move |g| g.late == late && g.members.contains(&NodeId(me as u32)))
    };
    if run == 1 {
        futures::future::join_all(mine(false).map(|g| member_part(&node, g, me, &log))).await;
        log.lock().first_done.insert(me);
    }
    // The late groups: the restarted node roots them in its new run, the
    // others join them after their first groups.
    // They create it once all are ready: the restarted node's new run is up
    // (before it, the group would be its old run's, and fail with it), and
    // the others' first groups are over (those with its old run fail, some
    // only after the create timeout).
    let late = mine(true).filter(|g| (g.members[0].index() == me) == (run > 1));
    futures::future::join_all(late.map(|g| async {
        let root = g.members[0].index();
        let ready = |record: &Record| {
            record.back.contains(&root)
                && g.members[1..].iter().all(|m| {
                    record.first_done.contains(&m.index()) || record.gone.contains(&m.index())
                })
        };
        while !ready(&log.lock()) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        member_part(&node, g, me, &log).await
    }))
    .await;
    let restarts = plan
        .faults
        .iter()
        .any(|f| matches!(f, Fault::Restart { node, .. } if *node == me));
    if run > 1 || !restarts {
        log.lock().parts_done.insert(me);
    }
    while plan.linger && !everyone_done(&plan, &log) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    node.shutdown().await;
    log.lock().done.insert(me);
    Ok(())
}

/// Every node's groups are done, or the node crashed for good.
pub(crate) fn everyone_done(plan: &Plan, log: &Log) -> bool {
    let record = log.lock();
    (0..plan.nodes).all(|i| record.parts_done.contains(&i) || record.gone.contains(&i))
}

pub(crate) async fn member_part(node: &Node, plan: &GroupPlan, me: usize, log: &Log) {
    let id = plan.id;
    let group = match node
        .create_group(GroupId(u64::from(id)), &plan.members, plan.config())
        .await
    {
        Ok(group) => group,
        Err(e) => return log.outcome(id, me, Err(e)),
    };
    match group.into_sender() {
        Ok(sender) => root_part(sender, plan, me, log).await,
        Err(receiver) => receiver_part(receiver, plan, me, log).await,
    }
}

pub(crate) async fn root_part(mut sender: rdmc::Sender, plan: &GroupPlan, me: usize, log: &Log) {
    let id = plan.id;
    let mut deliveries = Vec::new();
    let mut refused = None;
    for (seq, &len) in plan.messages.iter().enumerate() {
        if seq > 0 {
            // The pause, watching for the group's failure as an application
            // between sends would; the judge times the report from when it
            // was seen. The sends go on after it all the same.
            let resume = tokio::time::Instant::now() + plan.send_pause;
            tokio::select! {
                () = tokio::time::sleep_until(resume) => {}
                Err(_) = sender.closed() => {
                    log.lock().noticed.entry((id, me)).or_insert_with(now);
                    tokio::time::sleep_until(resume).await;
                }
            }
        }
        match sender.send(payload(id, seq, len)).await {
            Ok(receipt) => {
                let delivered = receipt.delivered();
                let log = log.clone();
                let members = plan.members.clone();
                deliveries.push(async move {
                    if delivered.await.is_ok() {
                        let mut record = log.lock();
                        record.delivered.entry(id).or_default().insert(seq as u64);
                        for m in &members[1..] {
                            let has = record
                                .taken
                                .get(&(id, m.index()))
                                .is_some_and(|t| t.contains(&(seq as u64)));
                            if !has {
                                record.broken.push(format!(
                                    "group {id}: message {seq} delivered, but member {m} has not taken it"
                                ));
                            }
                        }
                    }
                });
            }
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let (closed, _) = futures::join!(sender.close(), futures::future::join_all(deliveries));
    let result = match refused {
        Some(e) => Err(e),
        None => closed,
    };
    if result.is_ok() {
        let mut record = log.lock();
        for m in &plan.members[1..] {
            let taken = record.taken.get(&(id, m.index())).map_or(0, Vec::len);
            if taken != plan.messages.len() {
                record.broken.push(format!(
                    "group {id}: the root's close returned Ok, but member {m} took {taken} of {}",
                    plan.messages.len()
                ));
            }
        }
    }
    log.outcome(id, me, result);
}

pub(crate) async fn receiver_part(
    mut receiver: rdmc::Receiver,
    plan: &GroupPlan,
    me: usize,
    log: &Log,
) {
    let id = plan.id;
    let stall = plan.stalls == Some(me);
    let mut stalled = false;
    loop {
        let next = tokio::select! {
            next = receiver.next() => next,
            () = stall_of(log, id, me), if stall && !stalled => {
                stalled = true;
                tokio::time::sleep(STALL_FOR).await;
                continue;
            }
        };
        let Some(message) = next else { break };
        let message = match message {
            Ok(message) => message,
            Err(e) => return log.outcome(id, me, Err(e)),
        };
        log.took(plan, me, &message);
        tokio::time::sleep(plan.read_pause).await;
    }
    if stall && !stalled {
        // It hangs before closing, if not before.
        stall_of(log, id, me).await;
        tokio::time::sleep(STALL_FOR).await;
    }
    let closed = receiver.close().await;
    if closed.is_ok() {
        let taken = log.lock().taken.get(&(id, me)).map_or(0, Vec::len);
        if taken != plan.messages.len() {
            log.broken(format!(
                "group {id} member {me}: closed Ok having taken {taken} of {} messages",
                plan.messages.len()
            ));
        }
    }
    log.outcome(id, me, closed);
}

/// Resolves once member `me`'s application in group `group` is stalled.
async fn stall_of(log: &Log, group: u32, me: usize) {
    while !log.lock().stalled.contains_key(&(group, me)) {
        tokio::time::sleep(TICK * 10).await;
    }
}
