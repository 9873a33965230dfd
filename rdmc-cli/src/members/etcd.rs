//! `--members-from etcd`: every member registers
//! `<prefix>/<cluster>/members/<rank>` = its address under a lease that a
//! background task keeps alive; a member without a given rank claims the
//! lowest free one from 1 with a compare-and-create transaction. Each waits
//! (within the connect timeout) until `--size` members are registered,
//! then starts its node with the list, and keeps watching the prefix: a
//! member whose key disappears (its lease expired: it died) and reappears
//! (it was started again, re-registering) is reported. A restarted member
//! with the same address is let back in by the `tcp` transport.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, PutOptions, Txn, TxnOp,
    WatchOptions,
};
use serde_json::json;
use tokio::sync::watch;

use super::exchange::Own;
use super::watch::{Report, Watch};

/// Where and how a member registers.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The etcd endpoints (`http://host:port`).
    pub endpoints: Vec<String>,
    /// The members' keys' prefix, `<prefix>/<cluster>/members/`.
    pub prefix: String,
    /// How many members to wait for.
    pub size: u32,
    /// The rank to register at; `None`: claim the lowest free one from 1.
    pub rank: Option<u32>,
    /// The lease's time to live, in seconds.
    pub ttl: i64,
    /// This member's listen address (with `Own::Port`, plus its rank).
    pub own: Own,
}

/// Retry interval of the waits.
const POLL: Duration = Duration::from_millis(200);

/// Register, wait for every member, and keep watching: every member's
/// address in rank order, this member's rank and the watch.
pub async fn join(
    spec: Spec,
    deadline: Instant,
    report: Report,
) -> anyhow::Result<(Vec<SocketAddr>, u32, Watch)> {
    let named = spec.endpoints.join(",");
    let unreachable = || format!("cannot reach etcd at {named}");
    let mut client = bounded(deadline, async {
        Client::connect(
            &spec.endpoints,
            Some(ConnectOptions::new().with_connect_timeout(left(deadline))),
        )
        .await
        // The client's message only: it carries its cause's text already.
        .map_err(|e| anyhow!("{e}"))
    })
    .await
    .with_context(unreachable)?;
    let host = own_ip(&spec, deadline).await.with_context(unreachable)?;
    let lease = bounded(deadline, async {
        client
            .lease_grant(spec.ttl, None)
            .await
            .map_err(|e| anyhow!("{e}"))
    })
    .await
    .with_context(unreachable)?
    .id();
    let address = |rank: u32| -> anyhow::Result<SocketAddr> {
        Ok(match spec.own {
            Own::Given(addr) => addr,
            Own::Port(port) => SocketAddr::new(host, super::launcher::offset_port(port, rank)?),
        })
    };
    let rank = register(&mut client, &spec, lease, &address, deadline).await?;
    let (lost_tx, lost_rx) = watch::channel(None);
    let keeper = tokio::spawn(keep_alive(
        client.clone(),
        lease,
        spec.ttl,
        named.clone(),
        lost_tx,
    ));
    let (members, revision) = wait_for_all(&mut client, &spec, deadline).await?;
    let watcher = tokio::spawn(watch_members(
        client,
        spec.prefix.clone(),
        (rank, report),
        members.clone(),
        revision + 1,
    ));
    Ok((members, rank, Watch::new(lost_rx, vec![keeper, watcher])))
}

/// Time left until `deadline`.
fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// `work`, or an error at `deadline`.
async fn bounded<T>(
    deadline: Instant,
    work: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::time::timeout(left(deadline), work)
        .await
        .unwrap_or_else(|_| Err(anyhow!("no answer within the connect timeout")))
}

/// The IP this host reaches the first etcd endpoint from: where the
/// others can reach it too, unless `--listen` says otherwise.
async fn own_ip(spec: &Spec, deadline: Instant) -> anyhow::Result<std::net::IpAddr> {
    if let Own::Given(addr) = spec.own {
        return Ok(addr.ip());
    }
    let endpoint = &spec.endpoints[0];
    let hostport = endpoint
        .split_once("://")
        .map_or(endpoint.as_str(), |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    bounded(deadline, async {
        let stream = tokio::net::TcpStream::connect(&hostport)
            .await
            .with_context(|| hostport.clone())?;
        Ok(stream.local_addr()?.ip())
    })
    .await
}

fn key(prefix: &str, rank: u32) -> String {
    format!("{prefix}{rank}")
}

/// Claim this member's rank (or, without one, the lowest free rank from 1)
/// and put its address there, under its lease: a rank is taken only while
/// no live member holds it, so two processes never share one (a dead
/// member's key goes when its lease expires; until then, retry).
async fn register(
    client: &mut Client,
    spec: &Spec,
    lease: i64,
    address: &(dyn Fn(u32) -> anyhow::Result<SocketAddr> + Sync),
    deadline: Instant,
) -> anyhow::Result<u32> {
    let ranks: Vec<u32> = match spec.rank {
        Some(rank) => vec![rank],
        None => (1..spec.size).collect(),
    };
    loop {
        for &rank in &ranks {
            let k = key(&spec.prefix, rank);
            let put = PutOptions::new().with_lease(lease);
            let txn = Txn::new()
                .when([Compare::create_revision(k.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(k, address(rank)?.to_string(), Some(put))]);
            let claimed = bounded(deadline, async {
                client.txn(txn).await.map_err(|e| anyhow!("{e}"))
            })
            .await
            .with_context(|| format!("claiming rank {rank} in etcd"))?;
            if claimed.succeeded() {
                return Ok(rank);
            }
        }
        if Instant::now() + POLL >= deadline {
            return Err(anyhow!(match spec.rank {
                Some(rank) => {
                    let k = key(&spec.prefix, rank);
                    let holder = client
                        .get(k.clone(), None)
                        .await
                        .ok()
                        .and_then(|r| r.kvs().first().map(|kv| kv.value_str().map(str::to_owned)))
                        .and_then(Result::ok)
                        .unwrap_or_else(|| "an unknown address".to_owned());
                    format!(
                        "rank {rank} is held in etcd ({k}) by another live member at {holder}: \
                         two processes cannot be one member (a dead member's registration \
                         goes when its lease expires)"
                    )
                }
                None => format!(
                    "every rank from 1 to {} is taken under {} in etcd: the cluster is full \
                     (--size {}), or a dead member's registration has not expired yet",
                    spec.size - 1,
                    spec.prefix,
                    spec.size
                ),
            }));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The registered members: rank to address (ranks below `size` only).
fn registered(kvs: &[etcd_client::KeyValue], prefix: &str, size: u32) -> BTreeMap<u32, String> {
    kvs.iter()
        .filter_map(|kv| {
            let rank: u32 = kv.key_str().ok()?.strip_prefix(prefix)?.parse().ok()?;
            (rank < size).then(|| Some((rank, kv.value_str().ok()?.to_owned())))?
        })
        .collect()
}

/// Wait until every rank is registered: the addresses in rank order and
/// the revision they were read at.
async fn wait_for_all(
    client: &mut Client,
    spec: &Spec,
    deadline: Instant,
) -> anyhow::Result<(Vec<SocketAddr>, i64)> {
    let mut last = String::new();
    loop {
        let got = tokio::time::timeout(
            left(deadline),
            client.get(spec.prefix.as_str(), Some(GetOptions::new().with_prefix())),
        )
        .await;
        match got {
            Ok(Ok(response)) => {
                let found = registered(response.kvs(), &spec.prefix, spec.size);
                if found.len() == spec.size as usize {
                    let members = found
                        .iter()
                        .map(|(rank, a)| {
                            a.parse().map_err(|_| {
                                anyhow!("etcd: rank {rank}'s address {a:?} is not ip:port")
                            })
                        })
                        .collect::<Result<_, _>>()?;
                    let revision = response.header().map_or(0, |h| h.revision());
                    return Ok((members, revision));
                }
                let missing: Vec<String> = (0..spec.size)
                    .filter(|r| !found.contains_key(r))
                    .map(|r| r.to_string())
                    .collect();
                last = format!(
                    "{} of {} members registered under {}; missing rank(s) {}",
                    found.len(),
                    spec.size,
                    spec.prefix,
                    missing.join(", ")
                );
            }
            Ok(Err(e)) => last = format!("etcd: {e}"),
            Err(_) => {}
        }
        if Instant::now() + POLL >= deadline {
            bail!("waiting for every member in etcd: {last}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Why one attempt to keep the lease alive ended: an expired lease ends the
/// keeping at once, anything else is retried for the lease's time to live.
#[derive(Debug, thiserror::Error)]
enum KeepAliveError {
    /// etcd answered that the lease expired.
    #[error("expired")]
    Expired,
    /// etcd ended the keep-alive stream.
    #[error("the keep-alive stream ended")]
    Ended,
    /// The client's call failed.
    #[error(transparent)]
    Etcd(#[from] etcd_client::Error),
}

/// Keep the lease alive; once it cannot be for its whole time to live
/// (etcd gone) or it expired, say so on `lost`.
async fn keep_alive(
    mut client: Client,
    lease: i64,
    ttl: i64,
    named: String,
    lost: watch::Sender<Option<String>>,
) {
    let ttl = Duration::from_secs(ttl.max(1) as u64);
    let mut last_ok = Instant::now();
    let mut last_error = String::new();
    loop {
        let limit = (last_ok + ttl).saturating_duration_since(Instant::now());
        let attempt = async {
            let (mut keeper, mut stream) = client.lease_keep_alive(lease).await?;
            loop {
                keeper.keep_alive().await?;
                match stream.message().await? {
                    Some(answer) if answer.ttl() > 0 => {
                        last_ok = Instant::now();
                        tokio::time::sleep(ttl / 3).await;
                    }
                    Some(_) => return Err(KeepAliveError::Expired),
                    None => return Err(KeepAliveError::Ended),
                }
            }
        };
        match tokio::time::timeout(limit, attempt).await {
            Ok(Err(KeepAliveError::Expired)) => {
                last_error = "etcd says this member's lease expired".into();
                break;
            }
            Ok(Err(e)) => last_error = short(&e.to_string()),
            Ok(Ok(())) | Err(_) => {}
        }
        if last_ok.elapsed() >= ttl {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let reason = format!(
        "lost etcd at {named}: this member's registration could not be kept alive for {} s \
         (its lease's time to live){}",
        ttl.as_secs(),
        if last_error.is_empty() {
            String::new()
        } else {
            format!(": {last_error}")
        }
    );
    tracing::warn!("{reason}");
    let _ = lost.send(Some(reason));
}

/// An etcd client error without the transport's debug dump of its cause.
fn short(error: &str) -> String {
    error.split(", source:").next().unwrap_or(error).to_owned()
}

/// Report members whose registration disappears and reappears, from
/// `revision` on, retrying the watch while etcd is away (the lease's
/// keeper is what gives up).
async fn watch_members(
    mut client: Client,
    prefix: String,
    (me, report): (u32, Report),
    members: Vec<SocketAddr>,
    mut revision: i64,
) {
    let size = members.len() as u32;
    let mut present: BTreeMap<u32, String> = members
        .iter()
        .enumerate()
        .map(|(r, a)| (r as u32, a.to_string()))
        .collect();
    loop {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision);
        if let Ok(mut stream) = client.watch(prefix.as_str(), Some(options)).await {
            while let Ok(Some(response)) = stream.message().await {
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    revision = revision.max(kv.mod_revision() + 1);
                    let Some(rank) = kv
                        .key_str()
                        .ok()
                        .and_then(|k| k.strip_prefix(prefix.as_str()))
                        .and_then(|r| r.parse::<u32>().ok())
                        .filter(|&r| r < size)
                    else {
                        continue;
                    };
                    match event.event_type() {
                        EventType::Delete => {
                            if let Some(addr) = present.remove(&rank) {
                                announce(report, me, "member_left", rank, &addr);
                            }
                        }
                        EventType::Put => {
                            let addr = kv.value_str().unwrap_or_default().to_owned();
                            if present.insert(rank, addr.clone()).is_none() {
                                announce(report, me, "member_back", rank, &addr);
                            }
                        }
                    }
                }
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Say that member `rank` left or came back, as the member's output does.
fn announce(report: Report, me: u32, event: &str, rank: u32, addr: &str) {
    let left = event == "member_left";
    if left {
        tracing::warn!(member = rank, %addr, "member left: its etcd registration expired");
    } else {
        tracing::info!(member = rank, %addr, "member back: registered in etcd again");
    }
    if report.json {
        println!(
            "{}",
            json!({"event": event, "rank": me, "member": rank, "address": addr, "source": "etcd"})
        );
    } else if left {
        println!("rank {me}: member {rank} ({addr}) left: its etcd registration expired");
    } else {
        println!("rank {me}: member {rank} ({addr}) is back: registered in etcd again");
    }
}
