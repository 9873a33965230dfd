//! `rdmc push --hosts` against a real OpenSSH server: the test starts its
//! own `sshd` on loopback (host key, client key and `authorized_keys` made
//! by the test, in its scratch directory), and the push starts every
//! receiver through it, handing each the cluster and a key made for the
//! push on the session's standard input. Skipped, saying so, where
//! `/usr/sbin/sshd` is missing or the test is not root (sshd needs it);
//! `RDMC_REQUIRE_SSHD=1` (CI) makes that a failure instead.

mod child;
#[allow(dead_code)]
mod cluster_ports;
#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use child::wait_within;
use cluster_ports::ClusterPorts;
use scratch::ScratchDir;

const SSHD: &str = "/usr/sbin/sshd";

/// Whether sshd can run here; if not, the reason (a failure under
/// `RDMC_REQUIRE_SSHD=1`).
fn sshd_missing() -> Option<String> {
    let why = if !Path::new(SSHD).exists() {
        "no /usr/sbin/sshd (Debian's openssh-server)"
    } else if unsafe { libc::geteuid() } != 0 {
        "not root (sshd switches to the logged-in user)"
    } else {
        return None;
    };
    assert!(
        std::env::var_os("RDMC_REQUIRE_SSHD").is_none(),
        "RDMC_REQUIRE_SSHD is set but: {why}"
    );
    eprintln!("skipped: {why}");
    Some(why.to_owned())
}

/// A private sshd on a loopback port, killed when dropped.
struct Sshd {
    child: Child,
    port: u16,
    client_key: PathBuf,
}

impl Sshd {
    fn start(dir: &Path) -> Self {
        let keygen = |name: &str| {
            let status = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.join(name))
                .status()
                .unwrap();
            assert!(status.success(), "ssh-keygen {name}");
        };
        keygen("host_key");
        keygen("client_key");
        std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).unwrap();
        // sshd's privilege separation directory.
        std::fs::create_dir_all("/run/sshd").unwrap();
        let port = cluster_ports::free_ports([127, 0, 0, 1].into(), 1)[0];
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n\
             AuthorizedKeysFile {keys}\nPermitRootLogin prohibit-password\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
             StrictModes no\nPidFile {pid}\n",
            host_key = dir.join("host_key").display(),
            keys = dir.join("authorized_keys").display(),
            pid = dir.join("sshd.pid").display(),
        );
        std::fs::write(dir.join("sshd_config"), config).unwrap();
        let child = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(dir.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "sshd did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Sshd {
            child,
            port,
            client_key: dir.join("client_key"),
        }
    }

    /// The `--ssh` command that logs in to it.
    fn ssh_command(&self) -> String {
        format!(
            "ssh -i {} -p {} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
             -o LogLevel=ERROR",
            self.client_key.display(),
            self.port
        )
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `rdmc push --json --hosts FILE` of `src` to `n` receivers at the ports
/// held, each landing in `out{rank}` under `dir`, started with `remote`.
fn push(dir: &Path, ports: &Path, sshd: &Sshd, remote: &str, src: &Path) -> (i32, String, String) {
    let text = std::fs::read_to_string(ports).unwrap();
    let addrs: Vec<&str> = text.lines().collect();
    let hosts: String = addrs[1..]
        .iter()
        .map(|addr| format!("root@127.0.0.1 {addr}\n"))
        .collect();
    std::fs::write(dir.join("hosts"), hosts).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rdmc"))
        .args(["push", "--json", "--hosts"])
        .arg(dir.join("hosts"))
        .args(["--listen", addrs[0], "--out"])
        .arg(dir.join("out{rank}"))
        .args(["--ssh", &sshd.ssh_command(), "--remote-rdmc", remote])
        .args(["--max-message-size", "1MiB", "--connect-timeout", "30"])
        .arg(src)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            r.read_to_string(&mut text).unwrap();
            text
        })
    };
    let out = read(Box::new(child.stdout.take().unwrap()));
    let err = read(Box::new(child.stderr.take().unwrap()));
    let status = wait_within(&mut child, Duration::from_secs(180));
    (
        status.code().unwrap_or(-1),
        out.join().unwrap(),
        err.join().unwrap(),
    )
}

fn events(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The files under `dir`, by relative path, with their contents.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path
                    .strip_prefix(dir)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                found.push((rel, std::fs::read(&path).unwrap()));
            }
        }
    }
    found.sort();
    found
}

#[test]
fn a_push_starts_its_receivers_over_ssh_and_a_rerun_sends_nothing() {
    if sshd_missing().is_some() {
        return;
    }
    let dir = ScratchDir::new("cli_push_ssh");
    let sshd = Sshd::start(&dir);
    let ports = ClusterPorts::new(4);
    ports.write_members_file(&dir.join("addrs"));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..5u8 {
        let data: Vec<u8> = (0..700_000u32)
            .map(|j| (j as u8) ^ i.wrapping_mul(31))
            .collect();
        std::fs::write(src.join(format!("sub/f{i}")), data).unwrap();
    }
    let remote = env!("CARGO_BIN_EXE_rdmc");
    let (code, out, err) = push(&dir, &dir.join("addrs"), &sshd, remote, &src);
    assert_eq!(code, 0, "push: {err}\n{out}");
    assert!(!err.contains(" WARN "), "a successful push warned: {err}");
    let said = events(&out);
    let exits: Vec<i64> = said
        .iter()
        .filter(|e| e["event"] == "remote_exit")
        .map(|e| e["status"].as_i64().unwrap())
        .collect();
    assert_eq!(exits, [0, 0, 0], "{out}");
    let received = said
        .iter()
        .filter(|e| e["event"] == "remote" && e["message"]["event"] == "received")
        .count();
    assert_eq!(received, 15, "every receiver reported every file: {out}");
    let want = tree(&src);
    for rank in 1..4 {
        let got = tree(&dir.join(format!("out{rank}/src")));
        assert!(got == want, "receiver {rank} differs");
        // Nothing else landed there: the key came on the session's input.
        let names: Vec<_> = std::fs::read_dir(dir.join(format!("out{rank}")))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["src"], "receiver {rank}");
    }
    // Again: every receiver holds everything, nothing is sent.
    let (code, out, err) = push(&dir, &dir.join("addrs"), &sshd, remote, &src);
    assert_eq!(code, 0, "push again: {err}\n{out}");
    let said = events(&out);
    let held = said
        .iter()
        .find(|e| e["event"] == "already_held")
        .expect("already_held");
    assert_eq!(held["hosts"].as_array().unwrap().len(), 3, "{out}");
    assert!(
        !said.iter().any(|e| e["event"] == "sent"),
        "a file was sent again: {out}"
    );
}

#[test]
fn a_receiver_that_cannot_be_started_fails_the_push_at_once_naming_it() {
    if sshd_missing().is_some() {
        return;
    }
    let dir = ScratchDir::new("cli_push_ssh_missing");
    let sshd = Sshd::start(&dir);
    let ports = ClusterPorts::new(3);
    ports.write_members_file(&dir.join("addrs"));
    let src = dir.join("file");
    std::fs::write(&src, b"contents").unwrap();
    let start = Instant::now();
    let (code, out, err) = push(&dir, &dir.join("addrs"), &sshd, "/nonexistent/rdmc", &src);
    // Long before the 30 s connect timeout.
    assert!(start.elapsed() < Duration::from_secs(20), "{err}");
    assert_eq!(code, 2, "{err}\n{out}");
    assert!(
        err.contains("/nonexistent/rdmc"),
        "the remote shell's words: {err}"
    );
    assert!(err.contains("ssh session ended"), "{err}");
}
