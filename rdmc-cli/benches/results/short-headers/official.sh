#!/bin/bash
# #11's --quick command on the short-header build, three times, MPI in each run
cd /work/main
O=/tmp/cf/official
mkdir -p $O
for i in 1 2 3; do
  flock /tmp/rdmc-netlab.lock /tmp/cf/new-rdmc bench --quick --algorithms binomial-pipeline,chain --runs 5 --out $O/quick-$i > $O/quick-$i.log 2>&1
  echo "quick $i $(date +%T) rc $?"
done
