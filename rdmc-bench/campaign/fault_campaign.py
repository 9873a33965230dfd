#!/usr/bin/env python3
"""fault_campaign.py: randomized faults against multi-process `rdmc member` groups.

Every run starts a group of 3-6 `rdmc member` processes, one per network
namespace of a lab of its own (namespaces rdfc-h0.., veth pairs into the
bridge rdfc-br0, addresses 10.78.0.0/24; a second bridge rdfc-br1 for
partitions), with a random algorithm, block size, number and sizes of files
and link rate, injects one fault, and checks the outcome. Fault kinds:

  none       control run, no fault
  kill       kill -9 of a random member (the root or not) at a random moment
  stop       SIGSTOP of a random member for failure timeout + 1.5 s, then SIGCONT
  link       a member's host link taken down (ip link set ... down)
  partition  the bridge split in two: some members moved to a second bridge
  disk       a receiver's output directory is a tmpfs smaller than the data
  flip       one byte flipped on the way to a receiver, by an on-path relay of
             this script's own (the receiver lives in a namespace of its own
             whose every link passes through the relay)
  restart    kill -9 of a random member (the root or not) at a random moment,
             then the same member started again (same namespace, address,
             rank and arguments, a fresh output directory) 0-0.5 s after the
             kill, once the killed process is gone; every member of the run
             has --linger (failure timeout + 4 s), so that the survivors are
             still there to let the new run in, and --connections all, so
             that every survivor connects to the new run

Checks after every run (each failed check is a violation, named by its class):

  success_without_data  a member exited 0 although some member does not hold
                        every message byte-identically (outputs compared with
                        the inputs; a member killed before writing counts); a
                        restarted member's exit 0 answers for its own fresh
                        output and the other members', not its killed run's
  flip_undetected       a byte was flipped on the wire, yet every member exited 0
  control_failed        a member failed in a run without a fault
  unnamed               a survivor of a fault exited non-zero without naming a
                        member that failed (in "node N", "member N", "rank N",
                        "peer N", "NodeId(N)" or the member's address): the
                        killed, stopped, cut-off or full-disk member; for a
                        partition a member on the other side; for a flip any
                        other member (the link's far end)
  slow                  a survivor exited later than failure timeout + 1 s after
                        the fault (connect timeout + failure timeout + 1 s when
                        no member had reported progress yet at the fault); the
                        moment of a full disk is its receiver's exit, of a flip
                        the relay's report; after a flip only non-zero exits;
                        in a restart run (members linger) the moment its work
                        ended (its log's "group closed", "group failed" or
                        "group not created"), or its exit if earlier
  hang                  a member was still running at the run's wall-time bound
                        (then every process is killed); a restarted member that
                        had not ended its work (as above) within connect
                        timeout + failure timeout + 1 s of its start, unless
                        it went on to exit 0
  partial_file          a `.part` file left in an output directory (the
                        directory of a member killed with -9 excepted)
  not_readmitted        in a restart run, a member other than the victim still
                        running 2 s after the restart had not logged the
                        victim's "peer up" with a newer incarnation than its
                        first run's (tracing target rdmc::runtime) by then

A survivor is a member still running at the moment of the fault and not its
victim (the flip's receiver counts as a survivor: it must name a peer; in a
restart run a member only lingering after its work is none).
Control runs and faults that land after every member exited are checked for
the general promises only (success_without_data, hang, partial_file).

Deterministic from a seed: run i of `--seed S` has kind KINDS[i % len(KINDS)]
and draws everything else from its own seed; a run prints one JSON line, and
the summary lists violations with `--replay KIND:SEED` to rerun one alone.
Root only (namespaces, veth, tc, tmpfs). Cleans up namespaces, mounts and
processes on exit and on Ctrl-C. Python 3 standard library only.

Usage:
  fault_campaign.py [--runs N] [--seed S] [--kinds none,kill,...]
                    [--require none,kill,...] [--rdmc PATH] [--log FILE]
                    [--transport tcp|ofi] [--hogs N]
  fault_campaign.py --replay KIND:SEED [--rdmc PATH] [--transport ofi] [--hogs N]

The members' connect timeout grows with the machine's load (see
connect_timeout_for); --hogs N keeps N busy processes running to make a
loaded machine; --transport ofi runs the members on libfabric's tcp provider
(a build with --features ofi; every kind but flip and restart).
  fault_campaign.py --cleanup

Exit status: 0 when no run of a kind listed in --require had a violation
(violations of the other kinds are reported only), 1 otherwise, 2 on a usage
or setup error.
"""

import argparse
import fcntl
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import campaign_restart
from campaign_lab import (BRIDGE2, MAX_MEMBERS, NS_PREFIX, PRIVATE_NS, SUBNET, VETH_PREFIX, Lab,
                          host_addr, log, sh, start_relay)

KINDS = ["none", "kill", "stop", "link", "partition", "disk", "flip", "restart"]
# The kinds only the tcp transport can run, and why.
TCP_ONLY = {
    "flip": "its relay carries the members' TCP connections, not libfabric's",
    "restart": "only tcp lets a restarted member in again (a new incarnation)",
}
ALGORITHMS = ["sequential", "chain", "binomial-tree", "binomial-pipeline"]
BLOCK_SIZES = [4096, 16384, 65536, 262144, 1048576]


FAILURE_TIMEOUT = 1.0
# The members' connect timeout: CONNECT_TIMEOUT, or more on a loaded machine.
# Formation is CPU-bound work for processes that are still starting (a debug
# build's mesh of 5 members took up to 3 s at load 20 on 2 cores, about
# 0.3 s per unit of load per core); a fault-free run must not fail, so the
# timeout is twice that, CONNECT_PER_LOAD seconds per unit of load per core
# (the larger of the 1- and 5-minute averages), at least CONNECT_TIMEOUT and
# at most CONNECT_TIMEOUT_MAX. Each run records the value it used, and the
# members' formation times (`formed`), so the margin can be checked.
CONNECT_TIMEOUT = 3.0
CONNECT_PER_LOAD = 0.6
CONNECT_TIMEOUT_MAX = 12.0
# A run still going after RUN_WALL seconds, plus RUN_WALL_PER_MIB for every
# MiB it sends, has hung (a debug build on a loaded machine moves ~1 MiB/s).
RUN_WALL = 20.0
RUN_WALL_PER_MIB = 2.0
# In restart runs every member lingers this long after its work (its node,
# connections and logs kept), so that the survivors are there to let the
# restarted victim in; the run's wall-time bound grows accordingly.
LINGER = FAILURE_TIMEOUT + 4.0
# Blocks per message at most: a small block size is drawn for small messages.
MAX_BLOCKS = 512
# Examples of each violation class whose files are kept, unless told otherwise.
KEEP_EXAMPLES = 3

# A member named in an error: "node 3", "nodes 0, 1, 2", "node(s) 1, 2",
# "peers [1, 2]", "NodeId(4)". Every id of a list counts (a member that
# waited for "nodes 0, 1, 2" names 1 and 2 too).
CULPRIT_RE = re.compile(
    r"\b(?:node|member|rank|peer)s?(?:\(s\))?\s*[#:]?\s*(?:\[\s*)?"
    r"((?:NodeId\()?\d+\)?(?:\s*,\s*(?:NodeId\()?\d+\)?)*)"
    r"|NodeId\((\d+)\)",
    re.IGNORECASE,
)
ADDR_RE = re.compile(re.escape(SUBNET) + r"\.(\d+)")
PREFIX_RE = re.compile(r"^rdmc member \d+:\s*")
FORMED_RE = re.compile(r"mesh formed in (\d+) ms")


def current_load():
    """The larger of the 1- and 5-minute load averages and of the tasks
    runnable right now (which the averages follow only after a minute)."""
    running = 0
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("procs_running"):
                    running = int(line.split()[1])
    except OSError:
        pass
    return max(*os.getloadavg()[:2], running)


def connect_timeout_for(load, cpus):
    """The members' connect timeout at `load` (the load average) on `cpus`."""
    return round(min(CONNECT_TIMEOUT_MAX, max(CONNECT_TIMEOUT, CONNECT_PER_LOAD * load / cpus)), 1)


def formed_after(path):
    """How long the member's mesh took to form (seconds), from its log."""
    try:
        with open(path, errors="replace") as f:
            found = FORMED_RE.findall(f.read())
    except OSError:
        return None
    return int(found[-1]) / 1000 if found else None

# ------------------------------------------------------------------------ runs


def run_seed(master, index):
    h = hashlib.sha256(f"{master}:{index}".encode()).digest()
    return int.from_bytes(h[:4], "little")


def plan_run(kind, seed):
    """Everything a run does, drawn from its seed."""
    rng = random.Random(f"{kind}:{seed}")
    n = rng.randint(3, MAX_MEMBERS)
    files = rng.randint(1, 4)
    sizes = []
    for _ in range(files):
        r = rng.random()
        if r < 0.1:
            sizes.append(rng.randint(0, 100))
        elif r < 0.4:
            sizes.append(rng.randint(1, 256 * 1024))
        else:
            sizes.append(rng.randint(256 * 1024, 4 * 1024 * 1024))
    if kind in ("disk", "flip") and sum(sizes) < 256 * 1024:
        sizes[-1] += rng.randint(256 * 1024, 2 * 1024 * 1024)
    plan = {
        "kind": kind,
        "seed": seed,
        "members": n,
        "algorithm": rng.choice(ALGORITHMS),
        "block_size": rng.choice(
            [b for b in BLOCK_SIZES if max(sizes) <= b * MAX_BLOCKS] or BLOCK_SIZES[-1:]),
        "sizes": sizes,
        "rate_mbit": rng.choice([50, 100, 200, 400]),
        # below the ephemeral range (32768-): a connection of an earlier run
        # still closing cannot hold the port
        "port": 10000 + seed % 20000,
    }
    total = sum(sizes)
    # a moment within the transfer's expected span (plus process start-up)
    span = 0.3 + total * 8 / (plan["rate_mbit"] * 1e6) * 1.5
    plan["fault_at"] = round(rng.uniform(0.15, span), 3)
    if kind in ("kill", "stop", "link", "restart"):
        plan["victims"] = [rng.randrange(n)]
    elif kind == "partition":
        ranks = list(range(n))
        rng.shuffle(ranks)
        cut = rng.randint(1, n - 1)
        plan["victims"] = sorted(ranks[:cut])
    elif kind in ("disk", "flip"):
        plan["victims"] = [rng.randrange(1, n)]
    else:
        plan["victims"] = []
    if kind == "disk":
        plan["tmpfs_bytes"] = rng.randint(4096, max(4096, total // 2))
    if kind == "restart":
        plan["restart_delay"] = round(rng.uniform(0, 0.5), 3)
    if kind == "flip":
        plan["flip_after"] = rng.randint(200, max(201, int(total * 0.9)))
        plan["flip_mask"] = 1 << rng.randrange(8)
    return plan


def culprits_named(error):
    text = PREFIX_RE.sub("", error)
    named = {int(x) for a, b in CULPRIT_RE.findall(text) for x in re.findall(r"\d+", a or b)}
    named |= {int(m) - 1 for m in ADDR_RE.findall(text)}
    return named


def last_error(path):
    try:
        with open(path, errors="replace") as f:
            lines = [l.strip() for l in f if l.strip().startswith("rdmc member")]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def prepare_run(plan, workdir):
    """The run's directory: its input files (seeded), members file, key and
    receivers' output directories."""
    kind, n, seed = plan["kind"], plan["members"], plan["seed"]
    rng = random.Random(f"data:{seed}")
    run_dir = tempfile.mkdtemp(prefix=f"run-{kind}-{seed}-", dir=workdir)
    inputs = []
    for i, size in enumerate(plan["sizes"]):
        path = os.path.join(run_dir, f"in{i}")
        with open(path, "wb") as f:
            f.write(rng.randbytes(size))
        inputs.append(path)
    members_file = os.path.join(run_dir, "members")
    with open(members_file, "w") as f:
        for r in range(n):
            f.write(f"{host_addr(r)}:{plan['port']}\n")
    key_file = os.path.join(run_dir, "key")
    with open(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(rng.randbytes(32))
    outs = [os.path.join(run_dir, f"out{r}") for r in range(n)]
    for o in outs[1:]:
        os.makedirs(o, exist_ok=True)
    return run_dir, inputs, members_file, key_file, outs


def start_members(lab, plan, rdmc, files, options):
    """Every member, rank 0 sending the inputs: the processes and the paths
    of their stdouts and stderrs. options: (connect timeout, flip rank,
    transport)."""
    started = [start_member(lab, plan, rdmc, files, options, r) for r in range(plan["members"])]
    return tuple(list(x) for x in zip(*started))


def start_member(lab, plan, rdmc, files, options, r, again=""):
    """Member r's process, and the paths of its stdout and stderr; again is
    a suffix for the files (and the output directory) of a restart."""
    run_dir, inputs, members_file, key_file, outs = files
    connect_timeout, flip_rank, transport = options
    ns = PRIVATE_NS if r == flip_rank else f"{NS_PREFIX}{r}"
    cmd = ["ip", "netns", "exec", ns, rdmc, "member", "--members", members_file,
           "--rank", str(r), "--algorithm", plan["algorithm"],
           "--block-size", str(plan["block_size"]), "--key-file", key_file,
           "--connect-timeout", str(connect_timeout),
           "--failure-timeout", str(FAILURE_TIMEOUT)]
    logs = "off,rdmc::transport::mesh=info,rdmc::transport::tcp=info"
    if plan["kind"] == "restart":
        # Every member connected at start (not on demand): every survivor
        # then sees the restarted member's new run come up.
        cmd += ["--linger", str(LINGER), "--connections", "all"]
        logs += ",rdmc::runtime=info"  # peer up, group closed or failed
    if transport != "tcp":
        cmd += ["--transport", transport]
    cmd += inputs if r == 0 else ["--out", outs[r] + again]
    so = os.path.join(run_dir, f"stdout{r}{again}")
    se = os.path.join(run_dir, f"stderr{r}{again}")
    proc = lab.spawn(cmd, stdout=open(so, "w"), stderr=open(se, "w"),
                     env=dict(os.environ, RUST_LOG=logs, NO_COLOR="1"))
    return proc, so, se


def wall_bound(plan, connect_timeout):
    """The run's wall-time bound: a member still running then has hung."""
    bound = RUN_WALL + RUN_WALL_PER_MIB * sum(plan["sizes"]) / 2**20
    if plan["kind"] == "restart":
        # the survivors linger after their work; the restarted victim forms
        # its mesh, waits for its group until they leave, then lingers too
        bound += plan["restart_delay"] + connect_timeout + 2 * LINGER
    return bound


def watch(plan, procs, stdouts, t0, bound, restart):
    """Until every member exits (or the run's wall-time bound): each one's
    exit time, the fault injected at its moment; in a restart run the
    victim started again by restart() (which returns its process) once its
    delay is over and the killed process is gone. Returns exit_at,
    fault_time, the members running at the fault, whether any had reported
    progress, and the restarted process with its start and exit times."""
    kind, n, victims = plan["kind"], plan["members"], plan["victims"]
    exit_at = [None] * n
    # disk and flip faults happen when the data gets there: their moment is
    # known only afterwards (the full receiver's exit, the relay's report)
    fault_done = kind in ("none", "disk", "flip")
    fault_time = None
    running_at_fault = set()
    progressed_at_fault = False
    stop_until = restart_at = None
    again = {"proc": None, "at": None, "exit_at": None}
    while True:
        now = time.monotonic() - t0
        for r, p in enumerate(procs):
            if exit_at[r] is None and p.poll() is not None:
                exit_at[r] = now
        if again["proc"] is not None and again["exit_at"] is None and again["proc"].poll() is not None:
            again["exit_at"] = now
        if not fault_done and now >= plan["fault_at"]:
            fault_done = True
            fault_time = now
            running_at_fault = {r for r in range(n) if exit_at[r] is None}
            progressed_at_fault = any(os.path.getsize(s) > 0 for s in stdouts)
            inject(plan, procs)
            if kind == "stop":
                stop_until = now + FAILURE_TIMEOUT + 1.5
            if kind == "restart":
                restart_at = now + plan["restart_delay"]
        if stop_until is not None and now >= stop_until:
            try:
                os.kill(procs[victims[0]].pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            stop_until = None
        if restart_at is not None and now >= restart_at and exit_at[victims[0]] is not None:
            again["proc"], again["at"] = restart(), now
            restart_at = None
        waiting = stop_until is not None or restart_at is not None or (
            again["proc"] is not None and again["exit_at"] is None)
        if all(e is not None for e in exit_at) and not waiting:
            break
        if now > bound:
            break
        time.sleep(0.01)
    return exit_at, fault_time, running_at_fault, progressed_at_fault, again


def holdings(plan, inputs, outs, running_at_fault):
    """Who holds every message byte-identically (complete, by rank), and
    the members that left a temporary file behind (partial)."""
    kind, n, victims = plan["kind"], plan["members"], plan["victims"]
    expected = digests(inputs)
    complete = [True] * n
    partial = []
    for r in range(1, n):
        complete[r], names = holds(outs[r], expected)
        killed = kind in ("kill", "restart") and r in victims and r in running_at_fault
        if not killed and any(x.endswith(".part") for x in names):
            partial.append(r)
    return complete, partial


def digests(inputs):
    expected = []
    for path in inputs:
        with open(path, "rb") as f:
            expected.append(hashlib.sha256(f.read()).digest())
    return expected


def holds(out, expected):
    """Whether the output directory out holds every message (whose
    digests are expected) byte-identically, and the names in it."""
    complete = True
    for i, digest in enumerate(expected):
        try:
            with open(os.path.join(out, f"{i}.bin"), "rb") as f:
                if hashlib.sha256(f.read()).digest() != digest:
                    complete = False
        except OSError:
            complete = False
    try:
        names = os.listdir(out)
    except OSError:
        names = []
    # a message nobody sent is not holding the messages either
    if any(x.endswith(".bin") and x[:-4].isdigit() and int(x[:-4]) >= len(expected)
           for x in names):
        complete = False
    return complete, names


def judge(plan, outcome, connect_timeout):
    """The run's violations, and whether the fault was effective (it hit
    running members, and a flip run's bit was flipped). The restarted
    member of a restart run (outcome["again"]) is named "restarted"."""
    kind, n = plan["kind"], plan["members"]
    hung, codes, complete = outcome["hung"], outcome["codes"], outcome["complete"]
    running_at_fault, flipped = outcome["running_at_fault"], outcome["flipped"]
    ended, fault_time = outcome["ended"], outcome["fault_time"]
    again = outcome["again"]
    violations = []
    if hung or (again and again["hung"]):
        violations.append({"class": "hang",
                           "members": hung + (["restarted"] if again and again["hung"] else [])})
    succeeded = [r for r in range(n) if codes[r] == 0 and r not in hung]
    missing = [r for r in range(n) if not complete[r]]
    if again and again["code"] == 0:
        # the restarted member's success speaks for its own output, not for
        # what its killed run left
        succeeded.append("restarted")
        missing = [r for r in missing if r != plan["victims"][0] or codes[r] == 0]
        missing += [] if again["complete"] else ["restarted"]
    if succeeded and missing:
        violations.append({"class": "success_without_data", "succeeded": succeeded,
                           "missing": missing})
    if kind == "none" and any(c != 0 for c in codes):
        violations.append({"class": "control_failed",
                           "failed": [r for r in range(n) if codes[r] != 0]})
    if kind == "flip" and flipped and len(succeeded) == n:
        violations.append({"class": "flip_undetected"})
    partial = outcome["partial"] + (["restarted"] if again and again["partial"] else [])
    if partial:
        violations.append({"class": "partial_file", "members": partial})
    effective = kind != "none" and bool(running_at_fault) and (kind != "flip" or flipped)
    if effective:
        bound = FAILURE_TIMEOUT + 1.0
        if not outcome["progressed_at_fault"]:
            bound += connect_timeout
        late, unnamed = [], []
        for r in sorted(running_at_fault):
            blame = culprit_set(plan, r)
            if blame is None or r in hung:
                continue  # a victim itself: only the general checks apply
            # after a flip, a member that went on to exit 0 is already a
            # flip_undetected (or success_without_data) violation
            timed = kind != "flip" or codes[r] != 0
            # after a restart, survivors may go on with the victim's new run
            # (the restart came before their group was made): a success of
            # both is checked for the data, not timed
            timed = timed and not (again and again["code"] == 0 and codes[r] == 0)
            if timed and ended[r] - fault_time > bound:
                late.append({"member": r, "after": round(ended[r] - fault_time, 3)})
            if codes[r] != 0 and not (culprits_named(outcome["errors"][r]) & blame):
                unnamed.append(r)
        if late:
            violations.append({"class": "slow", "members": late, "bound": bound})
        if unnamed:
            violations.append({"class": "unnamed", "members": unnamed})
    if again:
        for v in campaign_restart.judge_restart(plan, outcome, again,
                                                connect_timeout + FAILURE_TIMEOUT + 1.0):
            same = [w for w in violations if w["class"] == v["class"]]
            if same:  # one violation of a class a run
                same[0]["members"] += v["members"]
            else:
                violations.append(v)
    return violations, effective


def execute(lab, plan, rdmc, workdir, transport="tcp"):
    kind, n, seed = plan["kind"], plan["members"], plan["seed"]
    victims = plan["victims"]
    files = prepare_run(plan, workdir)
    run_dir, inputs, _, _, outs = files

    lab.reset(plan["rate_mbit"])
    flip_rank = victims[0] if kind == "flip" else None
    relay = None
    if kind == "disk":
        lab.mount_tmpfs(outs[victims[0]], plan["tmpfs_bytes"])
    if kind == "flip":
        relay = start_relay(lab, plan, run_dir, flip_rank)

    load = current_load()
    connect_timeout = connect_timeout_for(load, os.cpu_count() or 1)
    options = (connect_timeout, flip_rank, transport)
    t0, wall0 = time.monotonic(), time.time()
    procs, stdouts, stderrs = start_members(lab, plan, rdmc, files, options)

    def restart():
        return start_member(lab, plan, rdmc, files, options, victims[0], again=".restart")[0]

    watched = watch(plan, procs, stdouts, t0, wall_bound(plan, connect_timeout), restart)
    exit_at, fault_time, running_at_fault, progressed_at_fault, again = watched
    wall = time.monotonic() - t0
    hung = [r for r in range(n) if exit_at[r] is None]
    again["hung"] = again["proc"] is not None and again["exit_at"] is None
    lab.kill_all()
    flipped = False
    if relay is not None:
        # the relay was killed with the others: read what it printed
        report = relay.stdout.read().split()
        if report[:1] == ["flipped"]:
            flipped = True
            fault_time = float(report[2]) - t0
        sh("ip", "netns", "del", PRIVATE_NS, check=False)
    if kind == "disk" and exit_at[victims[0]] is not None and procs[victims[0]].returncode != 0:
        fault_time = exit_at[victims[0]]
    if kind in ("disk", "flip") and fault_time is not None:
        # members ending in the same polling tick as the fault still count
        running_at_fault = {r for r in range(n)
                            if exit_at[r] is None or exit_at[r] >= fault_time - 0.015}
        progressed_at_fault = True

    codes = [p.returncode for p in procs]
    errors = [last_error(se) for se in stderrs]
    complete, partial = holdings(plan, inputs, outs, running_at_fault)
    lab.unmount_all()
    ended = exit_at
    if kind == "restart":
        ended, running_at_fault = restart_outcome(plan, files, stderrs, (wall0, fault_time),
                                                  exit_at, running_at_fault, again)

    violations, effective = judge(plan, {
        "hung": hung, "codes": codes, "complete": complete, "partial": partial,
        "running_at_fault": running_at_fault, "flipped": flipped, "exit_at": exit_at,
        "ended": ended, "fault_time": fault_time, "progressed_at_fault": progressed_at_fault,
        "errors": errors, "again": again if kind == "restart" else None,
    }, connect_timeout)
    result = {
        "kind": kind, "seed": seed, "replay": f"{kind}:{seed}", "transport": transport,
        "members": n, "algorithm": plan["algorithm"], "block_size": plan["block_size"],
        "sizes": plan["sizes"], "rate_mbit": plan["rate_mbit"], "victims": victims,
        "fault_at": fault_time if fault_time is None else round(fault_time, 3),
        "effective": effective, "progressed_at_fault": progressed_at_fault, "flipped": flipped if kind == "flip" else None,
        "exit_codes": codes, "exit_at": [None if e is None else round(e, 3) for e in exit_at],
        "complete": complete, "errors": errors, "wall": round(wall, 3),
        "load": round(load, 2), "connect_timeout": connect_timeout,
        "formed": [formed_after(se) for se in stderrs],
        "violations": violations, "dir": run_dir,
    }
    if kind == "restart":
        result["restart"] = {k: again[k] for k in ("delay", "at", "exit_code", "exit_at",
                                                  "ended_at", "complete", "error", "readmitted")}
        result["ended_at"] = [None if e is None else round(e, 3) for e in ended]
    return result


def restart_outcome(plan, files, stderrs, moments, exit_at, alive_at_fault, again):
    """What a restart run's logs tell: when each member's work ended (the
    members linger after it), the members still at work at the fault (a
    member lingering after its group closed is not hit by it), and the
    restarted process's outcome, into again."""
    n, victim = plan["members"], plan["victims"][0]
    wall0, fault_time = moments
    run_dir, inputs, _, _, outs = files
    lines = [campaign_restart.stamped_lines(se, wall0) for se in stderrs]
    ended = []
    for r in range(n):
        known = [t for t in (exit_at[r], campaign_restart.ended_at(lines[r])) if t is not None]
        ended.append(min(known) if known else None)
    working = {r for r in alive_at_fault
               if fault_time is None or ended[r] is None or ended[r] >= fault_time - 0.015}
    proc = again.pop("proc")
    again["delay"] = plan["restart_delay"]
    again["exit_code"] = None if proc is None else proc.returncode
    again["code"] = None if again["hung"] else again["exit_code"]
    again["complete"], again["partial"] = None, False
    if proc is not None and victim != 0:
        again["complete"], names = holds(outs[victim] + ".restart", digests(inputs))
        again["partial"] = not again["hung"] and any(x.endswith(".part") for x in names)
    elif proc is not None:
        again["complete"] = True  # the root holds its inputs
    again_log = os.path.join(run_dir, f"stderr{victim}.restart")
    again["error"] = last_error(again_log)
    known = [t for t in (again["exit_at"], campaign_restart.ended_at(
        campaign_restart.stamped_lines(again_log, wall0))) if t is not None]
    again["ended_at"] = min(known) if known else None
    again["readmitted"] = [
        None if r == victim or again["at"] is None
        else campaign_restart.readmitted_after(lines[r], victim, again["at"])
        for r in range(n)]
    again["readmitted"] = [None if a is None else round(a, 3) for a in again["readmitted"]]
    for key in ("at", "exit_at", "ended_at"):
        again[key] = None if again[key] is None else round(again[key], 3)
    return ended, working


def culprit_set(plan, r):
    """The members survivor r may name, or None when r is itself a victim
    (a killed, stopped or cut-off member, or the receiver that failed)."""
    kind, victims, n = plan["kind"], plan["victims"], plan["members"]
    if kind == "partition":
        mine = r in victims
        return {x for x in range(n) if (x in victims) != mine}
    if kind == "flip":
        # the flipped link's ends: the receiver or one of its peers
        return set(range(n)) - {r}
    if r in victims:
        return None
    return set(victims)


def inject(plan, procs):
    kind, victims = plan["kind"], plan["victims"]
    if kind in ("kill", "restart"):
        try:
            os.kill(procs[victims[0]].pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    elif kind == "stop":
        try:
            os.kill(procs[victims[0]].pid, signal.SIGSTOP)
        except ProcessLookupError:
            pass
    elif kind == "link":
        sh("ip", "link", "set", f"{VETH_PREFIX}{victims[0]}", "down")
    elif kind == "partition":
        for v in victims:
            sh("ip", "link", "set", f"{VETH_PREFIX}{v}", "master", BRIDGE2)


# ----------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 1)[1])
    ap.add_argument("--runs", type=int, default=70)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", default=None,
                    help="the fault kinds to cycle through (default: all; with ofi all but "
                         "flip and restart)")
    ap.add_argument("--transport", choices=["tcp", "ofi"], default="tcp",
                    help="the members' transport; ofi (libfabric's tcp provider) needs a build "
                         "with --features ofi")
    ap.add_argument("--require", default="",
                    help="kinds whose violations fail the campaign (others: report only)")
    ap.add_argument("--replay", metavar="KIND:SEED")
    ap.add_argument("--rdmc", default=None, help="the rdmc binary (default: target/debug/rdmc)")
    ap.add_argument("--log", help="also write the JSON lines to this file")
    ap.add_argument("--keep", action="store_true", help="keep every run's files")
    ap.add_argument("--keep-examples", type=int, default=KEEP_EXAMPLES, metavar="N",
                    help="keep the files of the first N violating runs of each class")
    ap.add_argument("--cleanup", action="store_true", help="only remove a leftover lab")
    ap.add_argument("--hogs", type=int, default=0, metavar="N",
                    help="keep N busy processes running meanwhile (a loaded machine)")
    args = ap.parse_args()

    if os.geteuid() != 0:
        log("must run as root (network namespaces, veth, tc, tmpfs)")
        return 2
    for tool in ("ip", "tc", "mount"):
        if shutil.which(tool) is None:
            log(f"{tool} is missing (apt-get install iproute2)")
            return 2
    # one campaign at a time: they share the lab's names
    lock = open("/run/rdmc-fault-campaign.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        log("another fault campaign is running (/run/rdmc-fault-campaign.lock)")
        return 2
    lab = Lab()
    if args.cleanup:
        lab.down()
        return 0
    if args.kinds is None:
        args.kinds = ",".join(k for k in KINDS if args.transport == "tcp" or k not in TCP_ONLY)
    kinds = [k for k in args.kinds.split(",") if k]
    require = {k for k in args.require.split(",") if k}
    for k in kinds + sorted(require):
        if k not in KINDS:
            log(f"unknown fault kind {k!r} (kinds: {', '.join(KINDS)})")
            return 2
    rdmc = args.rdmc
    if rdmc is None:
        here = os.path.dirname(os.path.abspath(__file__))
        rdmc = os.path.join(here, "..", "..", "target", "debug", "rdmc")
    rdmc = os.path.abspath(rdmc)
    if not os.access(rdmc, os.X_OK):
        log(f"no rdmc binary at {rdmc} (cargo build -p rdmcast-cli, or --rdmc PATH)")
        return 2

    if args.replay:
        kind, _, seed = args.replay.partition(":")
        if kind not in KINDS or not seed.isdigit():
            log("--replay takes KIND:SEED, e.g. kill:123456")
            return 2
        specs = [(kind, int(seed))]
    else:
        specs = [(kinds[i % len(kinds)], run_seed(args.seed, i)) for i in range(args.runs)]
    for k in sorted({k for k, _ in specs} & set(TCP_ONLY)):
        if args.transport != "tcp":
            log(f"{k} needs --transport tcp: {TCP_ONLY[k]}")
            return 2

    def interrupted(signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)  # even where started ignoring it
    workdir = tempfile.mkdtemp(prefix="rdfc-")
    logf = open(args.log, "a") if args.log else None
    results = []
    kept = {}  # (kind, class) -> runs seen, whose files are kept up to --keep-examples
    start = time.monotonic()
    hogs = []
    try:
        for _ in range(args.hogs):
            hogs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        lab.up()
        for kind, seed in specs:
            plan = plan_run(kind, seed)
            result = execute(lab, plan, rdmc, workdir, args.transport)
            classes = [(kind, v["class"]) for v in result["violations"]]
            if not args.keep and all(kept.get(c, 0) >= args.keep_examples for c in classes):
                shutil.rmtree(result["dir"], ignore_errors=True)
                result["dir"] = None
            for c in classes:
                kept[c] = kept.get(c, 0) + 1
            results.append(result)
            line = json.dumps(result, sort_keys=True)
            print(line, flush=True)
            if logf:
                logf.write(line + "\n")
                logf.flush()
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        lab.down()
        if args.keep or any(r["dir"] for r in results):
            log(f"the files of violating runs (up to {args.keep_examples} per class) are in "
                f"{workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        if logf:
            logf.close()

    summary = summarize(results, require, time.monotonic() - start)
    print(json.dumps(summary, sort_keys=True), flush=True)
    print_summary(summary, file=sys.stderr)
    print_violations(results, require, file=sys.stderr)
    if len(results) < len(specs):
        return 1
    return 1 if summary["required_violations"] else 0


def summarize(results, require, seconds):
    per_kind = {}
    for r in results:
        k = per_kind.setdefault(r["kind"], {"runs": 0, "effective": 0, "mid_transfer": 0,
                                            "violating_runs": 0, "classes": {}})
        k["runs"] += 1
        k["effective"] += bool(r["effective"])
        k["mid_transfer"] += bool(r["effective"] and r["progressed_at_fault"])
        k["violating_runs"] += bool(r["violations"])
        for v in r["violations"]:
            c = k["classes"].setdefault(v["class"], {"runs": 0, "examples": []})
            c["runs"] += 1
            if len(c["examples"]) < 3:
                c["examples"].append(r["replay"])
    required = sum(per_kind[k]["violating_runs"] for k in per_kind if k in require)
    loads = [r["load"] for r in results]
    # formation times of fault-free runs, against the connect timeout used
    formed = [(f, r["connect_timeout"]) for r in results if r["kind"] == "none"
              for f in r["formed"] if f is not None]
    return {"event": "summary", "runs": len(results), "seconds": round(seconds, 1),
            "per_kind": per_kind, "require": sorted(require),
            "required_violations": required,
            "load": [min(loads), max(loads)] if loads else None,
            "connect_timeout": sorted({r["connect_timeout"] for r in results}),
            "formed_max": max((f for f, _ in formed), default=None),
            "formed_max_share": round(max((f / t for f, t in formed), default=0), 3)}


def print_violations(results, require, file):
    """Each violating run of a required kind in full (what it found, the
    fault, every member's exit and one-line error), so that a log whose
    JSON lines went elsewhere (CI) still shows what went wrong."""
    for r in results:
        if r["violations"] and r["kind"] in require:
            print(f"violating run {r['replay']}: {json.dumps(r['violations'])}; fault at "
                  f"{r['fault_at']} s on {r['victims']} (after progress: "
                  f"{r['progressed_at_fault']}), exit codes {r['exit_codes']} at "
                  f"{r['exit_at']} s, load {r['load']}", file=file)
            for e in r["errors"]:
                print(f"    {e}", file=file)


def print_summary(s, file):
    print(f"\n{s['runs']} runs in {s['seconds']} s", file=file)
    for kind in KINDS:
        if kind not in s["per_kind"]:
            continue
        k = s["per_kind"][kind]
        tag = "required" if kind in s["require"] else "report-only"
        print(f"  {kind:<10} {k['runs']:>4} runs ({k['effective']} with the fault landing, "
              f"{k['mid_transfer']} of them after progress), "
              f"{k['violating_runs']} violating [{tag}]", file=file)
        for c, v in sorted(k["classes"].items()):
            print(f"      {c}: {v['runs']} runs, e.g. --replay {' / '.join(v['examples'])}",
                  file=file)
    if s["load"]:
        print(f"load average {s['load'][0]}-{s['load'][1]}; connect timeouts used "
              f"{s['connect_timeout']} s; slowest fault-free mesh formed in {s['formed_max']} s "
              f"({100 * s['formed_max_share']:.0f} % of its connect timeout at most)", file=file)
    print(f"violations in required kinds: {s['required_violations']}", file=file)


if __name__ == "__main__":
    sys.exit(main())
