#!/usr/bin/env bash
# netlab.sh: an emulated cluster on one Linux machine, for rdmc-benchmarks.
#
# N network namespaces rdmc-h0..rdmc-h{N-1} ("hosts"), each with one veth
# (eth0, 10.77.0.(i+1)/24) into one bridge rdmc-br0 in the root namespace. Every
# host link is capped in both directions with tbf: on eth0 inside the namespace
# (host -> bridge) and on the root-side veth rdmc-v<i> (bridge -> host). The bridge
# has no address: the lab's addresses exist only inside the namespaces.
#
# With --racks R (R >= 2) the hosts sit in R racks of consecutive hosts (host i
# in rack i*R/N), one bridge rdmc-br<r> per rack (its top-of-rack switch). Two
# racks are joined by one veth pair rdmc-up0 <-> rdmc-up1 (the uplink); more
# racks each have an uplink rdmc-up<r> <-> rdmc-uc<r> into a core bridge
# rdmc-core. Every uplink is capped at --uplink RATE3 (default: RATE) in both
# directions, so all traffic between two racks shares it. One subnet for all.
#
# Usage (root; needs iproute2 only, installed through apt-get when missing):
#   netlab.sh up N RATE [--slow HOST RATE2]... [--delay D] [--racks R [--uplink RATE3]] [--cc NAME]
#   netlab.sh racks                (the rack of each host, in host order)
#   netlab.sh down
#   netlab.sh status
#   netlab.sh exec H CMD...
#   netlab.sh addr H
#   netlab.sh addrs
#   netlab.sh run N RATE [up options] -- CMD...   (up, run CMD, always down)
#   netlab.sh selftest
#   netlab.sh selftest racks       (two racks of two hosts, the uplink cap)
# RATE is a tc rate: 250mbit, 1gbit, 500kbit, ... See rdmc-bench/scripts/README.md.
#
# Every host uses the TCP congestion control --cc NAME, else $NETLAB_CC, else
# cubic (Linux's default): a new namespace would otherwise take the machine's
# default, which differs between machines, and results depend on it.
set -eEuo pipefail

NS_PREFIX=rdmc-h        # namespaces rdmc-h0, rdmc-h1, ...
VETH_PREFIX=rdmc-v      # root-side veth ends rdmc-v0, rdmc-v1, ...
BRIDGE=rdmc-br0         # the bridge of rack 0 (of the whole lab without racks)
BRIDGE_PREFIX=rdmc-br   # rack bridges rdmc-br0, rdmc-br1, ...
UPLINK_PREFIX=rdmc-up   # rack-side uplink ends rdmc-up0, rdmc-up1, ...
CORE_PREFIX=rdmc-uc     # core-side uplink ends (more than two racks)
CORE=rdmc-core          # the core bridge (more than two racks)
SUBNET=10.77.0          # host i has SUBNET.(i+1)/24
TBF_LATENCY=20ms        # tbf queue limit, expressed as time
DEFAULT_CC=cubic        # every host's TCP congestion control unless told
MAX_HOSTS=250

SELF=$(readlink -f "${BASH_SOURCE[0]}")

die() { echo "netlab: $*" >&2; exit 1; }
note() { echo "netlab: $*" >&2; }

usage() {
    sed -n '2,/^set -euo/p' "$SELF" | sed '$d' | sed 's/^# \{0,1\}//'
    exit "${1:-2}"
}

# ---------------------------------------------------------------- prerequisites

require_root() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces, veth, tc)"
}

# Install iproute2 (ip, tc) when missing, non-interactively.
require_tools() {
    if command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1; then
        return
    fi
    note "ip/tc missing: installing iproute2 with apt-get"
    command -v apt-get >/dev/null 2>&1 || die "ip/tc missing and no apt-get to install iproute2"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq iproute2 >/dev/null
    command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1 || die "iproute2 install failed"
}

# The system python (pyenv shims, if any, are not needed inside namespaces).
if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=$(command -v python3 || echo python3); fi

# Teardown policy, applied by the EXIT trap set in main: "run" and "selftest"
# always tear down; "up" tears down only if it did not complete (error, Ctrl-C).
ALWAYS_DOWN=0
UP_PENDING=0
CHILD=""
on_exit() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$CHILD" ]; then kill_tree "$CHILD"; fi
    if [ "$ALWAYS_DOWN" = 1 ] || [ "$UP_PENDING" = 1 ]; then
        cmd_down >/dev/null 2>&1 || note "teardown incomplete; run 'netlab.sh down'"
    fi
    exit "$rc"
}
# Kill a process and its descendants, by PID.
kill_tree() {
    local p kids
    kids=$(ps -o pid= --ppid "$1" 2>/dev/null || true)
    for p in $kids; do kill_tree "$p"; done
    kill -TERM "$1" 2>/dev/null || true
}

# ---------------------------------------------------------------------- helpers

ns_name() { echo "${NS_PREFIX}$1"; }
host_addr() { echo "${SUBNET}.$(($1 + 1))"; }

# Namespaces of the lab (possibly partial, e.g. after a crash).
lab_namespaces() {
    ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${NS_PREFIX}[0-9]+$" || true
}

# Root-namespace links of the lab (bridge and veth ends).
lab_links() {
    ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
        grep -E "^(${BRIDGE_PREFIX}[0-9]+|${VETH_PREFIX}[0-9]+|${UPLINK_PREFIX}[0-9]+|${CORE_PREFIX}[0-9]+|${CORE})$" || true
}

lab_exists() {
    [ -n "$(lab_namespaces)" ] || [ -n "$(lab_links)" ]
}

# Number of hosts of the running lab (namespaces are numbered from 0).
lab_hosts() {
    local n=0
    while ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$(ns_name "$n")"; do
        n=$((n + 1))
    done
    echo "$n"
}

check_host() {
    local h=$1
    [[ "$h" =~ ^[0-9]+$ ]] || die "host must be a number, got '$h'"
    ip netns list | awk '{print $1}' | grep -qx "$(ns_name "$h")" ||
        die "host $h does not exist (is the lab up? see 'netlab.sh status')"
}

# tc rate string -> bits per second (integer). Accepts bit/kbit/mbit/gbit/tbit,
# bps/kbps/mbps/gbps (bytes per second, tc's convention) and plain numbers (bit/s here).
rate_bits() {
    local r=${1,,}
    [[ "$r" =~ ^([0-9]+)([a-z]*)$ ]] || die "bad rate '$1' (examples: 250mbit, 1gbit)"
    local n=${BASH_REMATCH[1]} u=${BASH_REMATCH[2]}
    case "$u" in
        ""|bit) echo "$n" ;;
        kbit) echo $((n * 1000)) ;;
        mbit) echo $((n * 1000000)) ;;
        gbit) echo $((n * 1000000000)) ;;
        tbit) echo $((n * 1000000000000)) ;;
        bps) echo $((n * 8)) ;;
        kbps) echo $((n * 8000)) ;;
        mbps) echo $((n * 8000000)) ;;
        gbps) echo $((n * 8000000000)) ;;
        *) die "bad rate unit in '$1' (use bit, kbit, mbit, gbit)" ;;
    esac
}

# tbf burst in bytes for a rate: 2 ms worth of data, at least 128 KiB. tbf
# cuts every packet larger than its burst into wire-size frames, and TCP hands
# the stack 64 KiB GSO packets: with a smaller burst each of them would cross
# the bridge as ~45 separate frames, and the lab's CPU, not its links, would
# become the bottleneck with many hosts (measured: the per-frame path through
# bridge, netfilter and tbf took most of the machine at 8 hosts x 250mbit).
tbf_burst() {
    local bits b
    bits=$(rate_bits "$1")
    b=$((bits / 8 / 500))
    [ "$b" -ge 131072 ] || b=131072
    echo "$b"
}

# Is TCP congestion control $1 available? Loads its module (tcp_$1) if not yet.
require_cc() {
    local cc=$1 avail=/proc/sys/net/ipv4/tcp_available_congestion_control
    [[ "$cc" =~ ^[a-z0-9_]+$ ]] || die "--cc: '$cc' is not a congestion control name"
    if ! grep -qw "$cc" "$avail"; then
        modprobe "tcp_$cc" 2>/dev/null || true
    fi
    grep -qw "$cc" "$avail" ||
        die "TCP congestion control '$cc' is not available (this kernel has: $(cat "$avail")); give --cc or NETLAB_CC one of those"
    # A namespace other than the host's may choose only an allowed one (else
    # EPERM): on a host whose default is another (e.g. bbr), cubic is not.
    local allowed=/proc/sys/net/ipv4/tcp_allowed_congestion_control
    if ! grep -qw "$cc" "$allowed"; then
        sysctl -qw net.ipv4.tcp_allowed_congestion_control="$(cat "$allowed") $cc" ||
            die "cannot allow TCP congestion control '$cc' in namespaces (allowed: $(cat "$allowed"))"
        note "allowed TCP congestion control $cc in namespaces (host's allowed list: $(cat "$allowed"))"
    fi
}

# Does this kernel have netem? Probe on a throwaway dummy-free target: a veth
# pair in a scratch namespace, so nothing else is touched.
netem_supported() {
    local ns=${NS_PREFIX}probe ok=1
    ip netns add "$ns" 2>/dev/null || return 1
    if ip -n "$ns" link set lo up 2>/dev/null &&
        tc -n "$ns" qdisc add dev lo root netem delay 1ms 2>/dev/null; then
        ok=0
    fi
    ip netns del "$ns" 2>/dev/null || true
    return $ok
}

# ---------------------------------------------------------------------- up/down

# Cap one host's link at RATE in both directions, optionally with a delay on the
# host's egress (only if netem exists; checked by the caller).
shape_host() {
    local i=$1 rate=$2 delay=${3:-} ns burst
    ns=$(ns_name "$i")
    burst=$(tbf_burst "$rate")
    # host -> bridge
    tc -n "$ns" qdisc replace dev eth0 root handle 1: tbf rate "$rate" burst "$burst" latency "$TBF_LATENCY"
    # bridge -> host
    tc qdisc replace dev "${VETH_PREFIX}$i" root handle 1: tbf rate "$rate" burst "$burst" latency "$TBF_LATENCY"
    if [ -n "$delay" ]; then
        tc -n "$ns" qdisc add dev eth0 parent 1:1 handle 10: netem delay "$delay"
    fi
}

# A new bridge with no address (no IPv6 either), up.
add_bridge() {
    ip link add "$1" type bridge forward_delay 0 stp_state 0
    echo 1 >"/proc/sys/net/ipv6/conf/$1/disable_ipv6" 2>/dev/null || true
    ip link set "$1" up
}

# A veth pair A <-> B between bridges BA and BB, capped at RATE in both
# directions (tbf on both ends' egress).
add_uplink() {
    local a=$1 ba=$2 b=$3 bb=$4 rate=$5 burst end
    burst=$(tbf_burst "$rate")
    ip link add "$a" type veth peer name "$b"
    for end in "$a:$ba" "$b:$bb"; do
        echo 1 >"/proc/sys/net/ipv6/conf/${end%%:*}/disable_ipv6" 2>/dev/null || true
        ip link set "${end%%:*}" master "${end##*:}"
        ip link set "${end%%:*}" up
        tc qdisc replace dev "${end%%:*}" root handle 1: tbf rate "$rate" burst "$burst" latency "$TBF_LATENCY"
    done
}

# The rack of host I of N hosts in R racks: consecutive blocks.
rack_of() { echo $(($1 * $3 / $2)); }

cmd_up() {
    local n=${1:-} rate=${2:-}
    [ -n "$n" ] && [ -n "$rate" ] || die "usage: netlab.sh up N RATE [--slow HOST RATE2]... [--delay D] [--racks R [--uplink RATE3]]"
    shift 2
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le "$MAX_HOSTS" ] ||
        die "N must be 1..$MAX_HOSTS, got '$n'"
    rate_bits "$rate" >/dev/null
    local -A slow=()
    local delay="" racks=1 uplink="" cc=${NETLAB_CC:-$DEFAULT_CC}
    while [ $# -gt 0 ]; do
        case "$1" in
            --cc)
                [ $# -ge 2 ] || die "--cc needs a congestion control, e.g. cubic"
                cc=$2
                shift 2 ;;
            --racks)
                [ $# -ge 2 ] || die "--racks needs a number of racks"
                [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge 1 ] && [ "$2" -le "$n" ] ||
                    die "--racks must be 1..$n (at least one host per rack), got '$2'"
                racks=$2
                shift 2 ;;
            --uplink)
                [ $# -ge 2 ] || die "--uplink needs a rate, e.g. 62500kbit"
                rate_bits "$2" >/dev/null
                uplink=$2
                shift 2 ;;
            --slow)
                [ $# -ge 3 ] || die "--slow needs HOST RATE2"
                [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -lt "$n" ] || die "--slow: host must be 0..$((n - 1)), got '$2'"
                rate_bits "$3" >/dev/null
                slow[$2]=$3
                shift 3 ;;
            --delay)
                [ $# -ge 2 ] || die "--delay needs a time, e.g. 1ms"
                delay=$2
                shift 2 ;;
            *) die "up: unknown option '$1'" ;;
        esac
    done
    if [ -n "$uplink" ] && [ "$racks" -lt 2 ]; then die "--uplink needs --racks 2 or more"; fi
    uplink=${uplink:-$rate}
    require_root
    require_tools
    require_cc "$cc"
    if lab_exists; then
        die "a lab already exists ($(lab_namespaces | wc -l) namespaces, links: $(lab_links | tr '\n' ' ')); run 'netlab.sh down' first"
    fi
    if [ -n "$delay" ] && ! netem_supported; then
        die "delay not supported on this kernel (tc qdisc netem is unavailable: no sch_netem); run without --delay"
    fi

    # A failure or an interrupt half-way must not leave a partial lab behind.
    UP_PENDING=1

    # No address on any bridge, no IPv6 either.
    local r
    for ((r = 0; r < racks; r++)); do add_bridge "${BRIDGE_PREFIX}$r"; done
    if [ "$racks" -eq 2 ]; then
        add_uplink "${UPLINK_PREFIX}0" "${BRIDGE_PREFIX}0" "${UPLINK_PREFIX}1" "${BRIDGE_PREFIX}1" "$uplink"
    elif [ "$racks" -gt 2 ]; then
        add_bridge "$CORE"
        for ((r = 0; r < racks; r++)); do
            add_uplink "${UPLINK_PREFIX}$r" "${BRIDGE_PREFIX}$r" "${CORE_PREFIX}$r" "$CORE" "$uplink"
        done
    fi

    local i ns veth
    for ((i = 0; i < n; i++)); do
        ns=$(ns_name "$i")
        veth=${VETH_PREFIX}$i
        ip netns add "$ns"
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 || true
        ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$cc" ||
            die "up: cannot set TCP congestion control '$cc' in $ns"
        ip link add "$veth" type veth peer name eth0 netns "$ns"
        echo 1 >"/proc/sys/net/ipv6/conf/$veth/disable_ipv6" 2>/dev/null || true
        ip link set "$veth" master "${BRIDGE_PREFIX}$(rack_of "$i" "$n" "$racks")"
        ip link set "$veth" up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "$(host_addr "$i")/24" dev eth0
        ip -n "$ns" link set eth0 up
        shape_host "$i" "${slow[$i]:-$rate}" "$delay"
    done
    UP_PENDING=0

    local extra=""
    for i in "${!slow[@]}"; do extra+=" host $i at ${slow[$i]};"; done
    [ "$racks" -lt 2 ] || extra+=" $racks racks of consecutive hosts, uplinks at $uplink both directions;"
    note "up: $n hosts at $rate per link, both directions;${extra} delay ${delay:-none}; TCP congestion control $cc"
}

# The rack of each host of the running lab, in host order (0 without racks):
# the number of the bridge its veth is attached to.
cmd_racks() {
    local n i master out=()
    n=$(lab_hosts)
    [ "$n" -ge 1 ] || die "no lab (see 'netlab.sh status')"
    for ((i = 0; i < n; i++)); do
        master=$(ip -o link show "${VETH_PREFIX}$i" | sed -n "s/.* master ${BRIDGE_PREFIX}\([0-9]*\) .*/\1/p")
        out+=("${master:-?}")
    done
    echo "${out[*]}"
}

cmd_down() {
    require_root
    local ns l
    for ns in $(lab_namespaces) "${NS_PREFIX}probe"; do
        # Kill whatever still runs inside (e.g. an interrupted benchmark) so the
        # namespace actually goes away; these processes belong to the lab.
        local pids
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    for l in $(lab_links); do
        ip link del "$l" 2>/dev/null || true
    done
    if lab_exists; then
        die "down: leftovers remain: $(lab_namespaces | tr '\n' ' ') $(lab_links | tr '\n' ' ')"
    fi
    note "down: no namespace or link with prefix rdmc- left"
}

cmd_status() {
    local n
    n=$(lab_hosts)
    if ! lab_exists; then echo "no lab"; return 0; fi
    echo "hosts: $n"
    local i
    for ((i = 0; i < n; i++)); do
        printf '%s %s ' "$(ns_name "$i")" "$(host_addr "$i")"
        tc -n "$(ns_name "$i")" qdisc show dev eth0 | head -1
    done
    echo "racks by host: $(cmd_racks)"
    echo "TCP congestion control: $(ip netns exec "$(ns_name 0)" sysctl -n net.ipv4.tcp_congestion_control)"
    local up
    for up in $(lab_links | grep -E "^${UPLINK_PREFIX}[0-9]+$"); do
        printf 'uplink %s ' "$up"
        tc qdisc show dev "$up" | head -1
    done
    echo "links: $(lab_links | tr '\n' ' ')"
}

cmd_exec() {
    [ $# -ge 2 ] || die "usage: netlab.sh exec H CMD..."
    require_root
    local h=$1
    shift
    check_host "$h"
    exec ip netns exec "$(ns_name "$h")" "$@"
}

cmd_addr() {
    [ $# -eq 1 ] || die "usage: netlab.sh addr H"
    [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -lt "$MAX_HOSTS" ] || die "bad host '$1'"
    host_addr "$1"
}

cmd_addrs() {
    local n=${1:-$(lab_hosts)} i out=()
    for ((i = 0; i < n; i++)); do out+=("$(host_addr "$i")"); done
    echo "${out[*]}"
}

# up, run CMD (in the root namespace, with NETLAB_* in its environment), and
# tear down whatever happens: normal exit, error, Ctrl-C or TERM.
cmd_run() {
    local up_args=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do up_args+=("$1"); shift; done
    [ $# -ge 2 ] || die "usage: netlab.sh run N RATE [up options] -- CMD..."
    shift
    [ ${#up_args[@]} -ge 2 ] || die "usage: netlab.sh run N RATE [up options] -- CMD..."
    local n=${up_args[0]}
    require_root
    if lab_exists; then die "a lab already exists; run 'netlab.sh down' first"; fi
    ALWAYS_DOWN=1
    cmd_up "${up_args[@]}"
    # CMD runs in the background so that INT/TERM reach this shell at once (a
    # foreground child would delay the trap until it exits); on_exit kills it.
    local rc=0
    NETLAB_HOSTS=$n NETLAB_RATE=${up_args[1]} NETLAB_ADDRS=$(cmd_addrs "$n") NETLAB_RACKS=$(cmd_racks) \
        NETLAB_NS_PREFIX=$NS_PREFIX NETLAB=$SELF "$@" &
    CHILD=$!
    wait "$CHILD" || rc=$?
    CHILD=""
    return $rc
}

# ---------------------------------------------------------------------- selftest

# A small TCP tool: "serve PORT" receives until EOF and prints bytes and seconds
# (first byte to EOF); "send ADDR PORT BYTES" sends zeros; "probe ADDR PORT" exits
# 0 if a TCP connection (or refusal, i.e. the host answered) happens within 2 s;
# "listen PORT SECONDS" tells whether anybody connected within SECONDS.
PYTOOL='
import socket, sys, time
cmd = sys.argv[1]
if cmd == "serve":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[2]))); s.listen(1)
    c, _ = s.accept(); n = 0; t0 = None
    while True:
        b = c.recv(1 << 20)
        if not b: break
        if t0 is None: t0 = time.monotonic()
        n += len(b)
    print(n, time.monotonic() - t0)
elif cmd == "send":
    s = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=30)
    left = int(sys.argv[4]); buf = bytes(1 << 20)
    while left > 0:
        k = min(left, len(buf)); s.sendall(buf[:k]); left -= k
    s.shutdown(socket.SHUT_WR); s.recv(1); s.close()
elif cmd == "listen":
    # Did anybody connect to PORT within SECONDS? Prints "connected" or "nobody".
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[2]))); s.listen(1); s.settimeout(float(sys.argv[3]))
    try:
        s.accept(); print("connected")
    except socket.timeout:
        print("nobody")
elif cmd == "probe":
    try:
        socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=2).close()
    except ConnectionRefusedError:
        pass
    except OSError:
        sys.exit(1)
'

# One transfer of BYTES from lab host SRC to host DST (the selftests'
# measure): sets the caller's `got` (bytes received) and `secs` (seconds).
transfer() {
    local src=$1 dst=$2 bytes=$3 out spid
    out=$(mktemp)
    ip netns exec "$(ns_name "$dst")" "$PY" -c "$PYTOOL" serve 5201 >"$out" &
    spid=$!
    sleep 0.5
    ip netns exec "$(ns_name "$src")" "$PY" -c "$PYTOOL" send "$(host_addr "$dst")" 5201 "$bytes"
    wait "$spid"
    read -r got secs <"$out"
    rm -f "$out"
}

# RATIO (a Python expression: a measured rate over its cap) and what was
# measured: "  TEXT (within 20%): ok", or "... (NOT within 20%): FAIL" and
# the caller's `fail` set.
check_within_20_percent() {
    if "$PY" -c "import sys; sys.exit(0 if 0.8 <= $1 <= 1.2 else 1)"; then
        echo "  $2 (within 20%): ok"
    else
        echo "  $2 (NOT within 20%): FAIL"
        fail=1
    fi
}

# Two transfers of BYTES at once, SRC1 -> DST1 and SRC2 -> DST2: sets the
# caller's `g1 s1` and `g2 s2` (bytes received and seconds of each).
two_transfers() {
    local src1=$1 dst1=$2 src2=$3 dst2=$4 bytes=$5 o1 o2 p1 p2 q1
    o1=$(mktemp); o2=$(mktemp)
    ip netns exec "$(ns_name "$dst1")" "$PY" -c "$PYTOOL" serve 5203 >"$o1" & p1=$!
    ip netns exec "$(ns_name "$dst2")" "$PY" -c "$PYTOOL" serve 5204 >"$o2" & p2=$!
    sleep 0.5
    ip netns exec "$(ns_name "$src1")" "$PY" -c "$PYTOOL" send "$(host_addr "$dst1")" 5203 "$bytes" &
    q1=$!
    ip netns exec "$(ns_name "$src2")" "$PY" -c "$PYTOOL" send "$(host_addr "$dst2")" 5204 "$bytes"
    wait "$q1" "$p1" "$p2"
    read -r g1 s1 <"$o1"; read -r g2 s2 <"$o2"
    rm -f "$o1" "$o2"
}

cmd_selftest() {
    require_root
    require_tools
    local rate=100mbit rate_bps=100000000 fail=0
    if lab_exists; then die "a lab already exists; run 'netlab.sh down' first"; fi
    ALWAYS_DOWN=1
    cmd_up 3 "$rate"

    local want=${NETLAB_CC:-$DEFAULT_CC} h got
    for h in 0 1 2; do
        got=$(ip netns exec "$(ns_name "$h")" sysctl -n net.ipv4.tcp_congestion_control)
        if [ "$got" = "$want" ]; then echo "selftest: host $h TCP congestion control $got: ok"
        else echo "selftest: host $h TCP congestion control $got, expected $want: FAIL"; fail=1; fi
    done

    echo "selftest: reachability (TCP probe, refused counts as reachable)"
    local a b
    for a in 0 1 2; do
        for b in 0 1 2; do
            [ "$a" != "$b" ] || continue
            if ip netns exec "$(ns_name "$a")" "$PY" -c "$PYTOOL" probe "$(host_addr "$b")" 9 ; then
                echo "  h$a -> h$b ok"
            else
                echo "  h$a -> h$b UNREACHABLE"; fail=1
            fi
        done
    done

    echo "selftest: isolation (lab addresses unreachable from the root namespace)"
    if ip -o addr show | grep -q " ${SUBNET}\."; then
        echo "  root namespace has a ${SUBNET}.x address: FAIL"; fail=1
    fi
    if ip -o addr show dev "$BRIDGE" | grep -q inet; then
        echo "  bridge has an address: FAIL"; fail=1
    fi
    # A TCP probe from the root namespace is not enough: a machine whose uplink
    # accepts every connection (a transparent proxy) "reaches" any address. So:
    # the route must not use the bridge, and a listener in h1 must see nothing.
    if ip route get "$(host_addr 1)" 2>/dev/null | grep -q "$BRIDGE"; then
        echo "  root routes $(host_addr 1) through $BRIDGE: FAIL"; fail=1
    fi
    local lout
    lout=$(mktemp)
    ip netns exec "$(ns_name 1)" "$PY" -c "$PYTOOL" listen 5202 3 >"$lout" &
    local lpid=$!
    sleep 0.5
    "$PY" -c "$PYTOOL" probe "$(host_addr 1)" 5202 || true
    wait "$lpid"
    if [ "$(cat "$lout")" = nobody ]; then
        echo "  root -> h1: no connection arrived at h1: ok"
    else
        echo "  root -> h1: a connection from the root namespace arrived: FAIL"; fail=1
    fi
    rm -f "$lout"

    echo "selftest: throughput h0 -> h1 and h1 -> h0, cap $rate"
    local bytes=$((rate_bps / 8 * 3)) dir src dst got secs mbit
    for dir in "0 1" "1 0"; do
        read -r src dst <<<"$dir"
        transfer "$src" "$dst" "$bytes"
        mbit=$("$PY" -c "print(f'{$got*8/$secs/1e6:.1f}')")
        check_within_20_percent "$got*8/$secs/$rate_bps" \
            "h$src -> h$dst: $got bytes in ${secs}s = $mbit Mbit/s, against its cap"
    done

    # Inbound cap (the bridge-side tbf): h0 and h2 send to h1 at once; each
    # sender's own link allows the full rate, so only h1's inbound cap limits
    # the sum to the rate.
    echo "selftest: inbound cap, h0 + h2 -> h1 at once"
    local g1 s1 g2 s2
    two_transfers 0 1 2 1 "$bytes"
    mbit=$("$PY" -c "print(f'{($g1+$g2)*8/max($s1,$s2)/1e6:.1f}')")
    check_within_20_percent "($g1+$g2)*8/max($s1,$s2)/$rate_bps" \
        "2 x $bytes bytes into h1 in $(printf %.2f "$(echo "$s1 $s2" | tr ' ' '\n' | sort -g | tail -1)")s = $mbit Mbit/s total, against its cap"

    echo "selftest: delay support"
    if netem_supported; then echo "  netem available: --delay works"; else echo "  delay not supported on this kernel (no netem): --delay refused, as documented"; fi

    cmd_down
    ALWAYS_DOWN=0
    if lab_exists; then echo "selftest: leftovers after down: FAIL"; fail=1; else echo "selftest: nothing with prefix rdmc- remains: ok"; fi
    if [ $fail -eq 0 ]; then echo "selftest: PASS"; else echo "selftest: FAIL"; return 1; fi
}

# Two racks of two hosts at 100 Mbit/s, uplink 25 Mbit/s: every host reaches
# every other, a transfer inside a rack runs at the host rate, one across the
# racks at the uplink's, two across at once share the uplink, and nothing is
# left after down.
cmd_selftest_racks() {
    require_root
    require_tools
    local rate=100mbit rate_bps=100000000 uplink=25mbit uplink_bps=25000000 fail=0
    if lab_exists; then die "a lab already exists; run 'netlab.sh down' first"; fi
    ALWAYS_DOWN=1
    cmd_up 4 "$rate" --racks 2 --uplink "$uplink"
    if [ "$(cmd_racks)" = "0 0 1 1" ]; then
        echo "selftest racks: racks by host 0 0 1 1: ok"
    else
        echo "selftest racks: racks by host $(cmd_racks), expected 0 0 1 1: FAIL"; fail=1
    fi
    local a b
    for a in 0 1 2 3; do
        for b in 0 1 2 3; do
            [ "$a" != "$b" ] || continue
            if ! ip netns exec "$(ns_name "$a")" "$PY" -c "$PYTOOL" probe "$(host_addr "$b")" 9; then
                echo "  h$a -> h$b UNREACHABLE"; fail=1
            fi
        done
    done
    [ $fail -ne 0 ] || echo "selftest racks: every host reaches every other: ok"
    # One transfer at a time: h0 -> h1 (inside rack 0), h0 -> h2 (across).
    local src dst cap bytes got secs ratio
    for pair in "0 1 $rate_bps" "0 2 $uplink_bps" "3 1 $uplink_bps"; do
        read -r src dst cap <<<"$pair"
        bytes=$((cap / 8 * 3))
        transfer "$src" "$dst" "$bytes"
        ratio=$("$PY" -c "print(f'{$got*8/$secs/$cap:.2f}')")
        check_within_20_percent "$ratio" "h$src -> h$dst: $ratio x its cap of $cap bit/s"
    done
    # h0 -> h2 and h1 -> h3 at once share the one uplink.
    local g1 s1 g2 s2
    bytes=$((uplink_bps / 8 * 2))
    two_transfers 0 2 1 3 "$bytes"
    ratio=$("$PY" -c "print(f'{($g1+$g2)*8/max($s1,$s2)/$uplink_bps:.2f}')")
    check_within_20_percent "$ratio" "h0 -> h2 + h1 -> h3 at once: $ratio x the uplink cap in total"
    cmd_down
    ALWAYS_DOWN=0
    if lab_exists; then echo "selftest racks: leftovers after down: FAIL"; fail=1; else echo "selftest racks: nothing with prefix rdmc- remains: ok"; fi
    if [ $fail -eq 0 ]; then echo "selftest racks: PASS"; else echo "selftest racks: FAIL"; return 1; fi
}

# ---------------------------------------------------------------------- main

main() {
    trap on_exit EXIT
    trap 'note "interrupted"; exit 130' INT
    trap 'note "terminated"; exit 143' TERM
    local sub=${1:-}
    [ $# -eq 0 ] || shift
    case "$sub" in
        up) cmd_up "$@" ;;
        down) cmd_down ;;
        status) require_root; cmd_status ;;
        exec) cmd_exec "$@" ;;
        addr) cmd_addr "$@" ;;
        addrs) cmd_addrs "$@" ;;
        run) cmd_run "$@" ;;
        selftest) if [ "${1:-}" = racks ]; then cmd_selftest_racks; else cmd_selftest; fi ;;
        racks) cmd_racks ;;
        -h|--help|help) usage 0 ;;
        *) usage 2 ;;
    esac
}

main "$@"
