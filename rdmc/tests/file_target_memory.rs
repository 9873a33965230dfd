//! A message received into a file, over `tcp` between two processes,
//! without the receiver (or the root, sending from a file) ever holding it
//! in memory: each process's peak resident memory (`VmHWM`) is measured
//! and must stay well below the message's size, and the file must be
//! byte-identical.
//!
//! The test re-runs its own binary as the two members (the test
//! `member_process` does nothing unless `RDMC_FILE_MEMBER` says which
//! member to be). The ignored test `six_gib_into_a_file` is the large
//! version (6 GiB by default, `RDMC_FILE_SIZE` bytes otherwise; needs
//! twice that in free disk under `RDMC_FILE_DIR` or the temporary
//! directory); run it in release mode:
//!
//! ```text
//! cargo test --release -p rdmcast --test file_target_memory -- --ignored --nocapture
//! ```

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use aws_lc_rs::digest::{Context, SHA256};
use futures::StreamExt;
use rdmc::{
    ClusterKey, GroupConfig, GroupId, Node, NodeConfig, NodeId, ReceiveTarget, ReceiveTargets,
    TcpConfig,
};

const MEMBER: &str = "RDMC_FILE_MEMBER";

/// A member process: `RDMC_FILE_MEMBER` is `rank;addr0,addr1;path`.
#[test]
fn member_process() {
    let Ok(spec) = std::env::var(MEMBER) else {
        return;
    };
    let mut parts = spec.split(';');
    let rank: u32 = parts.next().unwrap().parse().unwrap();
    let members: Vec<std::net::SocketAddr> = parts
        .next()
        .unwrap()
        .split(',')
        .map(|a| a.parse().unwrap())
        .collect();
    let path = PathBuf::from(parts.next().unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    runtime.block_on(member(rank, members, path));
    println!("RDMC_SECONDS {:.3}", started.elapsed().as_secs_f64());
    println!("RDMC_VMHWM_KIB {}", vm_hwm_kib());
}

async fn member(rank: u32, members: Vec<std::net::SocketAddr>, path: PathBuf) {
    let key = ClusterKey::from_bytes(b"rdmc file-target test cluster key".to_vec()).unwrap();
    let listener = std::net::TcpListener::bind(members[rank as usize]).unwrap();
    let tcp = TcpConfig::new(members, NodeId(rank), key)
        .with_listener(listener)
        .with_connect_timeout(Duration::from_secs(30));
    // A pool of a few MiB: the message must not need it.
    let node = Node::tcp(tcp, NodeConfig::new().with_buffer_pool(4 << 20))
        .await
        .unwrap();
    let ids = [NodeId(0), NodeId(1)];
    let config = GroupConfig::new().with_progress_timeout(Some(Duration::from_secs(120)));
    if rank == 0 {
        let group = node.create_group(GroupId(1), &ids, config).await.unwrap();
        let mut group = group.into_sender().unwrap();
        let file = File::open(&path).unwrap();
        let send = group.send_file(file).await.unwrap();
        send.delivered().await.unwrap();
        group.close().await.unwrap();
    } else {
        let target = path.clone();
        let targets =
            ReceiveTargets::new(move |_incoming| ReceiveTarget::create_file(target.clone()));
        let mut group = node
            .create_group(GroupId(1), &ids, config.with_receive_targets(targets))
            .await
            .unwrap()
            .into_receiver()
            .unwrap();
        let message = group.next().await.unwrap().unwrap();
        let file = message.file.expect("received into the file");
        file.file().sync_all().unwrap();
        assert!(group.next().await.is_none());
        group.close().await.unwrap();
    }
    node.shutdown().await;
}

/// This process's peak resident memory, in KiB.
fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/self/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Write `size` pseudo-random bytes to `path`.
fn generate(path: &Path, size: u64) {
    let mut out = BufWriter::with_capacity(4 << 20, File::create(path).unwrap());
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        for word in chunk.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            word.copy_from_slice(&x.to_le_bytes());
        }
        let n = left.min(chunk.len() as u64) as usize;
        out.write_all(&chunk[..n]).unwrap();
        left -= n as u64;
    }
    out.flush().unwrap();
}

fn sha256(path: &Path) -> String {
    let mut file = File::open(path).unwrap();
    let mut hasher = Context::new(&SHA256);
    let mut buf = vec![0u8; 4 << 20];
    loop {
        let n = file.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    hasher
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

struct Run {
    seconds: [f64; 2],
    vm_hwm_kib: [u64; 2],
}

/// Send a `size`-byte file from a root process to a receiver process that
/// writes it to a file; both files byte-identical (SHA-256).
fn run(size: u64, dir: &Path) -> Run {
    std::fs::create_dir_all(dir).unwrap();
    let source = dir.join("source");
    let received = dir.join("received");
    generate(&source, size);
    let addrs: Vec<String> = (0..2)
        .map(|_| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        })
        .collect();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = [(0, &source), (1, &received)]
        .into_iter()
        .map(|(rank, path)| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "member_process",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(
                    MEMBER,
                    format!("{rank};{};{}", addrs.join(","), path.display()),
                )
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut run = Run {
        seconds: [0.0; 2],
        vm_hwm_kib: [0; 2],
    };
    for (rank, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "member {rank} failed:\n{stdout}");
        // (The harness's own "test member_process ... " may start a line.)
        for line in stdout.lines() {
            if let Some((_, v)) = line.split_once("RDMC_VMHWM_KIB ") {
                run.vm_hwm_kib[rank] = v.trim().parse().unwrap();
            }
            if let Some((_, v)) = line.split_once("RDMC_SECONDS ") {
                run.seconds[rank] = v.trim().parse().unwrap();
            }
        }
        assert!(
            run.vm_hwm_kib[rank] > 0,
            "member {rank} printed no VmHWM:\n{stdout}"
        );
    }
    assert_eq!(std::fs::metadata(&received).unwrap().len(), size);
    let (want, got) = (sha256(&source), sha256(&received));
    assert_eq!(want, got, "the received file differs");
    println!(
        "{size} bytes: sha256 {got}; root {:.1} s, VmHWM {} KiB; receiver {:.1} s, VmHWM {} KiB",
        run.seconds[0], run.vm_hwm_kib[0], run.seconds[1], run.vm_hwm_kib[1]
    );
    std::fs::remove_file(&source).unwrap();
    std::fs::remove_file(&received).unwrap();
    run
}

fn scratch(what: &str) -> PathBuf {
    let base = std::env::var_os("RDMC_FILE_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    base.join(format!("rdmc-{what}-{}", std::process::id()))
}

#[test]
fn a_message_received_into_a_file_keeps_memory_bounded() {
    if std::env::var(MEMBER).is_ok() {
        return;
    }
    const SIZE: u64 = 128 << 20;
    let dir = scratch("file-target");
    let run = run(SIZE, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    // Neither process held the message: each peaked below a quarter of it
    // (a process that held it would be above its size).
    for (rank, kib) in run.vm_hwm_kib.into_iter().enumerate() {
        assert!(
            kib * 1024 < SIZE / 4,
            "member {rank} peaked at {kib} KiB for a {SIZE}-byte message"
        );
    }
}

#[test]
#[ignore = "6 GiB through the disk: run by hand, in release mode"]
fn six_gib_into_a_file() {
    if std::env::var(MEMBER).is_ok() {
        return;
    }
    let size = std::env::var("RDMC_FILE_SIZE").map_or(6 << 30, |s| s.parse().unwrap());
    let dir = scratch("six-gib");
    let run = run(size, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    for (rank, kib) in run.vm_hwm_kib.into_iter().enumerate() {
        assert!(
            kib < 1 << 20,
            "member {rank} peaked at {kib} KiB (1 GiB allowed)"
        );
    }
}
