use super::*;
use proptest::prelude::*;

/// An error's text as the command prints it (with its context, on one line).
trait ErrText {
    fn err_text(self) -> String;
}

impl<T: std::fmt::Debug> ErrText for anyhow::Result<T> {
    fn err_text(self) -> String {
        format!("{:#}", self.unwrap_err())
    }
}

fn env(vars: &[(&str, &str)]) -> BTreeMap<String, String> {
    vars.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn hostlists_expand_as_slurm_writes_them() {
    assert_eq!(
        parse_hostlist("node[01-04,07],gpu3").unwrap(),
        strings(&["node01", "node02", "node03", "node04", "node07", "gpu3"])
    );
    assert_eq!(
        parse_hostlist("n[8-10]").unwrap(),
        strings(&["n8", "n9", "n10"])
    );
    assert_eq!(
        parse_hostlist("n[08-10]").unwrap(),
        strings(&["n08", "n09", "n10"])
    );
    assert_eq!(
        parse_hostlist("r[1-2]n[1-2]-ib").unwrap(),
        strings(&["r1n1-ib", "r1n2-ib", "r2n1-ib", "r2n2-ib"])
    );
    assert_eq!(parse_hostlist("solo").unwrap(), strings(&["solo"]));
    assert_eq!(parse_hostlist("a, b").unwrap(), strings(&["a", "b"]));
}

#[test]
fn malformed_hostlists_are_refused_naming_the_fault() {
    for (list, says) in [
        ("node[01-04", "without its ']'"),
        ("node01]", "without its '['"),
        ("node[4-1]", "goes down"),
        ("node[a-b]", "not a number"),
        ("node[]", "not a number"),
        ("node[1-2],,x", "empty host"),
        ("n[[1]]", "inside brackets"),
        ("n[1-99999999]", "more than"),
        ("", "empty host"),
    ] {
        let err = parse_hostlist(list).err_text();
        assert!(err.contains(says), "{list:?}: {err}");
    }
}

#[test]
fn tasks_per_node_expand() {
    assert_eq!(parse_tasks_per_node("2(x3),1").unwrap(), vec![2, 2, 2, 1]);
    assert_eq!(parse_tasks_per_node("4").unwrap(), vec![4]);
    for bad in ["2(x)", "2(3)", "x", "2(x0)", "", "1,,2"] {
        assert!(parse_tasks_per_node(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn ranks_go_to_hosts_in_blocks() {
    let hosts = strings(&["a", "b", "c"]);
    let placed = block_distribution(&hosts, &[2, 1, 3], 6).unwrap();
    let want: Vec<(String, u32)> = [("a", 0), ("a", 1), ("b", 0), ("c", 0), ("c", 1), ("c", 2)]
        .iter()
        .map(|(h, l)| ((*h).to_owned(), *l))
        .collect();
    assert_eq!(placed, want);
    assert!(
        block_distribution(&hosts, &[2, 1], 3)
            .err_text()
            .contains("3 hosts")
    );
    assert!(
        block_distribution(&hosts, &[2, 1, 1], 5)
            .err_text()
            .contains("add up to 4")
    );
}

fn slurm_env(rank: &str, local: &str) -> BTreeMap<String, String> {
    env(&[
        ("SLURM_PROCID", rank),
        ("SLURM_NTASKS", "5"),
        ("SLURM_LOCALID", local),
        ("SLURM_JOB_NODELIST", "node[1-2],gpu3"),
        ("SLURM_TASKS_PER_NODE", "2(x2),1"),
    ])
}

#[test]
fn slurm_gives_rank_size_and_every_address() {
    let (launch, addrs) = slurm(&slurm_env("3", "1"), 7000).unwrap();
    assert_eq!(
        launch,
        Launch {
            rank: 3,
            size: 5,
            local_rank: 1
        }
    );
    assert_eq!(
        addrs,
        strings(&[
            "node1:7000",
            "node1:7001",
            "node2:7000",
            "node2:7001",
            "gpu3:7000"
        ])
    );
    // The step's variables win over the job's.
    let mut step = slurm_env("0", "0");
    step.insert("SLURM_STEP_NODELIST".into(), "x[1-5]".into());
    step.insert("SLURM_STEP_TASKS_PER_NODE".into(), "1(x5)".into());
    let (_, addrs) = slurm(&step, 9).unwrap();
    assert_eq!(addrs[4], "x5:9");
}

#[test]
fn slurm_faults_are_named() {
    let err = slurm(&env(&[]), 7000).err_text();
    assert!(err.contains("SLURM_PROCID is not set"), "{err}");
    let err = slurm(&env(&[("SLURM_PROCID", "1")]), 7000).err_text();
    assert!(
        err.contains("SLURM_NTASKS is not") && err.contains("incomplete"),
        "{err}"
    );
    let mut e = slurm_env("7", "0");
    let err = slurm(&e, 7000).err_text();
    assert!(
        err.contains("SLURM_PROCID=7 is not below SLURM_NTASKS=5"),
        "{err}"
    );
    e = slurm_env("1", "0");
    let err = slurm(&e, 7000).err_text();
    assert!(err.contains("distribution=block"), "{err}");
    e.insert("SLURM_JOB_NODELIST".into(), "node[1-2".into());
    let err = slurm(&e, 7000).err_text();
    assert!(
        err.contains("SLURM_JOB_NODELIST") && err.contains("'['"),
        "{err}"
    );
    e = slurm_env("1", "1");
    e.insert("SLURM_NTASKS".into(), "five".into());
    assert!(slurm(&e, 7000).err_text().contains("not a number"));
    e = slurm_env("1", "1");
    assert!(slurm(&e, 65535).err_text().contains("above 65535"));
}

#[test]
fn mpi_gives_rank_size_and_local_rank() {
    let ompi = env(&[
        ("OMPI_COMM_WORLD_RANK", "5"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("PMIX_RANK", "5"),
    ]);
    assert_eq!(
        mpi(&ompi).unwrap(),
        Launch {
            rank: 5,
            size: 8,
            local_rank: 1
        }
    );
    let pmix = env(&[
        ("PMIX_RANK", "2"),
        ("PMIX_SIZE", "3"),
        ("PMIX_LOCAL_RANK", "0"),
    ]);
    assert_eq!(mpi(&pmix).unwrap().rank, 2);
}

#[test]
fn mpi_faults_are_named() {
    let err = mpi(&env(&[])).err_text();
    assert!(err.contains("mpirun"), "{err}");
    let err = mpi(&env(&[("OMPI_COMM_WORLD_RANK", "1")])).err_text();
    assert!(err.contains("OMPI_COMM_WORLD_SIZE is not"), "{err}");
    let err = mpi(&env(&[
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "2"),
    ]))
    .err_text();
    assert!(err.contains("OMPI_COMM_WORLD_LOCAL_RANK is not"), "{err}");
    let err = mpi(&env(&[
        ("OMPI_COMM_WORLD_RANK", "2"),
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
    ]))
    .err_text();
    assert!(err.contains("not below"), "{err}");
    let err = mpi(&env(&[("OMPI_COMM_WORLD_RANK", "1"), ("PMIX_RANK", "2")])).err_text();
    assert!(err.contains("disagree"), "{err}");
}

#[test]
fn k8s_pods_find_each_other_by_the_services_names() {
    let e = env(&[("HOSTNAME", "rdmc-2"), ("RDMC_REPLICAS", "3")]);
    let (launch, addrs) = k8s(&e, &K8sOptions::default(), 7000).unwrap();
    assert_eq!((launch.rank, launch.size), (2, 3));
    assert_eq!(
        addrs,
        strings(&["rdmc-0.rdmc:7000", "rdmc-1.rdmc:7000", "rdmc-2.rdmc:7000"])
    );
    let opts = K8sOptions {
        pod_name: Some("my-set-0".into()),
        replicas: Some(2),
        service: Some("svc".into()),
        namespace: Some("ns".into()),
        template: None,
    };
    let (launch, addrs) = k8s(&env(&[]), &opts, 80).unwrap();
    assert_eq!(launch.rank, 0);
    assert_eq!(addrs[1], "my-set-1.svc.ns.svc.cluster.local:80");
    let local = K8sOptions {
        template: Some("127.0.0.1:{ordinal_port}".into()),
        ..opts.clone()
    };
    let (_, addrs) = k8s(&env(&[]), &local, 9000).unwrap();
    assert_eq!(addrs, strings(&["127.0.0.1:9000", "127.0.0.1:9001"]));
}

#[test]
fn k8s_faults_are_named() {
    let opts = K8sOptions::default();
    assert!(k8s(&env(&[]), &opts, 1).err_text().contains("--pod-name"));
    let err = k8s(&env(&[("HOSTNAME", "web")]), &opts, 1).err_text();
    assert!(err.contains("-<ordinal>"), "{err}");
    let err = k8s(&env(&[("HOSTNAME", "web-1")]), &opts, 1).err_text();
    assert!(err.contains("--replicas"), "{err}");
    let err = k8s(
        &env(&[("HOSTNAME", "web-4"), ("RDMC_REPLICAS", "4")]),
        &opts,
        1,
    )
    .err_text();
    assert!(err.contains("not below"), "{err}");
    let bad = K8sOptions {
        template: Some("{pod}.x".into()),
        ..opts
    };
    let err = k8s(
        &env(&[("HOSTNAME", "web-0"), ("RDMC_REPLICAS", "1")]),
        &bad,
        1,
    )
    .err_text();
    assert!(err.contains("placeholder"), "{err}");
}

/// A hostlist of `prefix[ranges]` items, written as Slurm would compress
/// it, and the hosts it stands for.
fn compressed() -> impl Strategy<Value = (String, Vec<String>)> {
    let item = (
        "[a-z]{1,4}",
        prop::collection::vec((0u32..40, 0u32..5, 1usize..4), 1..4),
    );
    prop::collection::vec(item, 1..4).prop_map(|items| {
        let mut text = Vec::new();
        let mut hosts = Vec::new();
        for (prefix, ranges) in items {
            let parts: Vec<String> = ranges
                .iter()
                .map(|&(lo, len, width)| {
                    let hi = lo + len;
                    for n in lo..=hi {
                        hosts.push(format!("{prefix}{n:0width$}"));
                    }
                    if len == 0 {
                        format!("{lo:0width$}")
                    } else {
                        format!("{lo:0width$}-{hi:0width$}")
                    }
                })
                .collect();
            text.push(format!("{prefix}[{}]", parts.join(",")));
        }
        (text.join(","), hosts)
    })
}

proptest! {
    #[test]
    fn compressed_hostlists_expand_to_their_hosts((text, hosts) in compressed()) {
        prop_assert_eq!(parse_hostlist(&text).unwrap(), hosts);
    }

    #[test]
    fn every_rank_is_placed_once_in_order(tasks in prop::collection::vec(0u32..5, 1..8)) {
        let hosts: Vec<String> = (0..tasks.len()).map(|i| format!("h{i}")).collect();
        let size: u32 = tasks.iter().sum();
        let placed = block_distribution(&hosts, &tasks, size).unwrap();
        prop_assert_eq!(placed.len() as u32, size);
        // Each host's ranks are consecutive, numbered 0.. on the host.
        let mut rank = 0usize;
        for (host, &n) in hosts.iter().zip(&tasks) {
            for local in 0..n {
                prop_assert_eq!(&placed[rank], &(host.clone(), local));
                rank += 1;
            }
        }
        let text: Vec<String> = tasks.iter().map(u32::to_string).collect();
        prop_assert_eq!(parse_tasks_per_node(&text.join(",")).unwrap(), tasks);
    }

    #[test]
    fn any_text_is_hosts_or_a_reason(text in "[a-z0-9\\[\\],-]{0,24}") {
        match parse_hostlist(&text) {
            Ok(hosts) => prop_assert!(!hosts.is_empty() && hosts.iter().all(|h| !h.is_empty())),
            Err(reason) => prop_assert!(!reason.to_string().is_empty()),
        }
    }
}
