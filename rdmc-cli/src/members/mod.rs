//! Where a member process finds its rank and its peers: a members file,
//! a launcher's environment (Slurm's `srun`, `mpirun`, a Kubernetes
//! StatefulSet), or an etcd cluster (the `etcd` feature).
//!
//! [`plan`] reads everything that needs no network (the command line, the
//! file, the environment) and checks it; [`join`] then does what needs the
//! network (resolving names, the bootstrap exchange, etcd), every wait
//! bounded by a deadline.

#[cfg(feature = "etcd")]
pub mod etcd;
pub mod exchange;
pub mod file;
pub mod launcher;
mod types;
mod watch;

pub use types::{How, Joined, Plan, Source, Want};
pub use watch::{Report, Watch};

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use clap::Args;

use exchange::{Exchange, ExchangeKey, Own};
use launcher::{Env, K8sOptions};

/// The error for `--members-from etcd` in a build without the `etcd` feature.
pub const NO_ETCD: &str = "this rdmc was built without etcd support; rebuild with \
                           `cargo build --features etcd` (needs protoc: apt-get install \
                           protobuf-compiler)";

/// How a member finds the cluster: the options every member command shares.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Finding the members")]
pub struct MembersArgs {
    /// File listing the members, one `host:port` per line in rank order
    /// (rank 0, the root, first; blank lines and `#` comments are
    /// skipped).
    #[arg(long, value_name = "FILE")]
    pub members: Option<PathBuf>,
    /// Where the ranks and peers come from: `file` (--members, the default
    /// when it is given), `slurm` (srun's environment), `mpi` (mpirun's
    /// environment, addresses exchanged through rank 0's --bootstrap),
    /// `k8s` (a StatefulSet's pod names and headless service), `etcd`
    /// (registration in etcd; the `etcd` feature).
    #[arg(long, value_enum, value_name = "SOURCE")]
    pub members_from: Option<Source>,
    /// slurm, mpi, k8s, etcd: the first member port of a host; a member
    /// listens on it plus its local rank on the host (k8s: every pod on
    /// it; etcd: plus its rank).
    #[arg(long, default_value_t = 7000, value_name = "PORT")]
    pub base_port: u16,
    /// mpi, etcd: this member's own listen address, instead of the base
    /// port at this host's address.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,
    /// mpi: where rank 0 gathers and hands out every rank's address
    /// (default: MASTER_ADDR:MASTER_PORT).
    #[arg(long, value_name = "HOST:PORT")]
    pub bootstrap: Option<String>,
    /// k8s: how the StatefulSet's pods are named and reached.
    #[command(flatten)]
    pub k8s: K8sOptions,
    /// etcd: the endpoints, comma-separated (default: ETCDCTL_ENDPOINTS,
    /// else http://127.0.0.1:2379).
    #[arg(long, value_name = "URLS")]
    pub etcd: Option<String>,
    /// etcd: the key prefix; members register at
    /// `<prefix>/<cluster>/members/<rank>`.
    #[arg(long, default_value = "/rdmc", value_name = "PREFIX")]
    pub etcd_prefix: String,
    /// etcd: the cluster's name, so that clusters can share an etcd.
    #[arg(long, default_value = "default", value_name = "NAME")]
    pub cluster: String,
    /// etcd: how many members the cluster has; each waits until all have
    /// registered.
    #[arg(long, value_name = "N")]
    pub size: Option<u32>,
    /// etcd: seconds a member's registration outlives it (its lease's
    /// time to live, kept alive while it runs).
    #[arg(long, default_value_t = 5, value_name = "SECONDS")]
    pub lease_ttl: i64,
}

/// The process's own environment, read once.
pub fn process_env() -> &'static dyn Env {
    &launcher::ProcessEnv
}

/// Read and check everything that needs no network: the options, the
/// members file or the launcher's environment. `flag` names the rank's
/// option in errors (`--rank`, `--me`, ...).
pub fn plan(args: &MembersArgs, want: Want, flag: &str, env: &dyn Env) -> anyhow::Result<Plan> {
    let source = match (args.members_from, &args.members) {
        (None | Some(Source::File), Some(_)) => Source::File,
        (Some(Source::File), None) | (None, None) => {
            bail!("no members: give --members FILE, or --members-from slurm|mpi|k8s|etcd");
        }
        (Some(other), Some(_)) => {
            bail!(
                "--members FILE is for --members-from file, not --members-from {}",
                other.name()
            );
        }
        (Some(other), None) => other,
    };
    let launched = |rank: u32, size: u32, how: How| -> anyhow::Result<Plan> {
        match want {
            Want::Rank(r) if r != rank => bail!(
                "{flag} {r}, but --members-from {} makes this process rank {rank}",
                source.name()
            ),
            _ => Ok(Plan {
                source,
                size: size as usize,
                rank: Some(rank),
                origin: format!("--members-from {}", source.name()),
                how,
            }),
        }
    };
    match source {
        Source::File => file::plan(args.members.as_deref().expect("checked above"), want, flag),
        Source::Slurm => {
            let (launch, names) = launcher::slurm(env, args.base_port)?;
            launched(launch.rank, launch.size, How::Names(names))
        }
        Source::K8s => {
            let (launch, names) = launcher::k8s(env, &args.k8s, args.base_port)?;
            launched(launch.rank, launch.size, How::Names(names))
        }
        Source::Mpi => {
            let launch = launcher::mpi(env)?;
            let own = own_address(args, launch.local_rank)?;
            let spec = Exchange {
                bootstrap: bootstrap(args, env)?,
                rank: launch.rank,
                size: launch.size,
                own,
            };
            launched(launch.rank, launch.size, How::Exchange(spec))
        }
        Source::Etcd => etcd_plan(args, want, env),
    }
}

#[cfg(feature = "etcd")]
fn etcd_plan(args: &MembersArgs, want: Want, env: &dyn Env) -> anyhow::Result<Plan> {
    let size = args.size.filter(|&n| n > 0).ok_or_else(|| {
        anyhow!("--members-from etcd needs --size N (1 or more): how many members to wait for")
    })?;
    let rank = match want {
        Want::Rank(r) => Some(r),
        Want::Root => Some(0),
        Want::Receiver => None,
    };
    if let Some(r) = rank.filter(|&r| r >= size) {
        bail!("rank {r} is not below --size {size}");
    }
    if args.lease_ttl < 1 {
        bail!("--lease-ttl must be 1 second or more");
    }
    let endpoints: Vec<String> = args
        .etcd
        .clone()
        .or_else(|| env.var("ETCDCTL_ENDPOINTS"))
        .unwrap_or_else(|| "http://127.0.0.1:2379".into())
        .split(',')
        .map(|e| e.trim().to_owned())
        .filter(|e| !e.is_empty())
        .collect();
    if endpoints.is_empty() {
        bail!("--etcd names no endpoint");
    }
    let prefix = format!(
        "{}/{}/members/",
        args.etcd_prefix.trim_end_matches('/'),
        args.cluster
    );
    let spec = etcd::Spec {
        endpoints,
        prefix,
        size,
        rank,
        ttl: args.lease_ttl,
        own: own_address(args, 0)?,
    };
    Ok(Plan {
        source: Source::Etcd,
        size: size as usize,
        rank,
        origin: "--members-from etcd".into(),
        how: How::Etcd(spec),
    })
}

#[cfg(not(feature = "etcd"))]
fn etcd_plan(_: &MembersArgs, _: Want, _: &dyn Env) -> anyhow::Result<Plan> {
    Err(anyhow!(NO_ETCD))
}

/// `--listen`, resolved; else the base port plus `offset` at the IP found
/// while joining.
pub fn own_address(args: &MembersArgs, offset: u32) -> anyhow::Result<Own> {
    match &args.listen {
        Some(listen) => resolve_now(listen)
            .map(Own::Given)
            .with_context(|| format!("--listen {listen}")),
        None => launcher::offset_port(args.base_port, offset).map(Own::Port),
    }
}

/// `--bootstrap`, else MASTER_ADDR:MASTER_PORT.
fn bootstrap(args: &MembersArgs, env: &dyn Env) -> anyhow::Result<String> {
    if let Some(b) = &args.bootstrap {
        return Ok(b.clone());
    }
    match (env.var("MASTER_ADDR"), env.var("MASTER_PORT")) {
        (Some(host), Some(port)) => Ok(launcher::port_on(
            &host,
            port.parse()
                .map_err(|_| anyhow!("MASTER_PORT={port:?} is not a port"))?,
            0,
        )?),
        (Some(_), None) => {
            bail!("MASTER_ADDR is set but MASTER_PORT is not: give both, or --bootstrap HOST:PORT")
        }
        (None, Some(_)) => {
            bail!("MASTER_PORT is set but MASTER_ADDR is not: give both, or --bootstrap HOST:PORT")
        }
        (None, None) => bail!(
            "--members-from mpi needs the address rank 0 gathers the members' addresses at: \
             --bootstrap HOST:PORT (rank 0's host), or MASTER_ADDR and MASTER_PORT"
        ),
    }
}

/// The first address `addr` (`host:port`) resolves to.
pub fn resolve_now(addr: &str) -> anyhow::Result<SocketAddr> {
    addr.to_socket_addrs()?
        .next()
        .ok_or_else(|| anyhow!("resolves to no address"))
}

/// Do the network part of `plan` (resolve, exchange, register), ending
/// at `deadline` at the latest.
pub async fn join(
    plan: Plan,
    key: &ExchangeKey,
    deadline: Instant,
    report: Report,
) -> anyhow::Result<Joined> {
    #[cfg(not(feature = "etcd"))]
    let _ = report;
    let rank = plan.rank;
    let members = match plan.how {
        How::Ready(members) => members,
        How::Names(names) => resolve_all(&names, deadline).await?,
        How::Exchange(spec) => exchange::run(&spec, key, deadline).await?,
        #[cfg(feature = "etcd")]
        How::Etcd(spec) => {
            let (members, rank, watch) = etcd::join(spec, deadline, report).await?;
            return Ok(Joined {
                members,
                rank,
                watch: Some(watch),
            });
        }
    };
    Ok(Joined {
        members,
        rank: rank.expect("only etcd claims a rank"),
        watch: None,
    })
}

/// Resolve every name, retrying those that do not resolve yet (a pod's
/// DNS name appears once the pod has an address) until `deadline`.
async fn resolve_all(names: &[String], deadline: Instant) -> anyhow::Result<Vec<SocketAddr>> {
    let mut found: Vec<Option<SocketAddr>> = vec![None; names.len()];
    loop {
        let mut last = None;
        for (name, slot) in names.iter().zip(&mut found) {
            if slot.is_none() {
                match tokio::net::lookup_host(name.as_str())
                    .await
                    .map(|mut a| a.next())
                {
                    Ok(Some(addr)) => *slot = Some(addr),
                    Ok(None) => last = Some(format!("{name}: resolves to no address")),
                    Err(e) => last = Some(format!("{name}: {e}")),
                }
            }
        }
        let Some(last) = last else {
            return Ok(found
                .into_iter()
                .map(|a| a.expect("all resolved"))
                .collect());
        };
        if Instant::now() + Duration::from_millis(250) > deadline {
            let missing = found.iter().filter(|a| a.is_none()).count();
            bail!(
                "{missing} member address(es) did not resolve within the connect timeout; \
                 last: {last}"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
