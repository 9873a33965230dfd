#!/bin/bash
S=/work/main/rdmc-cli/benches/mpi_netlab.sh
for r in 1 2 3; do
  for n in 4 8; do
    for seg in 32768 49152 65536; do
      echo "r$r n$n seg$seg $(flock /tmp/rdmc-netlab.lock bash $S --algorithm 3 --segsize $seg $n 250mbit 64M 5 1 2>>/work/exp/mpiseg/err.log)" >> /work/exp/mpiseg/out.txt
    done
  done
done
echo done > /work/exp/mpiseg/DONE
