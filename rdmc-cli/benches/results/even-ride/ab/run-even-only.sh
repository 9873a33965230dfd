#!/bin/bash
cd /work/main
for round in 1 2 3; do
  for bs in 48KiB 49129; do
    ./target/release/rdmc bench --quick --nodes 4 --algorithms binomial-pipeline --runs 5 --no-mpi --block-size $bs --out /tmp/ab/r$round-$bs > /tmp/ab/r$round-$bs.log 2>&1
    echo "$round $bs $(grep -h binomial /tmp/ab/r$round-$bs/summary.md | head -3 | tr '\n' ' ')"
  done
done
