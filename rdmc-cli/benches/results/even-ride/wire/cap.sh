#!/bin/bash
# capture every host's egress during one bench run at 4 hosts (new build)
BIN=${1:-/work/main/target/release/rdmc}
OUT=${2:-/tmp/cap/new}
mkdir -p $OUT; rm -f $OUT/*.pcap
cd /work/main
$BIN bench --quick --nodes 4 --algorithms binomial-pipeline --runs 2 --warmup 1 --no-mpi --out $OUT/bench > $OUT/bench.log 2>&1 &
B=$!
for i in $(seq 1 600); do ip netns list | grep -q "rdmc-h3" && break; sleep 0.05; done
sleep 0.3
P=""
for h in 0 1 2 3; do ip netns exec rdmc-h$h tcpdump -i eth0 -s 96 -Q out -w $OUT/h$h.pcap tcp 2>/dev/null & P="$P $!"; done
wait $B
sleep 0.5; kill $P 2>/dev/null; wait 2>/dev/null
ls -la $OUT
