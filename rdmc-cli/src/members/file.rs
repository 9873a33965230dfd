//! The members file: one `host:port` per line, in rank order.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;

use anyhow::{Context as _, anyhow, bail};

use super::types::{How, Plan, Source, Want};

/// Read the members file: one `host:port` per line, in rank order.
pub fn read_members(path: &Path) -> anyhow::Result<Vec<SocketAddr>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let members: Vec<SocketAddr> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .map(|(line, l)| {
            l.to_socket_addrs()
                .ok()
                .and_then(|mut addrs| addrs.next())
                .ok_or_else(|| anyhow!("{}:{}: {l:?} is not a host:port", path.display(), line + 1))
        })
        .collect::<Result<_, _>>()?;
    if members.is_empty() {
        bail!("{} lists no members", path.display());
    }
    Ok(members)
}

/// The file's members; the rank must be given (`flag`).
pub fn plan(path: &Path, want: Want, flag: &str) -> anyhow::Result<Plan> {
    let Want::Rank(rank) = want else {
        bail!("{flag} is needed with --members FILE (this process's line in it, from 0)");
    };
    let members = read_members(path)?;
    if rank as usize >= members.len() {
        bail!(
            "rank {rank} is not in the cluster: {} lists {} members",
            path.display(),
            members.len()
        );
    }
    Ok(Plan {
        source: Source::File,
        size: members.len(),
        rank: Some(rank),
        origin: path.display().to_string(),
        how: How::Ready(members),
    })
}
