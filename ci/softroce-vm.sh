#!/usr/bin/env bash
# ci/softroce-vm.sh: run commands inside a small qemu VM with real RDMA verbs
# over Soft-RoCE (the kernel's rxe driver), for the RDMA transports' tests.
#
# Usage (as root, on Debian bookworm or a relative):
#
#   ci/softroce-vm.sh [OPTIONS] [--script FILE]... [-- CMD [ARG...]]
#
# The VM boots Debian's own kernel (downloaded and unpacked into a cache, not
# installed) from a busybox initramfs, mounts this machine's root read-only
# over 9p and switches into it, so the host's binaries and libraries run there
# unchanged: build the tests on the host first. It has no network device at
# all; rxe runs on a `dummy0` device with the address 198.51.100.1/24
# (documentation range), so RDMA traffic never leaves the VM. Inside, after
# rxe0 is up, `ibv_devices` and libfabric's `verbs` endpoints are printed,
# then each --script FILE (bash) and the command after `--` run in order, in
# this repository's directory, until one fails. Writable inside: /tmp, /run,
# /var/tmp, `target/tmp` of this repository (CARGO_TARGET_TMPDIR), each a
# fresh tmpfs, and the results directory (--out, the same path inside and
# out). The guest's environment has:
#
#   RDMC_VM=1                 running inside the VM
#   RDMC_VM_OUT=DIR           the results directory (writable, shared)
#   RDMC_VM_ADDR=198.51.100.1 the address rxe0 is on
#   RDMC_VM_DEVICE=rxe0       the RDMA device
#   RDMC_OFI_PROVIDER=verbs, RDMC_OFI_FABRIC_ADDR=198.51.100.1 (the `ofi`
#                             test fixtures' settings)
#   RDMC_TEST_TIME_SCALE=4    the tests' bounds on whole transfers and on
#                             failure detection stretch
#   and every --env NAME=VALUE.
#
# Options:
#   --script FILE     run FILE with bash inside the VM (repeatable, in order)
#   --env NAME=VALUE  set NAME in the guest's environment (repeatable)
#   --out DIR         results directory (default: target/softroce-vm); its
#                     old contents are removed if an earlier run made it
#   --timeout SECS    hard bound on the VM's wall time, boot included
#                     (default 840); qemu is killed past it
#   --cache DIR       where the kernel package is kept between runs
#                     (default: $RDMC_VM_CACHE or /var/cache/rdmc-softroce)
#   --memory MIB      guest memory (default 4096)
#   --cpus N          guest CPUs (default 2)
#   --no-install      do not apt-get install the host packages
#
# Results in --out: console.log (everything the VM printed), guest.log (the
# guest script's own output), step-N.log (each step's output), status (the
# guest's exit code). Exit status: 0 when every step passed; the failing
# step's status; 124 on a time-out; 2 for usage errors; 3 when the VM did
# not come up or vanished without a status.
#
# TCG (software emulation) is used, not KVM: on the machines this was built
# on, KVM guests hung in the firmware. `no_timer_check noapic` keep the slow
# emulated guest from panicking on its timer check.
set -euo pipefail

readonly VM_ADDR=198.51.100.1
readonly VM_DEVICE=rxe0
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
readonly REPO

say() { printf 'softroce-vm: %s\n' "$*" >&2; }
die() {
    say "error: $1"
    exit "${2:-3}"
}
usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}

scripts=()
envs=()
command=()
out="$REPO/target/softroce-vm"
timeout_s=840
cache=${RDMC_VM_CACHE:-/var/cache/rdmc-softroce}
memory=4096
cpus=2
install=1
while (($#)); do
    case $1 in
    --script | --env | --out | --timeout | --cache | --memory | --cpus)
        (($# >= 2)) || die "$1 needs a value" 2
        case $1 in
        --script)
            [[ -f $2 ]] || die "--script: $2 is not a readable file" 2
            scripts+=("$(realpath "$2")")
            ;;
        --env)
            [[ $2 =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env needs NAME=VALUE" 2
            envs+=("$2")
            ;;
        --out) out=$2 ;;
        --timeout)
            [[ $2 =~ ^[0-9]+$ ]] && (($2 >= 60)) || die "--timeout needs seconds (>= 60)" 2
            timeout_s=$2
            ;;
        --cache) cache=$2 ;;
        --memory) [[ $2 =~ ^[1-9][0-9]*$ ]] && memory=$2 || die "--memory needs MiB" 2 ;;
        --cpus) [[ $2 =~ ^[1-9][0-9]*$ ]] && cpus=$2 || die "--cpus needs a count" 2 ;;
        esac
        shift 2
        ;;
    --no-install)
        install=0
        shift
        ;;
    --)
        shift
        command=("$@")
        break
        ;;
    -h | --help) usage ;;
    *) die "unknown argument '$1' (see --help)" 2 ;;
    esac
done
((${#scripts[@]} + ${#command[@]})) || say "nothing to run: only rxe0 is brought up and shown"
[[ $(id -u) -eq 0 ]] || die "must run as root (9p export of /, apt-get)" 2
# Inside, a fresh tmpfs covers each of these, so a checkout below one of them
# (a clean clone in /tmp, say) would vanish from the guest's view.
for d in /tmp /run /var/tmp /dev/shm; do
    case "$REPO/" in
    "$d"/*) die "this checkout ($REPO) is under $d, which the VM covers with a fresh tmpfs: run it from a checkout elsewhere" 2 ;;
    esac
done

# --- host packages -----------------------------------------------------------
if ((install)); then
    export DEBIAN_FRONTEND=noninteractive
    say "installing qemu, busybox, kmod, rdma-core, libfabric (apt-get)"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends qemu-system-x86 busybox-static kmod \
        rdma-core ibverbs-providers ibverbs-utils libfabric1 libfabric-bin iproute2 \
        >/dev/null
fi
for tool in qemu-system-x86_64 modprobe depmod dpkg-deb gzip; do
    command -v "$tool" >/dev/null || die "$tool is missing (run without --no-install?)"
done
# busybox-static installs /bin/busybox; a dynamic busybox cannot run from
# the initramfs.
busybox=$(command -v busybox) || die "busybox is missing"
file -L "$busybox" 2>/dev/null | grep -q 'dynamically linked' &&
    die "$busybox is dynamically linked; install busybox-static"

# --- the kernel, cached ------------------------------------------------------
mkdir -p "$cache"
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -n1)
[[ -n $kpkg ]] || die "cannot tell which kernel linux-image-amd64 is (apt-cache depends)"
kver=${kpkg#linux-image-}
kdir="$cache/$kver"
if [[ ! -f $kdir/.unpacked ]]; then
    say "downloading and unpacking $kpkg (not installing it) into $cache"
    rm -rf "$kdir" "$cache"/"$kpkg"_*.deb.partial
    deb=$(cd "$cache" && ls "$kpkg"_*.deb 2>/dev/null | head -n1) || true
    if [[ -z $deb ]]; then
        # `apt-get download` writes into the current directory.
        (cd "$cache" && apt-get download -q "$kpkg" 2>&1 | { grep -v unsandboxed || true; } >&2) ||
            die "apt-get download $kpkg failed"
        deb=$(cd "$cache" && ls "$kpkg"_*.deb | head -n1)
    fi
    mkdir -p "$kdir.tmp"
    dpkg-deb -x "$cache/$deb" "$kdir.tmp"
    depmod -b "$kdir.tmp" "$kver"
    mv "$kdir.tmp" "$kdir"
    touch "$kdir/.unpacked"
    # Older kernels' packages are of no further use.
    find "$cache" -maxdepth 1 -name 'linux-image-*.deb' ! -name "$deb" -delete
fi
vmlinuz=$kdir/boot/vmlinuz-$kver
[[ -f $vmlinuz ]] || die "$vmlinuz is missing; remove $kdir and retry"

# --- the results directory ---------------------------------------------------
mkdir -p "$out"
out=$(realpath "$out")
if [[ -n $(ls -A "$out") ]]; then
    [[ -f $out/.softroce-vm ]] || die "$out is not empty and not from an earlier run; choose another --out" 2
    find "$out" -mindepth 1 -delete
fi
touch "$out/.softroce-vm"
mkdir -p "$out/.vm"

# Writable tmpfs mounts inside the guest (besides /tmp, /run, /var/tmp).
tmpfs_dirs=("$REPO/target/tmp")
mkdir -p "${tmpfs_dirs[@]}"

# --- the guest's script (runs in the host's root, as the VM's PID 1's child) --
{
    printf '#!/bin/bash\n'
    printf '# Written by ci/softroce-vm.sh; runs inside the VM.\n'
    printf 'readonly OUT=%q REPO=%q VM_ADDR=%q VM_DEVICE=%q\n' "$out" "$REPO" "$VM_ADDR" "$VM_DEVICE"
    printf 'readonly STEP_LIMIT=%d\n' "$((timeout_s > 180 ? timeout_s - 90 : timeout_s / 2))"
    printf 'export RDMC_VM=1 RDMC_VM_OUT=%q RDMC_VM_ADDR=%q RDMC_VM_DEVICE=%q\n' "$out" "$VM_ADDR" "$VM_DEVICE"
    printf 'export RDMC_OFI_PROVIDER=verbs RDMC_OFI_FABRIC_ADDR=%q\n' "$VM_ADDR"
    # Emulation is slow: the tests' bounds on whole transfers stretch.
    printf 'export RDMC_TEST_TIME_SCALE=4\n'
    for e in "${envs[@]}"; do printf 'export %q\n' "$e"; done
    printf 'steps=(\n'
    # The scripts run from copies in the results directory: the originals
    # may be where the guest has a tmpfs (/tmp).
    i=0
    for s in "${scripts[@]}"; do
        i=$((i + 1))
        cp "$s" "$out/.vm/script-$i-$(basename "$s")"
        printf '  %q\n' "bash $(printf '%q' "$out/.vm/script-$i-$(basename "$s")")"
    done
    if ((${#command[@]})); then printf '  %q\n' "$(printf '%q ' "${command[@]}")"; fi
    printf ')\n'
    cat <<'GUEST'
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/tmp/home LANG=C.UTF-8
mkdir -p "$HOME"
say() { printf 'softroce-vm(guest): %s\n' "$*"; }
finish() {
    say "status $1"
    echo "$1" >"$OUT/status"
    sync
    exit "$1"
}
cd "$REPO" || finish 3
say "kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ {print int($2/1024) " MiB"}' /proc/meminfo)"

# rxe on a dummy device: the guest has no NIC, rxe on `lo` gets no IPv4 GID.
ip link set lo up
ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy || finish 3
ip addr add "$VM_ADDR/24" dev dummy0 && ip link set dummy0 up || finish 3
rdma link add "$VM_DEVICE" type rxe netdev dummy0 || finish 3
for _ in $(seq 50); do
    ibv_devinfo -d "$VM_DEVICE" 2>/dev/null | grep -q PORT_ACTIVE && break
    sleep 0.2
done
say "ibv_devices:"
ibv_devices
ibv_devinfo -d "$VM_DEVICE" | grep -E 'hca_id|transport|state|active_mtu|link_layer'
ibv_devices | grep -qw "$VM_DEVICE" || { say "$VM_DEVICE is missing"; finish 3; }
say "libfabric's verbs provider (FI_EP_MSG) on $VM_ADDR:"
fi_info -p verbs -t FI_EP_MSG -s "$VM_ADDR" 2>&1 | sed 's/^ */    /' || say "fi_info -p verbs lists nothing"
fi_info -p verbs -t FI_EP_MSG -s "$VM_ADDR" -v 2>/dev/null |
    awk '$1 ~ /^(max_msg_size|mr_mode|cq_data_size|tx_size|rx_size):$/ && !seen[$1]++ {$1 = $1; print "    " $0}' || true

n=0
for step in "${steps[@]}"; do
    n=$((n + 1))
    say "step $n: $step"
    start=$(date +%s)
    timeout --kill-after=10 "$STEP_LIMIT" bash -c "$step" 2>&1 | tee "$OUT/step-$n.log"
    rc=${PIPESTATUS[0]}
    say "step $n: exit $rc after $(($(date +%s) - start)) s"
    ((rc == 0)) || finish "$rc"
done
finish 0
GUEST
} >"$out/.vm/guest.sh"
chmod +x "$out/.vm/guest.sh"

# --- the initramfs -----------------------------------------------------------
work=$(mktemp -d /tmp/softroce-vm.XXXXXX)
qemu_pid=
cleanup() {
    if [[ -n $qemu_pid ]] && kill -0 "$qemu_pid" 2>/dev/null; then
        kill "$qemu_pid" 2>/dev/null || true
        sleep 2
        kill -9 "$qemu_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$work/root/bin" "$work/root/modules"
cp "$busybox" "$work/root/bin/busybox"
# The modules rxe, 9p and virtio need, in dependency order, each once, with
# the options modprobe would give them.
depends=
for mod in crc32_generic virtio_pci 9pnet_virtio 9p rdma_rxe rdma_ucm ib_uverbs dummy; do
    depends+=$(modprobe -d "$kdir" -S "$kver" --show-depends "$mod") ||
        die "module $mod is not in $kpkg"
    depends+=$'\n'
done
while read -r _ path args; do
    base=$(basename "$path")
    case $base in
    *.ko.xz) xz -dc "$path" >"$work/root/modules/${base%.xz}" ;;
    *.ko.zst) zstd -qdc "$path" >"$work/root/modules/${base%.zst}" ;;
    *.ko.gz) gzip -dc "$path" >"$work/root/modules/${base%.gz}" ;;
    *) cp "$path" "$work/root/modules/" ;;
    esac
    printf '%s %s\n' "${base%.ko*}.ko" "$args" >>"$work/root/modules/order"
done < <(awk '$1 == "insmod" && !seen[$2]++' <<<"$depends")
[[ -s $work/root/modules/order ]] || die "no modules found in $kdir"

{
    printf '#!/bin/busybox sh\n'
    printf 'OUT=%q\n' "$out"
    printf 'TMPFS="%s"\n' "${tmpfs_dirs[*]}"
    cat <<'INIT'
/bin/busybox --install -s /bin
export PATH=/bin
mkdir -p /proc /sys /dev /host
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
halt() {
    echo "softroce-vm(init): $*"
    sync
    poweroff -f
}
while read -r mod args; do
    insmod "/modules/$mod" $args || echo "softroce-vm(init): insmod $mod failed"
done </modules/order
opts=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o "$opts,ro,cache=loose" hostroot /host || halt "cannot mount the host's root"
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t devtmpfs devtmpfs /host/dev
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts devpts /host/dev/pts
for d in /dev/shm /tmp /run /var/tmp $TMPFS; do
    mount -t tmpfs -o mode=1777 tmpfs "/host$d" || halt "cannot mount a tmpfs on $d"
done
# After the tmpfs mounts, which it may be under (--out /tmp/...).
mkdir -p "/host$OUT" 2>/dev/null
mount -t 9p -o "$opts" results "/host$OUT" || halt "cannot mount the results share"
echo "softroce-vm(init): host root mounted; running the guest script"
# switch_root, not chroot: a chrooted process may not create user
# namespaces (the tests' unprivileged tmpfs needs them). The guest script's
# output goes to the console and guest.log; then power off (sysrq: no init
# system to ask), or, failing that, PID 1 exits and the kernel's panic ends
# qemu (-no-reboot).
exec switch_root /host /bin/bash -c '
"$0" 2>&1 | tee "$1/guest.log"
echo "softroce-vm(init): the guest script is done; powering off"
sync
umount "$1" 2>/dev/null
echo o >/proc/sysrq-trigger
sleep 30' "$OUT/.vm/guest.sh" "$OUT"
INIT
} >"$work/root/init"
chmod +x "$work/root/init"
(cd "$work/root" && find . | "$busybox" cpio -o -H newc 2>/dev/null | gzip -1) >"$work/initrd.gz"

# --- boot, bounded -----------------------------------------------------------
say "booting $kver under TCG ($cpus CPUs, $memory MiB, no NIC), at most $timeout_s s; console: $out/console.log"
started=$(date +%s)
qemu-system-x86_64 \
    -accel tcg -cpu max -smp "$cpus" -m "$memory" \
    -nodefaults -no-user-config -display none -monitor none -serial stdio \
    -no-reboot -nic none \
    -kernel "$vmlinuz" -initrd "$work/initrd.gz" \
    -append "console=ttyS0 rdinit=/init panic=-1 no_timer_check noapic quiet loglevel=4" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$out,mount_tag=results,security_model=none" \
    </dev/null >"$out/console.log" 2>&1 &
qemu_pid=$!
tail --pid="$qemu_pid" -n +1 -F "$out/console.log" 2>/dev/null &
tail_pid=$!
timed_out=0
while kill -0 "$qemu_pid" 2>/dev/null; do
    if (($(date +%s) - started >= timeout_s)); then
        say "time-out: the VM ran $timeout_s s; killing qemu (pid $qemu_pid)"
        timed_out=1
        kill "$qemu_pid" 2>/dev/null || true
        for _ in 1 2 3 4 5; do
            kill -0 "$qemu_pid" 2>/dev/null || break
            sleep 1
        done
        kill -9 "$qemu_pid" 2>/dev/null || true
        break
    fi
    sleep 1
done
wait "$qemu_pid" 2>/dev/null || true
qemu_pid=
sleep 0.5
kill "$tail_pid" 2>/dev/null || true
wait "$tail_pid" 2>/dev/null || true
say "the VM ran $(($(date +%s) - started)) s"

((timed_out)) && exit 124
[[ -s $out/status ]] || die "the VM stopped without a status (see $out/console.log)"
status=$(<"$out/status")
[[ $status =~ ^[0-9]+$ ]] || die "the VM left a garbled status '$status'"
if ((status != 0)); then
    say "failed: status $status (logs in $out)"
    exit "$status"
fi
say "passed (logs in $out)"
