#!/bin/bash
for r in 1 2 3; do
  for v in main hold; do
    flock /tmp/rdmc-netlab.lock /work/exp/rdmc-$v bench --quick --nodes 4,8 --algorithms binomial-pipeline --runs 5 --no-mpi --out /work/exp/hold/r$r-$v > /work/exp/hold/r$r-$v.log 2>&1
  done
done
echo done > /work/exp/hold/DONE
