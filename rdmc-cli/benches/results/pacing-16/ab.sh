#!/bin/bash
# interleaved A/B: off vs paced, 16 hosts, binomial pipeline + chain, 8 MiB x5 and 256 MiB x1
cd /work/main
for i in 1 2; do
  for v in off 30000000; do
    d=/tmp/pace/$v-$i
    if [ $v = off ]; then env -u RDMC_PACING_BPS flock /tmp/rdmc-netlab.lock /tmp/pace-rdmc bench --only latency --nodes 16 --algorithms chain,binomial-pipeline --no-mpi --runs 5 --out $d > $d.log 2>&1
    else RDMC_PACING_BPS=$v flock /tmp/rdmc-netlab.lock /tmp/pace-rdmc bench --only latency --nodes 16 --algorithms chain,binomial-pipeline --no-mpi --runs 5 --out $d > $d.log 2>&1; fi
    echo "$v $i done $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
