//! Processes driven like `rdmc member --bench` (the benchmark harness's
//! members and its `tcp-copy` baseline) on loopback: a members file with
//! the members' ports held, one process per rank printing JSON lines, and
//! the events each printed. rdmc-bench's tests include this file too.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::child::wait_within;
use crate::cluster_ports::ClusterPorts;
use crate::scratch::ScratchDir;

/// A members file for `n` members in the test's own scratch directory (a
/// key file `key` beside it), with the members' ports held (see
/// [`ClusterPorts`]); dereferences to the members file's path.
pub struct Members {
    path: PathBuf,
    _dir: ScratchDir,
    _ports: ClusterPorts,
}

impl std::ops::Deref for Members {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

/// [`Members`] for `n` members, in a directory named after the test.
pub fn members_file(name: &str, n: usize) -> Members {
    let ports = ClusterPorts::new(n);
    let dir = ScratchDir::new(&format!("cli_bench_{name}"));
    let path = dir.join("members");
    ports.write_members_file(&path);
    rdmc_cli::keygen::write_secret(&dir.join("key"), b"the bench tests' cluster key").unwrap();
    Members {
        path,
        _dir: dir,
        _ports: ports,
    }
}

/// `program ARGS --members FILE --rank RANK` (with the key file for
/// `member`), the root's stdin piped, stdout piped, stderr dropped.
pub fn spawn(program: &str, args: &[&str], members: &Path, rank: usize) -> Child {
    let mut command = Command::new(program);
    command
        .args(args)
        .arg("--members")
        .arg(members)
        .args(["--rank", &rank.to_string()]);
    if args[0] == "member" {
        command.arg("--key-file").arg(members.with_file_name("key"));
    }
    command
        .stdin(if rank == 0 {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the program runs")
}

/// Every JSON line the child prints until it exits (killed after `limit`),
/// and whether it exited successfully.
pub fn events(mut child: Child, limit: Duration) -> (bool, Vec<Value>) {
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(&l.unwrap()).expect("a JSON line"))
            .collect::<Vec<_>>()
    });
    let status = wait_within(&mut child, limit);
    (status.success(), reader.join().unwrap())
}

/// The events of kind `kind` (their `event` field).
pub fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == kind).collect()
}
