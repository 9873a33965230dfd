//! `--only push`: `rdmc push --hosts` over real sshd on the 16-host lab,
//! against `pdcp` (Debian's pdsh, its ssh module) and a parallel `scp`
//! fan-out from the root, and a single host-to-host `scp` of the same bytes.
//! Every tool's ssh opens with the curve25519 key exchange, which `rdmc
//! push` asks for itself, rather than this OpenSSH's sntrup761x25519.
//!
//! Every receiver (lab hosts 1..15) runs an `sshd` of the harness's own
//! (host key, client key and `authorized_keys` made with `ssh-keygen` under
//! the run's `--out`), listening on the host's lab address. The hosts share
//! one filesystem, so each sshd runs in a mount namespace of its own where
//! the common destination directory is a bind mount of that host's own
//! receive directory: every tool is given the same destination and each
//! host's copy lands apart. In that namespace root's `~/.bashrc`, which
//! `bash` runs for every command sshd starts, is an empty file, as on a
//! freshly installed host: the logins measure ssh, not the dotfiles of
//! whoever runs the bench (this machine's run `pyenv init`, ~0.1 s of CPU
//! per login, 15 of them on the lab's shared cores). Each receive directory is an ext4 filesystem of
//! its own (`mkfs.ext4` defaults, journaled, on a loop device doing direct
//! I/O to an image file on the machine's disk), as each real host has: on
//! one shared filesystem the 15 hosts' files would be created among the
//! 15,000 the previous copy left and that were just deleted, and a
//! filesystem without a journal (as this machine's own) scans past every
//! recently deleted inode for each file it creates. The data: one 256 MiB
//! file and 1,000 small files (1–64 KiB, in subdirectories, some mode 755),
//! mtimes set. Each run, each
//! tool in turn from host 0 (the receivers emptied and the page cache's dirty
//! pages flushed before each), timed from its start to its exit (0
//! required), then every receiver's tree compared with the source: `diff -r`
//! and every entry's mode, every file's size and mtime.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;

use super::Run;
use crate::lab::{CpuTimes, Lab, register, unregister};
use rdmc_cli::report::median;

/// Hosts of the experiment: the root (host 0) and 15 receivers.
const HOSTS: usize = 16;
/// The large file's size.
const LARGE: usize = 256 << 20;
/// How many small files.
const SMALL_FILES: usize = 1000;
/// ssh options of every client: the harness's key, no host key checks.
const SSH_OPTIONS: &str = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
                           -o LogLevel=ERROR -o BatchMode=yes";
/// The baselines' ssh key exchange: curve25519 first, as `rdmc push` asks
/// for it on this OpenSSH (whose default, sntrup761x25519, costs the client
/// 0.12 s of CPU per login): each tool logs in at its best.
const BASELINE_KEX: &str = "-o KexAlgorithms=^curve25519-sha256,curve25519-sha256@libssh.org";
/// The systems measured, in each run's order: name, what is run.
const SYSTEMS: [(&str, &str); 4] = [
    ("scp-single", "scp -r -p to one host"),
    ("rdmc", "rdmc push --hosts"),
    ("pdcp", "pdcp -r -p -f 15"),
    ("scp", "15 x scp -r -p at once"),
];

/// A file's or directory's facts compared between the source and a copy:
/// whether it is a directory, its permission bits, and a file's size and
/// mtime (seconds, nanoseconds).
type Facts = (bool, u32, u64, i64, i64);

/// The receivers' sshds, killed, and the experiment's directory removed,
/// when dropped.
struct Receivers {
    dir: PathBuf,
    sshds: Vec<Child>,
    /// The loop devices of the receivers' filesystems, mounted.
    loops: Vec<(String, PathBuf)>,
}

impl Drop for Receivers {
    fn drop(&mut self) {
        for child in &mut self.sshds {
            let _ = child.kill();
            let _ = child.wait();
            unregister(child.id());
        }
        for (device, mount) in self.loops.drain(..) {
            let _ = Command::new("umount").arg(&mount).status();
            let _ = Command::new("losetup").args(["-d", &device]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Size of each receiver's filesystem image (sparse): room for a copy.
const IMAGE_SIZE: u64 = 1 << 30;

impl Receivers {
    /// The scratch paths: the source tree, the common destination, the
    /// client key, the hosts file.
    fn source(&self) -> PathBuf {
        self.dir.join("source").join("tree")
    }
    fn dest(&self) -> PathBuf {
        self.dir.join("dest")
    }
    fn recv(&self, host: usize) -> PathBuf {
        self.dir.join(format!("recv-h{host}"))
    }
    fn key(&self) -> PathBuf {
        self.dir.join("client_key")
    }
    fn ssh(&self) -> String {
        format!("ssh -i {} {SSH_OPTIONS}", self.key().display())
    }

    /// Keys, configs and one sshd per receiver, each answering a login.
    fn start(dir: &Path, logs: &Path) -> Result<Receivers, String> {
        let _ = std::fs::remove_dir_all(dir);
        let mut receivers = Receivers {
            dir: dir.to_owned(),
            sshds: Vec::new(),
            loops: Vec::new(),
        };
        let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
        std::fs::create_dir_all(receivers.dest()).map_err(|e| io("dest", e))?;
        for name in ["host_key", "client_key"] {
            run_ok(
                Command::new("ssh-keygen")
                    .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                    .arg(dir.join(name)),
                "ssh-keygen",
            )?;
        }
        std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys"))
            .map_err(|e| io("authorized_keys", e))?;
        std::fs::create_dir_all("/run/sshd").map_err(|e| io("/run/sshd", e))?;
        let bashrc = dir.join("fresh-bashrc");
        std::fs::write(&bashrc, "").map_err(|e| io("fresh-bashrc", e))?;
        for host in 1..HOSTS {
            std::fs::create_dir_all(receivers.recv(host)).map_err(|e| io("recv", e))?;
            receivers.mount_filesystem(host)?;
            let config = dir.join(format!("sshd_config-h{host}"));
            let text = format!(
                "Port 22\nListenAddress {addr}\nHostKey {host_key}\n\
                 AuthorizedKeysFile {keys}\nPermitRootLogin prohibit-password\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
                 StrictModes no\nSubsystem sftp /usr/lib/openssh/sftp-server\nMaxStartups 100\nMaxSessions 100\nPidFile {pid}\n",
                addr = Lab::addr(host),
                host_key = dir.join("host_key").display(),
                keys = dir.join("authorized_keys").display(),
                pid = dir.join(format!("sshd-h{host}.pid")).display(),
            );
            std::fs::write(&config, text).map_err(|e| io("sshd_config", e))?;
            let log = std::fs::File::create(logs.join(format!("push-sshd-h{host}.log")))
                .map_err(|e| io("sshd log", e))?;
            let child = Command::new("ip")
                .args(["netns", "exec", &format!("rdmc-h{host}")])
                .args(["unshare", "-m", "--propagation", "private", "sh", "-c"])
                .arg(
                    "mount --bind \"$1\" \"$2\" && rc=\"$(getent passwd root | cut -d: -f6)/.bashrc\" \
                     && { [ ! -f \"$rc\" ] || mount --bind \"$4\" \"$rc\"; } \
                     && exec /usr/sbin/sshd -D -e -f \"$3\"",
                )
                .arg("sh")
                .arg(receivers.recv(host))
                .arg(receivers.dest())
                .arg(&config)
                .arg(&bashrc)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .map_err(|e| format!("starting sshd on host {host}: {e}"))?;
            register(child.id());
            receivers.sshds.push(child);
        }
        for host in 1..HOSTS {
            receivers.wait_for_login(host)?;
        }
        Ok(receivers)
    }

    /// Make `host`'s receive directory an ext4 filesystem of its own.
    fn mount_filesystem(&mut self, host: usize) -> Result<(), String> {
        let image = self.dir.join(format!("recv-h{host}.img"));
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(IMAGE_SIZE))
            .map_err(|e| format!("{}: {e}", image.display()))?;
        run_ok(
            Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image),
            "mkfs.ext4",
        )?;
        let out = Command::new("losetup")
            .args(["--direct-io=on", "-f", "--show"])
            .arg(&image)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        let device = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !out.status.success() || device.is_empty() {
            return Err(format!(
                "losetup {}: {}",
                image.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let recv = self.recv(host);
        if let Err(e) = run_ok(Command::new("mount").arg(&device).arg(&recv), "mount") {
            let _ = Command::new("losetup").args(["-d", &device]).status();
            return Err(e);
        }
        self.loops.push((device, recv.clone()));
        std::fs::remove_dir(recv.join("lost+found")).map_err(|e| format!("lost+found: {e}"))
    }

    /// Log in to `host` until it answers (10 s at most).
    fn wait_for_login(&self, host: usize) -> Result<(), String> {
        let start = Instant::now();
        loop {
            let mut ssh = on_root(&self.ssh());
            ssh.arg(format!("root@{}", Lab::addr(host))).arg("true");
            let ok = ssh
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(10) {
                return Err(format!("the sshd of host {host} did not answer a login"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Empty every receiver's directory (keeping it: it is bind-mounted).
    fn clear(&self) -> Result<(), String> {
        for host in 1..HOSTS {
            let recv = self.recv(host);
            let entries =
                std::fs::read_dir(&recv).map_err(|e| format!("{}: {e}", recv.display()))?;
            for entry in entries.flatten() {
                let path = entry.path();
                let removed = if path.is_dir() && !path.is_symlink() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
                removed.map_err(|e| format!("removing {}: {e}", path.display()))?;
            }
        }
        Ok(())
    }

    /// The command that copies the source to `receivers` (lab hosts) with
    /// `system`: one process, or one per receiver.
    fn commands(
        &self,
        system: &str,
        (rdmc, options): (&Path, &[String]),
        base_port: u16,
    ) -> Vec<Command> {
        let src = self.source();
        let dest = self.dest();
        let scp = |host: usize| {
            let mut cmd = on_root(&format!(
                "scp -r -p -i {} {SSH_OPTIONS} {BASELINE_KEX}",
                self.key().display()
            ));
            cmd.arg(&src)
                .arg(format!("root@{}:{}", Lab::addr(host), dest.display()));
            cmd
        };
        let addrs: Vec<String> = (1..HOSTS).map(Lab::addr).collect();
        match system {
            "scp-single" => vec![scp(1)],
            "scp" => (1..HOSTS).map(scp).collect(),
            "pdcp" => {
                let mut cmd = on_root("pdcp -r -p -f 15 -l root");
                cmd.args(["-w", &addrs.join(",")]).arg(&src).arg(&dest);
                cmd.env("PDSH_RCMD_TYPE", "ssh").env(
                    "PDSH_SSH_ARGS",
                    format!(
                        "-i {} {SSH_OPTIONS} {BASELINE_KEX} -l%u %h",
                        self.key().display()
                    ),
                );
                vec![cmd]
            }
            _ => {
                let mut cmd = on_root(&rdmc.display().to_string());
                let hosts: Vec<String> = addrs.iter().map(|a| format!("root@{a}")).collect();
                cmd.args(["push", "--hosts", &hosts.join(",")])
                    .arg("--out")
                    .arg(&dest)
                    .args(["--ssh", &self.ssh(), "--remote-rdmc"])
                    .arg(rdmc)
                    .args(["--base-port", &base_port.to_string()])
                    .args(options)
                    .arg(&src);
                vec![cmd]
            }
        }
    }

    /// Every receiver of `system`'s copy holds the source's tree: `diff -r`
    /// finds no difference and every entry's facts are the source's.
    fn check(&self, hosts: &[usize]) -> Result<(), String> {
        let source = self.source();
        let want = facts(&source)?;
        for &host in hosts {
            let copy = self.recv(host).join("tree");
            run_ok(
                Command::new("diff")
                    .args(["-r", "-q"])
                    .arg(&source)
                    .arg(&copy)
                    .stdout(Stdio::null()),
                &format!("diff -r of host {host}'s copy"),
            )?;
            let got = facts(&copy)?;
            if let Some((path, f)) = want.iter().find(|&(p, f)| got.get(p) != Some(f)) {
                return Err(format!(
                    "host {host}: {path} is {:?}, the source's {f:?}",
                    got.get(path)
                ));
            }
            if got.len() != want.len() {
                return Err(format!(
                    "host {host}: {} entries, the source {}",
                    got.len(),
                    want.len()
                ));
            }
        }
        Ok(())
    }
}

/// `ip netns exec rdmc-h0` with a command line split at spaces.
fn on_root(command: &str) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", "rdmc-h0"]);
    cmd.args(command.split_whitespace());
    cmd
}

/// Run `cmd` to its end; an error naming `what` unless it exits 0.
fn run_ok(cmd: &mut Command, what: &str) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("{what}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}

/// Every entry under `dir` by relative path, with its facts.
fn facts(dir: &Path) -> Result<BTreeMap<String, Facts>, String> {
    let mut found = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        let entries = std::fs::read_dir(&at).map_err(|e| format!("{}: {e}", at.display()))?;
        for entry in entries {
            let path = entry.map_err(|e| format!("{}: {e}", at.display()))?.path();
            let m =
                std::fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let rel = path
                .strip_prefix(dir)
                .unwrap_or(&path)
                .display()
                .to_string();
            let mode = m.permissions().mode() & 0o7777;
            if m.is_dir() {
                stack.push(path);
                found.insert(rel, (true, mode, 0, 0, 0));
            } else {
                found.insert(rel, (false, mode, m.len(), m.mtime(), m.mtime_nsec()));
            }
        }
    }
    Ok(found)
}

/// Write the source tree under `tree`: `large.bin` of [`LARGE`] bytes and
/// [`SMALL_FILES`] files of 1–64 KiB under `small/` (every third at its
/// top, the others in ten subdirectories), every fifth mode 755, the others
/// 644, each with an mtime of whole seconds of its own; its bytes.
fn write_source(tree: &Path) -> Result<u64, String> {
    let io = |p: &Path, e: std::io::Error| format!("writing {}: {e}", p.display());
    let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut bytes = 0u64;
    let mut put = |path: &Path, data: &[u8], mode: u32, secs: u64| -> Result<(), String> {
        std::fs::create_dir_all(path.parent().unwrap_or(tree)).map_err(|e| io(path, e))?;
        let mut file = std::fs::File::create(path).map_err(|e| io(path, e))?;
        file.write_all(data).map_err(|e| io(path, e))?;
        file.set_modified(base + Duration::from_secs(secs))
            .map_err(|e| io(path, e))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| io(path, e))?;
        bytes += data.len() as u64;
        Ok(())
    };
    put(
        &tree.join("large.bin"),
        &rdmc_cli::bench_protocol::payload(LARGE),
        0o644,
        0,
    )?;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 0..SMALL_FILES {
        let size = 1024 + (next() % (63 * 1024 + 1)) as usize;
        let data: Vec<u8> = (0..size.div_ceil(8))
            .flat_map(|_| next().to_le_bytes())
            .take(size)
            .collect();
        let dir = if i % 3 == 0 {
            tree.join("small")
        } else {
            tree.join("small").join(format!("d{}", i % 10))
        };
        let mode = if i % 5 == 0 { 0o755 } else { 0o644 };
        put(&dir.join(format!("f{i:04}.bin")), &data, mode, 1 + i as u64)?;
    }
    Ok(bytes)
}

impl Run<'_> {
    /// The push experiment on a 16-host lab of its own.
    pub(super) fn push(&mut self, netlab: &Path) -> Result<(), String> {
        let lab = Lab::up(netlab, HOSTS, &self.args.rate)?;
        let receivers = Receivers::start(&self.args.out.join("push"), &self.logs)?;
        let bytes = write_source(&receivers.source())?;
        let runs = self.args.runs.unwrap_or(5).max(1);
        let warmup = self.args.warmup.unwrap_or(1);
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); SYSTEMS.len()];
        let mut failures: Vec<Vec<serde_json::Value>> = vec![Vec::new(); SYSTEMS.len()];
        let before = CpuTimes::now();
        for run in 0..runs + warmup {
            for (k, (system, _)) in SYSTEMS.iter().enumerate() {
                if self.args.skip_slow_baselines && matches!(*system, "pdcp" | "scp") {
                    continue;
                }
                receivers.clear()?;
                run_ok(&mut Command::new("sync"), "sync")?;
                eprintln!(
                    "rdmc-bench: [{:>5.0} s] push run {run} {system}",
                    self.started.elapsed().as_secs_f64()
                );
                let base_port = 7000 + 10 * ((run * SYSTEMS.len() + k) % 200) as u16;
                let seconds = match self.time_copy(&receivers, system, base_port, run)? {
                    Ok(seconds) => seconds,
                    // rdmc must exit 0; a baseline's failure is a result.
                    Err(e) if *system == "rdmc" => return Err(e),
                    Err(e) => {
                        eprintln!("rdmc-bench: {e}");
                        failures[k].push(json!({"run": run, "error": e}));
                        continue;
                    }
                };
                let hosts: Vec<usize> = if *system == "scp-single" {
                    vec![1]
                } else {
                    (1..HOSTS).collect()
                };
                receivers
                    .check(&hosts)
                    .map_err(|e| format!("push: {system}, run {run}: {e}"))?;
                if run >= warmup {
                    times[k].push(seconds);
                }
            }
        }
        let cpu_idle = CpuTimes::now().idle_since(&before);
        let single = median(&times[0]);
        let rdmc = median(&times[1]);
        let ssh_version = Command::new("ssh")
            .arg("-V")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_owned())
            .unwrap_or_default();
        for (((system, algorithm), samples), failed) in SYSTEMS.iter().zip(&times).zip(&failures) {
            if samples.is_empty() && failed.is_empty() {
                continue;
            }
            let seconds = median(samples);
            let receivers = if *system == "scp-single" {
                1
            } else {
                HOSTS - 1
            };
            let record = json!({
                "experiment": "push", "system": system, "algorithm": algorithm,
                "nodes": HOSTS, "receivers": receivers, "size": bytes,
                "files": SMALL_FILES + 1, "large_size": LARGE,
                "ratio_to_single": seconds / single, "ratio_to_rdmc": seconds / rdmc,
                "single_seconds": single, "rdmc_seconds": rdmc,
                "failed_runs": failed, "ssh": ssh_version, "options": self.args.member_option, "cpu_idle": cpu_idle, "rate": self.args.rate,
            });
            self.emit(super::merge(record, super::seconds_of_runs(samples)));
        }
        drop(receivers);
        drop(lab);
        Ok(())
    }

    /// Seconds of one copy by `system` from start to every process's exit,
    /// or its failure (a process exiting non-zero, with its log's last
    /// line); output to the run's logs.
    fn time_copy(
        &self,
        receivers: &Receivers,
        system: &str,
        base_port: u16,
        run: usize,
    ) -> Result<Result<f64, String>, String> {
        let mut commands =
            receivers.commands(system, (&self.rdmc, &self.args.member_option), base_port);
        let start = Instant::now();
        let mut children = Vec::new();
        for (i, cmd) in commands.iter_mut().enumerate() {
            let log = self.logs.join(format!("push-{system}-run{run}-{i}.log"));
            let log = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
            let err = log.try_clone().map_err(|e| format!("log: {e}"))?;
            let child = cmd
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(err)
                .spawn()
                .map_err(|e| format!("starting {system}: {e}"))?;
            register(child.id());
            children.push(child);
        }
        let mut failed = None;
        for (i, mut child) in children.into_iter().enumerate() {
            let status = child
                .wait()
                .map_err(|e| format!("waiting for {system}: {e}"))?;
            unregister(child.id());
            if !status.success() {
                failed = Some((i, status));
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        Ok(match failed {
            Some((i, status)) => {
                let log = self.logs.join(format!("push-{system}-run{run}-{i}.log"));
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                Err(format!(
                    "push: {system} failed ({status}): {} ({})",
                    text.lines().last().unwrap_or(""),
                    log.display()
                ))
            }
            None => Ok(seconds),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_see_modes_sizes_and_mtimes() {
        let dir = std::env::temp_dir().join(format!("rdmc-bench-push-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("a/b/f"), b"12345").unwrap();
        std::fs::set_permissions(dir.join("a/b/f"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let f = facts(&dir).unwrap();
        assert_eq!(f.len(), 3, "{f:?}");
        let file = f["a/b/f"];
        assert_eq!((file.0, file.1, file.2), (false, 0o755, 5));
        assert!(f["a"].0 && f["a/b"].0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
