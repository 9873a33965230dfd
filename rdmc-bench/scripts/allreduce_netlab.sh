#!/usr/bin/env bash
# allreduce_netlab.sh: rdmc's allreduce (`rdmc-bench allreduce-member`, one process
# per netlab host, over tcp) and MPI_Allreduce (mpi_allreduce.c through
# mpi_netlab.sh, every one of OpenMPI's allreduce algorithms forced in turn,
# and its default rules) of SIZE bytes of f32 in the same lab, one after the
# other.
#
# Usage (root):
#   allreduce_netlab.sh N RATE SIZE RUNS WARMUP OUT.jsonl [rdmc-bench allreduce-member options]
# RDMC_BENCH: the rdmc-bench binary (default: target/release/rdmc-bench);
# RDMC: the rdmc binary, for its `keygen` (default: target/release/rdmc).
# SIZE in bytes. Appends one JSON line per system (and MPI algorithm) to
# OUT.jsonl. Wrap it in `flock /tmp/rdmc-netlab.lock`: the lab's names are
# machine-global.
set -euo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
NETLAB=$HERE/netlab.sh
RDMC=${RDMC:-$HERE/../../target/release/rdmc}
RDMC_BENCH=${RDMC_BENCH:-$HERE/../../target/release/rdmc-bench}
die() { echo "allreduce_netlab: $*" >&2; exit 1; }
note() { echo "allreduce_netlab: $*" >&2; }

[ $# -ge 6 ] || die "usage: allreduce_netlab.sh N RATE SIZE RUNS WARMUP OUT.jsonl [member options]"
N=$1 RATE=$2 SIZE=$3 RUNS=$4 WARMUP=$5 OUT=$6
shift 6
[ -x "$RDMC" ] || die "no rdmc binary at $RDMC (cargo build --release -p rdmcast-cli, or set RDMC)"
[ -x "$RDMC_BENCH" ] || die "no rdmc-bench binary at $RDMC_BENCH (cargo build --release -p rdmc-bench, or set RDMC_BENCH)"
if [ -z "${NETLAB_HOSTS:-}" ]; then
    exec "$NETLAB" run "$N" "$RATE" -- "$0" "$N" "$RATE" "$SIZE" "$RUNS" "$WARMUP" "$OUT" "$@"
fi

WORK=$(mktemp -d /tmp/allreduce-bench.XXXXXX)
pids=()
cleanup() {
    local rc=$?
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT

read -r -a addrs <<<"$("$NETLAB" addrs)"
[ "${#addrs[@]}" -ge "$N" ] || die "the lab has ${#addrs[@]} hosts, need $N"
: >"$WORK/members"
for ((i = 0; i < N; i++)); do echo "${addrs[$i]}:7710" >>"$WORK/members"; done
"$RDMC" keygen "$WORK/key" >/dev/null

# RDMC_ALGORITHMS: rdmc's algorithms to run (default: the tree, the ring and
# recursive halving and doubling, `halving`).
for algo in ${RDMC_ALGORITHMS-tree ring halving}; do
    note "rdmc allreduce ($algo): $N members, $SIZE bytes of f32, $RUNS runs (+$WARMUP warm-up), load: $(cut -d' ' -f1-3 /proc/loadavg)"
    pids=()
    for ((i = 1; i < N; i++)); do
        ip netns exec "rdmc-h$i" timeout 600 "$RDMC_BENCH" allreduce-member --members "$WORK/members" \
            --rank "$i" --key-file "$WORK/key" --size "$SIZE" --runs "$RUNS" --warmup "$WARMUP" \
            --algorithm "$algo" "$@" 2>"$WORK/member$i.log" &
        pids+=($!)
    done
    line=$(ip netns exec rdmc-h0 timeout 600 "$RDMC_BENCH" allreduce-member --members "$WORK/members" \
        --rank 0 --key-file "$WORK/key" --size "$SIZE" --runs "$RUNS" --warmup "$WARMUP" \
        --algorithm "$algo" "$@") \
        || { tail -n 5 "$WORK"/member*.log >&2 || true; die "rdmc allreduce failed"; }
    for p in "${pids[@]}"; do wait "$p" || die "a member failed"; done
    pids=()
    load=$(cut -d' ' -f1 /proc/loadavg)
    echo "${line%\}},\"rate\":\"$RATE\",\"load\":$load}" | tee -a "$OUT"
done

# MPI_ALGORITHMS="" skips MPI (a quick rdmc-only run).
for alg in ${MPI_ALGORITHMS-0 1 2 3 4 5 6}; do
    forced=()
    [ "$alg" = 0 ] || forced=(--algorithm "$alg")
    if line=$("$HERE/mpi_netlab.sh" --existing --allreduce "${forced[@]}" "$N" "$RATE" "$SIZE" "$RUNS" "$WARMUP"); then
        load=$(cut -d' ' -f1 /proc/loadavg)
        echo "${line%\}},\"algorithm\":$alg,\"rate\":\"$RATE\",\"load\":$load}" | tee -a "$OUT"
    else
        note "MPI_Allreduce algorithm $alg failed"
    fi
done
