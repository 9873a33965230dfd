#!/usr/bin/env bash
# Inside `netlab.sh run N 250mbit -- pieces.sh N OUT.jsonl ROUNDS`: the ring with
# each step in 1 (the default), 2 and 4 pieces, then MPI_Allreduce ring (4) and
# segmented ring (5), ROUNDS times interleaved.
set -euo pipefail
N=$1 OUT=$2 ROUNDS=${3:-3}
S=$(cd "$(dirname "$0")/../.." && pwd)/allreduce_netlab.sh
run() { RDMC_ALGORITHMS=ring MPI_ALGORITHMS="" $S "$N" 250mbit 1048576 5 1 "$OUT" "$@"; }
for r in $(seq "$ROUNDS"); do
  run
  run --ring-pieces 2
  run --ring-pieces 4
  RDMC_ALGORITHMS="" MPI_ALGORITHMS="4 5" $S "$N" 250mbit 1048576 5 1 "$OUT"
done
