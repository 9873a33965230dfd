#!/usr/bin/env python3
"""Per batch and variant: medians (range) over the runs of rdmc's one-message latency,
MPI_Bcast's better variant in the same run, their ratio, and rdmc's CPU per
member per message. Usage: summarise.py FILE.jsonl"""
import collections, json, statistics, sys

runs = collections.defaultdict(lambda: {"rdmc": None, "mpi": []})
for line in open(sys.argv[1]):
    x = json.loads(line)
    key = (x.get("batch", ""), x["variant"], x["round"])
    if x["system"] == "rdmc":
        runs[key]["rdmc"] = x
    else:
        runs[key]["mpi"].append(x["seconds"])
rows = collections.defaultdict(list)
for (batch, variant, _), r in sorted(runs.items()):
    rdmc, mpi = r["rdmc"]["seconds"] * 1e6, min(r["mpi"]) * 1e6
    rows[(batch, variant)].append((rdmc, mpi, rdmc / mpi, r["rdmc"]["member_cpu_seconds"] * 1e6))
for (batch, variant), v in rows.items():
    cols = []
    for i, name in enumerate(["rdmc µs", "MPI µs", "ratio", "CPU µs"]):
        c = [row[i] for row in v]
        cols.append(f"{name} {statistics.median(c):.2f} ({min(c):.2f}-{max(c):.2f})")
    print(f"{batch:3} {variant:18} runs {len(v):2}  " + "  ".join(cols))
