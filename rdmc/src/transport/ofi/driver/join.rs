//! A restarted peer let back in: once the rendezvous listener (still open
//! after start) has authenticated a newer run of a member and the two
//! nodes have swapped fabric addresses and tokens, the driver is told
//! ([`OfiCmd::Join`]). It reports the older run down (if it has not yet),
//! accepts the new run's connection requests for a data and a control
//! endpoint — those carrying the token issued to it, on the passive
//! endpoint kept listening — and, once both are connected, replaces the
//! peer's endpoints and state with them and reports the new run up.
//!
//! Each peer's endpoints have a generation, carried by their context
//! tokens and by every operation posted on them, so that what the
//! provider still reports about the closed ones (flushed operations, their
//! shutdown) is told apart from the new ones and dropped.
//!
//! Peers going down are read here too: [`Driver::poll_eq`] reads every
//! connection-manager event, and an endpoint that shut down or failed is a
//! peer down. (Silence past the failure timeout, and what is closed and
//! dropped when a peer is down, are [`FabricDriver`]'s.)

use std::net::SocketAddr;

use tokio::sync::oneshot;

use super::cm::{self, ConnReqInfo, EndpointOf, Event, Shared, read_event};
use super::{Driver, Endpoints, Peer};
use crate::ids::NodeId;
use crate::transport::Completion;
use crate::transport::fabric_driver::FabricDriver;
use crate::transport::ofi::fabric::strerror;

/// What the `ofi` transport's own tasks ask of its driver.
#[derive(Debug)]
pub(crate) enum OfiCmd {
    /// `peer`'s run `incarnation`, whose rendezvous address is `addr`, was
    /// let in: accept its connection requests carrying `token` (a peer of
    /// higher id), or connect to its passive endpoint at `dial`'s address
    /// presenting `dial`'s token (lower id), then replace the peer's
    /// endpoints; `done` says whether both connected.
    Join {
        peer: NodeId,
        incarnation: u64,
        addr: Option<SocketAddr>,
        token: [u8; 16],
        dial: Option<(Vec<u8>, [u8; 16])>,
        done: oneshot::Sender<Result<(), String>>,
    },
    /// Give up letting in `peer`'s run `incarnation` (its rendezvous
    /// failed or took too long).
    Cancel { peer: NodeId, incarnation: u64 },
}

/// A restarted peer's endpoints being connected.
#[derive(Debug)]
pub(crate) struct Join {
    /// The new endpoints, as they are accepted (generation and run set).
    eps: Endpoints,
    addr: Option<SocketAddr>,
    token: [u8; 16],
    /// Whether the data and the control endpoint are connected.
    connected: [bool; 2],
    done: Option<oneshot::Sender<Result<(), String>>>,
}

impl Join {
    /// Close what was opened and say why the join failed.
    fn fail(mut self, why: String) {
        tracing::warn!(reason = %why, "a restarted peer was not let back in");
        self.eps.close();
        if let Some(done) = self.done.take() {
            let _ = done.send(Err(why));
        }
    }
}

impl Driver {
    /// Read every EQ event there is: a peer whose endpoint shut down or
    /// failed is down; a restarted peer's connections are accepted.
    pub(super) fn poll_eq(&mut self) -> usize {
        let mut handled = 0;
        loop {
            match read_event(&self.eq) {
                Ok(Some(event)) => self.on_cm_event(event),
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the event queue");
                    break;
                }
            }
            handled += 1;
        }
        handled
    }

    /// Act on one of the transport's own commands.
    pub(super) fn on_join_command(&mut self, cmd: OfiCmd) {
        match cmd {
            OfiCmd::Join {
                peer,
                incarnation,
                addr,
                token,
                dial,
                done,
            } => {
                self.join(peer, incarnation, (addr, token), done);
                if let Some(dial) = dial {
                    self.dial_join(peer, &dial);
                }
            }
            OfiCmd::Cancel { peer, incarnation } => {
                if self
                    .joins
                    .get(&peer)
                    .is_some_and(|j| j.eps.incarnation == incarnation)
                {
                    let join = self.joins.remove(&peer).expect("checked");
                    join.fail(format!("node {peer}: its rendezvous was given up"));
                }
            }
        }
    }

    fn join(
        &mut self,
        peer: NodeId,
        incarnation: u64,
        (addr, token): (Option<SocketAddr>, [u8; 16]),
        done: oneshot::Sender<Result<(), String>>,
    ) {
        let refused = if self.core.flush_deadline().is_some() || self.pep.is_none() {
            Some("the node is shutting down".to_owned())
        } else if !self.core.peers.contains_key(&peer) {
            Some(format!("node {peer} is no peer of this node"))
        } else {
            None
        };
        if let Some(why) = refused {
            let _ = done.send(Err(why));
            return;
        }
        let current = &self.core.peers[&peer];
        let mut generation = current.link.generation;
        if let Some(old) = self.joins.remove(&peer) {
            generation = generation.max(old.eps.generation);
            old.fail(format!("node {peer}: a newer run of it came"));
        }
        // The newer run is proof that the older is gone.
        self.peer_failed(peer, "a newer run of it was let in");
        tracing::info!(
            peer = peer.0,
            incarnation,
            "letting a restarted peer back in"
        );
        self.joins.insert(
            peer,
            Join {
                eps: Endpoints::pending((generation.wrapping_add(1), incarnation)),
                addr,
                token,
                connected: [false; 2],
                done: Some(done),
            },
        );
    }

    /// Connect the endpoints of `peer`'s join (if it is under way) to its
    /// passive endpoint at `addr`, presenting `token`.
    fn dial_join(&mut self, peer: NodeId, (addr, token): &(Vec<u8>, [u8; 16])) {
        let Some(generation) = self.joins.get(&peer).map(|j| j.eps.generation) else {
            return;
        };
        let Some(info) = &self.info else {
            let join = self.joins.remove(&peer).expect("checked");
            return join.fail(format!(
                "node {peer}: this node connects to no restarted peer"
            ));
        };
        let shared = self.shared();
        let me = self.core.me;
        let dialled: Result<Vec<_>, _> = [false, true]
            .into_iter()
            .map(|ctrl| {
                let key = (peer, ctrl);
                shared.dial(info.as_ptr(), key, (me, generation), (addr, token))
            })
            .collect();
        let join = self.joins.get_mut(&peer).expect("checked");
        match dialled {
            Ok(eps) => {
                let mut eps = eps.into_iter();
                join.eps.data = eps.next();
                join.eps.ctrl = eps.next();
            }
            Err(e) => {
                let join = self.joins.remove(&peer).expect("checked");
                join.fail(format!("node {peer}: connecting to it: {e}"));
            }
        }
    }

    /// A connection-manager event after start.
    pub(super) fn on_cm_event(&mut self, event: Event) {
        match event {
            Event::ConnReq { info, data } => self.on_connreq(info, &data),
            Event::Connected(of) => self.on_connected(of),
            Event::Down(Some((peer, ctrl, generation)), err) => {
                let why = if err == 0 {
                    "endpoint shut down".to_owned()
                } else {
                    format!("endpoint error: {}", strerror(err))
                };
                if self
                    .joins
                    .get(&peer)
                    .is_some_and(|j| j.eps.generation == generation)
                {
                    let join = self.joins.remove(&peer).expect("checked");
                    let kind = if ctrl { "control" } else { "data" };
                    join.fail(format!("node {peer}: its {kind} endpoint: {why}"));
                } else if self
                    .core
                    .peers
                    .get(&peer)
                    .is_some_and(|p| p.link.generation == generation)
                {
                    self.peer_failed(peer, &why);
                }
            }
            Event::Down(None, _) => {}
        }
    }

    /// A connection request: accepted if it comes from a peer being let
    /// back in, with the token issued to it, for an endpoint not accepted
    /// yet; rejected otherwise.
    fn on_connreq(&mut self, req: ConnReqInfo, data: &[u8]) {
        let wanted = cm::parse_conn_data(data).filter(|(ctrl, from, token)| {
            self.joins.get(from).is_some_and(|j| {
                j.token == *token && !j.connected[usize::from(*ctrl)] && {
                    let ep = if *ctrl { &j.eps.ctrl } else { &j.eps.data };
                    ep.is_none()
                }
            })
        });
        let Some((ctrl, from, _)) = wanted else {
            tracing::warn!("rejected a fabric connection without a valid token");
            if let Some(pep) = &self.pep {
                cm::reject(pep, &req);
            }
            return;
        };
        let generation = self.joins[&from].eps.generation;
        let shared = self.shared();
        match shared.accept(req, (from, ctrl), generation) {
            Ok(ep) => {
                let join = self.joins.get_mut(&from).expect("checked");
                *(if ctrl {
                    &mut join.eps.ctrl
                } else {
                    &mut join.eps.data
                }) = Some(ep);
            }
            Err(e) => {
                let join = self.joins.remove(&from).expect("checked");
                join.fail(format!("node {from}: accepting its endpoint: {e}"));
            }
        }
    }

    /// An endpoint connected: once both of a joining peer's are, they
    /// replace the peer's.
    fn on_connected(&mut self, (peer, ctrl, generation): EndpointOf) {
        let Some(join) = self.joins.get_mut(&peer) else {
            return;
        };
        if join.eps.generation != generation {
            return;
        }
        join.connected[usize::from(ctrl)] = true;
        if join.connected != [true; 2] {
            return;
        }
        let mut join = self.joins.remove(&peer).expect("present");
        let (incarnation, addr) = (join.eps.incarnation, join.addr);
        let eps = std::mem::replace(&mut join.eps, Endpoints::pending((generation, incarnation)));
        // The old endpoints were closed when the peer went down; its
        // receive slots and credits were dropped then. A fresh peer has
        // no backlogs, every control send slot free, and a new clock.
        self.core.peers.insert(peer, Peer::new(eps));
        tracing::info!(peer = peer.0, incarnation, "a restarted peer is back");
        self.emit(Completion::PeerUp {
            node: peer,
            incarnation,
            addr,
        });
        if let Some(done) = join.done.take() {
            let _ = done.send(Ok(()));
        }
    }

    /// What endpoints are opened with.
    fn shared(&self) -> Shared<'_> {
        Shared {
            domain: &self.domain,
            eq: &self.eq,
            cq: &self.cq,
            pool: self.core.control_slots(),
            data_recvs: self.modes.rx_cq_data,
        }
    }

    /// Give up every join (the driver ends).
    pub(super) fn close_joins(&mut self) {
        for (_, join) in self.joins.drain() {
            join.fail("the node is shutting down".to_owned());
        }
    }
}
