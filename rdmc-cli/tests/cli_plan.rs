//! Runs the built `rdmc` binary: `rdmc plan --json` parsed back into a
//! [`Plan`] and verified, the table output, and refused arguments. The
//! exhaustive sweep of sizes runs in process (`src/plan.rs`'s tests).

use std::process::{Command, Output};

use rdmc::schedule::{Algorithm, Plan};

fn rdmc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdmc"))
        .args(args)
        .output()
        .expect("run rdmc")
}

/// `rdmc plan --json` for (algorithm, n, k): exactly one JSON object with
/// the documented keys, equal to the library's plan (which the in-process
/// sweep verifies for every size).
fn check(algorithm: Algorithm, n: usize, k: usize) {
    let args = format!("plan --algorithm {algorithm} --nodes {n} --blocks {k} --json");
    let out = rdmc(&args.split(' ').collect::<Vec<_>>());
    assert!(
        out.status.success(),
        "{args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let value: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let mut keys: Vec<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["algorithm", "blocks", "nodes", "steps", "transfers"]);
    let plan: Plan = serde_json::from_value(value).unwrap();
    assert_eq!(plan, Plan::new(algorithm, n, k).unwrap(), "{args}");
}

/// The binary's JSON for one case per algorithm, at awkward sizes (the full
/// sweep runs in process, in the crate's unit tests).
#[test]
fn json_plans() {
    for algorithm in Algorithm::ALL {
        check(algorithm, 13, 7);
    }
    check(Algorithm::BinomialPipeline, 1, 1);
    check(Algorithm::BinomialPipeline, 64, 16);
}

#[test]
fn table_output() {
    let out = rdmc(&["plan", "-a", "binomial-pipeline", "-n", "3", "-b", "2"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "binomial-pipeline multicast: 3 nodes, 2 blocks, 3 steps, 4 transfers\n\
         step 0: 0→1:b0\n\
         step 1: 0→2:b1\n\
         step 2: 1→2:b0 2→1:b1\n"
    );
}

#[test]
fn invalid_input_fails() {
    for args in [
        "plan --algorithm chain --nodes 0 --blocks 2",
        "plan --algorithm chain --nodes 3 --blocks 0",
        "plan --algorithm gossip --nodes 3 --blocks 2",
        "plan --algorithm chain --nodes -1 --blocks 2",
        "plan --algorithm chain --nodes 3",
        "plan -a sequential -n 100000000 -b 100000000",
        "frobnicate",
    ] {
        let out = rdmc(&args.split(' ').collect::<Vec<_>>());
        assert!(!out.status.success(), "{args} succeeded");
        assert!(out.stdout.is_empty(), "{args} printed to stdout");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains("error"), "{args}: {err}");
    }
    let err =
        String::from_utf8(rdmc(&["plan", "-a", "gossip", "-n", "3", "-b", "2"]).stderr).unwrap();
    assert!(err.contains("unknown algorithm \"gossip\""), "{err}");
}

/// `RDMC_TRACE` that names no file the command can write is a one-line
/// error before anything runs (it was a panic); an empty one is no trace.
#[test]
fn an_unwritable_trace_file_is_an_error_and_an_empty_one_none() {
    let args = [
        "plan",
        "--algorithm",
        "chain",
        "--nodes",
        "3",
        "--blocks",
        "2",
    ];
    let missing =
        std::env::temp_dir().join(format!("rdmc-no-such-dir-{}/t.json", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_rdmc"))
        .args(args)
        .env("RDMC_TRACE", &missing)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("RDMC_TRACE") && err.contains("t.json"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_rdmc"))
        .args(args)
        .env("RDMC_TRACE", "")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
