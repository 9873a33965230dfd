//! Starting a node on the `ofi` transport: choose the provider, open the
//! fabric objects, and connect a data and a control endpoint to every peer.
//!
//! Rendezvous uses the authenticated mesh the `tcp` transport runs on (the
//! cluster key's HMAC handshake): over each authenticated connection the two nodes
//! swap their passive endpoint's fabric address and a fresh random token.
//! The higher-ranked node then connects both endpoints through libfabric's
//! connection manager, presenting the token in the connection data; the
//! lower-ranked node accepts only connection requests carrying a token it
//! issued, so only cluster members get fabric endpoints. CM events are
//! dispatched by endpoint (fid context), not by their order. Once every
//! endpoint of a node is connected, the node says so over the mesh in a
//! second round of the mesh's agreement, and starts only once every member
//! has said so; a node whose endpoints do not connect tells every member
//! whom it blames, so that every member that fails names the same members.
//! Then the TCP connections are closed; the rendezvous listener and the
//! passive endpoint stay open, for members that restart ([`rejoin`]).

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use super::driver::cm::{self, EndpointKey, Event, Shared, read_event};
use super::driver::{
    CTRL_RECVS, CTRL_SENDS, ControlPool, Core, DATA_RECVS, Driver, Endpoints, Fid, Peer, Queues,
    WaitFd,
};
use super::fabric::{Domain, Info, check};
use super::rejoin::{self, MAX_NAME, Rejoin, RunTable, fresh_token, swap};
use super::{FabricOptions, OfiEndpoint, ffi};
use crate::error::Error;
use crate::ids::NodeId;
use crate::transport::fabric_driver::PeerLink;
use crate::transport::fabric_driver::{self, DriverOptions};
use crate::transport::mesh::handshake::Vet;
use crate::transport::mesh::{self, ClusterConfig, Mesh, MeshError, MeshPurpose};
use crate::transport::{Completion, Completions};
use crate::wait::CompletionMode;

fn transport_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Transport(format!("ofi: {what}: {e}"))
}

/// What the start-up steps need to know of the cluster once the mesh has
/// taken its configuration.
#[derive(Clone, Copy, Debug)]
struct Startup {
    me: NodeId,
    nodes: usize,
    connect_timeout: Duration,
    handshake_timeout: Duration,
    failure_timeout: Duration,
}

impl Startup {
    fn of(cluster: &ClusterConfig) -> Self {
        Startup {
            me: cluster.id,
            nodes: cluster.members.len(),
            connect_timeout: cluster.connect_timeout,
            handshake_timeout: cluster.handshake_timeout,
            failure_timeout: cluster.failure_timeout,
        }
    }

    /// Every other member.
    fn peers(&self) -> impl Iterator<Item = NodeId> + use<> {
        let me = self.me;
        (0..self.nodes as u32).map(NodeId).filter(move |&p| p != me)
    }
}

/// Start the node's fabric side, its driver set up as `driver` says;
/// returns its transport and completion queue.
pub(crate) async fn establish(
    cluster: ClusterConfig,
    driver: DriverOptions,
    options: FabricOptions,
    mode: CompletionMode,
) -> Result<(OfiEndpoint, Completions), Error> {
    cluster
        .check_member()
        .map_err(|e| Error::Transport(e.to_string()))?;
    let startup = Startup::of(&cluster);
    let members = cluster.members.clone();
    let info = choose_provider(&cluster, &options).await?;
    let fabric = FabricObjects::open(&info, startup.nodes)?;
    let runs = RunTable::default();
    let vet = rejoin::vet(startup.me, &runs);
    let Rendezvous {
        issued,
        theirs,
        mut mesh,
    } = rendezvous(cluster, &fabric.name, (startup.handshake_timeout, vet)).await?;
    // This node's endpoints are connected by then, or it gives up. The
    // other members started within the time of an address swap of ours:
    // the agreement's margin covers that.
    let timeout = startup.connect_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let shared = fabric.shared(info.summary.modes.rx_cq_data);
    let connected = match dial_lower_ranks(&shared, &info, &theirs, startup.me) {
        Ok(dialled) => {
            await_connections(&shared, &fabric.pep, &issued, startup, deadline, dialled).await
        }
        Err(failure) => Err(failure),
    };
    let endpoints = match connected {
        Ok(endpoints) => endpoints,
        Err(SetupFailure { error, blame }) => {
            mesh.abandon(deadline, timeout, &blame).await;
            return Err(error);
        }
    };
    mesh.confirm(deadline, timeout)
        .await
        .map_err(|e| transport_error("connecting endpoints", e))?;
    let known: HashMap<NodeId, u64> = startup
        .peers()
        .filter_map(|p| Some((p, mesh.incarnation(p)?)))
        .collect();
    let acceptor = mesh
        .into_acceptor()
        .expect("a formed mesh has its listener");
    let name = fabric.name.clone();
    let (downs, gone) = tokio::sync::mpsc::unbounded_channel();
    let (endpoint, completions) = start_driver(
        fabric,
        (info, downs),
        (endpoints, &known, &members),
        startup,
        &driver,
        &options,
        mode,
    )?;
    let rejoin = Rejoin {
        me: startup.me,
        members,
        name,
        connect_timeout: startup.connect_timeout,
        handshake_timeout: startup.handshake_timeout,
        margin: startup.failure_timeout / 2,
        runs,
        commands: endpoint.commands.downgrade(),
    };
    let (stop, acceptor) = rejoin::start(rejoin, acceptor, (known, gone));
    Ok((endpoint.with_task_beside(stop, acceptor), completions))
}

/// This node could not connect its endpoints: why, and the members it
/// blames (itself for a failure of its own).
struct SetupFailure {
    error: Error,
    blame: Vec<NodeId>,
}

impl SetupFailure {
    /// A failure of this node's own.
    fn local(me: NodeId) -> impl Fn(Error) -> SetupFailure {
        move |error| SetupFailure {
            error,
            blame: vec![me],
        }
    }
}

/// Step 1: the provider (`fi_getinfo` takes a while: off the runtime's
/// threads), with the strict modes forced if asked for.
async fn choose_provider(cluster: &ClusterConfig, options: &FabricOptions) -> Result<Info, Error> {
    let provider = options.provider.clone();
    let node: String = options
        .fabric_addr
        .unwrap_or_else(|| cluster.members[cluster.id.index()].ip())
        .to_string();
    let wanted = (options.provider.clone(), node.clone());
    let mut info = tokio::task::spawn_blocking(move || Info::get(&provider, &node))
        .await
        .map_err(|e| transport_error("fi_getinfo", e))?
        .map_err(|e| {
            if e.code == ffi::FI_ENODATA {
                let (provider, node) = &wanted;
                transport_error(
                    "choosing the provider",
                    format!(
                        "libfabric offers no `{provider}` endpoints (FI_EP_MSG with RMA and \
                         remote CQ data) on {node}; see `fi_info -p {provider} -t FI_EP_MSG`"
                    ),
                )
            } else {
                transport_error("choosing the provider", e)
            }
        })?;
    let strict = options.strict_modes;
    if strict {
        info.force_strict();
    }
    tracing::info!(
        provider = %info.summary.provider,
        fabric = %info.summary.fabric,
        domain = %info.summary.domain,
        mr_mode = format_args!("{:#x}", info.summary.raw_mr_mode),
        mode = format_args!("{:#x}", info.summary.raw_mode),
        cq_data_size = info.summary.cq_data_size,
        tx_size = info.summary.tx_size,
        rx_size = info.summary.rx_size,
        strict,
        "ofi provider chosen"
    );
    if !info.summary.thread_safe {
        tracing::warn!(
            "the domain is not FI_THREAD_SAFE; memory regions are closed from other threads"
        );
    }
    Ok(info)
}

/// The node's fabric objects, opened before the rendezvous. Fields drop in
/// order: the passive endpoint and the control pool before the queues, the
/// queues before the domain.
struct FabricObjects {
    /// The passive endpoint higher-ranked peers connect to.
    pep: Fid,
    /// Its fabric address, sent to every peer in the rendezvous.
    name: Vec<u8>,
    pool: ControlPool,
    cq: Fid,
    cq_fd: RawFd,
    eq: Fid,
    eq_fd: RawFd,
    domain: Arc<Domain>,
    /// The next memory registration key.
    next_key: u64,
}

impl FabricObjects {
    /// Step 2: fabric, domain, queues, control pool, passive endpoint, for
    /// a cluster of `nodes`.
    fn open(info: &Info, nodes: usize) -> Result<Self, Error> {
        let domain = Domain::open(info).map_err(|e| transport_error("opening the fabric", e))?;
        let (eq, eq_fd) = {
            let (mut eq, mut fd) = (ptr::null_mut(), 0);
            // SAFETY: the fabric is open; out-pointers are live locals.
            let ret = unsafe { ffi::rdmc_eq_open(domain.fabric(), &mut eq, &mut fd) };
            check("fi_eq_open", ret.into()).map_err(|e| transport_error("event queue", e))?;
            (Fid(eq), fd)
        };
        // One peer more than there are: room for a restarted peer's new
        // endpoints while what the old ones still report is not read yet.
        let peers = nodes as u64;
        let cq_size = peers * (CTRL_RECVS + DATA_RECVS + CTRL_SENDS + 32) as u64 + 64;
        let (cq, cq_fd) = {
            let (mut cq, mut fd) = (ptr::null_mut(), 0);
            // SAFETY: the domain is open; out-pointers are live locals.
            let ret = unsafe { ffi::rdmc_cq_open(domain.domain(), cq_size, &mut cq, &mut fd) };
            check("fi_cq_open", ret.into()).map_err(|e| transport_error("completion queue", e))?;
            (Fid(cq), fd)
        };
        let pool = ControlPool::new(&domain, nodes, 1)
            .map_err(|e| transport_error("registering control buffers", e))?;
        let (pep, name) = open_passive_endpoint(&domain, info, &eq)?;
        Ok(FabricObjects {
            pep,
            name,
            pool,
            cq,
            cq_fd,
            eq,
            eq_fd,
            domain,
            next_key: 2,
        })
    }

    /// What every endpoint of the node is opened with.
    fn shared(&self, data_recvs: bool) -> Shared<'_> {
        Shared {
            domain: &self.domain,
            eq: &self.eq,
            cq: &self.cq,
            pool: &self.pool,
            data_recvs,
        }
    }
}

/// The passive endpoint, listening, and its fabric address.
fn open_passive_endpoint(domain: &Domain, info: &Info, eq: &Fid) -> Result<(Fid, Vec<u8>), Error> {
    let mut name = vec![0u8; MAX_NAME];
    let mut name_len = name.len();
    let mut pep = ptr::null_mut();
    // SAFETY: fabric, info and EQ are live; `name` has `name_len` bytes.
    let ret = unsafe {
        ffi::rdmc_pep_open(
            domain.fabric(),
            info.as_ptr(),
            eq.0,
            &mut pep,
            name.as_mut_ptr().cast(),
            &mut name_len,
        )
    };
    check("fi_passive_ep/fi_listen", ret.into())
        .map_err(|e| transport_error("listening on the fabric", e))?;
    name.truncate(name_len);
    Ok((Fid(pep), name))
}

/// What the rendezvous yields.
struct Rendezvous {
    /// The token issued to each peer, which its connection requests carry.
    issued: HashMap<NodeId, [u8; 16]>,
    /// Each peer's passive endpoint address and the token it issued us.
    theirs: HashMap<NodeId, (Vec<u8>, [u8; 16])>,
    /// The authenticated connections, and the listener still turning
    /// strangers away, until the fabric endpoints are connected.
    mesh: Mesh,
}

/// Step 3: the rendezvous over the authenticated TCP mesh — swap fabric
/// addresses and fresh tokens with every peer.
async fn rendezvous(
    cluster: ClusterConfig,
    name: &[u8],
    (swap_timeout, vet): (Duration, Vet),
) -> Result<Rendezvous, Error> {
    let mut mesh = mesh::bring_up_vetted(cluster, MeshPurpose::OfiRendezvous, Some(vet))
        .await
        .map_err(|e| match e {
            MeshError::Listen(_) => Error::Transport(e.to_string()),
            e => transport_error("rendezvous", e),
        })?;
    let mut issued = HashMap::new();
    let swaps = mesh.peers.iter_mut().map(|(&peer, stream)| {
        let token = fresh_token();
        issued.insert(peer, token);
        async move {
            let r = tokio::time::timeout(swap_timeout, swap(stream, name, &token)).await;
            (peer, r)
        }
    });
    let mut theirs = HashMap::new();
    for (peer, r) in futures::future::join_all(swaps).await {
        let got = r
            .map_err(|_| {
                transport_error("fabric address exchange", format!("node {peer} timed out"))
            })?
            .map_err(|e| transport_error("fabric address exchange", format!("node {peer}: {e}")))?;
        theirs.insert(peer, got);
    }
    Ok(Rendezvous {
        issued,
        theirs,
        mesh,
    })
}

/// Step 4a: connect both endpoints to every lower rank.
fn dial_lower_ranks(
    shared: &Shared<'_>,
    info: &Info,
    theirs: &HashMap<NodeId, (Vec<u8>, [u8; 16])>,
    me: NodeId,
) -> Result<HashMap<EndpointKey, Fid>, SetupFailure> {
    let mut eps = HashMap::new();
    let lower = theirs.iter().filter(|(p, _)| **p < me);
    for (&peer, (addr, token)) in lower {
        for ctrl in [false, true] {
            let ep = shared
                .dial(info.as_ptr(), (peer, ctrl), (me, 0), (addr, token))
                .map_err(|e| transport_error(&format!("connecting to node {peer}"), e))
                .map_err(SetupFailure::local(me))?;
            eps.insert((peer, ctrl), ep);
        }
    }
    Ok(eps)
}

/// Step 4b: accept both endpoints from every higher rank (connection
/// requests with a token issued to them), and wait until every endpoint,
/// `eps` dialled before included, is connected — by `deadline`.
async fn await_connections(
    shared: &Shared<'_>,
    pep: &Fid,
    issued: &HashMap<NodeId, [u8; 16]>,
    startup: Startup,
    deadline: tokio::time::Instant,
    mut eps: HashMap<EndpointKey, Fid>,
) -> Result<HashMap<EndpointKey, Fid>, SetupFailure> {
    let local = SetupFailure::local(startup.me);
    let mut connected = std::collections::HashSet::new();
    let want = 2 * startup.nodes.saturating_sub(1);
    while connected.len() < want {
        if tokio::time::Instant::now() >= deadline {
            let missing: Vec<NodeId> = startup
                .peers()
                .filter(|&p| !connected.contains(&(p, false)) || !connected.contains(&(p, true)))
                .collect();
            let ids: Vec<u32> = missing.iter().map(|p| p.0).collect();
            return Err(SetupFailure {
                error: transport_error(
                    "connecting endpoints",
                    format!(
                        "node(s) {ids:?} not connected within {:?}",
                        startup.connect_timeout
                    ),
                ),
                blame: missing,
            });
        }
        let Some(ev) = read_event(shared.eq)
            .map_err(|e| local(transport_error("reading connection events", e)))?
        else {
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        };
        match ev {
            Event::ConnReq { info: req, data } => {
                let valid = cm::parse_conn_data(&data).filter(|(ctrl, from, token)| {
                    *from > startup.me
                        && from.index() < startup.nodes
                        && issued.get(from) == Some(token)
                        && !eps.contains_key(&(*from, *ctrl))
                });
                if let Some((ctrl, from, _)) = valid {
                    let ep = shared
                        .accept(req, (from, ctrl), 0)
                        .map_err(|e| transport_error("accepting an endpoint", e))
                        .map_err(&local)?;
                    eps.insert((from, ctrl), ep);
                } else {
                    tracing::warn!("rejected a fabric connection without a valid token");
                    cm::reject(pep, &req);
                }
            }
            Event::Connected((peer, ctrl, _)) => {
                connected.insert((peer, ctrl));
            }
            Event::Down(who, err) => {
                return Err(SetupFailure {
                    error: transport_error(
                        "connecting endpoints",
                        format!(
                            "node {} refused or dropped the connection ({})",
                            who.map_or_else(|| "?".to_owned(), |(p, _, _)| p.to_string()),
                            super::fabric::strerror(err)
                        ),
                    ),
                    // An unknown endpoint: this node's own failure, for all
                    // it knows.
                    blame: vec![who.map_or(startup.me, |(p, _, _)| p)],
                });
            }
        }
    }
    Ok(eps)
}

/// Step 5: hand the connected endpoints (to the peers' runs `runs`, at
/// `members`), the passive endpoint and the queues to a fabric driver
/// task, and start it; every peer is reported up. The driver keeps `info`
/// to connect to restarted peers, and tells `downs` of every peer's run
/// that goes down.
fn start_driver(
    fabric: FabricObjects,
    (info, downs): (Info, tokio::sync::mpsc::UnboundedSender<(NodeId, u64)>),
    (mut endpoints, runs, members): (
        HashMap<EndpointKey, Fid>,
        &HashMap<NodeId, u64>,
        &[std::net::SocketAddr],
    ),
    startup: Startup,
    driver: &DriverOptions,
    options: &FabricOptions,
    mode: CompletionMode,
) -> Result<(OfiEndpoint, Completions), Error> {
    let mut peers = HashMap::new();
    for p in startup.peers() {
        let data = endpoints.remove(&(p, false)).expect("connected");
        let ctrl = endpoints.remove(&(p, true)).expect("connected");
        let run = runs.get(&p).copied().unwrap_or(0);
        peers.insert(p, Peer::new(Endpoints::new(data, ctrl, (0, run))));
    }
    let interest = tokio::io::Interest::READABLE;
    // SAFETY: the fds are the CQ's and EQ's wait objects, open until those
    // queues close; the driver drops these registrations first.
    let cq_fd = unsafe { AsyncFd::register_with_interest(WaitFd(fabric.cq_fd), interest) }
        .map_err(|e| transport_error("waiting on the CQ", e))?;
    // SAFETY: as above.
    let eq_fd = unsafe { AsyncFd::register_with_interest(WaitFd(fabric.eq_fd), interest) }
        .map_err(|e| transport_error("waiting on the EQ", e))?;
    let queues = Queues {
        cq: fabric.cq,
        cq_fd,
        eq: fabric.eq,
        eq_fd,
        pep: Some(fabric.pep),
    };
    let span = tracing::debug_span!("rdmc_ofi", node = startup.me.0);
    // A socket provider completes a send once its socket took the bytes.
    let buffered = buffered_provider(&info.summary.provider);
    let description = format!("ofi, provider {}", info.summary.provider);
    let (endpoint, completions) = fabric_driver::spawn(driver, span, |commands, completions| {
        let failure_timeout = startup.failure_timeout;
        let core = Core::new(
            startup.me,
            peers,
            fabric.pool,
            commands,
            completions,
            mode,
            failure_timeout,
        );
        for (&node, peer) in &core.peers {
            core.emit(Completion::PeerUp {
                node,
                incarnation: peer.link.incarnation(),
                addr: members.get(node.index()).copied(),
            });
        }
        let mut driver = Driver::new(
            core,
            info.summary.modes,
            fabric.domain,
            queues,
            fabric.next_key,
        );
        // Verbs carries 4 bytes of CQ data, so strict (verbs-like) mode
        // never counts on more.
        driver.len_in_cq_data = info.summary.cq_data_size >= 8 && !options.strict_modes;
        driver.restarts(info, downs)
    });
    let endpoint = endpoint
        .with_buffered_sends(buffered)
        .with_description(description);
    Ok((endpoint, completions))
}

/// Whether libfabric's `provider` (e.g. `tcp;ofi_rxm`) runs over sockets,
/// whose send completions come once the kernel buffered the bytes.
fn buffered_provider(provider: &str) -> bool {
    provider
        .split(';')
        .any(|p| matches!(p, "tcp" | "sockets" | "udp" | "net"))
}

#[cfg(test)]
mod provider_tests {
    use super::buffered_provider;

    #[test]
    fn socket_providers_buffer_their_sends() {
        for p in ["tcp", "tcp;ofi_rxm", "sockets", "udp;ofi_rxd"] {
            assert!(buffered_provider(p), "{p}");
        }
        for p in ["verbs", "verbs;ofi_rxm", "efa", "shm", "psm3", ""] {
            assert!(!buffered_provider(p), "{p}");
        }
    }
}
