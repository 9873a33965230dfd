#!/bin/bash
# 16 hosts, binomial pipeline: main vs short headers, authenticated; then the short headers with the wire unprotected. MPI in each run.
cd /work/main
O=/tmp/cf/ab16
mkdir -p $O
for i in 1 2; do
  for v in main new; do
    B=/tmp/cf/new-rdmc; [ $v = main ] && B=/tmp/cf/main-rdmc
    flock /tmp/rdmc-netlab.lock $B bench --only latency --nodes 16 --algorithms binomial-pipeline --runs 5 --out $O/$v-$i > $O/$v-$i.log 2>&1
    echo "$v $i $(date +%T) rc $?"
  done
done
