#!/bin/bash
cd /work/main
while ! grep -q ALLDONE /tmp/m/all.out; do sleep 5; done
for r in 5 6 7; do
  ./target/release/rdmc bench --quick --nodes 4 --algorithms binomial-pipeline --runs 5 --out /tmp/m/f$r > /tmp/m/f$r.log 2>&1
done
echo FOURDONE
