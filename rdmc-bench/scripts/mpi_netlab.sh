#!/usr/bin/env bash
# mpi_netlab.sh: MPI_Bcast (rdmc-bench/scripts/mpi_bcast.c) with one rank per netlab host,
# over OpenMPI's TCP transport (no shared memory), for comparison with rdmc.
#
# Usage (root):
#   mpi_netlab.sh [options] N RATE SIZE [RUNS [WARMUP]]
# Options:
#   --algorithm K     force OpenMPI's coll/tuned bcast algorithm K
#                     (0 default rules, 1 basic_linear, 2 chain, 3 pipeline,
#                     4 split_binary, 5 binary, 6 binomial, 7 knomial,
#                     8 scatter_allgather, 9 scatter_allgather_ring)
#   --segsize BYTES   segment size for the forced algorithm (0 = unsegmented)
#   --cosmos FILE     the Cosmos-like storage trace of `rdmc-bench --only cosmos`
#                     (its workload file): MPI_Ibcast per write on a communicator
#                     per group, acknowledged to the root; SIZE RUNS WARMUP ignored
#   --overlap M       overlapping senders: every rank the root of its own
#                     communicator, M rounds of MPI_Ibcast on all at once
#   --burst M         small messages: M MPI_Bcast from rank 0 back to back per run
#   --slow HOST RATE2 passed to 'netlab.sh up' (one slower host link)
#   --order "H..."    the lab hosts of ranks 0, 1, ... (space or comma separated,
#                     default 0 1 .. N-1): mpirun's rank order follows the
#                     hostfile, so e.g. "0 8 1 9 ..." lists two racks interleaved
#   --allreduce       time MPI_Allreduce of SIZE bytes of f32 (rdmc-bench/scripts/mpi_allreduce.c)
#                     instead of MPI_Bcast; --algorithm then forces OpenMPI's
#                     allreduce algorithm K (0 default rules, 1 basic_linear,
#                     2 nonoverlapping, 3 recursive_doubling, 4 ring,
#                     5 segmented_ring, 6 rabenseifner)
#   --existing        use the lab that is already up (N must match it) instead
#                     of 'netlab.sh run N RATE -- ...'; implied when NETLAB_HOSTS
#                     is set, i.e. when running under 'netlab.sh run'
#   --timeout SECS    kill mpirun after SECS (default 600)
# SIZE accepts K/M/G suffixes (binary): 8M = 8 MiB. Prints mpi_bcast's JSON line
# on stdout; everything else goes to stderr.
#
# The recipe (see rdmc-bench/scripts/README.md): mpirun runs inside host 0's namespace with
# a hostfile of the hosts' addresses; OpenMPI starts its daemon on every other
# host through an rsh agent that is a small wrapper around 'ip netns exec',
# chosen by address. Every host gets its own TMPDIR (all hosts share one
# hostname and one /tmp, and the daemons' session directories would collide).
set -euo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
NETLAB=$HERE/netlab.sh
NS_PREFIX=rdmc-h
SUBNET_CIDR=10.77.0.0/24

die() { echo "mpi_netlab: $*" >&2; exit 1; }
note() { echo "mpi_netlab: $*" >&2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }

algorithm="" segsize="" overlap="" burst="" cosmos="" existing=0 collective=bcast timeout_s=600 order=""
slow=()
args=()
orig=("$@")
while [ $# -gt 0 ]; do
    case "$1" in
        --algorithm) [ $# -ge 2 ] || usage; algorithm=$2; shift 2 ;;
        --segsize) [ $# -ge 2 ] || usage; segsize=$2; shift 2 ;;
        --slow) [ $# -ge 3 ] || usage; slow+=(--slow "$2" "$3"); shift 3 ;;
        --overlap) [ $# -ge 2 ] || usage; overlap=$2; shift 2 ;;
        --cosmos) [ $# -ge 2 ] || usage; cosmos=$2; shift 2 ;;
        --burst) [ $# -ge 2 ] || usage; burst=$2; shift 2 ;;
        --order) [ $# -ge 2 ] || usage; order=${2//,/ }; shift 2 ;;
        --existing) existing=1; shift ;;
        --allreduce) collective=allreduce; shift ;;
        --timeout) [ $# -ge 2 ] || usage; timeout_s=$2; shift 2 ;;
        -h|--help) usage ;;
        -*) die "unknown option '$1'" ;;
        *) args+=("$1"); shift ;;
    esac
done
[ ${#args[@]} -ge 3 ] && [ ${#args[@]} -le 5 ] || usage
N=${args[0]} RATE=${args[1]} SIZE=${args[2]} RUNS=${args[3]:-5} WARMUP=${args[4]:-1}
[[ "$N" =~ ^[0-9]+$ ]] && [ "$N" -ge 2 ] || die "N must be >= 2"
[[ "$algorithm" =~ ^[0-9]*$ ]] || die "--algorithm takes a number"
[[ "$segsize" =~ ^[0-9]*$ ]] || die "--segsize takes a number of bytes"
[ -z "$segsize" ] || [ -n "$algorithm" ] || die "--segsize needs --algorithm"
[[ "$overlap" =~ ^[0-9]*$ ]] || die "--overlap takes a number of messages"
[[ "$burst" =~ ^[0-9]*$ ]] || die "--burst takes a number of messages"
[ -z "$burst" ] || [ -z "$overlap" ] || die "--burst and --overlap exclude each other"
[ -z "$cosmos" ] || [ -r "$cosmos" ] || die "--cosmos: cannot read $cosmos"
[ "$(id -u)" -eq 0 ] || die "must run as root"

# ------------------------------------------------------------------ prerequisites
if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
    note "mpicc/mpirun missing: installing openmpi-bin libopenmpi-dev with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null
fi
BUILD_DIR=${MPI_BCAST_DIR:-${CARGO_TARGET_DIR:-$HERE/../../target}/netlab}
BIN=$BUILD_DIR/mpi_$collective
if [ ! -x "$BIN" ] || [ "$HERE/mpi_$collective.c" -nt "$BIN" ]; then
    mkdir -p "$BUILD_DIR"
    mpicc -O2 -Wall -o "$BIN" "$HERE/mpi_$collective.c"
    note "built $BIN"
fi

# ------------------------------------------------------------------ the lab
if [ "$existing" = 0 ] && [ -z "${NETLAB_HOSTS:-}" ]; then
    # Bring the lab up for this run only; netlab.sh tears it down on any exit.
    exec "$NETLAB" run "$N" "$RATE" "${slow[@]}" -- "$0" --existing "${orig[@]}"
fi
[ ${#slow[@]} -eq 0 ] || [ "$existing" = 1 ] || note "--slow ignored: the lab is already up"
hosts=$("$NETLAB" addrs)
nhosts=$(wc -w <<<"$hosts")
[ "$nhosts" -ge "$N" ] || die "the lab has $nhosts hosts, need $N (is it up? 'netlab.sh status')"

# ------------------------------------------------------------------ one run
WORK=$(mktemp -d /tmp/rdmc-mpi.XXXXXX)
MPIRUN_PID=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    # mpirun and its daemons live in the lab's namespaces; stop the launcher we
    # started (by PID), its daemons die with it (and with the lab's teardown).
    [ -z "$MPIRUN_PID" ] || kill -TERM "$MPIRUN_PID" 2>/dev/null || true
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

hostfile=$WORK/hostfile
: >"$hostfile"
read -r -a addrs <<<"$hosts"
if [ -z "$order" ]; then order=$(seq -s ' ' 0 $((N - 1))); fi
read -r -a order_list <<<"$order"
[ "${#order_list[@]}" -eq "$N" ] || die "--order lists ${#order_list[@]} hosts, need $N"
declare -A seen=()
for h in "${order_list[@]}"; do
    [[ "$h" =~ ^[0-9]+$ ]] && [ "$h" -lt "$nhosts" ] || die "--order: no host '$h' in a lab of $nhosts"
    [ -z "${seen[$h]:-}" ] || die "--order: host $h listed twice"
    seen[$h]=1
    echo "${addrs[$h]} slots=1" >>"$hostfile"
    mkdir -p "$WORK/h$h"
done

# The rsh agent: OpenMPI calls it as 'AGENT [options] HOST COMMAND...' (like
# ssh). Host 10.77.0.(i+1) is namespace rdmc-h<i>.
agent=$WORK/agent
cat >"$agent" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1
shift
case "\$host" in
    10.77.0.*) i=\$((\${host##*.} - 1)) ;;
    *) echo "mpi_netlab agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec $NS_PREFIX\$i env TMPDIR=$WORK/h\$i sh -c "\$*"
EOF
chmod +x "$agent"

# MPI at its best on this lab: the lab's hosts share the machine's few cores,
# but each hostfile line says one slot, so OpenMPI thinks no host is
# oversubscribed and its ranks busy-poll, starving each other (16 ranks on 2
# cores: the forced pipeline 2.42x unicast instead of ~1.01x). mpi_yield_when_idle
# makes a rank with nothing to do yield its core (MPI_YIELD_WHEN_IDLE=0 in the
# environment turns it off, to compare).
mca=(--mca pml ob1 --mca btl tcp,self
     --mca btl_tcp_if_include "$SUBNET_CIDR" --mca oob_tcp_if_include "$SUBNET_CIDR"
     --mca mpi_yield_when_idle "${MPI_YIELD_WHEN_IDLE:-1}"
     --mca rtc_hwloc_vmhole none --mca plm_rsh_agent "$agent")
if [ -n "$algorithm" ]; then
    mca+=(--mca coll_tuned_use_dynamic_rules 1 --mca "coll_tuned_${collective}_algorithm" "$algorithm")
    [ -z "$segsize" ] || mca+=(--mca "coll_tuned_${collective}_algorithm_segmentsize" "$segsize")
fi

overlap_args=()
[ -z "$overlap" ] || overlap_args=(--overlap "$overlap")
[ -z "$burst" ] || overlap_args=(--burst "$burst")
[ -z "$cosmos" ] || overlap_args=(--cosmos "$(realpath "$cosmos")")
if [ -n "$cosmos" ]; then
    note "MPI_Ibcast per write of the Cosmos-like trace $cosmos: $N ranks, one per host, one run"
elif [ "$collective" = allreduce ]; then
    note "MPI_Allreduce of $SIZE bytes of f32: $N ranks, one per host, $RUNS runs (+$WARMUP warm-up), algorithm ${algorithm:-default rules}"
else
    note "MPI_${overlap:+I}Bcast${overlap:+ (every rank a root, $overlap rounds)}${burst:+ (bursts of $burst)}: $N ranks, one per host, $SIZE bytes, $RUNS runs (+$WARMUP warm-up), algorithm ${algorithm:-default rules}${segsize:+, segments $segsize B}"
fi
out=$WORK/out
rc=0
root=${order_list[0]}
ip netns exec "${NS_PREFIX}$root" env TMPDIR="$WORK/h$root" PMIX_MCA_gds=hash \
    timeout "$timeout_s" mpirun --allow-run-as-root --bind-to none \
    --hostfile "$hostfile" -np "$N" "${mca[@]}" -x PMIX_MCA_gds \
    "$BIN" "${overlap_args[@]}" "$SIZE" "$RUNS" "$WARMUP" >"$out" &
MPIRUN_PID=$!
wait "$MPIRUN_PID" || rc=$?
MPIRUN_PID=""
grep -v '^{' "$out" >&2 || true
json=$(grep '^{' "$out" || true)
[ "$rc" -eq 0 ] && [ -n "$json" ] || die "mpirun failed (exit $rc)"
echo "$json"
