#!/bin/bash
# A/B: main vs short headers (auto blocks) vs short headers with 64 KiB blocks; --quick at 4 and 8 nodes, MPI in each run
cd /work/main
O=/tmp/cf/ab
for i in 1 2 3; do
  for v in main new new64; do
    B=/tmp/cf/new-rdmc; X=""
    [ $v = main ] && B=/tmp/cf/main-rdmc
    [ $v = new64 ] && X="--block-size 64KiB"
    flock /tmp/rdmc-netlab.lock $B bench --quick --nodes 4,8 --algorithms binomial-pipeline --runs 5 $X --out $O/$v-$i > $O/$v-$i.log 2>&1
    echo "$v $i $(date +%T) rc $?"
  done
done
