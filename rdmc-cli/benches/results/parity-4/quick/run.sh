#!/bin/bash
# #11 --quick, binomial pipeline, authenticated vs none alternated, MPI in every run
cd /work/main
O=/tmp/cf/c33
for i in 1 2 3; do
  for v in auth none; do
    X=""; [ $v = none ] && X="--wire-security none"
    flock /tmp/rdmc-netlab.lock $O/rdmc bench --quick --algorithms binomial-pipeline --runs 5 $X --out $O/$v-$i > $O/$v-$i.log 2>&1
    echo "$v $i $(date +%T) rc $?" >> $O/progress
  done
done
