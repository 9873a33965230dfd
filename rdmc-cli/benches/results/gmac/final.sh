#!/bin/bash
# final.sh: #11's commands and #16's allreduce on the GMAC binary, MPI in the same runs
cd /work/main
B=/tmp/gmac/new-rdmc
O=/tmp/gmac/final
flock /tmp/rdmc-netlab.lock $B bench --only latency --nodes 16 --algorithms chain,binomial-pipeline --runs 5 --out $O/n16-auth > $O/n16-auth.log 2>&1; echo "n16 $(date +%T) rc $?"
flock /tmp/rdmc-netlab.lock $B bench --quick --algorithms binomial-pipeline,chain --runs 5 --out $O/quick-auth > $O/quick-auth.log 2>&1; echo "quick $(date +%T) rc $?"
flock /tmp/rdmc-netlab.lock $B bench --only allreduce --nodes 8,16 --runs 7 --warmup 4 --out $O/allreduce > $O/allreduce.log 2>&1; echo "allreduce $(date +%T) rc $?"
