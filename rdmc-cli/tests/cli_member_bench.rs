//! `rdmc member --bench`, the mode the benchmark harness (rdmc-bench)
//! drives, across real processes on loopback: commands on the root's
//! stdin, checked deliveries with their clock and timings, errors as
//! events, and `--workload` runs of overlapping groups.

mod bench_members;
mod child;
#[allow(dead_code)]
mod cluster_ports;
#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;

use std::io::Write;
use std::process::Child;
use std::time::Duration;

use serde_json::Value;

use bench_members::{events, members_file, of_kind};

/// `rdmc member` running the workload file `workload` on its own.
fn workload_member(workload: &std::path::Path) -> [&str; 5] {
    let path = workload.to_str().unwrap();
    ["member", "--json", "--bench", "--workload", path]
}

/// `rdmc ARGS` as rank `rank` of `members`.
fn spawn(args: &[&str], members: &std::path::Path, rank: usize) -> Child {
    bench_members::spawn(env!("CARGO_BIN_EXE_rdmc"), args, members, rank)
}

#[test]
fn bench_members_report_checked_deliveries_with_clock_and_timings() {
    let members = members_file("members", 3);
    let common = [
        "member",
        "--json",
        "--bench",
        "--max-size",
        "300000",
        "--block-size",
        "64KiB",
        "--algorithm",
        "binomial-pipeline",
    ];
    let receivers: Vec<Child> = (1..3).map(|r| spawn(&common, &members, r)).collect();
    let mut root = spawn(&common, &members, 0);
    root.stdin
        .take()
        .unwrap()
        .write_all(b"send 300000 1\nsend 1 3\n\nclose\n")
        .unwrap();
    let (ok, root_events) = events(root, Duration::from_secs(60));
    assert!(ok, "root failed: {root_events:?}");
    let sent = of_kind(&root_events, "sent");
    assert_eq!(sent.len(), 2, "{root_events:?}");
    assert_eq!(
        (sent[0]["seq"].as_u64(), sent[0]["count"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(
        (sent[1]["seq"].as_u64(), sent[1]["count"].as_u64()),
        (Some(1), Some(3))
    );
    assert!(sent[0]["setup_us"].as_f64().is_some());
    // Printed once every receiver's application took the messages: after
    // they were locally complete.
    for s in &sent {
        assert_eq!(s["acknowledged"], true, "{s:?}");
        assert!(
            s["acknowledged_t"].as_u64() >= s["done_t"].as_u64(),
            "{s:?}"
        );
    }
    assert_eq!(of_kind(&root_events, "closed").len(), 1);
    for receiver in receivers {
        let (ok, ev) = events(receiver, Duration::from_secs(60));
        assert!(ok, "receiver failed: {ev:?}");
        let delivered = of_kind(&ev, "delivered");
        // One event per run of messages ready at once: the last message's
        // always, in order, each at its own size.
        let seqs: Vec<u64> = delivered.iter().filter_map(|d| d["seq"].as_u64()).collect();
        assert_eq!(seqs.last(), Some(&3), "{ev:?}");
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
        for d in &delivered {
            let expected = if d["seq"] == 0 { 300_000 } else { 1 };
            assert_eq!(d["size"].as_u64(), Some(expected), "{d:?}");
        }
        // One monotonic clock: a delivery comes after its send started,
        // and before the root heard that every application has it.
        let t = delivered[0]["t"].as_u64().unwrap();
        assert!(t > sent[0]["t"].as_u64().unwrap());
        assert!(t <= sent[0]["acknowledged_t"].as_u64().unwrap());
        let last = delivered.last().unwrap()["t"].as_u64().unwrap();
        assert!(last <= sent[1]["acknowledged_t"].as_u64().unwrap());
        assert!(delivered[0]["started_t"].as_u64().unwrap() <= t);
        let total = delivered[0]["total_us"].as_f64().unwrap();
        let parts: f64 = ["setup_us", "copy_us", "transferring_us", "waiting_us"]
            .iter()
            .map(|k| delivered[0][k].as_f64().unwrap())
            .sum();
        assert!(parts <= total + 1.0, "{:?}", delivered[0]);
        assert_eq!(of_kind(&ev, "closed").len(), 1);
    }
}

#[test]
fn a_bad_command_fails_the_bench_root_with_an_error_event() {
    let members = members_file("bad_command", 2);
    let common = ["member", "--json", "--bench", "--max-size", "1000"];
    let receiver = spawn(&common, &members, 1);
    let mut root = spawn(&common, &members, 0);
    root.stdin
        .take()
        .unwrap()
        .write_all(b"send 5000 1\n")
        .unwrap();
    let (ok, ev) = events(root, Duration::from_secs(60));
    assert!(!ok, "a size above --max-size must fail: {ev:?}");
    let error = of_kind(&ev, "error");
    assert_eq!(error.len(), 1);
    assert!(error[0]["error"].as_str().unwrap().contains("max-size"));
    // The receiver sees the root fail rather than hang.
    let (ok, _) = events(receiver, Duration::from_secs(60));
    assert!(!ok);
}

/// Members running a workload of overlapping groups on their own: every
/// write is acknowledged once by its root, and delivered once, at its size,
/// by each other member of its group, in the group's order.
#[test]
fn workload_members_run_overlapping_groups_on_their_own() {
    run_overlapping_groups("workload", &[]);
}

/// The same with every write persisted at each replica before its root
/// acknowledges it: each replica's copies, checked, are removed after.
#[test]
fn workload_members_persist_each_write_before_it_is_acknowledged() {
    let dir = scratch::ScratchDir::new("workload-persist");
    let path = dir.to_str().unwrap();
    run_overlapping_groups("workload_persist", &["--persist-in", path]);
    for rank in 0..4 {
        let kept = dir.join(format!("rank-{rank}"));
        let left: Vec<_> = walk(&kept);
        assert!(left.is_empty(), "rank {rank} kept {left:?}");
        assert!(kept.is_dir(), "rank {rank} made no directory");
    }
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

fn run_overlapping_groups(name: &str, extra: &[&str]) {
    let members = members_file(name, 4);
    let workload = members.with_file_name("workload");
    // Four 3-member groups, rotating roots, two writes in flight per root.
    let groups = [[0u64, 1, 2], [1, 2, 3], [2, 3, 0], [3, 0, 1]];
    let writes = [
        (0usize, 300_000u64),
        (1, 2_000),
        (2, 1),
        (3, 700_000),
        (0, 5),
        (1, 64_000),
        (0, 100_000),
    ];
    let mut text = String::from("window 2\n");
    for (id, g) in groups.iter().enumerate() {
        text.push_str(&format!("group {id} {} {} {}\n", g[0], g[1], g[2]));
    }
    for (g, size) in writes {
        text.push_str(&format!("write {g} {size}\n"));
    }
    std::fs::write(&workload, text).unwrap();
    let common = [&workload_member(&workload)[..], extra].concat();
    let mut children: Vec<Child> = (0..4).rev().map(|r| spawn(&common, &members, r)).collect();
    children.reverse();
    drop(children[0].stdin.take());
    let all: Vec<Vec<Value>> = children
        .into_iter()
        .map(|c| {
            let (ok, ev) = events(c, Duration::from_secs(60));
            assert!(ok, "a member failed: {ev:?}");
            assert_eq!(of_kind(&ev, "closed").len(), 1, "{ev:?}");
            ev
        })
        .collect();
    for (i, &(g, size)) in writes.iter().enumerate() {
        // The write's position among its group's writes is its seq.
        let seq = writes[..i].iter().filter(|w| w.0 == g).count() as u64;
        let root = groups[g][0] as usize;
        let acks: Vec<_> = of_kind(&all[root], "written")
            .into_iter()
            .filter(|e| e["write"] == i as u64)
            .collect();
        assert_eq!(acks.len(), 1, "write {i}: {:?}", all[root]);
        assert_eq!(acks[0]["group"], g as u64);
        assert_eq!(acks[0]["seq"], seq);
        assert_eq!(acks[0]["size"], size);
        assert!(acks[0]["acked_t"].as_u64() >= acks[0]["t"].as_u64());
        for &replica in &groups[g][1..] {
            let got: Vec<_> = of_kind(&all[replica as usize], "delivered")
                .into_iter()
                .filter(|e| e["group"] == g as u64 && e["seq"] == seq)
                .collect();
            assert_eq!(got.len(), 1, "write {i} at replica {replica}");
            assert_eq!(got[0]["size"], size);
            // Acknowledged only once the replica had it.
            assert!(got[0]["t"].as_u64() <= acks[0]["acked_t"].as_u64());
        }
    }
    // Nothing delivered that was not written: 2 replicas per write.
    let deliveries: usize = all.iter().map(|ev| of_kind(ev, "delivered").len()).sum();
    assert_eq!(deliveries, 2 * writes.len());
}

#[test]
fn a_bad_workload_is_refused_before_anyone_is_contacted() {
    let members = members_file("bad_workload", 2);
    let workload = members.with_file_name("workload");
    std::fs::write(&workload, "group 0 0 1\nwrite 3 10\n").unwrap();
    let common = workload_member(&workload);
    let (ok, ev) = events(spawn(&common, &members, 1), Duration::from_secs(60));
    assert!(!ok);
    let error = of_kind(&ev, "error");
    assert_eq!(error.len(), 1, "{ev:?}");
    let text = error[0]["error"].as_str().unwrap();
    assert!(
        text.ends_with("workload line 2: write to group 3, not defined before"),
        "{text}"
    );
}
