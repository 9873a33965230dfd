//! `rdmc member --members-from slurm|k8s|mpi` across real processes on
//! loopback: the launcher's environment (set by the test, or Open MPI's
//! real `mpirun`) gives every member its rank and its peers, and a file
//! reaches every receiver byte for byte. A launcher environment that is
//! incomplete or wrong, and a bootstrap that never answers, are refused in
//! one line naming the fault, with a non-zero exit and no wait beyond the
//! connect timeout.

mod child;
#[allow(dead_code)]
mod cluster_ports;
#[allow(dead_code)]
mod members_from;
#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;

use std::time::{Duration, Instant};

use members_from::{Scratch, finish, have};

const LIMIT: Duration = Duration::from_secs(60);

/// Four members on 127.0.0.1 under `env(rank)`, with `--members-from
/// source`, `--base-port` and `args`: every receiver gets the root's file.
fn four_members(test: &str, source: &[&str], env: &dyn Fn(usize) -> Vec<(&'static str, String)>) {
    let scratch = Scratch::new(test, 4);
    let base = scratch.base.to_string();
    let file = scratch.path("f");
    let mut children: Vec<_> = (0..4)
        .map(|rank| {
            let mut command = scratch.member(&rank.to_string(), source);
            // Every rank gets the same command line, as from a launcher:
            // the receivers ignore the file.
            command
                .args(["--base-port", &base])
                .arg(&file)
                .envs(env(rank));
            command.spawn().unwrap()
        })
        .collect();
    for (rank, child) in children.iter_mut().enumerate() {
        let (status, err) = finish(child, LIMIT);
        assert!(status.success(), "{test}: rank {rank} failed: {err}");
    }
    scratch.check_copies(1..4);
}

#[test]
fn slurm_tasks_find_each_other_from_srun_s_environment() {
    // One "node", 127.0.0.1, running the four tasks: ports base + local id.
    four_members("slurm", &["--members-from", "slurm"], &|rank| {
        vec![
            ("SLURM_PROCID", rank.to_string()),
            ("SLURM_NTASKS", "4".into()),
            ("SLURM_LOCALID", rank.to_string()),
            ("SLURM_JOB_NODELIST", "127.0.0.1".into()),
            ("SLURM_TASKS_PER_NODE", "4".into()),
        ]
    });
}

#[test]
fn statefulset_pods_find_each_other_by_name() {
    // The pods' names give the ranks; the address template stands for the
    // headless service's names (`localhost`, one port per pod here).
    let template = ["--k8s-address-template", "localhost:{ordinal_port}"];
    four_members(
        "k8s",
        &[&["--members-from", "k8s"][..], &template].concat(),
        &|rank| {
            vec![
                ("HOSTNAME", format!("rdmc-{rank}")),
                ("RDMC_REPLICAS", "4".into()),
            ]
        },
    );
}

#[test]
fn mpirun_ranks_exchange_addresses_through_rank_zero() {
    if !have("mpirun", "RDMC_REQUIRE_MPI") {
        return;
    }
    let scratch = Scratch::new("mpi", 9);
    let rdmc = env!("CARGO_BIN_EXE_rdmc");
    // Each rank writes to its own directory: one command line for all.
    let member = format!(
        "exec {rdmc} member --members-from mpi --bootstrap 127.0.0.1:{} --base-port {} \
         --key-file {key} --out {dir}/out$OMPI_COMM_WORLD_RANK --connect-timeout 30 {file}",
        scratch.base + 8,
        scratch.base,
        key = scratch.path("key").display(),
        dir = scratch.dir.display(),
        file = scratch.path("f").display(),
    );
    let mut command = std::process::Command::new("mpirun");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        command.arg("--allow-run-as-root");
    }
    let mut mpirun = command
        .args(["-np", "8", "--oversubscribe", "sh", "-c", &member])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (status, err) = finish(&mut mpirun, Duration::from_secs(120));
    assert!(status.success(), "mpirun failed: {err}");
    scratch.check_copies(1..8);
}

/// One member alone, `args` and `env`: it exits 1 within `limit` (far
/// below the connect timeout where none is given), in one line naming
/// `expected`.
fn refused(
    scratch: &Scratch,
    args: &[&str],
    env: &[(&str, &str)],
    expected: &str,
    limit: Duration,
) {
    let mut command = scratch.member("x", args);
    command.envs(env.iter().copied());
    if !args.contains(&"--connect-timeout") {
        command.args(["--connect-timeout", "600"]);
    }
    for var in [
        "SLURM_PROCID",
        "OMPI_COMM_WORLD_RANK",
        "PMIX_RANK",
        "PMI_RANK",
        "MASTER_ADDR",
    ] {
        if !env.iter().any(|(k, _)| *k == var) {
            command.env_remove(var);
        }
    }
    let started = Instant::now();
    let (status, err) = finish(
        &mut command.spawn().unwrap(),
        limit + Duration::from_secs(10),
    );
    assert_eq!(status.code(), Some(1), "{args:?}: {err}");
    assert!(
        started.elapsed() < limit,
        "{args:?}: took {:?}",
        started.elapsed()
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(expected),
        "{args:?}: expected {expected:?} in {err:?}"
    );
}

#[test]
fn a_wrong_launcher_environment_is_named() {
    let scratch = Scratch::new("refused", 1);
    let quick = Duration::from_secs(20);
    let slurm = ["--members-from", "slurm"];
    refused(&scratch, &slurm, &[], "SLURM_PROCID is not set", quick);
    refused(
        &scratch,
        &slurm,
        &[("SLURM_PROCID", "1")],
        "SLURM_NTASKS is not",
        quick,
    );
    let job = [
        ("SLURM_NTASKS", "4"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_JOB_NODELIST", "node[1-4]"),
        ("SLURM_TASKS_PER_NODE", "1(x4)"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| -> Vec<(&str, &str)> {
        let mut all = job.to_vec();
        all.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
        all.extend_from_slice(extra);
        all
    };
    refused(
        &scratch,
        &slurm,
        &with(&[("SLURM_PROCID", "4")]),
        "SLURM_PROCID=4 is not below SLURM_NTASKS=4",
        quick,
    );
    refused(
        &scratch,
        &slurm,
        &with(&[("SLURM_PROCID", "1"), ("SLURM_JOB_NODELIST", "node[1-4")]),
        "SLURM_JOB_NODELIST=\"node[1-4\": \"node[1-4\": a '[' without its ']'",
        quick,
    );
    refused(
        &scratch,
        &["--members-from", "slurm", "--rank", "2"],
        &with(&[("SLURM_PROCID", "1")]),
        "--rank 2, but --members-from slurm makes this process rank 1",
        quick,
    );
    let mpi = ["--members-from", "mpi"];
    refused(
        &scratch,
        &mpi,
        &[],
        "start the members with `mpirun`",
        quick,
    );
    refused(
        &scratch,
        &mpi,
        &[("OMPI_COMM_WORLD_RANK", "1")],
        "OMPI_COMM_WORLD_SIZE is not",
        quick,
    );
    refused(
        &scratch,
        &["--members-from", "k8s"],
        &[("HOSTNAME", "web-1")],
        "--replicas",
        quick,
    );
    refused(
        &scratch,
        &[],
        &[],
        "give --members FILE, or --members-from",
        quick,
    );
    #[cfg(not(feature = "etcd"))]
    refused(
        &scratch,
        &["--members-from", "etcd"],
        &[],
        "--features etcd",
        quick,
    );
}

#[test]
fn a_bootstrap_that_never_answers_ends_at_the_connect_timeout() {
    // A free port: nothing answers there.
    let scratch = Scratch::new("no_bootstrap", 1);
    let bootstrap = format!("127.0.0.1:{}", scratch.base);
    let env = [
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
    ];
    refused(
        &scratch,
        &[
            "--members-from",
            "mpi",
            "--bootstrap",
            &bootstrap,
            "--connect-timeout",
            "2",
        ],
        &env,
        &format!("no answer from the bootstrap at {bootstrap}"),
        Duration::from_secs(8),
    );
    // MASTER_ADDR without MASTER_PORT is named.
    let mut half = env.to_vec();
    half.push(("MASTER_ADDR", "127.0.0.1"));
    refused(
        &scratch,
        &["--members-from", "mpi"],
        &half,
        "MASTER_PORT is not",
        Duration::from_secs(20),
    );
}
