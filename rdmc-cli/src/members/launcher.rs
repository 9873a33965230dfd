//! Ranks and peers from a launcher's environment: Slurm's `srun`, an MPI
//! launcher (`mpirun`), a Kubernetes StatefulSet. Pure functions of the
//! environment, given as a lookup, so that tests pass a map instead of
//! changing the process's own environment.

use std::collections::BTreeMap;

use anyhow::{Context as _, anyhow, bail};

/// What a launcher says about this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// This process's rank, `0..size`.
    pub rank: u32,
    /// How many processes the launcher started.
    pub size: u32,
    /// This process's index among the ones on its host (its port is the
    /// base port plus this).
    pub local_rank: u32,
}

/// An environment to read: a variable's value, if set.
pub trait Env {
    /// The value of `name`, if set (an empty value counts as unset).
    fn var(&self, name: &str) -> Option<String>;
}

/// The process's own environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

impl Env for BTreeMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).filter(|v| !v.is_empty()).cloned()
    }
}

/// A number from variable `name`.
fn number(env: &dyn Env, name: &str) -> anyhow::Result<Option<u32>> {
    env.var(name)
        .map(|v| {
            v.trim()
                .parse()
                .map_err(|_| anyhow!("{name}={v:?} is not a number"))
        })
        .transpose()
}

/// The first of `names` that is set, with its name.
fn first_number(
    env: &dyn Env,
    names: &[&'static str],
) -> anyhow::Result<Option<(u32, &'static str)>> {
    for &name in names {
        if let Some(n) = number(env, name)? {
            return Ok(Some((n, name)));
        }
    }
    Ok(None)
}

/// Check `rank < size` and build the [`Launch`].
fn launch(rank: (u32, &str), size: (u32, &str), local_rank: u32) -> anyhow::Result<Launch> {
    if size.0 == 0 {
        bail!("{} is 0: no processes", size.1);
    }
    if rank.0 >= size.0 {
        bail!(
            "{}={} is not below {}={}: a rank must be less than the number of processes",
            rank.1,
            rank.0,
            size.1,
            size.0
        );
    }
    Ok(Launch {
        rank: rank.0,
        size: size.0,
        local_rank,
    })
}

/// Slurm (`srun`): this task's rank and every task's `host:port` (ports
/// `base_port` plus the task's local id on its host), by Slurm's block
/// distribution: the first host's tasks take the first ranks, and so on.
pub fn slurm(env: &dyn Env, base_port: u16) -> anyhow::Result<(Launch, Vec<String>)> {
    let Some(rank) = number(env, "SLURM_PROCID")? else {
        bail!(
            "--members-from slurm: SLURM_PROCID is not set: run each member as a \
                    task of `srun` (in an allocation of `salloc`/`sbatch`)"
        );
    };
    let missing = |name: &str| {
        anyhow!(
            "--members-from slurm: SLURM_PROCID is set but {name} is not: an incomplete Slurm \
             environment (run the members with `srun`)"
        )
    };
    let size = number(env, "SLURM_NTASKS")?
        .or(number(env, "SLURM_NPROCS")?)
        .ok_or_else(|| missing("SLURM_NTASKS"))?;
    let local = number(env, "SLURM_LOCALID")?.ok_or_else(|| missing("SLURM_LOCALID"))?;
    let launch = launch((rank, "SLURM_PROCID"), (size, "SLURM_NTASKS"), local)?;
    let (list_name, list) = [
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
    ]
    .iter()
    .find_map(|&n| env.var(n).map(|v| (n, v)))
    .ok_or_else(|| missing("SLURM_JOB_NODELIST"))?;
    let (tasks_name, tasks) = ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"]
        .iter()
        .find_map(|&n| env.var(n).map(|v| (n, v)))
        .ok_or_else(|| missing("SLURM_TASKS_PER_NODE"))?;
    let hosts = parse_hostlist(&list).with_context(|| format!("{list_name}={list:?}"))?;
    let tasks = parse_tasks_per_node(&tasks).with_context(|| format!("{tasks_name}={tasks:?}"))?;
    let placed = block_distribution(&hosts, &tasks, size)
        .with_context(|| format!("{list_name} and {tasks_name}"))?;
    let (host, expected_local) = &placed[rank as usize];
    if *expected_local != local {
        bail!(
            "SLURM_LOCALID={local}, but by the block distribution task {rank} is task \
             {expected_local} on {host}: run with `srun --distribution=block`"
        );
    }
    if let Some(node) = env.var("SLURMD_NODENAME").filter(|n| n != host) {
        bail!(
            "SLURMD_NODENAME={node}, but by the block distribution task {rank} runs on \
             {host}: run with `srun --distribution=block`"
        );
    }
    let addrs = placed
        .iter()
        .map(|(host, local)| port_on(host, base_port, *local))
        .collect::<Result<_, _>>()?;
    Ok((launch, addrs))
}

/// `host:port` with `port = base + offset`, brackets around an IPv6 host.
pub fn port_on(host: &str, base: u16, offset: u32) -> anyhow::Result<String> {
    let port = offset_port(base, offset)?;
    if host.contains(':') {
        Ok(format!("[{host}]:{port}"))
    } else {
        Ok(format!("{host}:{port}"))
    }
}

/// `base + offset`, if a port.
pub fn offset_port(base: u16, offset: u32) -> anyhow::Result<u16> {
    u16::try_from(u32::from(base) + offset)
        .map_err(|_| anyhow!("port {base} + {offset} is above 65535 (see --base-port)"))
}

/// Most hosts a hostlist may expand to (a typo such as `n[1-99999999]`
/// is refused instead of filling the memory).
const MAX_HOSTS: usize = 1 << 20;

/// Expand a Slurm hostlist: `node[01-04,07],gpu3` is `node01`, `node02`,
/// `node03`, `node04`, `node07`, `gpu3`. A range keeps the width of its
/// first number (`[08-10]`: `08`, `09`, `10`); a name may hold several
/// bracket groups (`r[1-2]n[1-2]`: every combination, the last varying
/// fastest).
pub fn parse_hostlist(list: &str) -> anyhow::Result<Vec<String>> {
    let mut hosts = Vec::new();
    for item in split_top_level(list)? {
        if item.is_empty() {
            bail!("an empty host name");
        }
        let mut names = vec![String::new()];
        let mut rest = item;
        while !rest.is_empty() {
            let (literal, group) = match rest.find('[') {
                Some(open) => {
                    let close = rest[open..]
                        .find(']')
                        .map(|c| open + c)
                        .ok_or_else(|| anyhow!("{item:?}: a '[' without its ']'"))?;
                    (&rest[..open], Some(&rest[open + 1..close]))
                }
                None => (rest, None),
            };
            if literal.contains(']') {
                bail!("{item:?}: a ']' without its '['");
            }
            for name in &mut names {
                name.push_str(literal);
            }
            let Some(group) = group else { break };
            let numbers = expand_ranges(group).with_context(|| format!("{item:?}"))?;
            if names.len().saturating_mul(numbers.len()) > MAX_HOSTS {
                bail!("{item:?}: more than {MAX_HOSTS} hosts");
            }
            names = names
                .iter()
                .flat_map(|n| numbers.iter().map(move |x| format!("{n}{x}")))
                .collect();
            rest = &rest[literal.len() + group.len() + 2..];
        }
        hosts.extend(names);
        if hosts.len() > MAX_HOSTS {
            bail!("more than {MAX_HOSTS} hosts");
        }
    }
    if hosts.is_empty() {
        bail!("no hosts");
    }
    Ok(hosts)
}

/// The comma-separated items of a hostlist, commas inside brackets kept.
fn split_top_level(list: &str) -> anyhow::Result<Vec<&str>> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0u32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' if depth > 0 => bail!("{list:?}: brackets inside brackets"),
            '[' => depth = 1,
            ']' if depth == 0 => bail!("{list:?}: a ']' without its '['"),
            ']' => depth = 0,
            ',' if depth == 0 => {
                items.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth > 0 {
        bail!("{list:?}: a '[' without its ']'");
    }
    items.push(list[start..].trim());
    Ok(items)
}

/// `01-04,07` as `["01", "02", "03", "04", "07"]`.
fn expand_ranges(group: &str) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for part in group.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let digits =
            |s: &str| !s.is_empty() && s.len() <= 18 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            bail!("[{group}]: {part:?} is not a number or a range of numbers");
        }
        let (a, b): (u64, u64) = (lo.parse().unwrap_or(0), hi.parse().unwrap_or(0));
        if a > b {
            bail!("[{group}]: the range {part:?} goes down");
        }
        if (b - a) as usize >= MAX_HOSTS || out.len() > MAX_HOSTS {
            bail!("[{group}]: more than {MAX_HOSTS} hosts");
        }
        out.extend((a..=b).map(|n| format!("{n:0width$}", width = lo.len())));
    }
    Ok(out)
}

/// Expand Slurm's tasks per node: `2(x3),1` is `[2, 2, 2, 1]`.
pub fn parse_tasks_per_node(text: &str) -> anyhow::Result<Vec<u32>> {
    let mut counts = Vec::new();
    for item in text.split(',').map(str::trim) {
        let (count, repeat) = match item.split_once('(') {
            Some((count, rep)) => {
                let rep = rep
                    .strip_prefix('x')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| anyhow!("{item:?} is not COUNT or COUNT(xREPEAT)"))?;
                (count, rep)
            }
            None => (item, "1"),
        };
        let count: u32 = count
            .parse()
            .map_err(|_| anyhow!("{item:?}: {count:?} is not a task count"))?;
        let repeat: usize = repeat
            .parse()
            .ok()
            .filter(|&r| (1..=MAX_HOSTS).contains(&r))
            .ok_or_else(|| anyhow!("{item:?}: {repeat:?} is not a repeat count"))?;
        if counts.len() + repeat > MAX_HOSTS {
            bail!("more than {MAX_HOSTS} hosts");
        }
        counts.extend(std::iter::repeat_n(count, repeat));
    }
    Ok(counts)
}

/// Every rank's host and local id under the block distribution: host `i`
/// runs `tasks[i]` consecutive ranks.
pub fn block_distribution(
    hosts: &[String],
    tasks: &[u32],
    size: u32,
) -> anyhow::Result<Vec<(String, u32)>> {
    if hosts.len() != tasks.len() {
        bail!(
            "{} hosts but task counts for {} hosts",
            hosts.len(),
            tasks.len()
        );
    }
    let total: u64 = tasks.iter().map(|&t| u64::from(t)).sum();
    if total != u64::from(size) {
        bail!("the task counts add up to {total}, not to the {size} tasks of SLURM_NTASKS");
    }
    Ok(hosts
        .iter()
        .zip(tasks)
        .flat_map(|(host, &n)| (0..n).map(move |local| (host.clone(), local)))
        .collect())
}

/// An MPI launcher (Open MPI's `mpirun`, or any PMIx launcher): this
/// process's rank, the world's size and its local rank on its host.
pub fn mpi(env: &dyn Env) -> anyhow::Result<Launch> {
    let ompi = first_number(env, &["OMPI_COMM_WORLD_RANK"])?;
    let pmix = first_number(env, &["PMIX_RANK"])?;
    let rank = match (ompi, pmix) {
        (Some((a, _)), Some((b, _))) if a != b => {
            bail!(
                "OMPI_COMM_WORLD_RANK={a} and PMIX_RANK={b} disagree: not one launcher's \
                 environment"
            );
        }
        (Some(r), _) | (None, Some(r)) => r,
        (None, None) => first_number(env, &["PMI_RANK"])?.ok_or_else(|| {
            anyhow!(
                "--members-from mpi: no MPI launcher's environment (OMPI_COMM_WORLD_RANK, \
             PMIX_RANK and PMI_RANK are unset): start the members with `mpirun`"
            )
        })?,
    };
    let size = first_number(env, &["OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"])?.ok_or_else(
        || {
            anyhow!(
                "--members-from mpi: {} is set but OMPI_COMM_WORLD_SIZE is not: an incomplete \
                 MPI environment",
                rank.1
            )
        },
    )?;
    let local = first_number(
        env,
        &[
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "PMIX_LOCAL_RANK",
            "MPI_LOCALRANKID",
        ],
    )?
    .ok_or_else(|| {
        anyhow!(
            "--members-from mpi: {} is set but OMPI_COMM_WORLD_LOCAL_RANK is not: an \
             incomplete MPI environment",
            rank.1
        )
    })?;
    launch(rank, size, local.0)
}

/// How a StatefulSet's pods are named and reached (`--members-from k8s`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct K8sOptions {
    /// k8s: this pod's name, `<set>-<ordinal>` (default: HOSTNAME).
    #[arg(long = "pod-name", value_name = "NAME")]
    pub pod_name: Option<String>,
    /// k8s: the StatefulSet's replicas (default: RDMC_REPLICAS).
    #[arg(long = "replicas", value_name = "N")]
    pub replicas: Option<u32>,
    /// k8s: the headless service (default: RDMC_K8S_SERVICE, else the
    /// set's name).
    #[arg(long = "k8s-service", value_name = "NAME")]
    pub service: Option<String>,
    /// k8s: the namespace, for fully qualified names (default:
    /// POD_NAMESPACE; without one, the short names that resolve inside
    /// the pod's own namespace).
    #[arg(long = "k8s-namespace", value_name = "NS")]
    pub namespace: Option<String>,
    /// k8s: every pod's `host[:port]`, instead of
    /// `{set}-{ordinal}.{service}[.{namespace}.svc.cluster.local]`;
    /// placeholders `{set}`, `{ordinal}`, `{service}`, `{namespace}`,
    /// `{port}` (--base-port) and `{ordinal_port}` (--base-port plus the
    /// ordinal).
    #[arg(long = "k8s-address-template", value_name = "TEMPLATE")]
    pub template: Option<String>,
}

/// A StatefulSet's pod: its rank is its ordinal (`web-3` is rank 3), the
/// size its replicas, its peers the headless service's DNS names
/// `<set>-<i>.<service>[.<namespace>.svc.cluster.local]:<port>`.
pub fn k8s(env: &dyn Env, opts: &K8sOptions, port: u16) -> anyhow::Result<(Launch, Vec<String>)> {
    let pod = opts
        .pod_name
        .clone()
        .or_else(|| env.var("HOSTNAME"))
        .ok_or_else(|| {
            anyhow!("--members-from k8s: no pod name: HOSTNAME is unset; give --pod-name")
        })?;
    let (set, ordinal) = pod
        .rsplit_once('-')
        .and_then(|(set, n)| Some((set, n.parse::<u32>().ok()?)))
        .filter(|(set, _)| !set.is_empty())
        .ok_or_else(|| {
            anyhow!(
                "pod name {pod:?} does not end in -<ordinal>: not a StatefulSet's pod \
                 (see --pod-name)"
            )
        })?;
    let replicas = match opts.replicas {
        Some(n) => (n, "--replicas"),
        None => first_number(env, &["RDMC_REPLICAS"])?.ok_or_else(|| {
            anyhow!(
                "--members-from k8s: the StatefulSet's size is unknown: give --replicas N or set \
             RDMC_REPLICAS"
            )
        })?,
    };
    let launch = launch((ordinal, "the pod's ordinal"), replicas, 0)?;
    let service = opts
        .service
        .clone()
        .or_else(|| env.var("RDMC_K8S_SERVICE"))
        .unwrap_or_else(|| set.to_owned());
    let namespace = opts.namespace.clone().or_else(|| env.var("POD_NAMESPACE"));
    let template = opts.template.clone().unwrap_or_else(|| match namespace {
        Some(_) => "{set}-{ordinal}.{service}.{namespace}.svc.cluster.local".into(),
        None => "{set}-{ordinal}.{service}".into(),
    });
    let addrs = (0..launch.size)
        .map(|i| {
            let ordinal_port = offset_port(port, i)?;
            let name = template
                .replace("{set}", set)
                .replace("{ordinal}", &i.to_string())
                .replace("{service}", &service)
                .replace("{namespace}", namespace.as_deref().unwrap_or(""))
                .replace("{ordinal_port}", &ordinal_port.to_string())
                .replace("{port}", &port.to_string());
            if name.contains('{') {
                bail!("--k8s-address-template {template:?}: an unknown placeholder");
            }
            Ok(if has_port(&name) {
                name
            } else {
                port_on(&name, port, 0)?
            })
        })
        .collect::<anyhow::Result<_>>()?;
    Ok((launch, addrs))
}

/// Whether `addr` ends in `:port` (a bare IPv6 address does not count).
fn has_port(addr: &str) -> bool {
    match addr.rsplit_once(':') {
        Some((host, port)) => {
            (!host.contains(':') || host.ends_with(']')) && port.parse::<u16>().is_ok()
        }
        None => false,
    }
}

#[cfg(test)]
#[path = "launcher_tests.rs"]
mod tests;
