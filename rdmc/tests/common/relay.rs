//! A TCP relay on loopback in front of one member, for transports whose
//! links cross the listed addresses (capability `relayable`).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// Forwards every connection to `target`, both ways, optionally slowly,
/// until frozen — then it forwards nothing more but keeps the connections
/// open, like a peer that hangs or a network that drops everything.
pub struct Relay {
    /// Where the relay listens: the member's address for the others.
    pub addr: SocketAddr,
    /// Cancel to freeze the relay.
    pub freeze: CancellationToken,
}

impl Relay {
    /// Start a relay to `target`; with `pause`, it waits that long after
    /// forwarding each read of at most 64 KiB (a slow link).
    pub async fn start(target: SocketAddr, pause: Option<Duration>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let freeze = CancellationToken::new();
        let frozen = freeze.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = tokio::net::TcpStream::connect(target).await else {
                    continue;
                };
                let (ri, wi) = inbound.into_split();
                let (ro, wo) = outbound.into_split();
                tokio::spawn(pump(ri, wo, pause, frozen.clone()));
                tokio::spawn(pump(ro, wi, pause, frozen.clone()));
            }
        });
        Relay { addr, freeze }
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    pause: Option<Duration>,
    freeze: CancellationToken,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            biased;
            () = freeze.cancelled() => break,
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
        };
        if freeze.is_cancelled() || to.write_all(&buf[..n]).await.is_err() {
            break;
        }
        if let Some(pause) = pause {
            tokio::time::sleep(pause).await;
        }
    }
    // Frozen: hold both ends open, silent, until the test ends.
    std::future::pending::<()>().await;
    drop((from, to));
}

/// Read from `stream` until the other end closes it (or resets it).
pub async fn closed_by_peer(stream: &mut tokio::net::TcpStream) {
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}
