#!/usr/bin/env python3
"""One-off: 16 lab hosts (one slow), rdmc member --bench (binomial pipeline,
with and without --slow) and tcp-copy (fast host 0 -> fast host 1), 64 MiB,
1 warm-up + RUNS measured; prints per-run fast max / slow ratios to unicast.
Must run inside `flock /tmp/rdmc-netlab.lock` with the lab already up."""
import json, subprocess, sys, threading, time, os, queue
RDMC, N, SLOW, RUNS, OUT = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
SIZE = 64 << 20
os.makedirs(OUT, exist_ok=True)
subprocess.run([RDMC, "keygen", f"{OUT}/key"], check=True, capture_output=True)
port = [7700]
def addr(i): return f"10.77.0.{i+1}"
def cluster(n, cmd, extra, label):
    port[0] += 1
    with open(f"{OUT}/members-{label}", "w") as f:
        f.write("".join(f"{addr(i)}:{port[0]}\n" for i in range(n)))
    q = queue.Queue(); procs = []
    for r in reversed(range(n)):
        args = ["ip", "netns", "exec", f"rdmc-h{r}", RDMC, cmd, "--members", f"{OUT}/members-{label}",
                "--rank", str(r), "--max-size", str(SIZE)]
        if cmd == "member": args += ["--key-file", f"{OUT}/key", "--json", "--bench", "--failure-timeout", "10"] + extra
        p = subprocess.Popen(args, stdin=subprocess.PIPE if r == 0 else subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=open(f"{OUT}/{label}-{r}.log", "w"), text=True)
        def pump(p=p, r=r):
            for line in p.stdout:
                try: q.put((r, json.loads(line)))
                except ValueError: pass
        threading.Thread(target=pump, daemon=True).start()
        procs.append((r, p))
    root = [p for r, p in procs if r == 0][0]
    return q, root, procs
def wait(q, pred, timeout=180):
    end = time.time() + timeout; got = []
    while True:
        r, ev = q.get(timeout=max(0.1, end - time.time()))
        if ev.get("event") == "error": raise SystemExit(f"rank {r}: {ev}")
        got.append((r, ev))
        if pred(got): return got
def run(n, cmd, extra, label):
    q, root, procs = cluster(n, cmd, extra, label)
    wait(q, lambda g: sum(1 for _, e in g if e.get("event") == "ready") == n)
    res = []
    for i in range(RUNS + 1):
        root.stdin.write(f"send {SIZE} 1\n"); root.stdin.flush()
        got = wait(q, lambda g: sum(1 for _, e in g if e.get("event") == "delivered") == n - 1
                   and any(e.get("event") == "sent" for _, e in g))
        t0 = [e for _, e in got if e["event"] == "sent"][0]["t"]
        times = {r: (e["t"] - t0) / 1e9 for r, e in got if e["event"] == "delivered"}
        if i > 0: res.append(times)
    root.stdin.write("close\n"); root.stdin.close()
    for r, p in procs:
        try: p.wait(timeout=60)
        except subprocess.TimeoutExpired: p.kill()
    return res
uni = [t[1] for t in run(2, "tcp-copy", [], "unicast")]
u = sorted(uni)[len(uni) // 2]
out = {"unicast_s": uni, "load": open("/proc/loadavg").read().split()[:3]}
print(f"unicast median {u:.3f} s, runs {['%.3f' % x for x in uni]}", flush=True)
for label, extra in [("pipeline-named", ["--algorithm", "binomial-pipeline", "--slow", str(SLOW)]),
                     ("pipeline-unnamed", ["--algorithm", "binomial-pipeline"])]:
    rs = run(N, "member", extra, label)
    out[label] = rs
    for t in rs:
        fast = [v for r, v in t.items() if r != SLOW]
        print(f"{label}: fast max {max(fast)/u:.3f}x median {sorted(fast)[len(fast)//2]/u:.3f}x, slow {t[SLOW]/u:.3f}x", flush=True)
out["load_end"] = open("/proc/loadavg").read().split()[:3]
json.dump(out, open(f"{OUT}/results.json", "w"), indent=1)
