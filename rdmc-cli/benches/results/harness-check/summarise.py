#!/usr/bin/env python3
"""Tables of the harness-check rounds: rdmc's binomial pipeline and chain at
4 and 8 hosts (64 MiB, median of 5 per run) for the binary under test
("new") and main ("old"), with MPI's pipeline of the same rounds.

    summarise.py FILE.jsonl...   (noc.jsonl, idle.jsonl, w32.jsonl, final.jsonl)
"""
import json
import re
import statistics
import sys
from collections import defaultdict

for path in sys.argv[1:]:
    rows = defaultdict(list)
    for line in open(path):
        r = json.loads(line)
        run = r.get("variant_run", "")
        if r.get("system") == "mpi":
            rows[(r["nodes"], "MPI pipeline", "")].append(r["seconds"])
        elif r.get("experiment") == "latency" and r.get("system") == "rdmc":
            m = re.match(r"\w+-(\w+)-\d+", run)
            variant = m.group(1) if m else run
            rows[(r["nodes"], r["algorithm"], variant)].append(r["seconds"])
    print(f"## {path}")
    print("| hosts | system | variant | runs (s) | median |")
    print("| --- | --- | --- | --- | --- |")
    for key in sorted(rows):
        v = rows[key]
        print(f"| {key[0]} | {key[1]} | {key[2]} | {', '.join(f'{x:.4f}' for x in v)} | {statistics.median(v):.4f} |")
    print()
