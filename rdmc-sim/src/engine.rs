//! The discrete-event driver: every member's real [`GroupMember`], fed
//! the events of a virtual clock and the modelled network, its actions
//! carried out as the transport contract says.
//!
//! The contract the driver holds every member to (what the `rdma`
//! transport needs): a block is sent only into a receive its target posted
//! for it, from that sender, in the order posted, at the offset and length
//! posted. A broken contract stops the run with [`SimError::Contract`].

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use rand_core::{Rng, SeedableRng};
use rand_xorshift::XorShiftRng;
use rdmc_proto::{Action, Control, GroupMember, MemberConfig, Rank};

use crate::SimError;
use crate::fabric::{Fabric, Finish, FlowId};
use crate::network::{Network, Topology};

/// A block on its way: who sends it to whom, how long, what it carries.
#[derive(Clone, Copy, Debug)]
struct Block {
    from: u32,
    to: u32,
    len: usize,
    immediate: u64,
}

#[derive(Clone, Copy, Debug)]
enum Event {
    /// A control message reaches `to`.
    Control {
        to: u32,
        from: u32,
        control: Control,
    },
    /// A jittered block send starts now.
    SendStart(Block),
    /// A send completes at its sender (its bytes fit the send buffer).
    SendComplete { from: u32, to: u32 },
    /// A flow may have finished (if `version` is still current).
    FlowDone { flow: FlowId, version: u32 },
    /// A flow's bytes still to leave its sender fell to the early-announce
    /// threshold (if `version` is still current).
    NearlyDone { flow: FlowId, version: u32 },
    /// A block's receiver learns that at most the threshold of its bytes
    /// are still to arrive.
    Progress { block: Block, remaining: u64 },
    /// A block reaches its receiver.
    Arrive(Block),
}

/// An event at a time; the heap pops the earliest, ties in push order.
#[derive(Debug)]
struct Queued {
    /// The time's bits (times are never negative, so their bits order as
    /// the times do) above the push sequence number: one comparison.
    key: u128,
    event: Event,
}

impl Queued {
    fn new(at: f64, seq: u64, event: Event) -> Self {
        debug_assert!(at >= 0.0);
        Queued {
            key: (u128::from(at.to_bits()) << 64) | u128::from(seq),
            event,
        }
    }

    fn at(&self) -> f64 {
        f64::from_bits((self.key >> 64) as u64)
    }
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap.
        other.key.cmp(&self.key)
    }
}

/// A receive a member posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Posted {
    /// The bounce buffer for a message's first block (any offset).
    FirstBlock,
    /// Into a message's buffer.
    At { seq: u64, offset: usize, len: usize },
}

/// One member and what the driver knows of it.
#[derive(Debug)]
struct Host {
    member: GroupMember,
    /// Receives posted, per sending peer, in order.
    posted: Vec<(Rank, VecDeque<Posted>)>,
    /// Bytes of the current message this member posted receives for.
    bytes_posted: u64,
    /// When the message completed here (seconds, virtual clock).
    completed: Option<f64>,
    /// When the last block arrived here.
    last_block: f64,
    closed: bool,
    /// Blocks sent and not yet delivered, per connection (receiving peer).
    conns: Vec<Conn>,
    /// The peer of the one send whose completion waits for its
    /// connection's unsent bytes to fit the send buffer.
    pending: Option<Rank>,
    /// Blocks on the wire to this host now (their flows).
    inbound: Vec<FlowId>,
}

/// One connection's blocks, in order: the first is on the wire.
#[derive(Debug)]
struct Conn {
    peer: Rank,
    queue: VecDeque<Block>,
    /// Bytes of the queued blocks.
    unsent: u64,
}

impl Host {
    fn conn_to(&mut self, peer: Rank) -> &mut Conn {
        let index = match self.conns.iter().position(|c| c.peer == peer) {
            Some(index) => index,
            None => {
                self.conns.push(Conn {
                    peer,
                    queue: VecDeque::new(),
                    unsent: 0,
                });
                self.conns.len() - 1
            }
        };
        &mut self.conns[index]
    }

    fn posted_from(&mut self, from: Rank) -> &mut VecDeque<Posted> {
        let index = match self.posted.iter().position(|(p, _)| *p == from) {
            Some(index) => index,
            None => {
                self.posted.push((from, VecDeque::new()));
                self.posted.len() - 1
            }
        };
        &mut self.posted[index].1
    }
}

/// The simulation of one group.
#[derive(Debug)]
pub(crate) struct Engine {
    hosts: Vec<Host>,
    topology: Topology,
    fabric: Fabric,
    /// The block each live flow carries, by flow id, and whether its
    /// receiver was told it is nearly done.
    flows: Vec<Option<(Block, bool)>>,
    /// The early-announce threshold the receivers are told of (bytes).
    early_announce: Option<u64>,
    queue: BinaryHeap<Queued>,
    next_seq: u64,
    now: f64,
    jitter: f64,
    rng: XorShiftRng,
    finishes: Vec<Finish>,
    /// The size of the message under way, checked at every receiver.
    size: u64,
    largest_block: usize,
    pub(crate) events: u64,
    error: Option<SimError>,
    /// A send completes once its connection's unsent bytes are at most this.
    send_buffer: u64,
    /// Most blocks on the wire to one host at once, so far.
    pub(crate) most_inbound: usize,
    /// Most bytes a block on the wire to a host still had to send when
    /// another block to that host started, so far.
    pub(crate) most_overlap: f64,
}

impl Engine {
    /// Members built from `config(rank)`, on `network`.
    pub(crate) fn new(
        nodes: usize,
        early_announce: Option<u64>,
        network: &Network,
        config: impl Fn(Rank) -> MemberConfig,
    ) -> Result<Self, SimError> {
        let topology = network.topology(nodes)?;
        let mut hosts = Vec::with_capacity(nodes);
        let mut largest_block = 0;
        for rank in 0..nodes {
            let config = config(rank);
            largest_block = config.block_size.largest();
            hosts.push(Host {
                member: GroupMember::new(config)?,
                posted: Vec::new(),
                bytes_posted: 0,
                completed: None,
                last_block: 0.0,
                closed: false,
                conns: Vec::new(),
                pending: None,
                inbound: Vec::new(),
            });
        }
        let fabric = Fabric::new(topology.caps.clone());
        let mut engine = Engine {
            hosts,
            topology,
            fabric,
            flows: Vec::new(),
            early_announce,
            queue: BinaryHeap::new(),
            next_seq: 0,
            now: 0.0,
            jitter: network.jitter.as_secs_f64(),
            rng: XorShiftRng::seed_from_u64(network.seed),
            finishes: Vec::new(),
            size: 0,
            largest_block,
            events: 0,
            error: None,
            send_buffer: network.send_buffer,
            most_inbound: 0,
            most_overlap: 0.0,
        };
        for rank in 0..nodes {
            engine.drain(rank);
        }
        engine.run()?;
        Ok(engine)
    }

    /// The virtual clock, seconds.
    pub(crate) fn now(&self) -> f64 {
        self.now
    }

    /// The root sends one `size`-byte message; run until nothing is left
    /// to happen. Every member must have completed it.
    pub(crate) fn multicast(&mut self, size: u64) -> Result<(), SimError> {
        self.size = size;
        for host in &mut self.hosts {
            host.bytes_posted = 0;
            host.completed = None;
        }
        if let Err(e) = self.hosts[0].member.submit(size) {
            return Err(SimError::Failed {
                rank: 0,
                failure: e.to_string(),
            });
        }
        self.drain(0);
        self.run()?;
        self.stalled("the message", |h| h.completed.is_none())
    }

    /// Close the group (every receiver's application took the message);
    /// every member must end closed.
    pub(crate) fn close(&mut self) -> Result<(), SimError> {
        if let Err(e) = self.hosts[0].member.close() {
            return Err(SimError::Failed {
                rank: 0,
                failure: e.to_string(),
            });
        }
        self.drain(0);
        self.run()?;
        if self.hosts.len() == 1 {
            return Ok(());
        }
        self.stalled("the close", |h| !h.closed)
    }

    /// Per rank: when the message completed there, and when its last block
    /// arrived there (the root: when its last send completed, and 0).
    pub(crate) fn times(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.hosts
            .iter()
            .map(|h| (h.completed.unwrap_or(f64::NAN), h.last_block))
    }

    fn stalled(
        &self,
        phase: &'static str,
        unfinished: impl Fn(&Host) -> bool,
    ) -> Result<(), SimError> {
        let mut stuck = self.hosts.iter().enumerate().filter(|(_, h)| unfinished(h));
        match stuck.next() {
            None => Ok(()),
            Some((first, _)) => Err(SimError::Stalled {
                phase,
                incomplete: 1 + stuck.count(),
                first,
            }),
        }
    }

    fn push(&mut self, at: f64, event: Event) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.push(Queued::new(at, seq, event));
    }

    /// Process events until none is left or a member broke something.
    fn run(&mut self) -> Result<(), SimError> {
        while let Some(queued) = self.queue.pop() {
            let (at, event) = (queued.at(), queued.event);
            if let Some(e) = self.error.take() {
                return Err(e);
            }
            self.now = at;
            self.events += 1;
            match event {
                Event::Control { to, from, control } => {
                    let to = to as usize;
                    self.hosts[to].member.handle_control(from as usize, control);
                    self.drain(to);
                }
                Event::SendStart(block) => self.enqueue(block),
                Event::SendComplete { from, to } => {
                    let from = from as usize;
                    self.hosts[from].member.handle_send_complete(to as usize);
                    self.drain(from);
                }
                Event::FlowDone { flow, version } => {
                    if !self.fabric.is_current(flow, version) {
                        continue;
                    }
                    let (block, _) = self.flows[flow as usize].take().expect("a live flow");
                    self.fabric.finish(at, flow, &mut self.finishes);
                    self.schedule_finishes();
                    let (from, to) = (block.from as usize, block.to as usize);
                    let inbound = &mut self.hosts[to].inbound;
                    if let Some(i) = inbound.iter().position(|&f| f == flow) {
                        inbound.swap_remove(i);
                    }
                    let host = &mut self.hosts[from];
                    let index = host
                        .conns
                        .iter()
                        .position(|c| c.peer == to)
                        .expect("the flow's connection");
                    let conn = &mut host.conns[index];
                    conn.queue.pop_front();
                    conn.unsent -= block.len as u64;
                    let (next, unsent) = (conn.queue.front().copied(), conn.unsent);
                    if next.is_none() {
                        // Only connections with bytes queued are kept: a
                        // root of thousands stays quick to search.
                        host.conns.swap_remove(index);
                    }
                    if let Some(next) = next {
                        self.start_flow(next);
                    }
                    if self.hosts[from].pending == Some(to) && unsent <= self.send_buffer {
                        self.hosts[from].pending = None;
                        self.hosts[from].member.handle_send_complete(to);
                        self.drain(from);
                    }
                    self.push(at + self.topology.latency, Event::Arrive(block));
                }
                Event::NearlyDone { flow, version } => {
                    if !self.fabric.is_current(flow, version) {
                        continue;
                    }
                    let Some((block, told)) = self.flows[flow as usize].as_mut() else {
                        continue;
                    };
                    if std::mem::replace(told, true) {
                        continue;
                    }
                    let block = *block;
                    let remaining = self.early_announce.unwrap_or(0).min(block.len as u64);
                    // The receiver sees the bytes one latency after they left.
                    self.push(
                        at + self.topology.latency,
                        Event::Progress { block, remaining },
                    );
                }
                Event::Progress { block, remaining } => {
                    let to = block.to as usize;
                    self.hosts[to]
                        .member
                        .handle_block_progress(block.from as usize, remaining);
                    self.drain(to);
                }
                Event::Arrive(block) => {
                    let to = block.to as usize;
                    self.hosts[to].last_block = at;
                    self.hosts[to].member.handle_block(
                        block.from as usize,
                        block.immediate,
                        block.len,
                    );
                    self.drain(to);
                }
            }
        }
        self.error.take().map_or(Ok(()), Err)
    }

    /// A block joins its connection's queue (and the wire, if first); its
    /// send completes now if the connection's unsent bytes fit the send
    /// buffer, else once they do.
    fn enqueue(&mut self, block: Block) {
        let (from, to) = (block.from as usize, block.to as usize);
        let conn = self.hosts[from].conn_to(to);
        conn.queue.push_back(block);
        conn.unsent += block.len as u64;
        let (first, unsent) = (conn.queue.len() == 1, conn.unsent);
        if first {
            self.start_flow(block);
        }
        if unsent <= self.send_buffer {
            let (from, to) = (block.from, block.to);
            self.push(self.now, Event::SendComplete { from, to });
        } else {
            self.hosts[from].pending = Some(to);
        }
    }

    fn start_flow(&mut self, block: Block) {
        let host = &self.hosts[block.to as usize];
        for &other in &host.inbound {
            let left = self.fabric.remaining(other, self.now);
            self.most_overlap = self.most_overlap.max(left);
        }
        let path = self.topology.path(block.from as usize, block.to as usize);
        let id = self
            .fabric
            .start(self.now, path, block.len as f64, &mut self.finishes);
        if self
            .early_announce
            .is_some_and(|threshold| block.len as u64 > threshold)
        {
            // The core must ignore a report of more than the threshold (a
            // transport may report progress at any point): one as the block
            // starts arriving.
            let remaining = block.len as u64;
            let at = self.now + self.topology.latency;
            self.push(at, Event::Progress { block, remaining });
        }
        let host = &mut self.hosts[block.to as usize];
        host.inbound.push(id);
        self.most_inbound = self.most_inbound.max(host.inbound.len());
        if self.flows.len() <= id as usize {
            self.flows.resize(id as usize + 1, None);
        }
        self.flows[id as usize] = Some((block, false));
        self.schedule_finishes();
    }

    fn schedule_finishes(&mut self) {
        for i in 0..self.finishes.len() {
            let f = self.finishes[i];
            if let Some(threshold) = self.early_announce {
                // When the bytes still to leave fall to the threshold, at
                // this rate (pushed first: at a tie it precedes the finish).
                let at = (f.at - threshold as f64 / f.rate).max(self.now);
                let (flow, version) = (f.flow, f.version);
                self.push(at, Event::NearlyDone { flow, version });
            }
            self.push(
                f.at,
                Event::FlowDone {
                    flow: f.flow,
                    version: f.version,
                },
            );
        }
        self.finishes.clear();
    }

    fn contract(&mut self, rank: Rank, detail: String) {
        if self.error.is_none() {
            self.error = Some(SimError::Contract { rank, detail });
        }
    }

    /// Carry out member `rank`'s actions, in order.
    fn drain(&mut self, rank: Rank) {
        while let Some(action) = self.hosts[rank].member.poll_action() {
            match action {
                Action::PostFirstBlockRecv { from } => {
                    self.hosts[rank]
                        .posted_from(from)
                        .push_back(Posted::FirstBlock);
                }
                Action::BeginMessage {
                    size,
                    first_block_len,
                    ..
                } => {
                    if size != self.size {
                        let detail = format!("began a message of {size} bytes, not {}", self.size);
                        self.contract(rank, detail);
                    }
                    self.hosts[rank].bytes_posted += first_block_len as u64;
                }
                Action::PostRecv {
                    from,
                    seq,
                    offset,
                    len,
                } => {
                    let host = &mut self.hosts[rank];
                    host.bytes_posted += len as u64;
                    host.posted_from(from)
                        .push_back(Posted::At { seq, offset, len });
                }
                Action::SendBlock {
                    to,
                    seq,
                    offset,
                    len,
                    immediate,
                } => self.send_block(rank, to, Posted::At { seq, offset, len }, immediate),
                Action::SendControl { to, control } => {
                    let at = self.now + self.topology.latency;
                    self.push(
                        at,
                        Event::Control {
                            to: to as u32,
                            from: rank as u32,
                            control,
                        },
                    );
                }
                Action::MessageComplete { .. } => {
                    let host = &mut self.hosts[rank];
                    host.completed = Some(self.now);
                    if rank != 0 {
                        if host.bytes_posted != self.size {
                            let detail = format!(
                                "completed a {}-byte message having received {} bytes",
                                self.size, host.bytes_posted
                            );
                            self.contract(rank, detail);
                        }
                        // The application takes the message at once.
                        self.hosts[rank].member.message_consumed();
                    }
                }
                Action::AllDelivered => {
                    // The application has taken everything and closes.
                    if let Err(e) = self.hosts[rank].member.close() {
                        self.fail(rank, e.to_string());
                    }
                }
                Action::Closed => self.hosts[rank].closed = true,
                // Buffers are not modelled; the per-message delivery
                // acknowledgements travel as control messages above.
                Action::ReleaseBlock { .. }
                | Action::MessageDelivered { .. }
                | Action::MessagePersisted { .. } => {}
                Action::Failed(failure) => self.fail(rank, failure.to_string()),
            }
        }
    }

    fn fail(&mut self, rank: Rank, failure: String) {
        if self.error.is_none() {
            self.error = Some(SimError::Failed { rank, failure });
        }
    }

    /// A member sends a block: it must go into the receive its target
    /// posted next for this sender.
    fn send_block(&mut self, from: Rank, to: Rank, what: Posted, immediate: u64) {
        let Posted::At { len, .. } = what else {
            unreachable!("sends are at an offset")
        };
        let largest = self.largest_block;
        let posted = self.hosts[to].posted_from(from).pop_front();
        let fits = match posted {
            Some(Posted::FirstBlock) => len <= largest,
            Some(p) => p == what,
            None => false,
        };
        if !fits {
            let detail =
                format!("sent {what:?} to rank {to}, whose next receive from it is {posted:?}");
            self.contract(from, detail);
            return;
        }
        let block = Block {
            from: from as u32,
            to: to as u32,
            len,
            immediate,
        };
        if self.jitter > 0.0 {
            let unit = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let at = self.now + unit * self.jitter;
            self.push(at, Event::SendStart(block));
        } else {
            self.enqueue(block);
        }
    }
}
