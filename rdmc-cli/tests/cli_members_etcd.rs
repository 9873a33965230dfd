//! `rdmc member --members-from etcd` (the `etcd` feature) against a real
//! etcd server on loopback: four members register, find each other and
//! complete a multicast; a member killed with SIGKILL is reported gone by
//! the others within its lease's time to live (and a margin), and once
//! started again, reported back. An unreachable etcd is refused at once.
//! Skipped, saying so, where `etcd` is not installed, unless
//! RDMC_REQUIRE_ETCD is set.
#![cfg(feature = "etcd")]

mod child;
#[allow(dead_code)]
mod cluster_ports;
#[allow(dead_code)]
mod members_from;
#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use members_from::{Lines, Scratch, finish, have};

/// The members' lease time to live, in seconds.
const TTL: u64 = 2;
/// How much later than the lease's expiry a departure may be reported
/// (etcd checks for expired leases twice a second; the machine is shared).
const MARGIN: Duration = Duration::from_secs(4);

/// An etcd server on 127.0.0.1 with its own data directory and ports,
/// killed (by its PID) when dropped.
struct Etcd {
    child: Child,
    url: String,
}

impl Etcd {
    fn start(dir: &std::path::Path, client: u16, peer: u16) -> Self {
        let (client_url, peer_url) = (
            format!("http://127.0.0.1:{client}"),
            format!("http://127.0.0.1:{peer}"),
        );
        let log = std::fs::File::create(dir.join("etcd.log")).unwrap();
        let child = Command::new("etcd")
            .arg("--data-dir")
            .arg(dir.join("etcd-data"))
            .args(["--name", "test", "--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("test={peer_url}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let etcd = Etcd {
            child,
            url: client_url,
        };
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", client)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "etcd did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        etcd
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn members_register_multicast_and_see_a_killed_member_go_and_come_back() {
    if !have("etcd", "RDMC_REQUIRE_ETCD") {
        return;
    }
    let scratch = Scratch::new("etcd", 6);
    let etcd = Etcd::start(&scratch.dir, scratch.base + 4, scratch.base + 5);
    let (base, ttl) = (scratch.base.to_string(), TTL.to_string());
    let common = [
        "--members-from",
        "etcd",
        "--etcd",
        &etcd.url,
        "--size",
        "4",
        "--base-port",
        &base,
        "--lease-ttl",
        &ttl,
        "--cluster",
        "test",
        "--json",
    ];
    let file = scratch.path("f");
    let spawn = |rank: usize, out: &str, extra: &[&str]| -> Child {
        let mut command = scratch.member(out, &common);
        command.args(["--rank", &rank.to_string()]).args(extra);
        if rank == 0 {
            command.arg(&file);
        }
        command.spawn().unwrap()
    };
    let lines = Lines::new();
    let mut members: Vec<Child> = (0..4)
        .map(|rank| spawn(rank, &rank.to_string(), &["--linger", "30"]))
        .collect();
    for (rank, child) in members.iter_mut().enumerate() {
        lines.follow(rank, child);
    }
    // Once every member has closed the group, the multicast is complete.
    lines.expect(
        &[0, 1, 2, 3],
        &[r#""event":"closed""#],
        Duration::from_secs(60),
    );
    scratch.check_copies(1..4);

    // A second process claiming live member 1's rank is refused, naming it.
    let mut impostor = spawn(1, "imp", &["--connect-timeout", "3"]);
    let (status, err) = finish(&mut impostor, Duration::from_secs(30));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("rank 1 is held in etcd") && err.contains("another live member"),
        "{err}"
    );

    members[2].kill().unwrap();
    let _ = members[2].wait();
    let limit = Duration::from_secs(TTL) + MARGIN;
    lines.expect(
        &[0, 1, 3],
        &[r#""event":"member_left""#, r#""member":2"#],
        limit,
    );

    // Started again with the same rank: it registers again and its node
    // is let back in (the multicast it was part of is over: it ends there).
    let mut again = spawn(2, "2b", &["--connect-timeout", "10"]);
    lines.follow(2, &mut again);
    lines.expect(
        &[0, 1, 3],
        &[r#""event":"member_back""#, r#""member":2"#],
        Duration::from_secs(15),
    );
    let _ = again.kill();
    let _ = again.wait();

    for rank in [0, 1, 3] {
        let (status, err) = finish(&mut members[rank], Duration::from_secs(60));
        assert!(status.success(), "rank {rank} failed: {err}");
    }
}

#[test]
fn an_unreachable_etcd_is_named_at_once() {
    // A free port: no etcd there.
    let scratch = Scratch::new("etcd_unreachable", 1);
    let url = format!("http://127.0.0.1:{}", scratch.base);
    let started = Instant::now();
    let mut child = scratch
        .member(
            "1",
            &[
                "--members-from",
                "etcd",
                "--etcd",
                &url,
                "--size",
                "2",
                "--rank",
                "1",
            ],
        )
        .spawn()
        .unwrap();
    let (status, err) = finish(&mut child, Duration::from_secs(40));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(35),
        "bounded by the connect timeout"
    );
    assert!(
        err.contains(&format!("cannot reach etcd at {url}")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
}
