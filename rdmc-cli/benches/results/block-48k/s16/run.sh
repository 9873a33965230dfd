#!/bin/bash
for r in 1 2; do
  for v in auto 49152; do
    flock /tmp/rdmc-netlab.lock /work/exp/rdmc-main bench --only latency --nodes 16 --algorithms binomial-pipeline --runs 5 --no-mpi --block-size $v --out /work/exp/s16/r$r-$v > /work/exp/s16/r$r-$v.log 2>&1
  done
done
echo done > /work/exp/s16/DONE
