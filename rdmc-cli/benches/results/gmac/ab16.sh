#!/bin/bash
# ab16.sh ROUNDS: 16 hosts, binomial pipeline, authenticated: main vs new (GMAC) alternated, MPI pipeline (32 KiB) 8M+256M per round
cd /work/main
R=${1:-3}
for i in $(seq 1 $R); do
  for b in main new; do
    d=/tmp/gmac/out/n16-$b-$i
    flock /tmp/rdmc-netlab.lock /tmp/gmac/$b-rdmc bench --only latency --nodes 16 --algorithms binomial-pipeline --no-mpi --runs 5 --out $d > $d.log 2>&1
    echo "$b $i $(date +%T) rc $?"
  done
  for s in 8M 256M; do
    flock /tmp/rdmc-netlab.lock rdmc-cli/benches/mpi_netlab.sh --algorithm 3 --segsize 32768 16 250mbit $s 5 1 > /tmp/gmac/out/mpi-$s-$i.json 2>/tmp/gmac/out/mpi-$s-$i.log
    echo "mpi $s $i $(date +%T) $(head -c 150 /tmp/gmac/out/mpi-$s-$i.json)"
  done
done
