#!/usr/bin/env python3
"""Per-block timelines of one rdmc message, from the members' trace logs.

Run the members with
    RUST_LOG=rdmc_proto::member=trace,rdmc::transport::tcp::link=trace NO_COLOR=1
(`rdmc-bench` passes its environment on), then

    timeline.py LOGDIR/NNN-rdmc-...-{0..N-1}.log [--seq S] [--block-ms MS]

For every block transfer of message S (default: the last complete one) it
finds when the sender issued it and which of its three preconditions came
last — the block itself arriving at the sender ("block": store-and-forward),
the target's ready-for-block ("ready"), the sender's previous send completing
("send": one block send outstanding at a time) — and how long the bytes took
from the sender's issue to the first frame at the target ("queue") and from
there to the whole block received ("wire"). It prints a summary per cause and
the critical path backwards from the last block the last receiver got: the
chain of "this waited for that" that set the message's latency.
"""

import argparse
import collections
import datetime
import re
import sys

ANSI = re.compile(r"\x1b\[[0-9;]*m")
LINE = re.compile(r"^(\S+Z)\s+TRACE\s+(.*)$")
FIELD = re.compile(r"(\w+)=(\S+)")


def parse_time(stamp):
    # 2026-11-23T19:50:41.123456Z: seconds as float (microsecond resolution).
    stamp = stamp.rstrip("Z")
    if "." in stamp:
        head, frac = stamp.split(".")
        frac = (frac + "000000")[:6]
        stamp = f"{head}.{frac}"
    else:
        stamp += ".000000"
    t = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f")
    return t.replace(tzinfo=datetime.timezone.utc).timestamp()


def read_events(path):
    """(time, message, fields, link peer or None) for every trace line."""
    events = []
    with open(path, errors="replace") as f:
        for raw in f:
            line = ANSI.sub("", raw.rstrip("\n"))
            m = LINE.match(line)
            if not m:
                continue
            t = parse_time(m.group(1))
            rest = m.group(2)
            peer = None
            lm = re.search(r"rdmc_link\{peer=(\d+)\}", rest)
            if lm:
                peer = int(lm.group(1))
            # The message text follows the last "target: ".
            body = rest.split(": ", 1)[-1] if ": " in rest else rest
            body = re.sub(r"^[\w:]+: ", "", body)
            msg = FIELD.split(body)[0].strip()
            fields = {k: v for k, v in FIELD.findall(body)}
            events.append((t, msg, fields, peer))
    return events


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+", help="one log per rank, in rank order")
    ap.add_argument("--seq", type=int, help="message sequence number")
    ap.add_argument("--block-ms", type=float, default=0.0,
                    help="one block's time on a link, for the ideal line")
    ap.add_argument("--path", type=int, default=40, help="critical-path lines to print")
    args = ap.parse_args()

    ev = [read_events(p) for p in args.logs]
    n = len(ev)
    seqs = sorted({int(f["seq"]) for e in ev for (_, m, f, _) in e
                   if m in ("block send", "block received", "first block received")
                   and "seq" in f})
    if not seqs:
        sys.exit("no block events: were the members run with RUST_LOG=...=trace?")
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
    x, lines = final, []
    while x is not None:
        recv = x["recv"] or x["issue"]
        totals["transfer"] += recv - x["issue"]
        totals["reaction"] += x["react"]
        lines.append(f"  {ms(x['issue'] - start):8.2f} ms  {x['from']:>2} -> {x['to']:<2} "
                     f"block {x['block']:<5} took {ms(recv - x['issue']):6.2f} ms "
                     f"(queue {ms((x['arrive'] or recv) - x['issue']):5.2f}); "
                     f"issued {ms(x['react']):5.2f} ms after its {x['cause']}")
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
                    totals["transfer"] -= 0
        elif x["cause"] == "ready":
            totals["ready wait"] += 0
        if x["cause"] == "send" and nxt is not None:
            # Charge the previous send's time as "send" rather than transfer.
            lines.append(f"      (waited for its previous send, to {nxt['to']})")
        x = nxt if nxt is not x else None
        if x is not None and x["cause"] == "send":
            pass
    for line in reversed(lines[:args.path]):
        print(line)
    print("  on the path: " + ", ".join(f"{k} {ms(v):.1f} ms" for k, v in totals.items()))


if __name__ == "__main__":
    main()
