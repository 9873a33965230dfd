#!/usr/bin/env bash
# Inside `netlab.sh run N 250mbit -- completion.sh N OUT.jsonl ROUNDS`: the ring
# with adaptive (the default) and interrupt completions, then MPI_Allreduce ring
# (4) and segmented ring (5), ROUNDS times interleaved.
set -euo pipefail
N=$1 OUT=$2 ROUNDS=${3:-3}
S=$(cd "$(dirname "$0")/../.." && pwd)/allreduce_netlab.sh
run() { RDMC_ALGORITHMS=ring MPI_ALGORITHMS="" $S "$N" 250mbit 1048576 5 1 "$OUT" "$@"; }
for r in $(seq "$ROUNDS"); do
  run
  run --completion interrupt
  RDMC_ALGORITHMS="" MPI_ALGORITHMS="4 5" $S "$N" 250mbit 1048576 5 1 "$OUT"
done
