//! What the `--members-from` tests share: a scratch directory with a key,
//! a file to send and a block of consecutive free loopback ports, member
//! processes whose output lines are read as they come, and the
//! skip-or-require rule for tools the machine may lack.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::cluster_ports::ClusterPorts;
use crate::scratch::ScratchDir;

/// A scratch directory with a cluster key (`key`) and a file to send
/// (`f`), and a block of consecutive loopback ports from `base`.
pub struct Scratch {
    pub dir: ScratchDir,
    pub content: Vec<u8>,
    pub base: u16,
    _ports: ClusterPorts,
}

impl Scratch {
    pub fn new(test: &str, ports: u16) -> Self {
        let ports = ClusterPorts::consecutive(ports);
        let dir = ScratchDir::new(&format!("cli_members_from_{test}"));
        rdmc_cli::keygen::write_secret(
            &dir.join("key"),
            b"a cluster key of more than sixteen bytes\n",
        )
        .unwrap();
        let content: Vec<u8> = (0..300_001u32)
            .map(|i| ((i * 31) ^ (i >> 9)) as u8)
            .collect();
        std::fs::write(dir.join("f"), &content).unwrap();
        Scratch {
            dir,
            content,
            base: ports.base(),
            _ports: ports,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `rdmc member` with the key, writing to `out{name}`.
    pub fn member(&self, name: &str, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_rdmc"));
        command
            .arg("member")
            .arg("--key-file")
            .arg(self.path("key"))
            .arg("--out")
            .arg(self.path(&format!("out{name}")))
            .args(args)
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// Every receiver in `ranks` holds the file, byte for byte.
    pub fn check_copies(&self, ranks: impl IntoIterator<Item = usize>) {
        for rank in ranks {
            let got = std::fs::read(self.path(&format!("out{rank}/0.bin")))
                .unwrap_or_else(|e| panic!("rank {rank}: no copy: {e}"));
            assert!(got == self.content, "rank {rank}: the copy differs");
        }
    }
}

/// Wait for `child` (killed after `limit`): its status and stderr.
pub fn finish(child: &mut Child, limit: Duration) -> (std::process::ExitStatus, String) {
    let status = crate::child::wait_within(child, limit);
    let mut err = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        stderr.read_to_string(&mut err).unwrap();
    }
    (status, err)
}

/// The stdout lines of several members, as they come: `(member, line)`.
pub struct Lines {
    tx: mpsc::Sender<(usize, String)>,
    rx: mpsc::Receiver<(usize, String)>,
}

impl Lines {
    pub fn new() -> Self {
        let (tx, rx) = mpsc::channel();
        Lines { tx, rx }
    }

    /// Read `child`'s stdout as member `who`'s.
    pub fn follow(&self, who: usize, child: &mut Child) {
        let (stdout, tx) = (child.stdout.take().unwrap(), self.tx.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send((who, line));
            }
        });
    }

    /// Wait until each member of `from` has printed a line containing
    /// every one of `text`, within `limit`; fail naming those that did not.
    pub fn expect(&self, from: &[usize], text: &[&str], limit: Duration) {
        let start = Instant::now();
        let mut waiting: Vec<usize> = from.to_vec();
        while !waiting.is_empty() {
            let left = limit.saturating_sub(start.elapsed());
            match self.rx.recv_timeout(left) {
                Ok((who, line)) if text.iter().all(|t| line.contains(t)) => {
                    waiting.retain(|&w| w != who)
                }
                Ok(_) => {}
                Err(_) => panic!("members {waiting:?} did not print {text:?} within {limit:?}"),
            }
        }
    }
}

/// Whether a test that needs `tool` runs: yes where it is installed; where
/// it is not, the test is skipped with a printed reason, unless `require`
/// (an environment variable) is set: then it fails.
pub fn have(tool: &str, require: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os(require).is_none(),
            "{tool} is not installed, and {require} is set"
        );
        eprintln!("skipped: {tool} is not installed (set {require} to make this a failure)");
    }
    found
}
