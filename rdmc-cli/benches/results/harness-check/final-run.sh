#!/bin/bash
# final-run.sh: the issue's 16-host command (authenticated, then none), then --quick 4,8 auth vs none with MPI, 2 rounds (BENCHMARKS.md, "The bench's own check in the way")
B=${RDMC:-target/release/rdmc}
cd "$(dirname "$0")/../../../.."   # the repository
for ws in authenticated none; do
  flock /tmp/rdmc-netlab.lock $B bench --only latency --nodes 16 --algorithms chain,binomial-pipeline --runs 5 --wire-security $ws --out out/n16-$ws > out/n16-$ws.log 2>&1
  echo "n16 $ws $(date +%T) rc $?"
done
for i in 1 2; do
  for ws in authenticated none; do
    d=out/q-$ws-$i
    flock /tmp/rdmc-netlab.lock $B bench --quick --nodes 4,8 --algorithms binomial-pipeline,chain --no-mpi --runs 5 --wire-security $ws --out $d > $d.log 2>&1
    echo "q $ws $i $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  done
  for n in 4 8; do
    flock /tmp/rdmc-netlab.lock rdmc-cli/benches/mpi_netlab.sh --algorithm 3 --segsize 32768 $n 250mbit 64M 5 1 > out/mpi-$n-$i.json 2>out/mpi-$n-$i.log
    echo "mpi $n $i $(date +%T) $(head -c 100 out/mpi-$n-$i.json)"
  done
done
