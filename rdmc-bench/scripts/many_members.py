#!/usr/bin/env python3
"""many_members.py: how N `rdmc member` processes on one machine form a cluster.

For every N of --nodes and every run: start N `rdmc member` processes on
loopback (rank r at 127.0.0.1:--base-port+r, below the ephemeral range),
rank 0 multicasting one random file of --size with the CLI's default
algorithm (the binomial pipeline), and record

  wall_s                      first process started .. last process exited
  max_sockets_per_process     the most sockets (fds linked to `socket:[...]`)
  median_sockets_per_process  a process held; the median over the processes
  ok                          all exited 0, every receiver's `0.bin` == input
  failures, first_error       how many members failed; the last stderr lines
                              of the first to fail (e.g. "stood still ...")
  idle_before, others_cpu_s   CPUs idle before the run (it waits for 90%, up to
                              --wait-idle s); CPU s others used during the run

Every run is bounded by --timeout, after which the processes this script
started (only those, by PID) are killed; temp dirs and processes are cleaned
up on every exit path. Python 3 standard library only; Linux (/proc, pidfd).

Usage (all options: --help):
  many_members.py --binary PATH [--nodes 64,128,256] [--runs 5] [--size 1MiB]
      [--timeout 120] [--json OUT] [--label NAME] [-- EXTRA MEMBER ARGS...]
e.g. many_members.py --binary target/release/rdmc --nodes 256 --runs 3 \\
      --json 256-ft30.json --label ft30 -- --failure-timeout 30 --connect-timeout 60
"""

import argparse
import collections
import json
import os
import re
import resource
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

SCAN_ALWAYS = 64  # a process with at most this many fds is cheap to scan
UNITS = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "gib": 1 << 30}


def parse_size(text):
    """'1MiB', '64KiB', '64K', '1000' -> bytes (binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(m.group(1)) * UNITS[m.group(2).lower()]


def count_sockets(pid):
    """Open sockets of process pid: its fds whose link starts `socket:`."""
    n, d = 0, f"/proc/{pid}/fd"
    try:
        names = os.listdir(d)
    except OSError:
        return 0  # gone
    for name in names:
        try:
            n += os.readlink(f"{d}/{name}").startswith("socket:")
        except OSError:
            pass  # closed meanwhile
    return n


class Sampler:
    """Every process's most open fds and most sockets. Counting sockets reads
    every fd's link (~5 us): for 256 members of 260 sockets ~0.3 s of CPU, a
    load that starves the members. So a sample stats /proc/PID/fd (its size:
    the open fds, Linux >= 6.2; 0 before) and counts sockets only at a new
    peak of fds that held for one sample (always with few fds or on old kernels)."""

    def __init__(self, n):
        self.fds, self.sockets, self.last, self.counted = [0] * n, [0] * n, [-1] * n, [-1] * n

    def sample(self, r, pid):
        try:
            total = os.stat(f"/proc/{pid}/fd").st_size
        except OSError:
            return  # gone
        self.fds[r] = max(self.fds[r], total)
        if total == 0 or total > self.counted[r] and (
                total == self.last[r] or total <= SCAN_ALWAYS):
            self.sockets[r] = max(self.sockets[r], count_sockets(pid))
            self.counted[r] = total
        self.last[r] = total


def cpu_times():
    """The machine's CPU seconds so far (/proc/stat): busy, user .. steal (as a
    member's rusage may hold softirq and steal time), and idle with iowait."""
    with open("/proc/stat") as f:
        v = [int(x) / os.sysconf("SC_CLK_TCK") for x in f.readline().split()[1:9]]
    return sum(v) - v[3] - v[4], v[3] + v[4]


def our_cpu():
    """CPU seconds of this script and its reaped children (the members)."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def last_lines(path, lines=5):
    """The last non-empty lines of a file (a member's stderr)."""
    try:
        with open(path, errors="replace") as f:
            return [line.rstrip("\n") for line in f if line.strip()][-lines:]
    except OSError:
        return []


def run_once(args, n, run, extra):
    """One cluster of n members: start, sample, wait, check. The result dict."""
    tmp = tempfile.mkdtemp(prefix=f"rdmc-many-{n}-")
    path = lambda name: os.path.join(tmp, name)  # noqa: E731
    procs, pidfds, gate = {}, {}, None  # rank -> Popen, pidfd -> rank
    try:
        subprocess.run([args.binary, "keygen", path("key")], check=True, stdout=subprocess.DEVNULL)
        data = os.urandom(args.size)
        with open(path("payload"), "wb") as f, open(path("members"), "w") as m:
            f.write(data)
            m.writelines(f"127.0.0.1:{args.base_port + r}\n" for r in range(n))
        # Rank order, root first (members retry connecting until --connect-
        # timeout). --start gate: each child, a shell reading a pipe on its
        # stdin, waits till all are started, then execs rdmc (same PID); the
        # clock starts at that release, not counting the launcher's pace
        # (seconds for 128 on 2 cores, slowed by the members already running).
        gate = os.pipe() if args.start == "gate" else None
        wrap = ["/bin/sh", "-c", 'read -r _; exec "$0" "$@" </dev/null'] if gate else []
        # A pidfd turns readable when its process exits: exact exit times.
        poller, start = select.poll(), time.monotonic()
        for r in range(n):
            cmd = [*wrap, args.binary, "member", "--members", path("members"), "--rank", str(r),
                   "--key-file", path("key"), *extra]
            cmd += [path("payload")] if r == 0 else ["--out", path(f"out{r}")]
            with open(path(f"stdout{r}"), "wb") as out, open(path(f"stderr{r}"), "wb") as err:
                procs[r] = subprocess.Popen(cmd, stdin=gate[0] if gate else subprocess.DEVNULL,
                                            stdout=out, stderr=err)
            pfd = os.pidfd_open(procs[r].pid)
            pidfds[pfd] = r
            poller.register(pfd, select.POLLIN)
        spawn_s = time.monotonic() - start
        if gate:
            start = time.monotonic()
            for fd in gate:
                os.close(fd)  # EOF: every child goes on to exec rdmc
            gate = None
        sampler, exited, cpu0 = Sampler(n), {}, time.process_time()
        deadline, next_sample = start + args.timeout, time.monotonic()
        while len(exited) < n and time.monotonic() < deadline:
            if time.monotonic() >= next_sample:  # sample every --sample-ms
                for r in set(range(n)) - exited.keys():
                    sampler.sample(r, procs[r].pid)
                next_sample = time.monotonic() + args.sample_ms / 1000
            wait_ms = max(0, min(next_sample, deadline) - time.monotonic()) * 1000
            for pfd, _ in poller.poll(wait_ms):
                exited[pidfds[pfd]] = time.monotonic()
                procs[pidfds[pfd]].wait()
                poller.unregister(pfd)
        timed_out, monitor_cpu = len(exited) < n, time.process_time() - cpu0
        wall = (time.monotonic() if timed_out else max(exited.values())) - start
        # The verdict: exit codes, then every receiver's copy against the input.
        failed = {}
        for r, p in procs.items():
            if r not in exited:
                failed[r] = "killed at --timeout"  # (by the finally below)
            elif p.returncode != 0:
                failed[r] = f"exit {p.returncode}"
            elif r != 0:
                try:
                    with open(path(f"out{r}/0.bin"), "rb") as f:
                        if f.read() != data:
                            failed[r] = "output differs"
                except OSError:
                    failed[r] = "output missing"
        first = min(failed, key=lambda r: exited.get(r, float("inf")), default=None)
        said = collections.Counter(  # the failed members' last words, numbers as N
            re.sub(r"\d+", "N", "".join(last_lines(path(f"stderr{r}"), 1)) or failed[r])
            for r in failed)
        return {"nodes": n, "run": run, "ok": not failed, "wall_s": round(wall, 3),
                "max_sockets_per_process": max(sampler.sockets),
                "median_sockets_per_process": statistics.median(sampler.sockets),
                "max_fds_per_process": max(sampler.fds),
                "failures": len(failed), "failed_ranks": sorted(failed),
                "first_error": None if first is None else {
                    "rank": first, "reason": failed[first],
                    "stderr_tail": last_lines(path(f"stderr{first}"))},
                "error_kinds": dict(said.most_common(5)), "timed_out": timed_out,
                "spawn_s": round(spawn_s, 3), "monitor_cpu_s": round(monitor_cpu, 3)}
    finally:
        for fd in list(pidfds) + list(gate or ()):
            os.close(fd)
        for p in procs.values():  # on every exit path: no member outlives us
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def summarize(n, runs):
    """Per-N summary: wall over the ok runs (over all runs if none was ok)."""
    ok = [r for r in runs if r["ok"]]
    walls = [r["wall_s"] for r in (ok or runs)]
    return {"nodes": n, "runs": len(runs), "ok": len(ok), "wall_over": "ok" if ok else "all",
            "wall_median_s": round(statistics.median(walls), 3),
            "wall_min_s": min(walls), "wall_max_s": max(walls),
            "max_sockets_per_process": max(r["max_sockets_per_process"] for r in runs)}


def main():
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    argv, extra = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Arguments after -- go to every `rdmc member`.")
    ap.add_argument("--binary", required=True, help="the rdmc binary")
    ap.add_argument("--nodes", default="64,128,256", help="cluster sizes, comma-separated")
    ap.add_argument("--runs", type=int, default=5, help="runs per cluster size")
    ap.add_argument("--size", type=parse_size, default=1 << 20, help="bytes to send (1MiB, 64KiB)")
    ap.add_argument("--base-port", type=int, default=20000, help="rank r listens on base+r")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a run may take")
    ap.add_argument("--start", choices=["gate", "sequential"], default="gate",
                    help="members released at once when all are forked (default), or as forked")
    ap.add_argument("--wait-idle", type=float, default=300.0, help="seconds to wait for idle CPUs")
    ap.add_argument("--sample-ms", type=float, default=50.0, help="sampling period")
    ap.add_argument("--json", help="write the results here (rewritten after every run)")
    ap.add_argument("--label", default="", help="a name for this measurement")
    args = ap.parse_args(argv)
    args.binary = os.path.abspath(args.binary)
    nodes = [int(x) for x in args.nodes.split(",") if x.strip()]
    if not os.access(args.binary, os.X_OK) or not nodes or min(nodes) < 2:
        ap.error("--binary: an executable; --nodes: at least 2 (a root and a receiver)")
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])  # the first ephemeral (outgoing) port
    if args.base_port + max(nodes) > low:
        ap.error(f"ports {args.base_port}..{args.base_port + max(nodes) - 1} reach the "
                 f"ephemeral range (from {low}): choose a lower --base-port")
    # A member holds a socket per peer: raise our (the children's) fd limit.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY:  # (the kernel refuses an unlimited soft one)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    # SIGTERM/SIGHUP unwind like Ctrl-C, so the finally blocks clean up.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: sys.exit(128 + s))

    result = {"label": args.label, "binary": args.binary, "extra_args": extra,
              "start": args.start, "size": args.size, "timeout_s": args.timeout,
              "sample_ms": args.sample_ms, "cpus": os.cpu_count(), "kernel": os.uname().release,
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "runs": [], "summary": []}

    def save():  # after every run, so an interrupted campaign keeps its runs
        if args.json:
            with open(args.json + ".tmp", "w") as f:
                json.dump(result, f, indent=1)
            os.replace(args.json + ".tmp", args.json)

    print(f"{'N':>5} {'run':>3} {'ok':>3} {'wall s':>8} {'sock max':>8} {'sock med':>8}  error")
    for n in nodes:
        runs = []
        for run in range(args.runs):
            # Other work on the machine skews a run: wait (up to --wait-idle s)
            # for a second of idle CPUs, and count what others use meanwhile.
            waited = time.monotonic()
            while True:
                (b0, i0), _ = cpu_times(), time.sleep(1)
                (b1, i1), ours = cpu_times(), our_cpu()
                idle = (i1 - i0) / max(i1 - i0 + b1 - b0, 1e-9)
                if idle >= 0.9 or time.monotonic() - waited >= args.wait_idle:
                    break
            waited = round(time.monotonic() - waited, 1)
            r = run_once(args, n, run, extra)
            r.update(idle_before=round(idle, 2), waited_s=waited,
                     others_cpu_s=round(cpu_times()[0] - b1 - (our_cpu() - ours), 2))
            runs.append(r)
            result["runs"].append(r)
            e = r["first_error"]
            note = e and (f"{r['failures']} failed; rank {e['rank']} {e['reason']}: "
                          + (e["stderr_tail"] or [""])[-1])
            print(f"{n:>5} {run:>3} {'yes' if r['ok'] else 'NO':>3} {r['wall_s']:>8.2f} "
                  f"{r['max_sockets_per_process']:>8} {r['median_sockets_per_process']:>8}  "
                  f"{note or ''}", flush=True)
            save()
        result["summary"].append(summarize(n, runs))
        save()
    print(f"\n{'N':>5} {'ok':>5} {'median wall s':>14} {'range s':>16} {'sockets/proc':>12}")
    for s in result["summary"]:
        print(f"{s['nodes']:>5} {s['ok']:>2}/{s['runs']:<2} {s['wall_median_s']:>14.2f} "
              f"{s['wall_min_s']:>7.2f}..{s['wall_max_s']:<7.2f} {s['max_sockets_per_process']:>12}"
              + ("" if s["ok"] else "  (wall of failed runs)"))
    return 0 if all(s["ok"] == s["runs"] for s in result["summary"]) else 1


if __name__ == "__main__":
    sys.exit(main())
