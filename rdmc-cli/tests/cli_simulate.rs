//! Runs the built `rdmc` binary: `rdmc simulate --json` lines, their
//! agreement with closed forms and with each other, determinism, the
//! table, the plots, and refused arguments.

use std::process::{Command, Output};

use serde_json::Value;

fn rdmc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdmc"))
        .args(args)
        .output()
        .expect("run rdmc")
}

fn json_lines(args: &[&str]) -> (Vec<Value>, String) {
    let out = rdmc(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let values = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (values, stdout)
}

#[test]
fn json_has_one_line_per_algorithm_and_group_size() {
    let args = [
        "simulate",
        "--nodes",
        "2,5..8",
        "--size",
        "4MiB",
        "--block-size",
        "256KiB",
        "--json",
    ];
    let (lines, stdout) = json_lines(&args);
    assert_eq!(lines.len(), rdmc::Algorithm::ALL.len() * 3, "{stdout}");
    let mut seen = Vec::new();
    for line in &lines {
        let algorithm = line["algorithm"].as_str().unwrap();
        let nodes = line["nodes"].as_u64().unwrap();
        seen.push((algorithm.to_owned(), nodes));
        let completed: Vec<f64> = line["completed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(completed.len() as u64, nodes - 1);
        let max = completed.iter().copied().fold(0.0, f64::max);
        let min = completed.iter().copied().fold(f64::INFINITY, f64::min);
        assert_eq!(line["max"].as_f64().unwrap(), max);
        assert_eq!(line["min"].as_f64().unwrap(), min);
        let median = line["median"].as_f64().unwrap();
        assert!(min <= median && median <= max);
        assert_eq!(line["block_size"], 256 << 10);
        assert_eq!(line["blocks"], 16);
        // The lab's defaults: 250 Mbit/s, 50 µs.
        assert_eq!(line["rate_bps"].as_f64().unwrap(), 250e6);
        assert_eq!(line["latency_s"].as_f64().unwrap(), 50e-6);
        let unicast = line["unicast"].as_f64().unwrap();
        assert_eq!(unicast, (4u64 << 20) as f64 * 8.0 / 250e6 + 50e-6);
        let ratio = line["ratio_to_unicast"].as_f64().unwrap();
        assert!((ratio - max / unicast).abs() < 1e-12);
        // Nobody beats one unicast. Sequential: the root streams receiver
        // r's k blocks after r − 1 others; each costs k block times plus
        // the first block's handshake (it arrives after L, the receives
        // for the rest are announced after another L), and the last block
        // arrives L after it left: r·(k·δ + 2L) + L = r·(unicast + L) + L.
        assert!(ratio >= 1.0, "{line}");
        if algorithm == "sequential" {
            let n = nodes as f64 - 1.0;
            let want = n * (unicast + 50e-6) + 50e-6;
            assert!((max - want).abs() < 1e-9, "{max} vs {want}");
        }
    }
    for algorithm in rdmc::Algorithm::ALL.map(|a| a.name()) {
        for nodes in [2, 5, 8] {
            assert!(seen.contains(&(algorithm.to_owned(), nodes)), "{seen:?}");
        }
    }
    // The same command gives the same bytes, on one thread or several.
    let (_, again) = json_lines(&args);
    assert_eq!(stdout, again);
    let one_thread = [&args[..], &["--jobs", "1"]].concat();
    let (_, again) = json_lines(&one_thread);
    assert_eq!(stdout, again);
    let three = [&args[..], &["--jobs", "3"]].concat();
    let (_, again) = json_lines(&three);
    assert_eq!(stdout, again);
}

#[test]
fn slow_hosts_racks_and_jitter_are_taken_and_reported() {
    let args = [
        "simulate",
        "--nodes",
        "8",
        "--size",
        "2MiB",
        "--algorithm",
        "chain",
        "--rate",
        "1gbit",
        "--latency",
        "10us",
        "--slow",
        "3=2",
        "--racks",
        "2",
        "--uplink",
        "500mbit",
        "--placement",
        "interleaved",
        "--jitter",
        "20us",
        "--seed",
        "9",
        "--json",
    ];
    let (lines, stdout) = json_lines(&args);
    assert_eq!(lines.len(), 1);
    let line = &lines[0];
    assert_eq!(line["slow"][0]["host"], 3);
    assert_eq!(line["racks"]["placement"], "interleaved");
    assert_eq!(line["seed"], 9);
    // An interleaved chain crosses the half-rate uplink at every hop, and
    // host 3 runs at half rate: at least twice the unicast.
    assert!(line["ratio_to_unicast"].as_f64().unwrap() >= 2.0, "{line}");
    let (_, again) = json_lines(&args);
    assert_eq!(stdout, again);
    let mut other_seed = args.to_vec();
    let seed = other_seed.len() - 2;
    other_seed[seed] = "10";
    let (_, other) = json_lines(&other_seed);
    assert_ne!(stdout, other);
}

#[test]
fn table_and_plots() {
    let dir = std::env::temp_dir().join(format!("rdmc-simulate-{}", std::process::id()));
    let dir_arg = dir.to_str().unwrap();
    let out = rdmc(&[
        "simulate",
        "--nodes",
        "2..16",
        "--size",
        "1MiB",
        "--algorithm",
        "chain,binomial-pipeline",
        "--plot",
        dir_arg,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    // A title, a header, 2 algorithms × 4 sizes.
    assert_eq!(stdout.lines().count(), 2 + 8, "{stdout}");
    assert!(stdout.contains("binomial-pipeline      16"), "{stdout}");
    for file in [
        "latency_1MiB.svg",
        "ratio_1MiB.svg",
        "summary.md",
        "results.csv",
    ] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(text.len() > 100, "{file}");
    }
    let svg = std::fs::read_to_string(dir.join("ratio_1MiB.svg")).unwrap();
    assert!(svg.contains("binomial-pipeline") && svg.contains("chain"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_arguments_are_refused_with_a_reason() {
    for (args, want) in [
        (
            &["simulate", "--nodes", "4", "--slow", "7=2"][..],
            "host 7 does not exist",
        ),
        (&["simulate", "--nodes", "0"], "at least 1 member"),
        (&["simulate", "--rate", "fast"], "not a rate"),
        (&["simulate", "--latency", "5"], "give a unit"),
        (&["simulate", "--algorithm", "best"], "unknown algorithm"),
        (&["simulate", "--ready-window", "0"], "ready window"),
        (&["simulate", "--uplink", "1gbit"], "--racks"),
    ] {
        let out = rdmc(args);
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

/// The two-rack case in simulation: 16 hosts in two racks joined by
/// uplinks at ¼ of a host's rate, members listed interleaved across the
/// racks. The hybrid, told the racks, sends each block across once: within
/// 1.05× of the uplink bound (4 unicasts), and at least twice as fast as
/// the flat binomial pipeline, which crosses the uplink with most blocks
/// several times.
#[test]
fn the_hybrid_told_the_racks_crosses_the_uplink_once() {
    let args = [
        "simulate",
        "--nodes",
        "16",
        "--size",
        "64MiB",
        "--algorithm",
        "binomial-pipeline,hybrid",
        "--racks",
        "2",
        "--uplink",
        "62500kbit",
        "--placement",
        "interleaved",
        "--json",
    ];
    let (lines, stdout) = json_lines(&args);
    let ratio = |name: &str| {
        lines
            .iter()
            .find(|l| l["algorithm"] == name)
            .unwrap_or_else(|| panic!("no {name} line: {stdout}"))["ratio_to_unicast"]
            .as_f64()
            .unwrap()
    };
    let (hybrid, flat) = (ratio("hybrid"), ratio("binomial-pipeline"));
    assert!((4.0..=4.2).contains(&hybrid), "hybrid {hybrid}× unicast");
    assert!(
        flat >= 2.0 * hybrid,
        "flat {flat}× against hybrid {hybrid}×"
    );
}
