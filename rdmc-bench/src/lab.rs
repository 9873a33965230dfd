//! The machinery under `rdmc-bench`: the emulated cluster
//! (`scripts/netlab.sh`), processes started in its namespaces and driven
//! through their stdin and JSON stdout, the machine's CPU idle time, and
//! clean-up on every exit path, Ctrl-C included.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Processes of ours that must die if the bench is interrupted.
static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());
/// The netlab script, once a lab may exist (for the interrupt handler).
static NETLAB: OnceLock<PathBuf> = OnceLock::new();
/// The lab hosts' TCP congestion control (`rdmc-bench --congestion-control`).
static CONGESTION_CONTROL: OnceLock<String> = OnceLock::new();

/// Every lab of this run gives its hosts TCP congestion control `name`
/// (`netlab.sh` through `NETLAB_CC`; its default otherwise). The first call wins.
pub(crate) fn set_congestion_control(name: &str) {
    let _ = CONGESTION_CONTROL.set(name.to_owned());
}

/// `bash SCRIPT`, told the run's congestion control: the way to start
/// `netlab.sh` or a script that brings a lab up itself.
pub(crate) fn lab_script(script: &Path) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(script);
    if let Some(cc) = CONGESTION_CONTROL.get() {
        cmd.env("NETLAB_CC", cc);
    }
    cmd
}

/// Tear the lab down and kill our processes on SIGINT or SIGTERM, then exit.
pub(crate) fn install_interrupt_handler(netlab: &Path) {
    let _ = NETLAB.set(netlab.to_path_buf());
    std::thread::spawn(|| {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        let code = rt.block_on(async {
            let Ok(mut term) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            else {
                return None;
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => Some(130),
                _ = term.recv() => Some(143),
            }
        });
        if let Some(code) = code {
            eprintln!("rdmc-bench: interrupted; tearing the lab down");
            kill_children();
            if let Some(netlab) = NETLAB.get() {
                let _ = Command::new("bash").arg(netlab).arg("down").status();
            }
            std::process::exit(code);
        }
    });
}

fn kill_children() {
    let pids = std::mem::take(&mut *CHILDREN.lock().unwrap_or_else(|e| e.into_inner()));
    for pid in pids {
        // SAFETY: kill(2) with a PID of a child we started and a valid signal.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
}

pub(crate) fn register(pid: u32) {
    CHILDREN.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
}

pub(crate) fn unregister(pid: u32) {
    CHILDREN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|&p| p != pid);
}

/// An emulated cluster that exists while this value does.
pub(crate) struct Lab {
    netlab: PathBuf,
    /// Number of hosts.
    pub(crate) hosts: usize,
}

impl Lab {
    /// Bring up `hosts` hosts at `rate` (removing any earlier lab first).
    pub(crate) fn up(netlab: &Path, hosts: usize, rate: &str) -> Result<Lab, String> {
        Lab::up_with(netlab, hosts, rate, &[])
    }

    /// Bring up `hosts` hosts at `rate` with more `netlab.sh up` options
    /// (`--slow H RATE2`, `--racks R --uplink RATE3`).
    pub(crate) fn up_with(
        netlab: &Path,
        hosts: usize,
        rate: &str,
        options: &[String],
    ) -> Result<Lab, String> {
        let _ = Command::new("bash")
            .arg(netlab)
            .arg("down")
            .stderr(Stdio::null())
            .status();
        let status = lab_script(netlab)
            .args(["up", &hosts.to_string(), rate])
            .args(options)
            .status()
            .map_err(|e| format!("running {}: {e}", netlab.display()))?;
        if !status.success() {
            return Err(format!(
                "netlab.sh up {hosts} {rate} {} failed ({status})",
                options.join(" ")
            ));
        }
        Ok(Lab {
            netlab: netlab.to_path_buf(),
            hosts,
        })
    }

    /// The address of host `i`.
    pub(crate) fn addr(i: usize) -> String {
        format!("10.77.0.{}", i + 1)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(&self.netlab).arg("down").status();
    }
}

/// One event of one process: its rank and the JSON object it printed, or
/// `None` once its stdout closed.
type Event = (usize, Option<Value>);

/// Processes `rdmc member --bench` (or `rdmc-bench tcp-copy`), one per lab host,
/// rank 0 driven through its stdin.
pub(crate) struct Cluster {
    children: Vec<Child>,
    root_stdin: Option<ChildStdin>,
    events: Receiver<Event>,
    /// Each rank's CPU seconds at its event of the latest [`Sample`] (at
    /// `ready` before the first).
    cpu: Vec<f64>,
    next_seq: u64,
    exited: Vec<bool>,
    label: String,
    /// Events other than `ready` that came while waiting for every rank
    /// to be ready (a workload's first writes), for [`Cluster::run_to_close`].
    early: Vec<(usize, Value)>,
    /// Every receiver said at `ready` that it prints `checked` once a
    /// large message passed its check (`rdmc member --bench` does).
    announces_checks: bool,
}

/// The outcome of one `send SIZE COUNT`.
#[derive(Debug)]
pub(crate) struct Sample {
    /// From the root's send to the last receiver's delivery of the last message.
    pub(crate) seconds: f64,
    /// CPU seconds each rank used since its previous event.
    pub(crate) cpu: Vec<f64>,
    /// The root's `sent` event.
    pub(crate) sent: Value,
    /// Each receiver's `delivered` event of the last message (index = rank).
    pub(crate) delivered: Vec<Value>,
}

/// The receivers' events of a series, by (rank, sequence number).
#[derive(Debug, Default)]
struct SeriesEvents {
    /// Each receiver's `delivered` event.
    delivered: HashMap<(usize, u64), Value>,
    /// Each receiver's `checked` (the message passed its check).
    checked: HashSet<(usize, u64)>,
}

impl SeriesEvents {
    /// Keep `event` if it is a receiver's `delivered`.
    fn keep_delivered(&mut self, rank: usize, event: Value) {
        if rank > 0
            && event["event"] == "delivered"
            && let Some(seq) = event["seq"].as_u64()
        {
            self.delivered.insert((rank, seq), event);
        }
    }

    /// Whether every receiver of a group of `ranks` ranks delivered `seq`.
    fn all_delivered(&self, ranks: usize, seq: u64) -> bool {
        (1..ranks).all(|rank| self.delivered.contains_key(&(rank, seq)))
    }

    /// Whether every receiver of a group of `ranks` ranks checked `seq`.
    fn all_checked(&self, ranks: usize, seq: u64) -> bool {
        (1..ranks).all(|rank| self.checked.contains(&(rank, seq)))
    }
}

/// What one sample of [`Cluster::measure_series`] waits for before the
/// next command: the root's `sent` of the sample's first message, then the
/// root's acknowledgement or every receiver's delivery of its last message
/// and, for a large message, every receiver's `checked` of the last one.
#[derive(Debug)]
struct SampleWait {
    first: u64,
    last: u64,
    /// Ranks in the group, the root (rank 0) included.
    ranks: usize,
    /// Receivers check this size on a thread of their own and say `checked`.
    large: bool,
    /// The root's `sent` of `first`, once it came.
    root: Option<Value>,
}

impl SampleWait {
    /// Take one event of rank `rank`.
    fn take(&mut self, rank: usize, event: Value, events: &mut SeriesEvents) {
        if rank == 0 && event["event"] == "sent" && event["seq"] == self.first {
            self.root = Some(event);
        } else if event["event"] == "checked" {
            if let Some(seq) = event["seq"].as_u64() {
                events.checked.insert((rank, seq));
            }
        } else {
            events.keep_delivered(rank, event);
        }
    }

    /// Whether the next command may go.
    fn done(&self, events: &SeriesEvents) -> bool {
        let Some(root) = &self.root else {
            return false;
        };
        (root["acknowledged"] == true || events.all_delivered(self.ranks, self.last))
            && (!self.large || events.all_checked(self.ranks, self.last))
    }
}

impl Sample {
    /// The sample of the root's `sent` event whose last message is `last`,
    /// taking each receiver's `delivered` event of `last` out of
    /// `delivered` (by rank and sequence number). `cpu` holds each rank's
    /// CPU seconds at its previous sample's event and is moved on to this
    /// one's.
    fn of(
        sent: Value,
        last: u64,
        delivered: &mut HashMap<(usize, u64), Value>,
        cpu: &mut [f64],
    ) -> Result<Sample, String> {
        let n = cpu.len();
        let mut events = vec![Value::Null; n];
        for (rank, slot) in events.iter_mut().enumerate().skip(1) {
            *slot = delivered
                .remove(&(rank, last))
                .ok_or_else(|| format!("rank {rank} did not report message {last}"))?;
        }
        let t0 = sent["t"].as_u64().ok_or("a sent event without t")?;
        let t1 = events
            .iter()
            .filter_map(|d| d["t"].as_u64())
            .max()
            .ok_or("no delivered event")?;
        let used = (0..n)
            .map(|rank| {
                let event = if rank == 0 { &sent } else { &events[rank] };
                let now = event["cpu"].as_f64().unwrap_or(cpu[rank]);
                let used = (now - cpu[rank]).max(0.0);
                cpu[rank] = now;
                used
            })
            .collect();
        Ok(Sample {
            seconds: t1.saturating_sub(t0) as f64 / 1e9,
            cpu: used,
            sent,
            delivered: events,
        })
    }

    /// Each receiver's seconds from the root's send to its delivery of the
    /// last message (index = rank; NaN for the root and a missing event).
    pub(crate) fn per_receiver(&self) -> Vec<f64> {
        let t0 = self.sent["t"].as_u64();
        self.delivered
            .iter()
            .map(|d| match (t0, d["t"].as_u64()) {
                (Some(t0), Some(t1)) => t1.saturating_sub(t0) as f64 / 1e9,
                _ => f64::NAN,
            })
            .collect()
    }
}

impl Cluster {
    /// Start `program args(rank)` under `ip netns exec rdmc-h<hosts[rank]>`
    /// for each rank `r`, stderr to `logs/<label>-<rank>.log`, and wait
    /// until all are ready.
    pub(crate) fn start_on(
        hosts: &[usize],
        label: &str,
        logs: &Path,
        (program, args): (&Path, impl Fn(usize) -> Vec<String>),
        ready_timeout: Duration,
    ) -> Result<Cluster, String> {
        let n = hosts.len();
        let (tx, events) = mpsc::channel();
        let mut cluster = Cluster {
            children: Vec::new(),
            root_stdin: None,
            events,
            cpu: vec![0.0; n],
            next_seq: 0,
            exited: vec![false; n],
            label: label.to_owned(),
            early: Vec::new(),
            announces_checks: n > 1,
        };
        // Receivers first, so they listen by the time the root connects.
        for rank in (0..n).rev() {
            let log = std::fs::File::create(logs.join(format!("{label}-{rank}.log")))
                .map_err(|e| format!("creating a log file: {e}"))?;
            let mut child = Command::new("ip")
                .args(["netns", "exec", &format!("rdmc-h{}", hosts[rank])])
                .arg(program)
                .args(args(rank))
                .stdin(if rank == 0 {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stdout(Stdio::piped())
                .stderr(log)
                .spawn()
                .map_err(|e| format!("starting rank {rank} of {label}: {e}"))?;
            register(child.id());
            if rank == 0 {
                cluster.root_stdin = child.stdin.take();
            }
            let stdout = child.stdout.take().expect("stdout is piped");
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if let Ok(v) = serde_json::from_str::<Value>(&line)
                        && tx.send((rank, Some(v))).is_err()
                    {
                        return;
                    }
                }
                let _ = tx.send((rank, None));
            });
            cluster.children.push(child);
        }
        let mut ready = vec![false; n];
        let deadline = Instant::now() + ready_timeout;
        while ready.iter().any(|r| !r) {
            let (rank, event) = cluster.next_event(deadline)?;
            if event["event"] == "ready" {
                ready[rank] = true;
                cluster.cpu[rank] = event["cpu"].as_f64().unwrap_or(0.0);
                if rank > 0 && event["checks"] != "announced" {
                    cluster.announces_checks = false;
                }
            } else {
                cluster.early.push((rank, event));
            }
        }
        Ok(cluster)
    }

    /// The next event of any rank; an error for an `error` event, an exit
    /// or the deadline passing.
    fn next_event(&mut self, deadline: Instant) -> Result<(usize, Value), String> {
        match self.next_event_or_exit(deadline)? {
            (rank, Some(event)) => Ok((rank, event)),
            (rank, None) => Err(format!(
                "{} rank {rank} exited unexpectedly (see its log)",
                self.label
            )),
        }
    }

    /// The next event of any rank, `None` meaning the rank exited; an error
    /// for an `error` event or the deadline passing.
    fn next_event_or_exit(&mut self, deadline: Instant) -> Result<Event, String> {
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.events.recv_timeout(wait) {
            Ok((rank, Some(event))) => {
                if event["event"] == "error" {
                    return Err(format!(
                        "{} rank {rank}: {}",
                        self.label,
                        event["error"].as_str().unwrap_or("error")
                    ));
                }
                Ok((rank, Some(event)))
            }
            Ok((rank, None)) => {
                self.exited[rank] = true;
                Ok((rank, None))
            }
            Err(RecvTimeoutError::Timeout) => Err(format!("{}: timed out", self.label)),
            Err(RecvTimeoutError::Disconnected) => Err(format!("{}: all exited", self.label)),
        }
    }

    /// `samples` times: send `count` messages of `size` bytes back to back
    /// and wait until every receiver has the last one; one [`Sample`] each.
    ///
    /// When the root's `sent` event says `acknowledged` (the rdmc root
    /// prints it only once every receiver's application holds the
    /// messages) the next command goes out on it, and the receivers' events, which
    /// they hold until the group is quiet, are collected after the last
    /// sample: nothing is read from the receivers while a message is on its
    /// way. Otherwise (the unicast baseline) each sample waits for them.
    pub(crate) fn measure_series(
        &mut self,
        size: u64,
        count: u64,
        samples: usize,
        timeout: Duration,
    ) -> Result<Vec<Sample>, String> {
        let n = self.children.len();
        // Each sample's root event, and every receiver event by (rank, seq).
        let mut sent: Vec<Value> = Vec::with_capacity(samples);
        let mut lasts: Vec<u64> = Vec::with_capacity(samples);
        let mut events = SeriesEvents::default();
        // Receivers check a large message on a thread at idle priority and
        // say `checked` once it passed: the next command waits for that,
        // so that no check shares the cores with a measured transfer.
        let large = self.announces_checks && size > rdmc_cli::bench_protocol::CHECK_INLINE as u64;
        for _ in 0..samples {
            let first = self.next_seq;
            let last = first + count - 1;
            self.next_seq += count;
            let stdin = self
                .root_stdin
                .as_mut()
                .ok_or("the root's stdin is closed")?;
            writeln!(stdin, "send {size} {count}")
                .and_then(|()| stdin.flush())
                .map_err(|e| format!("{}: commanding the root: {e}", self.label))?;
            let deadline = Instant::now() + timeout;
            let mut wait = SampleWait {
                first,
                last,
                ranks: n,
                large,
                root: None,
            };
            while !wait.done(&events) {
                let (rank, event) = self.next_event(deadline)?;
                wait.take(rank, event, &mut events);
            }
            sent.push(
                wait.root
                    .expect("a sample is done only with the root's event"),
            );
            lasts.push(last);
        }
        let deadline = Instant::now() + timeout;
        while !lasts.iter().all(|&last| events.all_delivered(n, last)) {
            let (rank, event) = self.next_event(deadline)?;
            events.keep_delivered(rank, event);
        }
        let mut delivered = events.delivered;
        sent.into_iter()
            .zip(lasts)
            .map(|(sent, last)| Sample::of(sent, last, &mut delivered, &mut self.cpu))
            .collect()
    }

    /// Every event until each rank has printed `closed` (processes that run
    /// a workload on their own and close when it is done), in arrival
    /// order; an error for an `error` event, a rank exiting before it
    /// closed, or `timeout` passing. The processes are reaped.
    pub(crate) fn run_to_close(mut self, timeout: Duration) -> Result<Vec<(usize, Value)>, String> {
        let deadline = Instant::now() + timeout;
        let mut events = std::mem::take(&mut self.early);
        let mut closed = vec![false; self.children.len()];
        for (rank, event) in &events {
            if event["event"] == "closed" {
                closed[*rank] = true;
            }
        }
        let outcome = loop {
            if closed.iter().all(|c| *c) {
                break Ok(events);
            }
            match self.next_event_or_exit(deadline) {
                Ok((rank, Some(event))) => {
                    if event["event"] == "closed" {
                        closed[rank] = true;
                    }
                    events.push((rank, event));
                }
                Ok((rank, None)) if !closed[rank] => {
                    break Err(format!(
                        "{} rank {rank} exited before it closed (see its log)",
                        self.label
                    ));
                }
                Ok(_) => {}
                Err(e) => break Err(e),
            }
        };
        self.reap();
        outcome
    }

    /// Close the group and wait for every process to exit.
    pub(crate) fn close(mut self) -> Result<(), String> {
        let outcome = self.close_inner();
        self.reap();
        outcome
    }

    fn close_inner(&mut self) -> Result<(), String> {
        if let Some(mut stdin) = self.root_stdin.take() {
            let _ = writeln!(stdin, "close");
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut closed = vec![false; self.children.len()];
        while closed.iter().any(|c| !c) {
            match self.next_event_or_exit(deadline)? {
                (rank, Some(event)) if event["event"] == "closed" => closed[rank] = true,
                (rank, None) if !closed[rank] => {
                    return Err(format!(
                        "{} rank {rank} exited without closing (see its log)",
                        self.label
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Wait a little for each process, then kill what is left.
    fn reap(&mut self) {
        self.root_stdin = None;
        let deadline = Instant::now() + Duration::from_secs(10);
        for child in &mut self.children {
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
            unregister(child.id());
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.reap();
    }
}

/// Cumulative CPU times of the whole machine, from `/proc/stat`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CpuTimes {
    idle: u64,
    total: u64,
}

impl CpuTimes {
    /// Read them now (zeros if `/proc/stat` cannot be read).
    pub(crate) fn now() -> CpuTimes {
        let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let fields: Vec<u64> = text
            .lines()
            .find(|l| l.starts_with("cpu "))
            .map(|l| {
                l.split_whitespace()
                    .skip(1)
                    .filter_map(|f| f.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        // user nice system idle iowait irq softirq steal (guest is in user).
        let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
        let total = fields.iter().take(8).sum();
        CpuTimes { idle, total }
    }

    /// The fraction of the machine's CPU time idle since `earlier`.
    pub(crate) fn idle_since(&self, earlier: &CpuTimes) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total)?;
        let idle = self.idle.checked_sub(earlier.idle)?;
        (total > 0).then(|| idle as f64 / total as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn idle_fraction_from_two_readings() {
        let a = CpuTimes {
            idle: 100,
            total: 400,
        };
        let b = CpuTimes {
            idle: 175,
            total: 500,
        };
        assert_eq!(b.idle_since(&a), Some(0.75));
        assert_eq!(a.idle_since(&b), None);
        assert_eq!(a.idle_since(&a), None);
        let now = CpuTimes::now();
        assert!(now.total >= now.idle);
    }

    #[test]
    fn a_sample_takes_the_latest_receiver_and_each_ranks_cpu_since_its_last_sample() {
        let sent = |t: u64, cpu: f64| json!({"event": "sent", "t": t, "cpu": cpu});
        let delivered = |seq: u64, t: u64, cpu: f64| json!({"event": "delivered", "seq": seq, "t": t, "cpu": cpu});
        let mut events = HashMap::new();
        for (rank, t, cpu) in [(1, 1_500, 0.25), (2, 1_900, 0.5)] {
            events.insert((rank, 4), delivered(4, t, cpu));
        }
        // An event of another message stays for its own sample.
        events.insert((1, 5), delivered(5, 9_000, 0.3));
        let mut cpu = vec![1.0, 0.125, 0.5];
        let sample = Sample::of(sent(1_000, 1.5), 4, &mut events, &mut cpu).unwrap();
        assert_eq!(sample.seconds, 900e-9);
        assert_eq!(sample.cpu, [0.5, 0.125, 0.0]);
        assert_eq!(cpu, [1.5, 0.25, 0.5]);
        assert_eq!(sample.per_receiver()[1], 500e-9);
        assert_eq!(events.len(), 1);
        // A receiver that did not report the message is an error, not a
        // sample without it.
        let missing = Sample::of(sent(8_000, 1.75), 5, &mut events, &mut cpu);
        assert!(missing.unwrap_err().contains("rank 2"));
    }

    /// One sample of messages 10..=12 in a group of 3 ranks.
    fn wait(large: bool) -> SampleWait {
        SampleWait {
            first: 10,
            last: 12,
            ranks: 3,
            large,
            root: None,
        }
    }

    fn sent(acknowledged: bool) -> Value {
        json!({"event": "sent", "seq": 10, "acknowledged": acknowledged})
    }

    fn delivered(seq: u64) -> Value {
        json!({"event": "delivered", "seq": seq})
    }

    fn checked(seq: u64) -> Value {
        json!({"event": "checked", "seq": seq})
    }

    #[test]
    fn a_small_sample_ends_once_every_receiver_has_the_last_message() {
        let mut events = SeriesEvents::default();
        let mut w = wait(false);
        // Deliveries may come before the root's event; earlier messages
        // do not count.
        w.take(1, delivered(12), &mut events);
        w.take(2, delivered(11), &mut events);
        assert!(!w.done(&events), "no root event yet");
        w.take(0, sent(false), &mut events);
        assert!(!w.done(&events), "rank 2 lacks message 12");
        w.take(2, delivered(12), &mut events);
        assert!(w.done(&events));
        assert_eq!(w.root.as_ref().unwrap()["seq"], 10);
    }

    #[test]
    fn an_acknowledged_send_ends_a_small_sample_at_once() {
        let mut events = SeriesEvents::default();
        let mut w = wait(false);
        // Another sample's root event is not this one's.
        w.take(
            0,
            json!({"event": "sent", "seq": 7, "acknowledged": true}),
            &mut events,
        );
        assert!(!w.done(&events));
        w.take(0, sent(true), &mut events);
        assert!(w.done(&events));
    }

    #[test]
    fn a_large_sample_waits_for_every_receivers_check_of_its_last_message() {
        let mut events = SeriesEvents::default();
        let mut w = wait(true);
        w.take(0, sent(true), &mut events);
        w.take(1, delivered(12), &mut events);
        w.take(2, delivered(12), &mut events);
        assert!(!w.done(&events), "nothing checked");
        w.take(1, checked(12), &mut events);
        w.take(2, checked(11), &mut events);
        // The root's own word does not count either.
        w.take(0, checked(12), &mut events);
        assert!(!w.done(&events), "rank 2 checked only message 11");
        w.take(2, checked(12), &mut events);
        assert!(w.done(&events));
        // `checked` events are not deliveries.
        assert_eq!(events.delivered.len(), 2);
    }
}
