//! `rdmc demo` end to end: every receiver's copy, written with `--out`, is
//! byte-identical to what the root sent.

#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;

use std::path::Path;
use std::process::{Command, Output};

use scratch::ScratchDir;

fn demo(out: &Path, args: &[&str]) -> String {
    demo_over("mem", out, args)
}

fn demo_over(transport: &str, out: &Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_rdmc"))
        .args([
            "demo",
            "--transport",
            transport,
            "--algorithm",
            "all",
            "--json",
            "--out",
        ])
        .arg(out)
        .args(args)
        .output()
        .expect("rdmc runs");
    let stdout = String::from_utf8(output.stdout).expect("utf-8 output");
    assert!(
        output.status.success(),
        "rdmc demo {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn check_copies(out: &Path, nodes: usize, expected_len: u64) {
    let sent = std::fs::read(out.join("0.bin")).expect("the root's bytes");
    assert_eq!(sent.len() as u64, expected_len);
    for rank in 1..nodes {
        let got = std::fs::read(out.join(format!("{rank}.bin"))).expect("a receiver's copy");
        assert!(got == sent, "rank {rank}'s copy differs");
    }
}

fn check_reports(stdout: &str, nodes: u64, size: u64, messages: u64) {
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let algorithms: Vec<&str> = lines
        .iter()
        .map(|l| l["algorithm"].as_str().unwrap())
        .collect();
    assert_eq!(
        algorithms,
        ["sequential", "chain", "tree", "binomial-pipeline", "hybrid"]
    );
    for line in &lines {
        assert_eq!(line["nodes"], nodes);
        assert_eq!(line["size"], size);
        assert_eq!(line["messages"], messages);
        assert_eq!(line["verified"], true);
        assert!(line["seconds"].as_f64().unwrap() >= 0.0);
        assert!(line["gbps"].as_f64().is_some());
        assert!(line["block_size"].as_u64().is_some());
    }
}

#[test]
fn thirteen_nodes_odd_size_every_algorithm() {
    let dir = tempdir("odd");
    let out = demo(
        &dir,
        &[
            "--nodes",
            "13",
            "--size",
            "10000019",
            "--block-size",
            "65536",
        ],
    );
    check_reports(&out, 13, 10_000_019, 1);
    check_copies(&dir, 13, 10_000_019);
}

/// `--racks` and `--slow`: the hybrid over three racks dealt out in turn,
/// the binomial pipeline and the hybrid with two slow members; every copy
/// byte-exact. A rack list of the wrong length is refused up front.
#[test]
fn racks_and_slow_members_every_algorithm() {
    let dir = tempdir("racks");
    let out = demo(
        &dir,
        &[
            "--nodes",
            "13",
            "--size",
            "1000003",
            "--block-size",
            "16KiB",
            "--racks",
            "3",
            "--slow",
            "4,7",
        ],
    );
    check_reports(&out, 13, 1_000_003, 1);
    check_copies(&dir, 13, 1_000_003);
    let output = Command::new(env!("CARGO_BIN_EXE_rdmc"))
        .args(["demo", "--nodes", "3", "--size", "10", "--racks", "0,1"])
        .output()
        .expect("rdmc runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("2 racks given for a group of 3 members"),
        "{stderr}"
    );
}

#[test]
fn several_messages_are_concatenated_in_order() {
    let dir = tempdir("five");
    let out = demo(
        &dir,
        &[
            "--nodes",
            "13",
            "--size",
            "100003",
            "--block-size",
            "4KiB",
            "--messages",
            "5",
        ],
    );
    check_reports(&out, 13, 100_003, 5);
    check_copies(&dir, 13, 5 * 100_003);
    // Five different messages, not one repeated.
    let sent = std::fs::read(dir.join("0.bin")).unwrap();
    assert_ne!(sent[..100_003], sent[100_003..200_006]);
}

#[test]
fn one_byte_and_empty_messages() {
    for size in [1u64, 0] {
        let dir = tempdir(&format!("size{size}"));
        let out = demo(
            &dir,
            &[
                "--nodes",
                "13",
                "--size",
                &size.to_string(),
                "--block-size",
                "65536",
            ],
        );
        check_reports(&out, 13, size, 1);
        check_copies(&dir, 13, size);
    }
}

#[test]
fn a_file_is_multicast_as_is() {
    let dir = tempdir("file");
    let source = dir.join("source.dat");
    let bytes: Vec<u8> = (0..300_001u32).map(|i| (i * 7 + i / 255) as u8).collect();
    std::fs::write(&source, &bytes).unwrap();
    let out_dir = dir.join("out");
    let out = demo(
        &out_dir,
        &[
            "--nodes",
            "5",
            "--file",
            source.to_str().unwrap(),
            "--block-size",
            "1000",
        ],
    );
    check_reports(&out, 5, 300_001, 1);
    check_copies(&out_dir, 5, 300_001);
    assert_eq!(std::fs::read(out_dir.join("4.bin")).unwrap(), bytes);
}

#[test]
fn overlapping_groups_all_deliver_and_report_fairness() {
    let dir = tempdir("groups");
    let out = demo(
        &dir,
        &[
            "--nodes",
            "5",
            "--size",
            "50001",
            "--block-size",
            "4KiB",
            "--groups",
            "5",
        ],
    );
    check_reports(&out, 5, 50_001, 1);
    for line in out.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["groups"], 5);
        assert_eq!(v["group_seconds"].as_array().unwrap().len(), 5);
        let fairness = v["fairness"].as_f64().unwrap();
        assert!(fairness > 0.0 && fairness <= 1.0, "{fairness}");
    }
    check_copies(&dir, 5, 50_001);
}

/// `transport` gives every member an identical copy: of one large odd
/// message among `nodes` members, then of `messages` messages of `size`
/// bytes among `members` (with `extra` options).
fn identical_copies_over(transport: &str, nodes: u64, many: (u64, u64, u64), extra: &[&str]) {
    let dir = tempdir(transport);
    let n = nodes.to_string();
    let first = ["--nodes", &n, "--size", "3000017", "--block-size", "64KiB"];
    let out = demo_over(transport, &dir, &first);
    check_reports(&out, nodes, 3_000_017, 1);
    for line in out.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["transport"], transport);
    }
    check_copies(&dir, nodes as usize, 3_000_017);
    let (members, size, messages) = many;
    let dir = tempdir(&format!("{transport}_many"));
    let (m, l, k) = (members.to_string(), size.to_string(), messages.to_string());
    let mut args = vec!["--nodes", &m, "--size", &l, "--block-size", "16KiB"];
    args.extend(["--messages", &k]);
    args.extend_from_slice(extra);
    let out = demo_over(transport, &dir, &args);
    check_reports(&out, members, size, messages);
    check_copies(&dir, members as usize, messages * size);
}

#[test]
fn over_tcp_eight_members_get_identical_copies() {
    identical_copies_over("tcp", 8, (8, 100_000, 20), &[]);
}

/// `rdmc demo` over tcp among three members writing to `out`, with `extra`
/// arguments and the environment variables `envs` set: its output, once
/// it succeeded.
fn demo_of_three(out: &Path, extra: &[&str], envs: &[(&str, &std::ffi::OsStr)]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_rdmc"))
        .args(["demo", "--transport", "tcp", "--nodes", "3"])
        .args(extra)
        .arg("--out")
        .arg(out)
        .envs(envs.iter().copied())
        .output()
        .expect("rdmc runs");
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{err}");
    output
}

/// Logs written to a pipe (here, or `rdmc ... | cat`, or a log file)
/// carry no terminal escape codes.
#[test]
fn logs_to_a_pipe_have_no_escape_codes() {
    let dir = tempdir("logs");
    let output = demo_of_three(
        &dir,
        &["--size", "1000"],
        &[("RUST_LOG", "rdmc=info".as_ref())],
    );
    let logs = String::from_utf8_lossy(&output.stderr);
    assert!(logs.contains("INFO"), "info lines were logged: {logs}");
    assert!(!logs.contains('\x1b'), "an escape code in: {logs:?}");
    // One line per member at the group's creation says what it runs.
    let created: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("group created"))
        .collect();
    assert_eq!(created.len(), 3, "{logs}");
    for line in created {
        for field in [
            "members=0,1,2",
            "algorithm=",
            "block_size=",
            "transport=tcp, authenticated frames",
            "completion=",
        ] {
            assert!(line.contains(field), "{field} in {line}");
        }
    }
}

#[cfg(feature = "ofi")]
#[test]
fn over_ofi_seven_members_get_identical_copies_of_odd_messages() {
    identical_copies_over("ofi", 7, (5, 1, 30), &["--completion", "polling"]);
}

/// `--ofi-addr` reaches the fabric: loopback works, an address this host
/// does not have fails to bind, saying so.
#[cfg(feature = "ofi")]
#[test]
fn over_ofi_the_fabric_binds_to_ofi_addr() {
    let demo = |addr: &str| {
        Command::new(env!("CARGO_BIN_EXE_rdmc"))
            .args([
                "demo",
                "--transport",
                "ofi",
                "--nodes",
                "2",
                "--size",
                "1000",
            ])
            .args(["--ofi-addr", addr])
            .output()
            .unwrap()
    };
    let output = demo("127.0.0.1");
    assert!(output.status.success(), "{output:?}");
    // 192.0.2.1: documentation range, on no interface here.
    let output = demo("192.0.2.1");
    assert!(!output.status.success());
    let text = String::from_utf8_lossy(&output.stdout) + String::from_utf8_lossy(&output.stderr);
    assert!(text.contains("Cannot assign requested address"), "{text}");
}

#[cfg(not(feature = "ofi"))]
#[test]
fn ofi_without_the_feature_fails_with_a_clear_message() {
    let output = Command::new(env!("CARGO_BIN_EXE_rdmc"))
        .args(["demo", "--transport", "ofi", "--nodes", "2", "--size", "10"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let text = String::from_utf8_lossy(&output.stdout) + String::from_utf8_lossy(&output.stderr);
    assert!(text.contains("--features ofi"), "{text}");
    let output = Command::new(env!("CARGO_BIN_EXE_rdmc"))
        .args([
            "member",
            "--transport",
            "ofi",
            "--members",
            "/dev/null",
            "--rank",
            "0",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
}

#[test]
fn bad_arguments_fail_with_a_message() {
    for args in [
        &["demo", "--block-size", "0", "--size", "10"][..],
        &["demo", "--size", "12 parsecs"],
        &["demo", "--algorithm", "gossip"],
        &["demo", "--nodes", "0"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_rdmc"))
            .args(args)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?} should fail");
        assert!(!output.stderr.is_empty(), "{args:?} should say why");
    }
}

/// A fresh directory under the target directory, removed first if present,
/// and again when the test passes.
fn tempdir(name: &str) -> ScratchDir {
    ScratchDir::new(&format!("cli_demo_{name}"))
}

/// `--baseline` first warms rdmc up with an untimed round of the messages:
/// what `--out` holds and the report counts are still exactly the timed
/// messages, once each, on `mem` and `tcp`, in the adaptive completion mode.
#[test]
fn the_baseline_warm_up_is_neither_written_nor_counted() {
    for transport in ["mem", "tcp"] {
        let dir = tempdir(&format!("warm_{transport}"));
        let out = demo_over(
            transport,
            &dir,
            &[
                "--nodes",
                "4",
                "--size",
                "300007",
                "--block-size",
                "64KiB",
                "--messages",
                "3",
                "--completion",
                "adaptive",
                "--baseline",
            ],
        );
        check_reports(&out, 4, 300_007, 3);
        check_copies(&dir, 4, 3 * 300_007);
        for line in out.lines() {
            let report: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(report["baseline_seconds"].as_f64().is_some(), "{line}");
        }
    }
}

/// `RDMC_TRACE=FILE`: Chrome trace-event JSON (what Perfetto opens), one
/// `rdmc_message` slice per message and member, from its start to its
/// completion there.
#[test]
fn a_trace_of_a_multicast_opens_in_a_trace_viewer() {
    let dir = tempdir("trace");
    let trace = dir.join("trace.json");
    let args = ["--size", "100000", "--messages", "2"];
    demo_of_three(&dir.join("out"), &args, &[("RDMC_TRACE", trace.as_ref())]);
    let events: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&trace).unwrap()).expect("a JSON array");
    let slices = |phase: &str| {
        let mut seqs: Vec<String> = events
            .iter()
            .filter(|e| e["name"] == "rdmc_message" && e["ph"] == phase)
            .map(|e| e["args"]["seq"].as_str().unwrap().to_owned())
            .collect();
        seqs.sort();
        seqs
    };
    // Two messages, at each of three members: begun and ended.
    let expected = ["0", "0", "0", "1", "1", "1"];
    assert_eq!(slices("b"), expected);
    assert_eq!(slices("e"), expected);
}

/// `RDMC_TRACE` holds the block events `rdmc-bench/scripts/timeline.py`
/// reads, their fields as args (strings), at trace level only in the trace:
/// the log on stderr keeps `RUST_LOG`'s level. Its "trace clock" event puts
/// the trace's `ts` (from the process's start) on the wall clock.
#[test]
fn a_trace_holds_the_block_events_timeline_py_reads() {
    let dir = tempdir("trace_blocks");
    let trace = dir.join("trace.json");
    let args = [
        "--size",
        "100000",
        "--block-size",
        "16KiB",
        "--messages",
        "2",
    ];
    let envs = [
        ("RDMC_TRACE", trace.as_os_str()),
        ("RUST_LOG", "rdmc=debug".as_ref()),
    ];
    let output = demo_of_three(&dir.join("out"), &args, &envs);
    let logs = String::from_utf8_lossy(&output.stderr);
    assert!(logs.contains("DEBUG"), "debug lines were logged: {logs}");
    assert!(!logs.contains("TRACE"), "trace lines on stderr: {logs}");
    let events: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&trace).unwrap()).expect("a JSON array");
    // The args of every instant event with message `message`, each checked
    // to hold `fields` as whole numbers.
    let with = |message: &str, fields: &[&str]| -> Vec<serde_json::Value> {
        let found: Vec<_> = events
            .iter()
            .filter(|e| e["ph"] == "i" && e["args"]["message"] == message)
            .map(|e| {
                assert!(e["ts"].as_f64().is_some(), "{e}");
                e["args"].clone()
            })
            .collect();
        for args in &found {
            for field in fields {
                let value = args[field]
                    .as_str()
                    .unwrap_or_else(|| panic!("{message}: {args}"));
                assert!(value.parse::<u64>().is_ok(), "{message}: {args}");
            }
        }
        found
    };
    let clock = with("trace clock", &["unix_us"]);
    assert_eq!(clock.len(), 1);
    let groups = with("group created", &["rank"]);
    assert_eq!(groups.len(), 3);
    assert!(groups.iter().all(|g| g["members"] == "0,1,2"), "{groups:?}");
    assert_eq!(with("message started", &["rank", "seq"]).len(), 2);
    let sends = with("block send", &["rank", "seq", "block", "to"]).len();
    let completes = with("block send complete", &["rank", "to"]).len();
    let arriving = with("block arriving", &["from", "to"]).len();
    let received = with("block received", &["rank", "seq", "block", "from"]).len()
        + with("first block received", &["rank", "seq", "block", "from"]).len();
    assert!(!with("ready-for-block", &["rank", "from"]).is_empty());
    // 7 blocks to each of two receivers, per message.
    assert_eq!(received, 2 * 2 * 7);
    assert_eq!((sends, completes, arriving), (received, received, received));
}
