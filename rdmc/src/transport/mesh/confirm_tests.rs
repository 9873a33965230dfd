//! Tests of the agreement a transport runs over a formed mesh after its own
//! setup ([`Mesh::confirm`], [`Mesh::abandon`]): every member goes on, or
//! every member that fails names the member that made the setup fail.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::*;

const KEY: &[u8] = b"mesh confirmation test key, 32 b";

/// `n` members' meshes on loopback, formed, with a failure timeout of
/// `failure` (the agreement's margin is half of it).
async fn formed(n: usize, failure: Duration) -> Vec<Mesh> {
    let listeners: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let ups = listeners.into_iter().zip(0..).map(|(l, id)| {
        let mut cluster = ClusterConfig::new(
            addrs.clone(),
            NodeId(id),
            ClusterKey::from_bytes(KEY).unwrap(),
        );
        cluster.listener = Some(l);
        cluster.connect_timeout = Duration::from_secs(20);
        cluster.failure_timeout = failure;
        bring_up(cluster, MeshPurpose::OfiRendezvous)
    });
    futures::future::try_join_all(ups).await.unwrap()
}

/// Every member's `confirm` by `deadline` (`within` from now), started at
/// once: their tasks.
fn start_confirms(
    meshes: Vec<Mesh>,
    deadline: Instant,
    within: Duration,
) -> Vec<tokio::task::JoinHandle<Result<(), MeshError>>> {
    meshes
        .into_iter()
        .map(|mut mesh| tokio::spawn(async move { mesh.confirm(deadline, within).await }))
        .collect()
}

/// Every member's `confirm` with a deadline `within` from now, at once.
async fn confirm_all(meshes: Vec<Mesh>, within: Duration) -> Vec<(Mesh, Result<(), MeshError>)> {
    let deadline = Instant::now() + within;
    let runs = meshes.into_iter().map(|mut mesh| {
        tokio::spawn(async move {
            let r = mesh.confirm(deadline, within).await;
            (mesh, r)
        })
    });
    futures::future::join_all(runs)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test]
async fn a_confirmed_mesh_goes_on_carrying_the_transports_bytes() {
    let mut meshes = formed(3, Duration::from_secs(2)).await;
    // The transport's own bytes before the agreement (an address swap) ...
    for mesh in &mut meshes {
        let me = mesh.me.0 as u8;
        for stream in mesh.peers.values_mut() {
            stream.write_all(&[me; 3]).await.unwrap();
        }
    }
    for mesh in &mut meshes {
        for (peer, stream) in &mut mesh.peers {
            let mut got = [0u8; 3];
            stream.read_exact(&mut got).await.unwrap();
            assert_eq!(got, [peer.0 as u8; 3]);
        }
    }
    // ... the agreement, twice (the directions' sequence numbers go on) ...
    for _ in 0..2 {
        meshes = confirm_all(meshes, Duration::from_secs(5))
            .await
            .into_iter()
            .map(|(mesh, r)| r.map(|()| mesh).unwrap())
            .collect();
    }
    // ... and the streams still carry what the transport writes after it.
    for mesh in &mut meshes {
        let me = mesh.me.0 as u8 + 10;
        for stream in mesh.peers.values_mut() {
            stream.write_all(&[me]).await.unwrap();
        }
    }
    for mesh in &mut meshes {
        assert_eq!(mesh.peers.len(), 2);
        for (peer, stream) in &mut mesh.peers {
            assert_eq!(stream.read_u8().await.unwrap(), peer.0 as u8 + 10);
        }
    }
}

#[tokio::test]
async fn a_member_that_gives_up_has_everyone_name_whom_it_blames() {
    // Node 3's setup failed because of node 2 (whose link is down: it says
    // nothing); nodes 0 and 1 finished theirs and wait in the agreement.
    let mut meshes = formed(4, Duration::from_secs(2)).await;
    let mut three = meshes.pop().unwrap();
    let _two = meshes.pop().unwrap();
    let within = Duration::from_secs(10);
    let deadline = Instant::now() + within;
    let waiting = start_confirms(meshes, deadline, within);
    tokio::time::sleep(Duration::from_millis(200)).await;
    three.abandon(deadline, within, &[NodeId(2)]).await;
    for (id, w) in waiting.into_iter().enumerate() {
        let error = w.await.unwrap().expect_err("confirmed without node 3");
        assert_eq!(error.blame(), vec![NodeId(2)], "node {id}: {error}");
        assert!(
            matches!(
                error,
                MeshError::GaveUp {
                    from: NodeId(3),
                    ..
                }
            ),
            "node {id}: {error:?}"
        );
    }
}

#[tokio::test]
async fn a_member_that_blames_itself_is_named() {
    let mut meshes = formed(3, Duration::from_secs(2)).await;
    let mut two = meshes.pop().unwrap();
    let within = Duration::from_secs(10);
    let deadline = Instant::now() + within;
    let waiting = start_confirms(meshes, deadline, within);
    two.abandon(deadline, within, &[NodeId(2)]).await;
    for (id, w) in waiting.into_iter().enumerate() {
        let error = w.await.unwrap().expect_err("confirmed without node 2");
        assert_eq!(error.blame(), vec![NodeId(2)], "node {id}: {error}");
    }
}

#[tokio::test]
async fn a_member_silent_in_the_agreement_is_named_after_its_deadline() {
    let failure = Duration::from_millis(400);
    let mut meshes = formed(3, failure).await;
    // Node 2 stays connected and never says a word.
    let _two = meshes.pop().unwrap();
    let within = Duration::from_millis(300);
    let started = Instant::now();
    for (id, (_, r)) in confirm_all(meshes, within).await.into_iter().enumerate() {
        let error = r.expect_err("confirmed without node 2");
        assert_eq!(error.blame(), vec![NodeId(2)], "node {id}: {error}");
    }
    // Not before the deadline and the margin; the upper bound only says it
    // did not wait for something else (the test runtime's own bound).
    assert!(started.elapsed() >= within + failure / 2);
}

#[tokio::test]
async fn a_member_gone_in_the_agreement_is_named() {
    let mut meshes = formed(3, Duration::from_secs(2)).await;
    drop(meshes.pop());
    for (id, (_, r)) in confirm_all(meshes, Duration::from_secs(10))
        .await
        .into_iter()
        .enumerate()
    {
        let error = r.expect_err("confirmed without node 2");
        assert_eq!(error.blame(), vec![NodeId(2)], "node {id}: {error}");
        assert!(
            matches!(error, MeshError::Lost { .. }),
            "node {id}: {error:?}"
        );
    }
}

#[tokio::test]
async fn a_cluster_of_one_confirms_at_once() {
    let meshes = formed(1, Duration::from_secs(2)).await;
    for (_, r) in confirm_all(meshes, Duration::from_secs(300)).await {
        r.unwrap();
    }
}
