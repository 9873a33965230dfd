#!/bin/bash
# nway.sh TAG N "label|bin|args" ... -> alternating lab runs of the 1 KiB latency
TAG=$1; N=$2; shift 2
for i in $(seq 1 $N); do
  for spec in "$@"; do
    IFS='|' read -r L BIN X <<< "$spec"
    OUT=/tmp/lat/$TAG-$L-$i; rm -rf $OUT
    flock /tmp/rdmc-netlab.lock $BIN bench --only small-messages --nodes ${NODES:-8} --algorithms binomial-pipeline --small-sizes 1KiB --small-burst 0 $X --out $OUT > $OUT.log 2>&1 || echo "$L $i failed"
  done
done
