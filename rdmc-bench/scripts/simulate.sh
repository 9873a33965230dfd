#!/usr/bin/env bash
# The simulation experiments of BENCHMARKS.md ("Simulation"), with
# `rdmc simulate` (virtual time: no root, no network, deterministic).
#
#   rdmc-bench/scripts/simulate.sh [OUT]   # default OUT: target/simulation
#
# Each experiment writes OUT/NAME/sim.jsonl (one JSON line per algorithm
# and group size) and, where a plot helps, `--plot` output (SVG, summary,
# CSV) in OUT/NAME/. Builds the release binary first.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Results stay out of the source tree.
OUT=${1:-target/simulation}
cargo build --release --locked --bin rdmc >/dev/null
RDMC=target/release/rdmc
mkdir -p "$OUT"

sim() { # NAME ARGS...: one experiment into OUT/NAME
    local name=$1
    shift
    mkdir -p "$OUT/$name"
    echo "== $name: rdmc simulate $*" >&2
    "$RDMC" simulate "$@" --json >"$OUT/$name/sim.jsonl"
}

# Fig. 8 of the RDMC paper: 256 MiB to up to 4095 receivers, 1 MiB blocks
# (the paper's), on the lab's network (250 Mbit/s, 50 us). The library's
# window of 8 announced receives, and the original's one at a time.
NODES=2..4096
for window in 8 1; do
    sim "fig8-window$window" --nodes $NODES --size 256MiB --block-size 1MiB \
        --algorithm sequential,chain,binomial-pipeline --ready-window $window \
        --plot "$OUT/fig8-window$window"
done
# The same with the library's defaults (automatic block size).
sim fig8-defaults --nodes 2,16,256,4096 --size 256MiB --algorithm all

# Sec. 4.5: one slow link (half rate) between hypercube neighbours 5 and 7
# (they exchange blocks every l-th step), and in a chain between 5 and 6.
for window in 8 1; do
    sim "slow-link-window$window" --nodes 64 --size 256MiB --block-size 1MiB \
        --algorithm binomial-pipeline --ready-window $window --slow-link 5-7=2
    sim "no-slow-link-window$window" --nodes 64 --size 256MiB --block-size 1MiB \
        --algorithm binomial-pipeline --ready-window $window
done
sim slow-link-chain --nodes 64 --size 256MiB --block-size 1MiB --algorithm chain --slow-link 5-6=2
sim no-slow-link-chain --nodes 64 --size 256MiB --block-size 1MiB --algorithm chain

# The issue's slow host: 16 hosts, host 5 at half rate both ways, 64 MiB,
# library defaults.
sim slow-host --nodes 16 --size 64MiB --algorithm all --slow 5=2
sim slow-host-window1 --nodes 16 --size 64MiB --algorithm all --slow 5=2 --ready-window 1
# The same with the slow host named (GroupConfig::with_slow_members): the
# binomial pipeline and the hybrid make it a leaf fed by a relay. The slow
# host as rank 1, a middle rank, rank 5 and the last.
for slow in 1 5 8 15; do
    sim "slow-host-named-$slow" --nodes 16 --size 64MiB --algorithm binomial-pipeline,hybrid \
        --slow $slow=2 --name-slow
done

# Sec. 4.5 point 1: a member late by up to a block time on every send.
for jitter in 0 3ms 15ms 30ms; do
    sim "jitter-$jitter" --nodes 64 --size 256MiB --block-size 1MiB \
        --algorithm chain,binomial-pipeline --ready-window 1 --jitter "$jitter" --seed 1
done

# Two racks of 8 behind uplinks at a quarter of a host link, ranks
# blocked and interleaved (as a placement service may hand them out).
for placement in blocked interleaved; do
    sim "racks-$placement" --nodes 16 --size 64MiB --algorithm all \
        --racks 2 --uplink 62.5mbit --placement $placement
done
