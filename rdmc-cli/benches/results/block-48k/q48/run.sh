#!/bin/bash
for r in 1 2 3; do
  flock /tmp/rdmc-netlab.lock /work/exp/rdmc-48 bench --quick --algorithms binomial-pipeline --runs 5 --out /work/exp/q48/auth-$r > /work/exp/q48/auth-$r.log 2>&1
done
flock /tmp/rdmc-netlab.lock /work/exp/rdmc-48 bench --only latency --nodes 16 --algorithms binomial-pipeline --runs 5 --out /work/exp/q48/n16 > /work/exp/q48/n16.log 2>&1
echo done > /work/exp/q48/DONE
