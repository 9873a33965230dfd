//! Starting a node on the `rdma` transport: open the device, create a
//! queue pair per peer with its receives posted, swap queue pair addresses
//! over the authenticated TCP mesh, connect, and meet at a barrier.
//!
//! The mesh is the `tcp` transport's (the cluster key's HMAC handshake, the
//! same admission rules), so only members that proved the key learn a QP
//! number to send to. Each pair swaps (QP number, first packet sequence
//! number, LID, GID); both move their QP to RTR and RTS; then the members
//! run the mesh's agreement once more — a node says it is ready once every
//! QP of its own is, and starts once every member has said so — so that
//! nobody sends before its peer's QP is ready to receive, and a node whose
//! setup fails tells every member whom it blames. Then the mesh's listener
//! closes; its connections stay open, watched, to tell a peer's death at
//! once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::driver::{
    CTRL_RECVS, CTRL_SENDS, ControlPool, Core, Driver, Peer, QpLink, WRITES_IN_FLIGHT,
};
use super::ffi::Notifier;
use super::verbs::{Device, Qp, QpAddress, RdmaError};
use super::{DeviceOptions, RdmaEndpoint};
use crate::error::Error;
use crate::ids::NodeId;
use crate::transport::fabric_driver::{self, DriverOptions};
use crate::transport::mesh::{self, ClusterConfig, Mesh, MeshError, MeshPurpose};
use crate::transport::{Completions, crypto};
use crate::wait::CompletionMode;

fn transport_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Transport(format!("rdma: {what}: {e}"))
}

/// Swap queue pair addresses with a peer over its authenticated stream.
async fn swap(stream: &mut TcpStream, ours: &QpAddress) -> std::io::Result<QpAddress> {
    stream.write_all(&ours.encode()).await?;
    let mut theirs = [0u8; QpAddress::LEN];
    stream.read_exact(&mut theirs).await?;
    Ok(QpAddress::decode(&theirs))
}

/// Wait until the peer closes its rendezvous connection (or it breaks),
/// then say so. Nothing more is sent on it; the driver aborts this task —
/// closing the connection, which tells the peer — when the peer is down
/// or the node stops.
async fn watch(peer: NodeId, mut stream: TcpStream, closed: mpsc::UnboundedSender<NodeId>) {
    let mut buf = [0u8; 64];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {} // nothing is expected; ignore it
        }
    }
    let _ = closed.send(peer);
}

/// Start the node's verbs side; returns its transport and completion queue.
pub(crate) async fn establish(
    cluster: ClusterConfig,
    driver: DriverOptions,
    options: DeviceOptions,
    mode: CompletionMode,
) -> Result<(RdmaEndpoint, Completions), Error> {
    cluster
        .check_member()
        .map_err(|e| Error::Transport(e.to_string()))?;
    let me = cluster.id;
    let (swap_timeout, failure_timeout) = (cluster.handshake_timeout, cluster.failure_timeout);
    let (device, pool, qps) = open_device(options, me, cluster.members.len()).await?;
    let mut mesh = mesh::bring_up(cluster, MeshPurpose::RdmaRendezvous)
        .await
        .map_err(|e| match e {
            MeshError::Listen(_) => Error::Transport(e.to_string()),
            e => transport_error("rendezvous", e),
        })?;
    // Every member's QPs are ready by then, or it gave up: the swap takes
    // at most the handshake timeout, moving the QPs to RTS no time to
    // speak of.
    let timeout = swap_timeout + swap_timeout.max(Duration::from_secs(1));
    let deadline = tokio::time::Instant::now() + timeout;
    let connected = match connect_queue_pairs(&device, &mut mesh, qps, me, swap_timeout).await {
        Ok(connected) => connected,
        Err((error, blame)) => {
            mesh.abandon(deadline, timeout, &[blame]).await;
            return Err(error);
        }
    };
    // Every QP of ours is ready to receive: say so, and hear the same from
    // every member.
    mesh.confirm(deadline, timeout)
        .await
        .map_err(|e| transport_error("connecting queue pairs", e))?;
    let (link_closed, watchers) = watch_links(mesh);
    let peers = connected
        .into_iter()
        .map(|(p, qp)| (p, Peer::new(QpLink::new(qp))))
        .collect();
    let device = Arc::new(device);
    let notifier = completion_notifier(&device)?;
    let span = tracing::debug_span!("rdmc_rdma", node = me.0);
    let described = |(endpoint, completions): (RdmaEndpoint, Completions)| {
        (
            endpoint.with_description("rdma verbs".to_owned()),
            completions,
        )
    };
    Ok(described(fabric_driver::spawn(
        &driver,
        span,
        |commands, completions| {
            let core = Core::new(
                me,
                peers,
                pool,
                commands,
                completions,
                mode,
                failure_timeout,
            );
            Driver::new(core, device, notifier).with_links(link_closed, watchers)
        },
    )))
}

/// Open the device for a cluster of `nodes` members (`me` among them), with
/// a queue pair per peer, its receives posted.
async fn open_device(
    options: DeviceOptions,
    me: NodeId,
    nodes: usize,
) -> Result<(Device, ControlPool, HashMap<NodeId, Qp>), Error> {
    let peers = nodes.saturating_sub(1) as u32;
    let per_qp = (CTRL_RECVS + CTRL_SENDS + WRITES_IN_FLIGHT) as u32;
    let cqe = peers * per_qp + 64;
    // Opening a device and registering memory are system calls that can
    // take a while (pinning pages): off the runtime's threads.
    let opened = tokio::task::spawn_blocking(move || -> Result<_, RdmaError> {
        let device = Device::open(&options, cqe)?;
        let pool = ControlPool::new(&device, nodes)?;
        let mut qps = HashMap::new();
        for p in (0..nodes as u32).map(NodeId).filter(|&p| p != me) {
            let mut qp =
                device.create_qp((CTRL_SENDS + WRITES_IN_FLIGHT) as u32, CTRL_RECVS as u32)?;
            for i in 0..CTRL_RECVS {
                pool.post_recv(&mut qp, p, i)?;
            }
            qps.insert(p, qp);
        }
        Ok((device, pool, qps))
    })
    .await
    .map_err(|e| transport_error("opening the device", e))?;
    let (device, pool, qps) = opened.map_err(Error::Rdma)?;
    tracing::info!(
        device = %device.name,
        port = device.port,
        gid_index = device.gid_index,
        gid = %device.gid,
        lid = device.lid,
        mtu = ?device.mtu,
        "rdma device opened"
    );
    Ok((device, pool, qps))
}

/// Swap queue pair addresses with every peer over the mesh (each swap
/// within `swap_timeout`) and move each queue pair to RTS: the connected
/// ones, or the first error with the node it blames.
async fn connect_queue_pairs(
    device: &Device,
    mesh: &mut Mesh,
    mut qps: HashMap<NodeId, Qp>,
    me: NodeId,
    swap_timeout: Duration,
) -> Result<HashMap<NodeId, Qp>, (Error, NodeId)> {
    // Every swap at once: one after another, two nodes could each wait for
    // the other's answer while that one waits for a third.
    let mut ours = HashMap::new();
    for (&peer, qp) in &qps {
        let psn = u32::from_le_bytes(crypto::random()) & 0xFF_FFFF;
        ours.insert(peer, (psn, device.address(qp, psn)));
    }
    let swaps = mesh.peers.iter_mut().map(|(&peer, stream)| {
        let address = ours[&peer].1;
        async move {
            let r = tokio::time::timeout(swap_timeout, swap(stream, &address)).await;
            (peer, r)
        }
    });
    let mut swapped = Vec::new();
    let mut failed = None;
    for (peer, r) in futures::future::join_all(swaps).await {
        match r {
            Ok(Ok(theirs)) => swapped.push((peer, theirs)),
            Ok(Err(e)) if failed.is_none() => {
                let error = transport_error("QP address exchange", format!("node {peer}: {e}"));
                failed = Some((error, peer));
            }
            Err(_) if failed.is_none() => {
                let error =
                    transport_error("QP address exchange", format!("node {peer} timed out"));
                failed = Some((error, peer));
            }
            _ => {}
        }
    }
    if let Some(failed) = failed {
        return Err(failed);
    }
    let mut connected = HashMap::new();
    for (peer, theirs) in swapped {
        let mut qp = qps.remove(&peer).expect("a QP per peer");
        device
            .connect(&mut qp, ours[&peer].0, &theirs)
            .map_err(|e| {
                (
                    transport_error(&format!("connecting to node {peer}"), e),
                    me,
                )
            })?;
        connected.insert(peer, qp);
    }
    Ok(connected)
}

/// Keep the mesh's authenticated connections open, watched: a peer whose
/// process dies has them closed by its kernel at once, which RC queue
/// pairs would only find out after their retries (or the failure timeout)
/// — the role `rdma_cm`'s disconnect plays elsewhere. Where the watchers
/// report a closed link, and their tasks.
fn watch_links(
    mut mesh: Mesh,
) -> (
    mpsc::UnboundedReceiver<NodeId>,
    HashMap<NodeId, tokio::task::JoinHandle<()>>,
) {
    let (closed_tx, link_closed) = mpsc::unbounded_channel();
    let watchers = std::mem::take(&mut mesh.peers)
        .into_iter()
        .map(|(peer, stream)| (peer, tokio::spawn(watch(peer, stream, closed_tx.clone()))))
        .collect();
    (link_closed, watchers)
}

/// The device's completion channel, registered with the runtime.
fn completion_notifier(device: &Device) -> Result<AsyncFd<Notifier>, Error> {
    let notifier = Notifier::new(Arc::clone(&device.cq), Arc::clone(&device.channel));
    // SAFETY: the fd is the completion channel's, which the notifier keeps
    // open (it holds the channel) for as long as the registration lives.
    unsafe { AsyncFd::register_with_interest(notifier, tokio::io::Interest::READABLE) }
        .map_err(|e| transport_error("waiting on the completion channel", e))
}
