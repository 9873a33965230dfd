//! An attacker on the path of a `tcp` link, after a genuine handshake:
//! one byte flipped anywhere in the data the root sends is never
//! delivered; the group fails on both ends, each naming the other end of
//! the link, in every one of 100 tries (with the default, authenticated
//! frames, and with encrypted ones). And members configured with
//! different wire security do not start: each says so, naming the peer and
//! both modes.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use rdmc::{Algorithm, Error, GroupConfig, GroupId, Node, NodeId, TcpConfig, WireSecurity};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use common::{LONG, Layout, bounded, create_all, ids, key, node_config, pair, payload, shutdown};

/// Bytes of the stream from node 0 to node 1 left alone: past the mesh
/// handshake and the key agreement (under 200 bytes), so the flip hits
/// frames.
const SKIP: usize = 1000;
/// The message: 64 KiB blocks, so the flip lands in headers, payloads and
/// tags alike.
const MESSAGE: usize = 256 * 1024;

/// A relay in front of `target` that forwards both ways and flips one bit
/// of the byte at `offset` of the stream from `target` back to whoever
/// connected.
async fn flipping_relay(target: SocketAddr, offset: usize) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = tokio::net::TcpStream::connect(target).await else {
                continue;
            };
            let (mut ri, mut wi) = inbound.into_split();
            let (mut ro, mut wo) = outbound.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut ri, &mut wo).await;
                let _ = wo.shutdown().await;
            });
            tokio::spawn(async move {
                let mut seen = 0usize;
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match ro.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if (seen..seen + n).contains(&offset) {
                        buf[offset - seen] ^= 0x04;
                    }
                    seen += n;
                    if wi.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                let _ = wi.shutdown().await;
            });
        }
    });
    addr
}

/// Start two nodes, node 0 reached through a relay flipping the byte at
/// `offset`, on `security`.
async fn tampered_pair(offset: usize, security: WireSecurity) -> Vec<Node> {
    let mut layout = Layout::new(2);
    let real = layout.addrs[0];
    let relay = flipping_relay(real, offset).await;
    let mut addrs = layout.addrs.clone();
    addrs[0] = relay;
    let starts = (0..2u32).map(|id| {
        let listener = layout.take_listener(id as usize);
        let config = TcpConfig::new(addrs.clone(), NodeId(id), key())
            .with_listener(listener)
            .with_failure_timeout(Duration::from_secs(3))
            .with_wire_security(security);
        Node::tcp(config, node_config())
    });
    bounded(LONG, "connecting", futures::future::try_join_all(starts))
        .await
        .unwrap()
}

/// Whether `e` is the group failing with `suspect` named.
fn names(e: &Error, suspect: NodeId) -> bool {
    matches!(e, Error::GroupFailed { suspect: Some(s), .. } if *s == suspect)
}

async fn one_try(try_no: u64, security: WireSecurity) {
    // A spread of offsets over the transfer, different every try.
    let k = (try_no.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize % (MESSAGE / 2);
    let offset = SKIP + k;
    let nodes = tampered_pair(offset, security).await;
    let config = GroupConfig::new()
        .with_algorithm(Algorithm::Sequential)
        .with_block_size(64 * 1024);
    let (mut root, mut receiver) =
        pair(create_all(&nodes, GroupId(1), &ids(&[0, 1]), config).await);
    let message = payload(try_no, MESSAGE);
    let sent = root.send(message.clone()).await.unwrap().sent();
    let received = async {
        match receiver.next().await {
            Some(Ok(got)) => panic!(
                "try {try_no} ({security:?}, byte {offset} flipped): delivered, {}",
                if got.data == message {
                    "intact (the flip missed the data?)"
                } else {
                    "CORRUPTED"
                }
            ),
            Some(Err(e)) => e,
            None => receiver.close().await.expect_err("the group must fail"),
        }
    };
    let closed = async {
        let _ = sent.await;
        root.close().await
    };
    let (receiver_error, root_outcome) =
        bounded(Duration::from_secs(20), "the tampered transfer", async {
            tokio::join!(received, closed)
        })
        .await;
    assert!(
        names(&receiver_error, NodeId(0)),
        "try {try_no}: the receiver's error does not name node 0: {receiver_error}"
    );
    let root_error = root_outcome.expect_err("the root's close must fail");
    assert!(
        names(&root_error, NodeId(1)),
        "try {try_no}: the root's error does not name node 1: {root_error}"
    );
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_fails_the_group_naming_the_link_100_of_100() {
    for try_no in 0..100 {
        one_try(try_no, WireSecurity::Authenticated).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_fails_an_encrypted_group_too() {
    for try_no in 0..20 {
        one_try(1000 + try_no, WireSecurity::Encrypted).await;
    }
}

/// Members with the wire security of `modes` (member `i` uses `modes[i]`):
/// what each `Node::tcp` returned.
async fn start_with(modes: &[WireSecurity]) -> Vec<Result<Node, Error>> {
    let mut layout = Layout::new(modes.len());
    let starts = modes.iter().enumerate().map(|(id, &mode)| {
        let config = TcpConfig::new(layout.addrs.clone(), NodeId(id as u32), key())
            .with_listener(layout.take_listener(id))
            .with_wire_security(mode);
        Node::tcp(config, node_config())
    });
    let starts: Vec<_> = starts.collect();
    bounded(LONG, "starting", futures::future::join_all(starts)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_with_different_wire_security_do_not_start_and_say_so() {
    use WireSecurity::{Authenticated, Encrypted, None as Clear};
    // Member i's mode, and the peer it names: the lowest of those whose
    // mode differs from its own.
    let cases: [(&[WireSecurity], &[u32]); 3] = [
        (&[Clear, Authenticated], &[1, 0]),
        (&[Clear, Authenticated, Authenticated], &[1, 0, 0]),
        (&[Encrypted, Authenticated, Encrypted], &[1, 0, 1]),
    ];
    for (modes, named) in cases {
        for (id, started) in start_with(modes).await.into_iter().enumerate() {
            let peer = NodeId(named[id]);
            match started {
                Err(
                    ref e @ Error::WireSecurityMismatch {
                        peer: p,
                        local,
                        remote,
                    },
                ) => {
                    assert_eq!(
                        (p, local, remote),
                        (peer, modes[id], Some(modes[peer.index()])),
                        "{modes:?}: member {id}: {e}"
                    );
                    let line = e.to_string();
                    assert!(
                        line.contains("wire security mismatch")
                            && line.contains(&format!("node {peer}"))
                            && line.contains(&modes[id].to_string())
                            && line.contains(&modes[peer.index()].to_string()),
                        "{modes:?}: member {id}: {line}"
                    );
                }
                Err(e) => panic!("{modes:?}: member {id} failed otherwise: {e}"),
                Ok(node) => {
                    node.shutdown().await;
                    panic!("{modes:?}: member {id} started");
                }
            }
        }
    }
}
