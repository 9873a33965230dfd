#!/usr/bin/env python3
"""metrics_lab.py: scrape every member's --metrics-addr during a lab multicast.

Brings up the emulated lab (netlab.sh: N hosts, each link capped at --rate),
starts `rdmc member` on every host (rank 0 sends --files files of --size
bytes each, the binomial pipeline by default), every member serving its
Prometheus metrics at its lab address, port --port, and lingering after the
group closed. Once every receiver has written every message, it scrapes every
member's `GET /metrics` and checks what the counters say against what the
schedule moved:

  received_bytes  sum over every member of rdmc_bytes_received_total
  sent_bytes      sum over every member of rdmc_bytes_sent_total
  expected_bytes  (N - 1) x the bytes of every file: each receiver gets each
                  byte once (the root receives none)
  latency_samples rdmc_message_seconds_count per receiver (one sample per
                  message each)

and that every receiver's output is byte-identical to its input. Prints one
JSON object; exits 1 if a check fails (received or sent more than 1 % off
the expected bytes, a receiver with another number of latency samples than
messages, an output that differs).

Root only (network namespaces). Python 3 standard library only. The lab is
torn down, and the processes this script started (only those) killed, on
every exit path.

Usage:
  metrics_lab.py --binary target/release/rdmc [--hosts 16] [--rate 250mbit]
      [--files 3] [--size 64MiB] [--json OUT] [-- EXTRA MEMBER ARGS...]
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
NETLAB = os.path.join(HERE, "netlab.sh")
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def parse_size(text):
    units = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
             "g": 1 << 30, "gib": 1 << 30}
    match = re.fullmatch(r"(\d+)\s*([a-zA-Z]*)", text.strip())
    if not match or match.group(2).lower() not in units:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 64MiB)")
    return int(match.group(1)) * units[match.group(2).lower()]


def netlab(*args):
    return subprocess.run([NETLAB, *args], check=True, capture_output=True, text=True).stdout


def metric_sum(text, name):
    """The sum of every sample of `name` (any labels)."""
    total = 0.0
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and match.group(1) == name:
            total += float(match.group(3))
    return total


def scrape(host, addr):
    """GET /metrics at addr, from inside host's namespace."""
    out = subprocess.run(
        ["ip", "netns", "exec", f"rdmc-h{host}", sys.executable, "-c",
         "import sys, urllib.request;"
         f"sys.stdout.write(urllib.request.urlopen('http://{addr}/metrics', timeout=10)"
         ".read().decode())"],
        check=True, capture_output=True, text=True, timeout=30)
    return out.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--rate", default="250mbit")
    parser.add_argument("--files", type=int, default=3)
    parser.add_argument("--size", type=parse_size, default=64 << 20)
    parser.add_argument("--port", type=int, default=7100)
    parser.add_argument("--metrics-port", type=int, default=9100)
    parser.add_argument("--linger", type=float, default=30.0)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json")
    parser.add_argument("extra", nargs="*")
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    work = tempfile.mkdtemp(prefix="rdmc-metrics-lab-")
    procs = []
    try:
        netlab("up", str(args.hosts), args.rate)
        addrs = netlab("addrs").split()
        members = os.path.join(work, "members")
        with open(members, "w") as f:
            f.writelines(f"{a}:{args.port}\n" for a in addrs)
        key = os.path.join(work, "key")
        subprocess.run([binary, "keygen", key], check=True, capture_output=True)
        inputs = []
        for i in range(args.files):
            path = os.path.join(work, f"in{i}")
            with open(path, "wb") as f:
                f.write(os.urandom(args.size - i))  # distinct sizes
            inputs.append(path)
        for rank in range(args.hosts):
            cmd = ["ip", "netns", "exec", f"rdmc-h{rank}", binary, "member",
                   "--members", members, "--rank", str(rank), "--key-file", key,
                   "--metrics-addr", f"{addrs[rank]}:{args.metrics_port}",
                   "--linger", str(args.linger), *args.extra]
            cmd += inputs if rank == 0 else ["--out", os.path.join(work, f"out{rank}")]
            err = open(os.path.join(work, f"err{rank}"), "w")
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err))
        started = time.monotonic()
        last = [os.path.join(work, f"out{r}", f"{args.files - 1}.bin")
                for r in range(1, args.hosts)]
        while not all(os.path.exists(p) for p in last):
            if time.monotonic() - started > args.timeout:
                raise SystemExit("timed out waiting for the receivers")
            if any(p.poll() not in (None, 0) for p in procs):
                raise SystemExit("a member failed: see " + work)
            time.sleep(0.1)
        wall = time.monotonic() - started
        # Let the close finish (every member's counters final), then scrape.
        time.sleep(3)
        per_member = []
        for rank in range(args.hosts):
            text = scrape(rank, f"{addrs[rank]}:{args.metrics_port}")
            per_member.append({
                "rank": rank,
                "received_bytes": metric_sum(text, "rdmc_bytes_received_total"),
                "sent_bytes": metric_sum(text, "rdmc_bytes_sent_total"),
                "latency_samples": metric_sum(text, "rdmc_message_seconds_count"),
            })
        total = sum(os.path.getsize(p) for p in inputs)
        expected = (args.hosts - 1) * total
        received = sum(m["received_bytes"] for m in per_member)
        sent = sum(m["sent_bytes"] for m in per_member)
        digests = [hashlib.sha256(open(p, "rb").read()).hexdigest() for p in inputs]
        identical = all(
            hashlib.sha256(open(os.path.join(work, f"out{r}", f"{i}.bin"), "rb").read())
            .hexdigest() == digests[i]
            for r in range(1, args.hosts) for i in range(args.files))
        samples_ok = all(m["latency_samples"] == args.files for m in per_member[1:])
        result = {
            "hosts": args.hosts, "rate": args.rate, "files": args.files,
            "bytes_per_file": args.size, "extra": args.extra,
            "wall_s_to_last_file": round(wall, 3),
            "expected_bytes": expected, "received_bytes": received, "sent_bytes": sent,
            "received_ratio": received / expected, "sent_ratio": sent / expected,
            "latency_samples_per_receiver": sorted({m["latency_samples"]
                                                    for m in per_member[1:]}),
            "root_latency_samples": per_member[0]["latency_samples"],
            "outputs_identical": identical, "per_member": per_member,
        }
        ok = (abs(received / expected - 1) <= 0.01 and abs(sent / expected - 1) <= 0.01
              and samples_ok and identical)
        result["ok"] = ok
        text = json.dumps(result, indent=1)
        print(text)
        if args.json:
            with open(args.json, "w") as f:
                f.write(text + "\n")
        for p in procs:
            p.wait(timeout=args.linger + 60)
        return 0 if ok else 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        subprocess.run([NETLAB, "down"], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
