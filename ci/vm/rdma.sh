#!/usr/bin/env bash
# Runs inside the Soft-RoCE VM (ci/softroce-vm.sh --script): the `rdma`
# transport (RDMA verbs through sideway) on rxe0. The binaries were built on
# the host with the `rdma` feature (ci/softroce-tier.sh passes their paths):
#
#   RDMC_TEST_RDMC_LIB     the library's unit tests (a QP moved to the error
#                          state, typed errors, the receive-slot table)
#   RDMC_TEST_WHOLE_GROUP  the whole-group suite (rdmc/tests/whole_group.rs)
#   RDMC_BIN               the `rdmc` binary
#
# Prints each suite's test count, rxe0's packet counters around it, and the
# sha256 sums of every member's copies (rdmc demo and rdmc member); fails on
# any failure, on a suite that ran nothing, or when copies differ.
set -euo pipefail

: "${RDMC_VM_OUT:?run inside ci/softroce-vm.sh}" "${RDMC_VM_DEVICE:?}"
: "${RDMC_TEST_RDMC_LIB:?}" "${RDMC_TEST_WHOLE_GROUP:?}" "${RDMC_BIN:?}"

counters=/sys/class/infiniband/$RDMC_VM_DEVICE/ports/1/hw_counters
packets() { echo $(($(<"$counters/sent_pkts"))); }
say() { printf 'rdma: %s\n' "$*"; }

# One suite: the tests of `binary` matching the filters, one at a time.
suite() {
    local name=$1 binary=$2 log=$RDMC_VM_OUT/$1.log before rc=0
    shift 2
    before=$(packets)
    say "$name: $binary $*"
    timeout 900 "$binary" "$@" --test-threads 1 >"$log" 2>&1 || rc=$?
    grep -E '^test |^test result' "$log" | sed 's/^/    /'
    if ((rc != 0)); then
        say "$name FAILED (exit $rc); its output:"
        sed -n '/^failures:/,$p' "$log" | head -n 200
        exit 1
    fi
    if grep -q ': skipped: ' "$log"; then
        say "$name: skipped for want of a device, inside the VM"
        exit 1
    fi
    local result
    result=$(grep '^test result' "$log" | tail -n 1)
    [[ $result =~ ([0-9]+)\ passed ]] && ((BASH_REMATCH[1] > 0)) || {
        say "$name: no test ran"
        exit 1
    }
    say "$name over $RDMC_VM_DEVICE: ${BASH_REMATCH[1]} passed; rxe0 sent $(($(packets) - before)) packets"
}

# Every member's copy must equal the others: `same FILE...` fails otherwise.
same() {
    sha256sum "$@" | sed 's/^/    /'
    (($(sha256sum "$@" | cut -d' ' -f1 | sort -u | wc -l) == 1)) || {
        say "copies differ: $*"
        exit 1
    }
}

# The suite's many-message scenarios, a tenth of their size: under TCG they
# would take most of the VM's time (the host's test run has them whole, on
# every transport it can run).
export RDMC_TEST_MIXED_MESSAGES=1000 RDMC_TEST_BURST_MESSAGES=300

suite unit-rdma "$RDMC_TEST_RDMC_LIB" transport::rdma transport::slots
suite whole-group-rdma "$RDMC_TEST_WHOLE_GROUP" rdma::

say "rdmc demo --transport rdma: 4 members, every algorithm, 3 MiB + 1 byte"
timeout 600 "$RDMC_BIN" demo --transport rdma --nodes 4 --size 3145729 --block-size 256KiB \
    --algorithm all
demo=$RDMC_VM_OUT/demo-rdma
say "rdmc demo --transport rdma: 4 members, 3 messages of 8 MiB, sha256 of every member's copy"
timeout 600 "$RDMC_BIN" demo --transport rdma --nodes 4 --size 8MiB --block-size 512KiB \
    --messages 3 --out "$demo"
copies=("$demo"/*.bin)
((${#copies[@]} == 4)) || { say "demo: ${#copies[@]} copies, not 4"; exit 1; }
same "${copies[@]}"

say "rdmc member --transport rdma: 4 processes, two files"
m=$(mktemp -d)
head -c 5000001 /dev/urandom >"$m/a.bin"
head -c 777 /dev/urandom >"$m/b.bin"
head -c 32 /dev/urandom >"$m/key"
printf '127.0.0.1:%d\n' 17100 17101 17102 17103 >"$m/members"
pids=()
for r in 1 2 3; do
    timeout 300 "$RDMC_BIN" member --transport rdma --key-file "$m/key" --members "$m/members" \
        --rank "$r" --block-size 256KiB --out "$m/out$r" >"$m/log$r" 2>&1 &
    pids+=($!)
done
rc=0
timeout 300 "$RDMC_BIN" member --transport rdma --key-file "$m/key" --members "$m/members" \
    --rank 0 --block-size 256KiB "$m/a.bin" "$m/b.bin" >"$m/log0" 2>&1 || rc=$?
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
if ((rc != 0)); then
    say "member FAILED (exit $rc):"
    tail -n 20 "$m"/log*
    exit 1
fi
same "$m/a.bin" "$m"/out*/0.bin
same "$m/b.bin" "$m"/out*/1.bin
say "member: every receiver holds both files intact"
