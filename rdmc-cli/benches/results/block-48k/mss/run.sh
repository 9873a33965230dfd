#!/bin/bash
# A/B: automatic block (32 KiB) vs a block whose authenticated frame is 23 full 1448-B segments
B=/work/main/target/release/rdmc
for r in 1 2 3; do
  for v in auto 33280; do
    flock /tmp/rdmc-netlab.lock $B bench --quick --nodes 4 --algorithms binomial-pipeline --runs 5 --no-mpi --block-size $v --out /work/exp/mss/r$r-$v > /work/exp/mss/r$r-$v.log 2>&1
  done
done
echo done > /work/exp/mss/DONE
