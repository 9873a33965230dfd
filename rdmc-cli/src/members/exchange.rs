//! The address exchange at rank 0, for launchers that give every process
//! its rank but not its peers' addresses (`mpirun`), in the style of
//! PyTorch's `MASTER_ADDR`/`MASTER_PORT` rendezvous.
//!
//! Rank 0 listens on the bootstrap address. Every other rank connects,
//! receives a fresh challenge, and sends its rank, the world's size and its
//! own listen address; once all `size` ranks are registered, rank 0 answers
//! every one with the full list. Every message is authenticated with
//! HMAC-SHA256 under a key derived from the cluster key, the registration
//! over rank 0's challenge and the answer over the rank's own nonce, so a
//! process without the key can neither register an address nor answer
//! with a list, and an old message cannot be replayed. Every wait ends at
//! the deadline (the connect timeout).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use aws_lc_rs::{hmac, rand};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Domain separation: the exchange's key is not the cluster key.
const LABEL: &[u8] = b"rdmc bootstrap exchange v1";
/// The largest message either side accepts.
const MAX_MESSAGE: usize = 1 << 20;
/// Bytes of a challenge or nonce.
const NONCE: usize = 16;

/// The key that authenticates the exchange: HMAC-SHA256 of a label under
/// the cluster key.
#[derive(Clone)]
pub struct ExchangeKey([u8; 32]);

impl ExchangeKey {
    /// Derive it from the cluster key.
    pub fn derive(cluster_key: &rdmc::ClusterKey) -> Self {
        ExchangeKey(cluster_key.derive(LABEL))
    }

    /// The message a tag is over: each part prefixed with its length.
    fn message(parts: &[&[u8]]) -> Vec<u8> {
        let mut message = Vec::new();
        for part in parts {
            message.extend_from_slice(&(part.len() as u64).to_be_bytes());
            message.extend_from_slice(part);
        }
        message
    }

    fn key(&self) -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, &self.0)
    }

    fn tag(&self, parts: &[&[u8]]) -> [u8; 32] {
        let tag = hmac::sign(&self.key(), &Self::message(parts));
        tag.as_ref().try_into().expect("32 bytes")
    }

    /// Whether `tag` is the parts' tag, compared in constant time.
    fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        hmac::verify(&self.key(), &Self::message(parts), tag).is_ok()
    }
}

/// This process's own listen address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Own {
    /// Given (`--listen`).
    Given(SocketAddr),
    /// This port, at the IP this host reaches rank 0 from (rank 0: the
    /// bootstrap's IP).
    Port(u16),
}

/// One rank's part in the exchange.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// Where rank 0 listens (`host:port`).
    pub bootstrap: String,
    /// This process's rank.
    pub rank: u32,
    /// How many ranks take part.
    pub size: u32,
    /// This process's own listen address.
    pub own: Own,
}

/// Every rank's listen address, in rank order, once every rank has
/// registered; an error naming what failed, at the deadline at the latest.
pub async fn run(
    spec: &Exchange,
    key: &ExchangeKey,
    deadline: Instant,
) -> anyhow::Result<Vec<SocketAddr>> {
    let limit = deadline.saturating_duration_since(Instant::now());
    // The steps below end at the deadline themselves; this only catches one
    // that blocks past it.
    let outcome = tokio::time::timeout(limit + Duration::from_millis(500), async {
        if spec.rank == 0 {
            serve(spec, key, deadline).await
        } else {
            register(spec, key, deadline).await
        }
    })
    .await;
    outcome.unwrap_or_else(|_| {
        Err(anyhow!(
            "the bootstrap exchange at {} did not complete within {:.0} s",
            spec.bootstrap,
            limit.as_secs_f64()
        ))
    })
}

/// Rank 0: listen, gather every rank's address, answer everyone.
async fn serve(
    spec: &Exchange,
    key: &ExchangeKey,
    deadline: Instant,
) -> anyhow::Result<Vec<SocketAddr>> {
    let bind = resolve(&spec.bootstrap).await?;
    let listener = TcpListener::bind(bind).await.map_err(|e| {
        anyhow!(
            "rank 0 cannot listen for the bootstrap at {}: {e}",
            spec.bootstrap
        )
    })?;
    let own = match spec.own {
        Own::Given(addr) => addr,
        Own::Port(port) => SocketAddr::new(bind.ip(), port),
    };
    let size = spec.size as usize;
    let mut table: Vec<Option<SocketAddr>> = vec![None; size];
    table[0] = Some(own);
    let mut waiting: Vec<Option<(TcpStream, [u8; NONCE])>> = (0..size).map(|_| None).collect();
    let (tx, mut rx) = mpsc::channel(64);
    while table.iter().any(Option::is_none) {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else { continue };
                let (tx, key, size) = (tx.clone(), key.clone(), spec.size);
                tokio::spawn(async move {
                    let limit = deadline.saturating_duration_since(Instant::now());
                    match tokio::time::timeout(limit, hear(stream, &key, size)).await {
                        Ok(Ok(registered)) => drop(tx.send(registered).await),
                        Ok(Err(why)) => tracing::warn!(%peer, "bootstrap: refused a registration: {why:#}"),
                        Err(_) => {}
                    }
                });
            }
            Some((rank, addr, nonce, stream)) = rx.recv() => {
                // A rank that registers again (restarted) replaces its
                // earlier registration.
                table[rank as usize] = Some(addr);
                waiting[rank as usize] = Some((stream, nonce));
            }
            () = tokio::time::sleep_until(deadline.into()) => {
                let missing: Vec<String> = (0..size)
                    .filter(|&r| table[r].is_none())
                    .map(|r| r.to_string())
                    .collect();
                bail!(
                    "the bootstrap at {}: rank(s) {} of {size} did not register in time \
                     (are they running, with the same --bootstrap and key?)",
                    spec.bootstrap,
                    missing.join(", ")
                );
            }
        }
    }
    let members: Vec<SocketAddr> = table
        .into_iter()
        .map(|a| a.expect("all registered"))
        .collect();
    let list: String = members.iter().map(|a| format!("{a}\n")).collect();
    for (rank, entry) in waiting.into_iter().enumerate() {
        let Some((mut stream, nonce)) = entry else {
            continue;
        };
        let tag = key.tag(&[b"members", &nonce, list.as_bytes()]);
        if let Err(e) = send(&mut stream, list.as_bytes(), &tag).await {
            // It will not start: the others find out when connecting.
            tracing::warn!(rank, "bootstrap: could not answer rank {rank}: {e}");
        }
    }
    Ok(members)
}

/// A registration, checked: rank, address, the rank's nonce and its
/// connection (to answer on).
type Registered = (u32, SocketAddr, [u8; NONCE], TcpStream);

/// Rank 0's side of one connection: challenge, read the registration,
/// check it.
async fn hear(mut stream: TcpStream, key: &ExchangeKey, size: u32) -> anyhow::Result<Registered> {
    let challenge = fresh_nonce()?;
    stream.write_all(&challenge).await?;
    let (body, tag) = receive(&mut stream).await?;
    if !key.verify(&[b"register", &challenge, &body], &tag) {
        bail!("it failed authentication (a process without the cluster key?)");
    }
    let text = String::from_utf8(body).map_err(|_| anyhow!("not text"))?;
    let parse = || -> Option<(u32, u32, [u8; NONCE], SocketAddr)> {
        let mut words = text.split_whitespace();
        let rank = words.next()?.parse().ok()?;
        let their_size = words.next()?.parse().ok()?;
        let nonce = from_hex(words.next()?)?;
        let addr = words.next()?.parse().ok()?;
        Some((rank, their_size, nonce, addr))
    };
    let (rank, their_size, nonce, addr) = parse().ok_or_else(|| anyhow!("malformed: {text:?}"))?;
    if their_size != size {
        bail!("rank {rank} says the size is {their_size}, rank 0 says {size}");
    }
    if rank == 0 || rank >= size {
        bail!("rank {rank} is not one of ranks 1 to {}", size - 1);
    }
    Ok((rank, addr, nonce, stream))
}

/// Ranks above 0: connect (again and again until rank 0 answers), register,
/// read the list.
async fn register(
    spec: &Exchange,
    key: &ExchangeKey,
    deadline: Instant,
) -> anyhow::Result<Vec<SocketAddr>> {
    let mut last = anyhow!("no attempt");
    while Instant::now() < deadline {
        match register_once(spec, key).await {
            Ok(members) => return Ok(members),
            Err(Fatal(why)) => return Err(why),
            Err(Retry(why)) => last = why,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(anyhow!(
        "no answer from the bootstrap at {} (rank 0's --bootstrap, or MASTER_ADDR and \
         MASTER_PORT) in time; last: {last:#}",
        spec.bootstrap
    ))
}

/// Why one attempt to register failed.
enum Attempt {
    /// Try again (rank 0 not up yet, a connection lost).
    Retry(anyhow::Error),
    /// Give up: the answer cannot be right.
    Fatal(anyhow::Error),
}
use Attempt::{Fatal, Retry};

async fn register_once(spec: &Exchange, key: &ExchangeKey) -> Result<Vec<SocketAddr>, Attempt> {
    let retry = |e: std::io::Error| Retry(e.into());
    let to = resolve(&spec.bootstrap).await.map_err(Retry)?;
    let mut stream = TcpStream::connect(to).await.map_err(retry)?;
    let own = match spec.own {
        Own::Given(addr) => addr,
        Own::Port(port) => SocketAddr::new(stream.local_addr().map_err(retry)?.ip(), port),
    };
    let mut challenge = [0u8; NONCE];
    stream.read_exact(&mut challenge).await.map_err(retry)?;
    let nonce = fresh_nonce().map_err(Fatal)?;
    let body = format!("{} {} {} {own}", spec.rank, spec.size, to_hex(&nonce));
    let tag = key.tag(&[b"register", &challenge, body.as_bytes()]);
    send(&mut stream, body.as_bytes(), &tag)
        .await
        .map_err(retry)?;
    let (list, tag) = receive(&mut stream).await.map_err(|e| {
        Retry(e.context("rank 0 refuses a registration made with another cluster key"))
    })?;
    if !key.verify(&[b"members", &nonce, &list], &tag) {
        return Err(Fatal(anyhow!(
            "the answer of the bootstrap at {} failed authentication: is it rank 0 of this \
             cluster, with the same --key-file?",
            spec.bootstrap
        )));
    }
    let members = std::str::from_utf8(&list)
        .ok()
        .and_then(|text| {
            text.lines()
                .map(|l| l.parse().ok())
                .collect::<Option<Vec<_>>>()
        })
        .filter(|m| m.len() == spec.size as usize)
        .ok_or_else(|| {
            Fatal(anyhow!(
                "the bootstrap's answer is not a list of every rank's address"
            ))
        })?;
    Ok(members)
}

/// The first address `host:port` resolves to.
async fn resolve(addr: &str) -> anyhow::Result<SocketAddr> {
    tokio::net::lookup_host(addr)
        .await
        .map_err(|e| anyhow!("bootstrap address {addr}: {e}"))?
        .next()
        .ok_or_else(|| anyhow!("bootstrap address {addr} resolves to nothing"))
}

/// Write a message: its length, its bytes, its tag.
async fn send(stream: &mut TcpStream, body: &[u8], tag: &[u8; 32]) -> std::io::Result<()> {
    let mut frame = Vec::with_capacity(4 + body.len() + 32);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(body);
    frame.extend_from_slice(tag);
    stream.write_all(&frame).await?;
    stream.flush().await
}

/// Read a message: its bytes and its tag.
async fn receive(stream: &mut TcpStream) -> anyhow::Result<(Vec<u8>, [u8; 32])> {
    let mut len = [0u8; 4];
    let closed = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => anyhow!("the connection closed without an answer"),
        _ => e.into(),
    };
    stream.read_exact(&mut len).await.map_err(closed)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_MESSAGE {
        bail!("a message of {len} bytes, more than the {MAX_MESSAGE} accepted");
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).await.map_err(closed)?;
    let mut tag = [0u8; 32];
    stream.read_exact(&mut tag).await.map_err(closed)?;
    Ok((body, tag))
}

fn to_hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// A fresh challenge or nonce, from aws-lc-rs's CSPRNG.
fn fresh_nonce() -> anyhow::Result<[u8; NONCE]> {
    let mut nonce = [0; NONCE];
    rand::fill(&mut nonce).map_err(|_| anyhow!("the random number generator failed"))?;
    Ok(nonce)
}

fn from_hex(text: &str) -> Option<[u8; NONCE]> {
    let mut out = [0u8; NONCE];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
#[path = "exchange_tests.rs"]
mod tests;
