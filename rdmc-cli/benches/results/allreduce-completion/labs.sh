#!/bin/bash
# labs.sh OUT ROUNDS BIN -> one 16-host lab (250 Mbit/s); per round: rdmc's ring
# (1 MiB of f32) in each completion mode and wire security, then MPI's two rings
# (algorithms 4 and 5). One JSON line per variant and round in OUT.<variant>.
OUT=$1; R=$2; BIN=$3
S=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
flock /tmp/rdmc-netlab.lock $S/netlab.sh run 16 250mbit -- bash -c "
for i in \$(seq 1 $R); do
  for v in 'p1|--completion polling' 'int|--completion interrupt' 'none|--completion polling --wire-security none' 'intnone|--completion interrupt --wire-security none' 'adaptive|--completion adaptive'; do
    IFS='|' read -r L X <<< \"\$v\"
    RDMC=$BIN RDMC_ALGORITHMS=ring MPI_ALGORITHMS='' $S/allreduce_netlab.sh 16 250mbit 1048576 7 4 $OUT.\$L \$X > /dev/null 2>>$OUT.log || echo \"\$L failed\"
  done
  RDMC=$BIN RDMC_ALGORITHMS='' MPI_ALGORITHMS='4 5' $S/allreduce_netlab.sh 16 250mbit 1048576 7 4 $OUT.mpi > /dev/null 2>>$OUT.log || echo mpi failed
done"
