#!/bin/bash
# READY_WINDOW 16 (announced 8 at a time over TCP) against main (8, 4 at a time): --quick at 4 and 8 hosts, no MPI, alternated
cd /work/main
O=/tmp/cf/w16
for i in 1 2 3; do
  for v in main w16; do
    B=/tmp/cf/c33/rdmc; [ $v = w16 ] && B=/tmp/cf/w16-rdmc
    flock /tmp/rdmc-netlab.lock $B bench --quick --nodes 4,8 --algorithms binomial-pipeline --runs 5 --no-mpi --out $O/$v-$i > $O/$v-$i.log 2>&1
    echo "$v $i $(date +%T) rc $?" >> $O/progress
  done
done
