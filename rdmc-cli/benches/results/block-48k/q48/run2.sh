#!/bin/bash
for r in 4 5 6; do
  flock /tmp/rdmc-netlab.lock /work/exp/rdmc-48 bench --quick --algorithms binomial-pipeline --runs 5 --out /work/exp/q48/auth-$r > /work/exp/q48/auth-$r.log 2>&1
done
echo done > /work/exp/q48/DONE2
