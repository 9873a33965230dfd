#!/bin/bash
cd /work/main
for round in 1 2; do
  /tmp/base-target/release/rdmc bench --quick --nodes 4,8 --algorithms binomial-pipeline --runs 5 --no-mpi --out /tmp/ab/t$round-base > /tmp/ab/t$round-base.log 2>&1
  /tmp/base-target/release/rdmc bench --quick --nodes 4,8 --algorithms binomial-pipeline --runs 5 --no-mpi --block-size 49129 --out /tmp/ab/t$round-baseeq > /tmp/ab/t$round-baseeq.log 2>&1
  ./target/release/rdmc bench --quick --nodes 4,8 --algorithms binomial-pipeline --runs 5 --no-mpi --out /tmp/ab/t$round-new > /tmp/ab/t$round-new.log 2>&1
done
echo done
