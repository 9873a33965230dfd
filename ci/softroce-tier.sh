#!/usr/bin/env bash
# ci/softroce-tier.sh: the Soft-RoCE VM tier of CI. Builds the `ofi` and
# `rdma` tests and `rdmc` on the host, then runs them inside
# ci/softroce-vm.sh's VM: `ofi` over libfabric's `verbs` provider
# (ci/vm/ofi-verbs.sh), then the `rdma` transport on RDMA verbs directly
# (ci/vm/rdma.sh). Arguments are passed to ci/softroce-vm.sh (say
# --no-install, --timeout SECS, --out DIR).
set -euo pipefail
cd "$(dirname "$0")/.."

# The VM runs the host's binaries unchanged, so build them here first.
cargo build --locked -p rdmcast-cli --features ofi,rdma
tests=$({
    cargo test --locked --features ofi,rdma --no-run --test whole_group --test ofi_resources \
        --test cli_member --message-format=json
    cargo test --locked -p rdmcast --features ofi,rdma --no-run --lib --message-format=json
} | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m["target"]["kind"] in (["test"], ["lib"]):
        kind = "lib-" if m["target"]["kind"] == ["lib"] else ""
        print(kind + m["target"]["name"], m["executable"])
')
exe() { awk -v t="$1" '$1 == t {print $2}' <<<"$tests"; }
whole_group=$(exe whole_group)
ofi_resources=$(exe ofi_resources)
cli_member=$(exe cli_member)
rdmc_lib=$(exe lib-rdmc)
[[ -x $whole_group && -x $ofi_resources && -x $cli_member && -x $rdmc_lib ]] || {
    echo "softroce-tier: test binaries not found in: $tests" >&2
    exit 1
}

exec ci/softroce-vm.sh \
    --env "RDMC_TEST_WHOLE_GROUP=$whole_group" \
    --env "RDMC_TEST_OFI_RESOURCES=$ofi_resources" \
    --env "RDMC_TEST_CLI_MEMBER=$cli_member" \
    --env "RDMC_TEST_RDMC_LIB=$rdmc_lib" \
    --env "RDMC_BIN=$PWD/target/debug/rdmc" \
    --script ci/vm/ofi-verbs.sh --script ci/vm/rdma.sh "$@"
