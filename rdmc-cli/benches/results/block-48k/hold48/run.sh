#!/bin/bash
# the hold hack (signals wait up to RDMC_HOLD_US for a data frame to the same peer) at 48 KiB blocks
for r in 1 2 3; do
  flock /tmp/rdmc-netlab.lock /work/exp/rdmc-48 bench --quick --nodes 4,8 --algorithms binomial-pipeline --runs 5 --no-mpi --out /work/exp/hold48/r$r-main > /work/exp/hold48/r$r-main.log 2>&1
  RDMC_HOLD_US=4000 flock /tmp/rdmc-netlab.lock /work/exp/rdmc-hold bench --quick --nodes 4,8 --algorithms binomial-pipeline --runs 5 --no-mpi --block-size 49152 --out /work/exp/hold48/r$r-hold4000 > /work/exp/hold48/r$r-hold4000.log 2>&1
done
echo done > /work/exp/hold48/DONE
