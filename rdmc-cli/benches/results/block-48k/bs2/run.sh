#!/bin/bash
for r in 1 2 3; do
  for v in auto 49152 48128 33256; do
    flock /tmp/rdmc-netlab.lock /work/exp/rdmc-main bench --quick --nodes 4,8 --algorithms binomial-pipeline --runs 5 --no-mpi --block-size $v --out /work/exp/bs2/r$r-$v > /work/exp/bs2/r$r-$v.log 2>&1
  done
done
echo done > /work/exp/bs2/DONE
