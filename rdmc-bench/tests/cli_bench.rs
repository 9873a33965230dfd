//! `rdmc-bench`'s own processes and command line: the `tcp-copy` unicast
//! baseline across real processes on loopback, and a run refused before it
//! needs root (the run itself needs root and network namespaces, so it is
//! not run here; the members it drives are `rdmc member --bench`, tested in
//! rdmc-cli's `cli_member_bench`).

#[path = "../../rdmc-cli/tests/bench_members/mod.rs"]
mod bench_members;
#[path = "../../rdmc-cli/tests/child/mod.rs"]
mod child;
// Not every helper of the shared module is used here.
#[allow(dead_code)]
#[path = "../../rdmc-cli/tests/cluster_ports/mod.rs"]
mod cluster_ports;
#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;

use std::io::Write;
use std::process::Command;
use std::time::Duration;

use bench_members::{events, members_file, of_kind, spawn};
use scratch::ScratchDir;

#[test]
fn tcp_copy_moves_and_checks_the_same_payload() {
    let members = members_file("tcp_copy", 2);
    let common = ["tcp-copy", "--max-size", "1MiB"];
    let receiver = spawn(env!("CARGO_BIN_EXE_rdmc-bench"), &common, &members, 1);
    let mut sender = spawn(env!("CARGO_BIN_EXE_rdmc-bench"), &common, &members, 0);
    sender
        .stdin
        .take()
        .unwrap()
        .write_all(b"send 1048576 2\nsend 10 1\nclose\n")
        .unwrap();
    let (ok, sent_events) = events(sender, Duration::from_secs(60));
    assert!(ok, "{sent_events:?}");
    assert_eq!(of_kind(&sent_events, "sent").len(), 2);
    let (ok, ev) = events(receiver, Duration::from_secs(60));
    assert!(ok, "{ev:?}");
    let sizes: Vec<u64> = of_kind(&ev, "delivered")
        .iter()
        .filter_map(|d| d["size"].as_u64())
        .collect();
    assert_eq!(sizes, [1 << 20, 1 << 20, 10]);
}

/// `rdmc-bench --algorithms` naming an algorithm none of the run's
/// experiments runs fails with that error before it needs root or a lab
/// (`--scripts` points nowhere, so a regression fails instead of starting
/// one).
#[test]
fn bench_refuses_an_algorithm_its_experiments_do_not_run() {
    let dir = ScratchDir::new("cli_bench_algorithms");
    let output = Command::new(env!("CARGO_BIN_EXE_rdmc-bench"))
        .args(["--only", "latency", "--algorithms", "hybrid"])
        .arg("--scripts")
        .arg(dir.join("no-scripts"))
        .arg("--out")
        .arg(dir.as_os_str())
        .output()
        .expect("rdmc-bench runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "error: --algorithms hybrid: no experiment of this run runs it \
             (only slow-host, racks do)"
        ),
        "{stderr}"
    );
}
