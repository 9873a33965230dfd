#!/bin/bash
# The harness-check rounds (BENCHMARKS.md, "The bench's own check in the way").
# ab.sh ROUNDS NEWBIN TAG: --quick at 4 and 8 hosts, the binary under test
# ("new") and main ("old") one after the other, then MPI's pipeline (32 KiB
# segments, its best here) at 4 and 8 hosts, in every round. TAG:
#   noc   main with the receivers' check skipped (a probe, never committed)
#   idle  receivers check on a SCHED_IDLE thread (this change)
#   w32   a ready-for-block window of 32 announced 16 at a time (a probe, not kept)
# Each record of TAG.jsonl carries `variant_run`, the round it came from.
R=$1; NEW=$2; TAG=$3
OLD=${OLD:-target/release/rdmc}   # main's binary
for i in $(seq "$R"); do
  for v in new old; do
    B=$NEW; [ $v = old ] && B=$OLD
    d=out/$TAG-$v-$i
    flock /tmp/rdmc-netlab.lock "$B" bench --quick --nodes 4,8 --algorithms binomial-pipeline,chain \
        --no-mpi --runs 5 --out "$d" > "$d.log" 2>&1
  done
  for n in 4 8; do
    flock /tmp/rdmc-netlab.lock rdmc-cli/benches/mpi_netlab.sh --algorithm 3 --segsize 32768 \
        $n 250mbit 64M 5 1 > "out/$TAG-mpi-$n-$i.json" 2> "out/$TAG-mpi-$n-$i.log"
  done
done
# The timelines: one traced run of each algorithm at 8 hosts, then tail.py DIR.
#   mkdir -p tl && RDMC_EVENT_TIMELINE=tl flock /tmp/rdmc-netlab.lock rdmc bench --quick \
#       --nodes 8 --algorithms chain --no-mpi --runs 2 --out tl-out
