#!/usr/bin/env python3
"""Per-block timelines of one rdmc message, from the members' JSON traces.

Run the members with RDMC_TRACE=DIR (an existing directory: each `rdmc`
process writes the Chrome trace-event JSON DIR/PID.json as it ends;
`rdmc-bench` passes its environment on), then

    timeline.py DIR [--run K] [--seq S] [--block-ms MS]

(or the trace files themselves, in any order). The trace's block events —
instant events whose args hold the fields, every value a string — are, at
the members (`rdmc_proto::member`): "message started" {rank, seq},
"block send" {rank, seq, block, to}, "ready-for-block" {rank, from},
"block send complete" {rank, to}, "first block received" and "block
received" {rank, seq, block, from}; at the TCP links: "block arriving"
{from, to} (node ids, mapped to ranks through the "group created" events'
{rank, members}). Each trace's `ts` counts from its process's start; its
"trace clock" event {unix_us} puts it on the wall clock, so the traces of
one machine line up.

For every block transfer of message S (default: the last complete one) it
finds when the sender issued it and which of its three preconditions came
last — the block itself arriving at the sender ("block": store-and-forward),
the target's ready-for-block ("ready"), the sender's previous send completing
("send": one block send outstanding at a time) — and how long the bytes took
from the sender's issue to the first frame at the target ("queue") and from
there to the whole block received ("wire"). It prints a summary per cause and
the critical path backwards from the last block the last receiver got: the
chain of "this waited for that" that set the message's latency.

One group per run: the traces of a run hold one group's members (a
directory of several runs, as `rdmc-bench` leaves it, is split into runs by
start time; --run picks one, default the last).
"""

import argparse
import collections
import json
import os
import sys

# The events the analysis reads, by their message.
BLOCK_EVENTS = {"message started", "block send", "ready-for-block",
                "block send complete", "first block received", "block received",
                "block arriving"}


def load_trace(path):
    """A trace file's events; a trace cut short (its process killed before
    the closing bracket) is read up to its last complete event."""
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        # One event a line, each but the last followed by a comma.
        return json.loads(text[:text.rfind(",\n")] + "\n]")


def read_trace(path):
    """One process's trace: its wall-clock start (seconds, None without a
    "trace clock" event), its "group created" args, and its block events
    as (time in seconds on the wall clock, message, args)."""
    events = [e for e in load_trace(path)
              if e.get("ph") == "i" and "message" in e.get("args", {})]
    start, groups, blocks = None, [], []
    for e in events:
        if e["args"]["message"] == "trace clock":
            start = (int(e["args"]["unix_us"]) - e["ts"]) / 1e6
        elif e["args"]["message"] == "group created":
            groups.append(e["args"])
    base = start or 0.0
    for e in events:
        args = e["args"]
        if args["message"] in BLOCK_EVENTS:
            blocks.append((base + e["ts"] / 1e6, args["message"], args))
    return {"path": path, "start": start, "groups": groups, "events": blocks}


def runs_of(traces):
    """Split the traces into runs: by start, a trace whose ranks a run
    already has begins the next."""
    runs, ranks = [], set()
    for t in sorted(traces, key=lambda t: t["start"] or 0.0):
        mine = {g["rank"] for g in t["groups"]}
        if not runs or mine & ranks:
            runs.append([])
            ranks = set()
        runs[-1].append(t)
        ranks |= mine
    return runs


def read_events(traces):
    """Per rank, (time, message, fields, link peer or None) of every block
    event, in time order: a link's "block arriving" {from, to} goes to the
    receiving rank, its peer the sending rank."""
    rank_of = {}
    for t in traces:
        for g in t["groups"]:
            rank_of[g["members"].split(",")[int(g["rank"])]] = int(g["rank"])
    per_rank = collections.defaultdict(list)
    for t in traces:
        for (time, msg, args) in t["events"]:
            if msg == "block arriving":
                to, peer = (rank_of.get(args[k], int(args[k])) for k in ("to", "from"))
                per_rank[to].append((time, msg, args, peer))
            elif "rank" in args:
                per_rank[int(args["rank"])].append((time, msg, args, None))
    n = max(per_rank) + 1 if per_rank else 0
    return [sorted(per_rank[r], key=lambda e: e[0]) for r in range(n)]


def trace_files(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".json"))
        else:
            files.append(p)
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+",
                    help="RDMC_TRACE's directory, or its trace files (any order)")
    ap.add_argument("--run", type=int, default=-1,
                    help="which run of the traces (by start; default the last)")
    ap.add_argument("--seq", type=int, help="message sequence number")
    ap.add_argument("--block-ms", type=float, default=0.0,
                    help="one block's time on a link, for the ideal line")
    ap.add_argument("--path", type=int, default=40, help="critical-path transfers to print (the latest)")
    args = ap.parse_args()

    runs = runs_of([read_trace(p) for p in trace_files(args.traces)])
    if not runs:
        sys.exit("no trace files")
    if len(runs) > 1:
        print(f"{len(runs)} runs in the traces; run {args.run % len(runs)} "
              f"({len(runs[args.run])} processes):")
    ev = read_events(runs[args.run])
    n = len(ev)
    seqs = sorted({int(f["seq"]) for e in ev for (_, m, f, _) in e
                   if m in ("block send", "block received", "first block received")
                   and "seq" in f})
    if not seqs:
        sys.exit("no block events: were the members run with RDMC_TRACE=DIR?")
    seq = args.seq if args.seq is not None else seqs[-1]
    start = min(t for e in ev for (t, m, f, _) in e if f.get("seq") == str(seq))

    # Per rank, every event of every message, in time order: the j-th block
    # send from r to t (over all messages) used the j-th ready-for-block t
    # sent r, completed with r's j-th send completion to t, and is t's j-th
    # block arriving and received from r.
    all_sends = [collections.defaultdict(list) for _ in range(n)]
    readies = [collections.defaultdict(list) for _ in range(n)]
    completes = [collections.defaultdict(list) for _ in range(n)]
    recvs = [collections.defaultdict(list) for _ in range(n)]
    arriving = [collections.defaultdict(list) for _ in range(n)]
    have = [dict() for _ in range(n)]
    order = [[] for _ in range(n)]  # rank r's sends of this message, in order
    for r, e in enumerate(ev):
        for (t, m, f, peer) in e:
            if m == "block send":
                to = int(f["to"])
                all_sends[r][to].append(t)
                if f.get("seq") == str(seq):
                    order[r].append((t, int(f["block"]), to, len(all_sends[r][to]) - 1))
            elif m == "ready-for-block":
                readies[r][int(f["from"])].append(t)
            elif m == "block send complete":
                completes[r][int(f["to"])].append(t)
            elif m in ("block received", "first block received"):
                recvs[r][int(f["from"])].append(t)
                if f.get("seq") == str(seq):
                    have[r][int(f["block"])] = t
            elif m == "block arriving" and peer is not None:
                arriving[r][peer].append(t)

    def nth(lst, j):
        return lst[j] if j < len(lst) else None

    transfers = {}  # (r, to, j) -> dict
    for r in range(n):
        prev_done = None
        for (t, b, to, j) in order[r]:
            x = {"from": r, "to": to, "block": b, "issue": t}
            x["have"] = start if r == 0 else have[r].get(b)
            x["ready"] = nth(readies[r][to], j)
            x["prev"] = prev_done
            x["complete"] = nth(completes[r][to], j)
            x["arrive"] = nth(arriving[to][r], j)
            x["recv"] = nth(recvs[to][r], j)
            prev_done = x["complete"] or t
            conds = [(x["have"], "block"), (x["ready"], "ready"), (x["prev"], "send")]
            conds = [(c, w) for c, w in conds if c is not None and c <= t + 1e-4]
            last = max(conds) if conds else (t, "?")
            x["cause"], x["cause_t"] = last[1], last[0]
            x["react"] = t - last[0]
            transfers[(r, to, j)] = x
            transfers[("by_block", to, b)] = x

    xs = [x for k, x in transfers.items() if k[0] != "by_block"]
    ms = lambda s: s * 1e3
    last_recv = max((x["recv"] or 0) for x in xs)
    print(f"message seq {seq}: {n} members, {len(xs)} block transfers, "
          f"{ms(last_recv - start):.1f} ms from the root's first send to the last block")
    if args.block_ms:
        steps = max(len(order[r]) for r in range(n))
        print(f"  ideal at {args.block_ms} ms per block: ~{steps} steps -> "
              f"{steps * args.block_ms:.1f} ms")
    cause = collections.Counter(x["cause"] for x in xs)
    print("what each send waited for last (count; median/max of the wait since the "
          "previous condition):")
    for c, k in cause.most_common():
        waits = sorted(x["cause_t"] - min(v for v in (x["have"], x["ready"], x["prev"])
                                          if v is not None) for x in xs if x["cause"] == c)
        print(f"  {c:6} {k:5}  {ms(waits[len(waits) // 2]):7.2f} / {ms(waits[-1]):7.2f} ms")
    def stat(name, vals):
        vals = sorted(v for v in vals if v is not None)
        if vals:
            print(f"  {name:34} median {ms(vals[len(vals) // 2]):7.2f}  "
                  f"p90 {ms(vals[int(len(vals) * 0.9)]):7.2f}  max {ms(vals[-1]):7.2f} ms")
    print("per transfer:")
    stat("reaction (condition -> issue)", [x["react"] for x in xs])
    stat("queue (issue -> first frame there)",
         [x["arrive"] - x["issue"] for x in xs if x["arrive"]])
    stat("wire (first frame -> block received)",
         [x["recv"] - x["arrive"] for x in xs if x["recv"] and x["arrive"]])
    stat("issue -> received", [x["recv"] - x["issue"] for x in xs if x["recv"]])
    stat("issue -> send complete", [x["complete"] - x["issue"] for x in xs if x["complete"]])

    # Critical path: from the last block received, walk back through what
    # each send waited for last.
    final = max(xs, key=lambda x: x["recv"] or 0)
    print(f"critical path back from rank {final['to']}'s last block "
          f"(block {final['block']} from {final['from']}):")
    totals = collections.Counter()
    # One entry per transfer on the path (its line, and a note when it
    # waited for the sender's previous send), latest first.
    x, entries = final, []
    while x is not None:
        recv = x["recv"] or x["issue"]
        totals["transfer"] += recv - x["issue"]
        totals["reaction"] += x["react"]
        entry = [f"  {ms(x['issue'] - start):8.2f} ms  {x['from']:>2} -> {x['to']:<2} "
                 f"block {x['block']:<5} took {ms(recv - x['issue']):6.2f} ms "
                 f"(queue {ms((x['arrive'] or recv) - x['issue']):5.2f}); "
                 f"issued {ms(x['react']):5.2f} ms after its {x['cause']}"]
        entries.append(entry)
        nxt = None
        if x["cause"] == "block" and x["from"] != 0:
            nxt = transfers.get(("by_block", x["from"], x["block"]))
        elif x["cause"] == "send":
            r = x["from"]
            i = next(i for i, s in enumerate(order[r]) if s[0] == x["issue"] and s[2] == x["to"])
            if i > 0:
                t, b, to, _ = order[r][i - 1]
                nxt = transfers.get(("by_block", to, b))
                if nxt is not None:
                    totals["send wait"] += (nxt["complete"] or nxt["issue"]) - nxt["issue"]
        elif x["cause"] == "ready":
            # How long the ready-for-block came after the block and the
            # previous send were both there.
            others = [v for v in (x["have"], x["prev"]) if v is not None]
            if others and x["ready"] is not None:
                totals["ready wait"] += max(0, x["ready"] - max(others))
        if x["cause"] == "send" and nxt is not None:
            entry.append(f"      (waited for its previous send, to {nxt['to']})")
        x = nxt if nxt is not x else None
    for entry in reversed(entries[:args.path]):
        for line in entry:
            print(line)
    print("  on the path: " + ", ".join(f"{k} {ms(v):.1f} ms" for k, v in totals.items()))


if __name__ == "__main__":
    main()
