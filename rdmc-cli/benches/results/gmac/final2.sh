#!/bin/bash
cd /work/main
B=/tmp/gmac/new-rdmc
O=/tmp/gmac/final
for i in 2 3 4 5; do
flock /tmp/rdmc-netlab.lock $B bench --only allreduce --nodes 8,16 --runs 7 --warmup 4 --out $O/allreduce-$i > $O/allreduce-$i.log 2>&1; echo "allreduce $i $(date +%T) rc $?"
done
for i in 2 3; do
flock /tmp/rdmc-netlab.lock $B bench --quick --algorithms binomial-pipeline,chain --runs 5 --out $O/quick-auth-$i > $O/quick-auth-$i.log 2>&1; echo "quick $i $(date +%T) rc $?"
done
