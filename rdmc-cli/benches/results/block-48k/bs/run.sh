#!/bin/bash
for r in 1 2 3; do
  for v in auto 65536 49152; do
    flock /tmp/rdmc-netlab.lock /work/exp/rdmc-main bench --quick --nodes 4,8 --algorithms binomial-pipeline --runs 5 --no-mpi --block-size $v --out /work/exp/bs/r$r-$v > /work/exp/bs/r$r-$v.log 2>&1
  done
done
echo done > /work/exp/bs/DONE
