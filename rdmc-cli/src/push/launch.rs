//! `rdmc push --hosts`: the push starts `rdmc receive` on every host
//! itself, over the system's OpenSSH client (with the user's ssh
//! configuration and agent).
//!
//! The pushing host makes a cluster key for this push alone and hands each
//! receiver the cluster — every member's address, its rank, the key — as
//! one JSON line on the ssh session's standard input (`rdmc receive
//! --cluster-from-stdin`): the key is never written to a receiver's disk
//! nor shown on a command line. The receivers' output is relayed, each
//! line named by its host; every ssh session is ended on every exit path
//! (a session still open when the push ends is waited for briefly, then
//! killed, which ends its receiver).

use std::io::Read;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use clap::Args;
use futures::StreamExt;
use futures::future::join_all;
use futures::stream::FuturesUnordered;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use super::{ClusterArgs, Failure};

/// Options of `rdmc push --hosts`.
#[derive(Debug, Args)]
#[command(next_help_heading = "Starting the receivers over ssh")]
pub(crate) struct HostsArgs {
    /// Start `rdmc receive` on these hosts over ssh, with a key made for
    /// this push: a file with one host per line, or a comma-separated list.
    /// A host is an ssh destination (`host`, `user@host`,
    /// `ssh://user@host:port`), then, optionally, the address its receiver
    /// listens on (`host:port`; default: the destination's host at
    /// --base-port). The pushing host listens at --listen (default: its
    /// address towards the first host, at --base-port).
    #[arg(long, value_name = "FILE|LIST",
          conflicts_with_all = ["members", "members_from", "key_file", "identity"])]
    pub(crate) hosts: Option<String>,
    /// With --hosts: the directory the files land in on every host
    /// (`{rank}` in it is replaced by the receiver's rank).
    #[arg(long, value_name = "DIR", requires = "hosts")]
    pub(crate) out: Option<String>,
    /// With --hosts: the ssh command, with any options of its own
    /// (`BatchMode=yes` is added: nothing may prompt). Where the client
    /// would open with the sntrup761x25519 key exchange (OpenSSH 9.0 to
    /// 9.8), whose key generation costs it 0.12 s of CPU per host,
    /// curve25519-sha256 is asked for first; give `-o KexAlgorithms=...`
    /// here to choose yourself.
    #[arg(long, default_value = "ssh", value_name = "COMMAND")]
    pub(crate) ssh: String,
    /// With --hosts: the `rdmc` program on the hosts.
    #[arg(long, default_value = "rdmc", value_name = "PATH")]
    pub(crate) remote_rdmc: String,
}

/// The longest hosts file or `--cluster-from-stdin` line read.
const TEXT_LIMIT: u64 = 1 << 20;

/// How long the push waits for the ssh sessions to end once it has ended.
const SESSION_WAIT: Duration = Duration::from_secs(30);

/// One receiving host.
#[derive(Clone, Debug)]
pub(crate) struct Host {
    /// The ssh destination.
    dest: String,
    /// Where its receiver listens.
    addr: SocketAddr,
}

/// A cluster handed over whole: every member's address, this member's
/// rank, the key.
pub(crate) type Listed = (Vec<SocketAddr>, u32, rdmc::ClusterKey);

/// What a launched receiver reads from its standard input.
#[derive(Serialize, Deserialize)]
pub(crate) struct LaunchLine {
    members: Vec<SocketAddr>,
    rank: u32,
    key: String,
}

/// A push's receivers, to be started.
pub(crate) struct Launch {
    hosts: Vec<Host>,
    /// The cluster key, as text (hex), as each receiver gets it.
    key: String,
    members: Vec<SocketAddr>,
}

impl Launch {
    /// Read the hosts, find the pushing host's address, make the key: the
    /// cluster (members, rank 0, key) and the launch.
    pub(crate) fn plan(args: &HostsArgs, cluster: &ClusterArgs) -> anyhow::Result<(Self, Listed)> {
        let spec = args.hosts.as_deref().expect("--hosts given");
        if args.out.is_none() {
            bail!("--hosts needs --out DIR: where the files land on every host");
        }
        let port = cluster.source.base_port;
        let hosts = parse_hosts(&read_spec(spec)?, port)?;
        let first = hosts.first().context("--hosts lists no host")?;
        let root = match &cluster.source.listen {
            Some(listen) => resolve(listen)?,
            None => SocketAddr::new(local_ip_towards(first.addr)?, port),
        };
        let mut members = vec![root];
        members.extend(hosts.iter().map(|h| h.addr));
        let mut random = [0u8; 32];
        aws_lc_rs::rand::fill(&mut random)
            .map_err(|_| anyhow!("the random number generator failed"))?;
        let key = hex::encode(random);
        let cluster_key = rdmc::ClusterKey::from_bytes(key.as_bytes())?;
        let launch = Launch {
            hosts,
            key,
            members: members.clone(),
        };
        Ok((launch, (members, 0, cluster_key)))
    }

    /// Start every receiver over ssh.
    pub(crate) async fn start(
        self,
        args: &HostsArgs,
        cluster: &ClusterArgs,
    ) -> anyhow::Result<Launched> {
        let mut ssh = shlex::split(&args.ssh)
            .filter(|words| !words.is_empty())
            .with_context(|| format!("--ssh {:?} is not a command", args.ssh))?
            .into_iter();
        let program = ssh.next().expect("not empty");
        let log_filter = std::env::var("RUST_LOG").ok();
        let ssh_args: Vec<String> = ssh.collect();
        let kex = join_all(
            self.hosts
                .iter()
                .map(|host| fast_kex(&program, &ssh_args, &host.dest)),
        )
        .await;
        let mut launched = Launched {
            sessions: Vec::new(),
            relays: Vec::new(),
            json: cluster.json,
        };
        for ((i, host), kex) in self.hosts.iter().enumerate().zip(kex) {
            let rank = i as u32 + 1;
            let remote = remote_command(args, cluster, rank, log_filter.as_deref())?;
            let mut child = Command::new(&program);
            child.args(&ssh_args);
            if let Some(kex) = kex {
                child.args(["-o", &kex]);
            }
            let mut child = child
                .args(["-o", "BatchMode=yes", "-T"])
                .arg(&host.dest)
                .arg("--")
                .arg(remote)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {program} for {}", host.dest))?;
            let line = serde_json::to_string(&LaunchLine {
                members: self.members.clone(),
                rank,
                key: self.key.clone(),
            })?;
            let mut stdin = child.stdin.take().expect("piped");
            // The line, then the end of the input: the receiver reads one.
            launched.relays.push(tokio::spawn(async move {
                let _ = stdin.write_all(format!("{line}\n").as_bytes()).await;
            }));
            launched.relay_output(&mut child, &host.dest, rank);
            launched.sessions.push(Session {
                host: host.clone(),
                rank,
                child,
            });
        }
        Ok(launched)
    }
}

/// The key exchanges ssh would offer `dest` (`ssh -G`, which connects to
/// nothing), reordered with curve25519-sha256 first when they open with
/// sntrup761x25519: its key generation takes OpenSSH 9.0 to 9.8 about
/// 0.12 s of CPU (measured on the lab's machine), which 15 logins at once
/// pay on the pushing host. The same algorithms stay on offer. `None` (ssh
/// as it is) when the user names key exchanges in `--ssh`, when the client
/// is not OpenSSH or opens with another.
async fn fast_kex(program: &str, ssh_args: &[String], dest: &str) -> Option<String> {
    if ssh_args
        .iter()
        .any(|a| a.to_ascii_lowercase().contains("kexalgorithms"))
    {
        return None;
    }
    let config = Command::new(program)
        .args(ssh_args)
        .arg("-G")
        .arg(dest)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .output();
    let config = tokio::time::timeout(Duration::from_secs(2), config)
        .await
        .ok()?
        .ok()
        .filter(|out| out.status.success())?;
    let listed = String::from_utf8_lossy(&config.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("kexalgorithms ").map(str::to_owned))?;
    curve25519_first(&listed).map(|list| format!("KexAlgorithms={list}"))
}

/// `offered` (ssh's comma-separated key exchanges) with the curve25519
/// ones moved to the front, if it opens with sntrup761x25519 and offers
/// curve25519-sha256.
fn curve25519_first(offered: &str) -> Option<String> {
    let offered: Vec<&str> = offered.trim().split(',').collect();
    let curve = |a: &&str| a.starts_with("curve25519-sha256");
    if !offered.first()?.starts_with("sntrup761x25519") || !offered.iter().any(curve) {
        return None;
    }
    let (first, rest): (Vec<&str>, Vec<&str>) = offered.into_iter().partition(curve);
    Some([first, rest].concat().join(","))
}

/// The ssh sessions of a push.
pub(crate) struct Launched {
    sessions: Vec<Session>,
    relays: Vec<JoinHandle<()>>,
    json: bool,
}

struct Session {
    host: Host,
    rank: u32,
    child: Child,
}

impl Launched {
    /// Relay a session's output: its receiver's JSON events (with
    /// `--json`, wrapped with the host) and every line of its stderr,
    /// named by the host.
    fn relay_output(&mut self, child: &mut Child, dest: &str, rank: u32) {
        let json = self.json;
        if let Some(stdout) = child.stdout.take() {
            let dest = dest.to_owned();
            self.relays.push(tokio::spawn(async move {
                let mut lines = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if json {
                        let event: serde_json::Value =
                            serde_json::from_str(&line).unwrap_or(json!(line));
                        println!(
                            "{}",
                            json!({"event": "remote", "host": dest, "rank": rank, "message": event})
                        );
                    }
                }
            }));
        }
        if let Some(stderr) = child.stderr.take() {
            let dest = dest.to_owned();
            self.relays.push(tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    eprintln!("{dest}: {line}");
                }
            }));
        }
    }

    /// Resolves when a session ends with a failure (before the push did):
    /// its receiver could not be started, or ended early.
    pub(crate) async fn failed(&mut self) -> Failure {
        let mut waits: FuturesUnordered<_> = self
            .sessions
            .iter_mut()
            .map(|s| async move { (&s.host.dest, s.rank, s.child.wait().await) })
            .collect();
        while let Some((dest, rank, status)) = waits.next().await {
            let why = match status {
                Ok(status) if status.success() => continue,
                Ok(status) => format!("{status}"),
                Err(e) => e.to_string(),
            };
            return Failure {
                message: format!(
                    "{dest} (rank {rank}): its ssh session ended ({why}) before the push \
                     could start; its output is above"
                ),
                hosts: vec![format!("{dest} (rank {rank})")],
            };
        }
        std::future::pending().await
    }

    /// Wait (briefly) for every session to end, end those that do not, and
    /// say how each ended.
    pub(crate) async fn finish(mut self) {
        let waits = self.sessions.iter_mut().map(|s| async move {
            let status = match tokio::time::timeout(SESSION_WAIT, s.child.wait()).await {
                Ok(status) => status.ok().and_then(|s| s.code()),
                Err(_) => {
                    let _ = s.child.kill().await;
                    None
                }
            };
            (&s.host.dest, s.rank, status)
        });
        for (dest, rank, status) in futures::future::join_all(waits).await {
            if self.json {
                println!(
                    "{}",
                    json!({"event": "remote_exit", "host": dest, "rank": rank, "status": status})
                );
            } else if status != Some(0) {
                match status {
                    Some(code) => eprintln!("rdmc push: {dest} (rank {rank}): exited {code}"),
                    None => eprintln!("rdmc push: {dest} (rank {rank}): ended by the push"),
                }
            }
        }
        for relay in self.relays.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(1), relay).await;
        }
    }
}

/// The command a receiver is started with (one string, as ssh passes it
/// to the remote shell: every word quoted), with the push's `RUST_LOG`
/// filter if it has one.
fn remote_command(
    args: &HostsArgs,
    cluster: &ClusterArgs,
    rank: u32,
    log_filter: Option<&str>,
) -> anyhow::Result<String> {
    let out = args
        .out
        .as_deref()
        .expect("checked")
        .replace("{rank}", &rank.to_string());
    let name = |v: Option<clap::builder::PossibleValue>| v.expect("a value").get_name().to_owned();
    let mut words = Vec::new();
    // The push's log filter reaches the receivers (their log lines come
    // back on the session's stderr, named by the host).
    if let Some(filter) = log_filter {
        words.extend(["env".to_owned(), format!("RUST_LOG={filter}")]);
    }
    words.extend([
        args.remote_rdmc.clone(),
        "receive".to_owned(),
        "--cluster-from-stdin".to_owned(),
        "--out".to_owned(),
        out,
        "--max-message-size".to_owned(),
        cluster.max_message_size.to_string(),
        "--connect-timeout".to_owned(),
        cluster.connect_timeout.to_string(),
        "--failure-timeout".to_owned(),
        cluster.failure_timeout.to_string(),
        "--transport".to_owned(),
        name(clap::ValueEnum::to_possible_value(&cluster.transport)),
        "--ofi-provider".to_owned(),
        cluster.ofi_provider.clone(),
        "--wire-security".to_owned(),
        name(clap::ValueEnum::to_possible_value(&cluster.wire_security)),
        "--completion".to_owned(),
        name(clap::ValueEnum::to_possible_value(&cluster.completion)),
        "--connections".to_owned(),
        name(clap::ValueEnum::to_possible_value(&cluster.connections)),
    ]);
    // A receiver's events (a line per file) are relayed only to a push
    // asked for JSON; otherwise the receiver prints one line at its end
    // (discarded: its failures go to stderr, which is relayed): on a push
    // of many small files, an ssh packet per file on every host costs
    // the hosts' CPU more than the files' own writes.
    if cluster.json {
        words.push("--json".to_owned());
    }
    let quoted: Result<Vec<_>, _> = words.iter().map(|w| shlex::try_quote(w)).collect();
    Ok(quoted
        .map_err(|e| anyhow!("a word of the remote command: {e}"))?
        .join(" "))
}

/// The hosts' text: the file `spec` names, or `spec` itself (commas
/// separating hosts).
fn read_spec(spec: &str) -> anyhow::Result<String> {
    let path = Path::new(spec);
    if !path.is_file() {
        return Ok(spec.replace(',', "\n"));
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(TEXT_LIMIT + 1).read_to_string(&mut text))
        .with_context(|| format!("reading {spec}"))?;
    if text.len() as u64 > TEXT_LIMIT {
        bail!("{spec}: longer than {TEXT_LIMIT} bytes");
    }
    Ok(text)
}

/// One host per line: `DEST [ADDR]`; blank lines and `#` comments are
/// skipped.
fn parse_hosts(text: &str, port: u16) -> anyhow::Result<Vec<Host>> {
    let mut hosts = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        let Some(dest) = words.next() else { continue };
        let addr = match words.next() {
            Some(addr) => resolve(addr)?,
            None => {
                let host = dest_host(dest);
                let text = if host.contains(':') {
                    format!("[{host}]:{port}")
                } else {
                    format!("{host}:{port}")
                };
                resolve(&text).with_context(|| {
                    format!("{dest}: give its receiver's address after it (`{dest} HOST:PORT`)")
                })?
            }
        };
        if let Some(extra) = words.next() {
            bail!("--hosts: {line:?}: unexpected {extra:?} (a host is `DEST [HOST:PORT]`)");
        }
        hosts.push(Host {
            dest: dest.to_owned(),
            addr,
        });
    }
    Ok(hosts)
}

/// The host part of an ssh destination (`user@host`,
/// `ssh://user@host:port`, `ssh://[v6]:port`).
fn dest_host(dest: &str) -> &str {
    let (rest, uri) = match dest.strip_prefix("ssh://") {
        Some(rest) => (rest, true),
        None => (dest, false),
    };
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    if !uri {
        return host;
    }
    match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => host.split(':').next().unwrap_or(host),
    }
}

fn resolve(text: &str) -> anyhow::Result<SocketAddr> {
    text.to_socket_addrs()
        .with_context(|| format!("{text}: not a HOST:PORT that resolves"))?
        .next()
        .with_context(|| format!("{text}: resolves to no address"))
}

/// This host's address on the route towards `peer`.
fn local_ip_towards(peer: SocketAddr) -> anyhow::Result<std::net::IpAddr> {
    let any: SocketAddr = if peer.is_ipv4() {
        "0.0.0.0:0".parse().expect("an address")
    } else {
        "[::]:0".parse().expect("an address")
    };
    let socket = UdpSocket::bind(any)?;
    socket
        .connect(peer)
        .with_context(|| format!("no route towards {peer}; give --listen"))?;
    Ok(socket.local_addr()?.ip())
}

/// `rdmc receive --cluster-from-stdin`: the line `rdmc push --hosts` sent.
pub(crate) fn read_launch_line() -> anyhow::Result<Listed> {
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::stdin().lock().take(TEXT_LIMIT), &mut line)
        .context("reading the cluster from standard input")?;
    let launch: LaunchLine = serde_json::from_str(line.trim_end())
        .context("standard input holds no cluster (as `rdmc push --hosts` sends it)")?;
    let key = rdmc::ClusterKey::from_bytes(launch.key.into_bytes())?;
    Ok((launch.members, launch.rank, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_read_with_their_addresses_or_the_base_port() {
        let hosts = parse_hosts(
            "# comment\nroot@127.0.0.1\n\nssh://me@127.0.0.2:2222 127.0.0.9:7100 # c\n",
            7000,
        )
        .unwrap();
        assert_eq!(hosts.len(), 2);
        assert_eq!(hosts[0].dest, "root@127.0.0.1");
        assert_eq!(hosts[0].addr, "127.0.0.1:7000".parse().unwrap());
        assert_eq!(hosts[1].dest, "ssh://me@127.0.0.2:2222");
        assert_eq!(hosts[1].addr, "127.0.0.9:7100".parse().unwrap());
        assert!(parse_hosts("a b c", 7000).is_err());
        assert!(parse_hosts("host 127.0.0.1", 7000).is_err());
    }

    #[test]
    fn curve25519_is_asked_first_only_before_sntrup() {
        let debian12 = "sntrup761x25519-sha512@openssh.com,curve25519-sha256,\
                        curve25519-sha256@libssh.org,ecdh-sha2-nistp256";
        assert_eq!(
            curve25519_first(debian12).as_deref(),
            Some(
                "curve25519-sha256,curve25519-sha256@libssh.org,\
                 sntrup761x25519-sha512@openssh.com,ecdh-sha2-nistp256"
            )
        );
        // ML-KEM (OpenSSH 9.9 on) is fast: left as it is; so is a list
        // without curve25519 or one already opening with it.
        assert_eq!(
            curve25519_first("mlkem768x25519-sha256,sntrup761x25519-sha512"),
            None
        );
        assert_eq!(
            curve25519_first("sntrup761x25519-sha512,ecdh-sha2-nistp256"),
            None
        );
        assert_eq!(
            curve25519_first("curve25519-sha256,sntrup761x25519-sha512"),
            None
        );
        assert_eq!(curve25519_first(""), None);
    }

    #[tokio::test]
    async fn the_key_exchange_comes_from_ssh_config_and_yields_to_the_user() {
        // Whatever this machine's client offers, a reorder keeps its set.
        if let Some(kex) = fast_kex("ssh", &[], "example.invalid").await {
            let list = kex.strip_prefix("KexAlgorithms=").unwrap();
            assert!(list.starts_with("curve25519-sha256"), "{kex}");
            assert!(list.contains("sntrup761x25519"), "{kex}");
        }
        let chosen = [
            "-o".to_owned(),
            "KexAlgorithms=curve25519-sha256".to_owned(),
        ];
        assert_eq!(fast_kex("ssh", &chosen, "example.invalid").await, None);
        assert_eq!(fast_kex("/nonexistent/ssh", &[], "h").await, None);
    }

    #[test]
    fn the_host_of_a_destination() {
        assert_eq!(dest_host("node1"), "node1");
        assert_eq!(dest_host("me@node1"), "node1");
        assert_eq!(dest_host("ssh://me@node1:22"), "node1");
        assert_eq!(dest_host("ssh://[::1]:22"), "::1");
        assert_eq!(dest_host("ssh://node1"), "node1");
    }

    #[test]
    fn the_remote_command_quotes_every_word() {
        let hosts = HostsArgs {
            hosts: Some("h".into()),
            out: Some("/data/my dir/{rank}".into()),
            ssh: "ssh".into(),
            remote_rdmc: "rdmc".into(),
        };
        #[derive(clap::Parser)]
        struct Command {
            #[command(flatten)]
            cluster: ClusterArgs,
        }
        let parsed: Command = clap::Parser::parse_from(["x", "--members", "m"]);
        let command = remote_command(&hosts, &parsed.cluster, 3, None).unwrap();
        assert!(command.contains("'/data/my dir/3'"), "{command}");
        assert!(
            command.starts_with("rdmc receive --cluster-from-stdin"),
            "{command}"
        );
        let words = shlex::split(&command).unwrap();
        assert_eq!(words[words.len() - 5], "authenticated");
        assert_eq!(words[words.len() - 3], "interrupt");
        assert_eq!(words[words.len() - 1], "all");
        // Receivers print events (a line per file) only for a push asked
        // for them.
        assert!(!words.iter().any(|w| w == "--json"), "{command}");
        let parsed: Command = clap::Parser::parse_from(["x", "--members", "m", "--json"]);
        let command = remote_command(&hosts, &parsed.cluster, 3, None).unwrap();
        assert!(
            shlex::split(&command)
                .unwrap()
                .iter()
                .any(|w| w == "--json")
        );
        // The push's log filter goes along, quoted.
        let command = remote_command(&hosts, &parsed.cluster, 3, Some("rdmc=debug,x y")).unwrap();
        assert!(
            command.starts_with("env 'RUST_LOG=rdmc=debug,x y' rdmc receive "),
            "{command}"
        );
    }
}
