//! The event loop: which pending event happens next (links, the root's and
//! the receivers' applications, creations, failure notices, timeouts), and
//! what it does to the model and the state machines.

use super::*;

#[derive(Clone, Copy, Debug)]
pub(super) enum Event {
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

impl Cluster {
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

    /// The application of `rank` has every message it took on stable
    /// storage (the count goes up only if it took more since).
    fn app_persists(&mut self, rank: Rank) {
        let (taken, before) = (self.nodes[rank].taken, self.nodes[rank].persisted);
        let counted = self.member_mut(rank).application_persisted(taken);
        if counted != (taken > before) {
            self.bug(format_args!(
                "{rank}: persisting {taken} after {before} counted: {counted}"
            ));
        }
        self.nodes[rank].persisted = taken;
    }

    /// The application of `rank` takes a message, or closes, leaves or
    /// crashes as its [`App`] says.
    fn app_act(&mut self, rank: Rank) {
        if self.app_takes(rank) {
            let seq = self.nodes[rank].taken;
            self.log(format_args!("{rank}: app takes #{seq}"));
            self.nodes[rank].taken += 1;
            self.member_mut(rank).message_consumed();
            if seq % 2 == 1 {
                self.app_persists(rank);
            }
            self.drain(rank);
            return;
        }
        match self.nodes[rank].app {
            App::Reader | App::ClosesAfter(_) => {
                self.log(format_args!("{rank}: app closes"));
                self.app_persists(rank);
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

    /// Let `event` happen.
    fn step(&mut self, event: Event) {
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
            Event::Link(Kind::Data, from, to) => self.deliver_data(from, to),
            Event::Link(Kind::RecvDone, from, to) => self.receive_done(from, to),
            Event::Link(Kind::SendDone, from, to) => self.send_done(from, to),
            Event::Link(Kind::Signal, from, to) => self.deliver_signal(from, to),
        }
    }

    /// A block reaches the head of the link `from → to`: it lands in the
    /// receive posted first (a receiver-not-ready is a bug), checked to fit.
    fn deliver_data(&mut self, from: Rank, to: Rank) {
        let bs = self.block_size;
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

    /// `to`'s receive completion for a block from `from`.
    fn receive_done(&mut self, from: Rank, to: Rank) {
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

    /// `from`'s send completion for a block to `to`.
    fn send_done(&mut self, from: Rank, to: Rank) {
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

    /// A signal reaches the head of the link `from → to`: a `Join`, a
    /// refusal or a control message, to the rendezvous or the member.
    fn deliver_signal(&mut self, from: Rank, to: Rank) {
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
                Signal::JoinRejected(_) | Signal::IdInUse => {}
            }
        }
        let sender = NodeId(from as u32);
        let rendezvous = &mut self.nodes[to].rendezvous;
        match signal {
            Signal::Join(summary) => {
                rendezvous.handle_join_settings(sender, GROUP, summary.fingerprint);
                rendezvous.handle_join(sender, GROUP, summary.digest);
            }
            Signal::JoinRejected(summary) => {
                rendezvous.handle_join_settings(sender, GROUP, summary.fingerprint);
                rendezvous.handle_join_rejected(sender, GROUP, summary.digest);
            }
            Signal::IdInUse => rendezvous.handle_id_in_use(sender, GROUP),
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
}
