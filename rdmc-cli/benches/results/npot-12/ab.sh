#!/bin/bash
cd /work/main
for i in 1 2; do
  for v in lead npot; do
    d=/tmp/pace/np-$v-$i
    flock /tmp/rdmc-netlab.lock /tmp/$v-rdmc bench --only latency --nodes 12 --algorithms chain,binomial-pipeline --no-mpi --runs 5 --out $d > $d.log 2>&1
    echo "$v $i $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"; grep -h "| 12 " $d/summary.md
  done
done
