//! `rdmc member --bench --workload FILE`: a member in many groups at once,
//! running a [`Workload`] on its own (no commands on stdin).
//!
//! Every member creates every group of the workload it belongs to (all at
//! once), prints `ready`, then:
//!
//! * as a root, issues its writes in the workload's order, at most
//!   `window` of them in flight: a write is in flight from its `send` until
//!   every member of its group has delivered it ([`rdmc::Receipt::delivered`]),
//!   which is when it prints a `written` event (`group`, `seq`, `write`,
//!   `size`, `t` the send, `acked_t` the acknowledgement);
//! * as a receiver, checks every message byte for byte against the payload
//!   every member builds alike and prints a `delivered` event (`group`,
//!   `seq`, `size`, `t`);
//!
//! and once all its writes are acknowledged and every group it receives in
//! has closed, closes its own groups and returns.
//!
//! With a directory to persist in, a write is acknowledged once every
//! replica has it on stable storage ([`rdmc::Receipt::persisted`]): each
//! receiver takes every message into a file of its own there, synced by
//! the group's stream ([`Durability::Synced`]) or, for a message that came
//! in memory (in a batch of small ones), written and synced by the
//! receiver; it checks the file, acknowledges it as persisted and removes
//! it (the disk need not hold the whole trace). Times are
//! `CLOCK_MONOTONIC` nanoseconds, as in [`crate::member_bench`] ([`rdmc_cli::clocks`]).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail};
use futures::stream::FuturesUnordered;
use futures::{StreamExt, future::try_join_all};
use rdmc::{
    Durability, Group, GroupConfig, GroupId, Message, Node, NodeId, ReceiveTarget, ReceiveTargets,
    Receiver, Sender,
};
use serde_json::json;

use rdmc_cli::bench_protocol::payload;
use rdmc_cli::clocks::{cpu_seconds, mono_ns};
use rdmc_cli::workload::Workload;

/// Run `workload` as member `rank` of the cluster `ids` on `node`, its
/// writes persisted in `persist` if given.
pub(crate) async fn run(
    rank: u32,
    (node, ids): (&Node, &[NodeId]),
    config: GroupConfig,
    workload: &Workload,
    persist: Option<&Path>,
) -> anyhow::Result<()> {
    let persist = match persist {
        Some(dir) => {
            let dir = dir.join(format!("rank-{rank}"));
            let made = tokio::fs::create_dir_all(&dir).await;
            made.map_err(|e| anyhow!("{}: {e}", dir.display()))?;
            Some(dir)
        }
        None => None,
    };
    let max = usize::try_from(workload.largest()).map_err(|_| anyhow!("a write is too large"))?;
    let payload = tokio::task::spawn_blocking(move || payload(max))
        .await
        .map_err(|e| anyhow!("generating the payload: {e}"))?;
    let mine: Vec<usize> = (0..workload.groups.len())
        .filter(|&g| workload.groups[g].contains(&rank))
        .collect();
    let creates = mine.iter().map(|&g| {
        let members: Vec<NodeId> = workload.groups[g]
            .iter()
            .map(|&r| ids[r as usize])
            .collect();
        let dir = persist.as_ref().map(|d| d.join(format!("g{g}")));
        let config = match &dir {
            Some(dir) => config
                .clone()
                .with_durability(Durability::Synced)
                .with_receive_targets(into_files(dir.clone())),
            None => config.clone(),
        };
        async move {
            if let Some(dir) = &dir {
                // Before the group exists: its first message may come at once.
                let made = tokio::fs::create_dir_all(dir).await;
                made.map_err(|e| anyhow!("{}: {e}", dir.display()))?;
            }
            node.create_group(GroupId(g as u64), &members, config)
                .await
                .map_err(|e| anyhow!("creating group {g}: {e}"))
        }
    });
    let groups = try_join_all(creates).await?;
    println!(
        "{}",
        json!({"event": "ready", "rank": rank, "t": mono_ns(Instant::now()), "cpu": cpu_seconds()})
    );
    let mut roots: Vec<(usize, Sender)> = Vec::new();
    let mut receivers: Vec<(usize, Receiver)> = Vec::new();
    for (g, group) in mine.into_iter().zip(groups) {
        match group {
            Group::Root(root) => roots.push((g, root)),
            Group::Receiver(receiver) => receivers.push((g, receiver)),
        }
    }

    let receiving = try_join_all(receivers.into_iter().map(|(g, group)| {
        let (payload, dir) = (&payload, persist.as_ref().map(|d| d.join(format!("g{g}"))));
        async move { receive(rank, (g, group), payload, dir).await }
    }));
    let sending = async {
        send(rank, &roots, workload, &payload, persist.is_some()).await?;
        try_join_all(roots.iter_mut().map(|(g, group)| async move {
            group
                .close()
                .await
                .map_err(|e| anyhow!("closing group {g}: {e}"))
        }))
        .await
    };
    tokio::try_join!(receiving, sending)?;
    Ok(())
}

/// Issue this root's writes in order, at most `window` in flight.
async fn send(
    rank: u32,
    roots: &[(usize, Sender)],
    workload: &Workload,
    payload: &bytes::Bytes,
    persisted: bool,
) -> anyhow::Result<()> {
    let mut next_seq = vec![0u64; workload.groups.len()];
    // The writes this member is the root of, in trace order.
    let mut mine = workload
        .writes
        .iter()
        .enumerate()
        .filter(|(_, w)| workload.root_of(w) == rank)
        .map(|(i, w)| (i, w.group, w.size));
    let mut in_flight = FuturesUnordered::new();
    loop {
        // Each send is queued as a slot of the window frees, so each group's
        // messages are numbered in trace order.
        while in_flight.len() < workload.window {
            let Some((i, g, size)) = mine.next() else {
                break;
            };
            let (_, group) = roots
                .iter()
                .find(|(id, _)| *id == g)
                .expect("a root has every group it is root of");
            let seq = next_seq[g];
            next_seq[g] += 1;
            let t = Instant::now();
            let receipt = group
                .send(payload.slice(..size as usize))
                .await
                .map_err(|e| anyhow!("write {i} (group {g}, message {seq}): {e}"))?;
            let acknowledged = if persisted {
                futures::future::Either::Left(receipt.persisted())
            } else {
                futures::future::Either::Right(receipt.delivered())
            };
            in_flight.push(async move {
                acknowledged
                    .await
                    .map_err(|e| anyhow!("write {i} (group {g}, message {seq}): {e}"))?;
                println!(
                    "{}",
                    json!({"event": "written", "rank": rank, "group": g, "seq": seq,
                           "write": i, "size": size, "t": mono_ns(t),
                           "acked_t": mono_ns(Instant::now()), "cpu": cpu_seconds()})
                );
                Ok::<(), anyhow::Error>(())
            });
        }
        match in_flight.next().await {
            Some(outcome) => outcome?,
            None => break,
        }
    }
    Ok(())
}

/// Each message of a group in a file of its own under `dir`.
fn into_files(dir: PathBuf) -> ReceiveTargets {
    ReceiveTargets::new(move |incoming| {
        ReceiveTarget::create_file(dir.join(format!("m{}", incoming.seq)))
    })
}

/// Take and check every message of group `g` until its root closes it;
/// with `persist`, each message is in a file there (written and synced
/// here if it came in memory), acknowledged as persisted once checked,
/// then removed.
async fn receive(
    rank: u32,
    (g, mut group): (usize, Receiver),
    payload: &bytes::Bytes,
    persist: Option<PathBuf>,
) -> anyhow::Result<()> {
    while let Some(message) = group.next().await {
        let now = Instant::now();
        let message = message.map_err(|e| anyhow!("group {g}: {e}"))?;
        let (seq, len) = match &persist {
            Some(dir) => {
                let (seq, dir, payload) = (message.seq, dir.clone(), payload.clone());
                let len = tokio::task::spawn_blocking(move || keep(message, &dir, &payload))
                    .await
                    .map_err(|e| anyhow!("group {g}: {e}"))?
                    .map_err(|e| anyhow!("group {g}: message {seq}: {e}"))?;
                group
                    .persisted(seq)
                    .map_err(|e| anyhow!("group {g}: {e}"))?;
                (seq, len)
            }
            None => {
                let seq = message.seq;
                check(&message.data, payload)
                    .map_err(|e| anyhow!("group {g}: message {seq}: {e}"))?;
                (seq, message.data.len())
            }
        };
        println!(
            "{}",
            json!({"event": "delivered", "rank": rank, "group": g, "seq": seq,
                   "size": len, "t": mono_ns(now), "cpu": cpu_seconds()})
        );
    }
    group
        .close()
        .await
        .map_err(|e| anyhow!("closing group {g}: {e}"))
}

/// Whether `data` is the payload's prefix.
fn check(data: &[u8], payload: &[u8]) -> anyhow::Result<()> {
    if data.len() > payload.len() || data != &payload[..data.len()] {
        bail!("its {} bytes differ from the root's payload", data.len());
    }
    Ok(())
}

/// Keep `message` in a file in `dir` (its own, synced by the stream; or
/// written and synced here if it came in memory), check the file against
/// the payload, and remove it: its length. Blocking.
fn keep(message: Message, dir: &Path, payload: &[u8]) -> anyhow::Result<usize> {
    let path = dir.join(format!("m{}", message.seq));
    if message.file.is_none() {
        std::fs::write(&path, &message.data)?;
        std::fs::File::open(&path)?.sync_data()?;
    }
    let kept = std::fs::read(&path)?;
    std::fs::remove_file(&path)?;
    check(&kept, payload)?;
    Ok(kept.len())
}
