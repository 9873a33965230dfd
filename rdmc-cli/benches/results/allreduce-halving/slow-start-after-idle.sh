#!/usr/bin/env bash
# Inside `netlab.sh run N 250mbit --`: set net.ipv4.tcp_slow_start_after_idle
# to SSAI in every lab host, then rdmc's ring and halving and MPI's ring,
# segmented ring and rabenseifner (allreduce_netlab.sh, 1 MiB of f32, 5 runs
# after 1 warm-up), appending to OUT.jsonl. RDMC: the rdmc binary.
# Usage: slow-start-after-idle.sh N OUT.jsonl SSAI
set -euo pipefail
N=$1 OUT=$2 SSAI=$3
BENCHES=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
for ((i = 0; i < N; i++)); do ip netns exec "rdmc-h$i" sysctl -qw net.ipv4.tcp_slow_start_after_idle="$SSAI"; done
RDMC_ALGORITHMS="ring halving" MPI_ALGORITHMS="4 5 6" "$BENCHES/allreduce_netlab.sh" "$N" 250mbit 1048576 5 1 "$OUT"
