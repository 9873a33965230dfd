#!/usr/bin/env bash
# Runs inside the Soft-RoCE VM (ci/softroce-vm.sh --script): the `ofi`
# transport over libfabric's `verbs` provider on rxe0. The test binaries were
# built on the host (ci/softroce-tier.sh passes their paths):
#
#   RDMC_TEST_WHOLE_GROUP  the whole-group suite (rdmc/tests/whole_group.rs)
#   RDMC_TEST_OFI_RESOURCES nodes give back their fabric resources
#   RDMC_TEST_CLI_MEMBER   the multi-process member suite (rdmc-cli)
#   RDMC_BIN               the `rdmc` binary
#
# The fixtures take the provider and address from RDMC_OFI_PROVIDER and
# RDMC_OFI_FABRIC_ADDR, which the VM sets to `verbs` and rxe0's address.
# Prints each suite's test count, rxe0's packet counters around it (proof the
# bytes went through the RDMA device), and the demo's sha256 sums; fails on
# any failure or when the demo's copies differ.
set -euo pipefail

: "${RDMC_VM_OUT:?run inside ci/softroce-vm.sh}" "${RDMC_VM_ADDR:?}" "${RDMC_VM_DEVICE:?}"
: "${RDMC_TEST_WHOLE_GROUP:?}" "${RDMC_TEST_OFI_RESOURCES:?}" \
    "${RDMC_TEST_CLI_MEMBER:?}" "${RDMC_BIN:?}"
[[ ${RDMC_OFI_PROVIDER:-} == verbs ]] || {
    echo "ofi-verbs: RDMC_OFI_PROVIDER is '${RDMC_OFI_PROVIDER:-}', not verbs" >&2
    exit 1
}

counters=/sys/class/infiniband/$RDMC_VM_DEVICE/ports/1/hw_counters
packets() { echo $(($(<"$counters/sent_pkts"))); }
say() { printf 'ofi-verbs: %s\n' "$*"; }

# One suite: the tests of `binary` matching `filter`, one at a time (TCG is
# slow and the machine small); prints the count and rxe0's packets.
suite() {
    local name=$1 binary=$2 filter=$3 log=$RDMC_VM_OUT/$1.log before rc=0
    before=$(packets)
    say "$name: $binary $filter (provider $RDMC_OFI_PROVIDER on $RDMC_VM_ADDR)"
    "$binary" "$filter" --test-threads 1 >"$log" 2>&1 || rc=$?
    grep -E '^test |^test result' "$log" | sed 's/^/    /'
    if ((rc != 0)); then
        say "$name FAILED (exit $rc); its output:"
        sed -n '/^failures:/,$p' "$log" | head -n 200
        exit 1
    fi
    local result
    result=$(grep '^test result' "$log")
    [[ $result =~ ([0-9]+)\ passed ]] && ((BASH_REMATCH[1] > 0)) || {
        say "$name: no test ran"
        exit 1
    }
    say "$name over verbs: ${BASH_REMATCH[1]} passed; rxe0 sent $(($(packets) - before)) packets"
}

# The suite's many-message scenarios, a tenth of their size: under TCG they
# would take most of the VM's time (the host's test run has them whole, on
# every transport it can run).
export RDMC_TEST_MIXED_MESSAGES=1000 RDMC_TEST_BURST_MESSAGES=300

suite whole-group-ofi-verbs "$RDMC_TEST_WHOLE_GROUP" ofi::
suite ofi-resources-verbs "$RDMC_TEST_OFI_RESOURCES" ""
suite member-ofi-verbs "$RDMC_TEST_CLI_MEMBER" ofi::

# The demo: 4 members, a few MiB (odd size, odd block), copies compared.
demo=$RDMC_VM_OUT/demo-ofi-verbs
before=$(packets)
say "rdmc demo --transport ofi --ofi-provider verbs --ofi-addr $RDMC_VM_ADDR, 4 members"
"$RDMC_BIN" demo --transport ofi --ofi-provider verbs --ofi-addr "$RDMC_VM_ADDR" \
    --nodes 4 --size 5000017 --block-size 300001 --messages 2 --out "$demo"
say "demo: rxe0 sent $(($(packets) - before)) packets; sha256 of every member's copy:"
(cd "$demo" && sha256sum ./*.bin) | sed 's/^/    /'
copies=$(ls "$demo"/*.bin | wc -l)
distinct=$(cd "$demo" && sha256sum ./*.bin | cut -d' ' -f1 | sort -u | wc -l)
size=$(stat -c %s "$demo/0.bin")
if ((copies != 4 || distinct != 1 || size != 2 * 5000017)); then
    say "demo FAILED: $copies copies, $distinct distinct, root's $size bytes"
    exit 1
fi
say "demo: 4 identical copies of $size bytes"
