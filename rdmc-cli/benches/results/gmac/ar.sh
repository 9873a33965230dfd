#!/bin/bash
# ar.sh N ROUNDS -> one N-host lab; per round: rdmc ring interrupt auth main/new, new none, MPI rings 4 5
N=$1; R=$2
S=/work/main/rdmc-cli/benches
OUT=/tmp/gmac/out/ar$N
flock /tmp/rdmc-netlab.lock $S/netlab.sh run $N 250mbit -- bash -c "
for i in \$(seq 1 $R); do
  for v in 'main|/tmp/gmac/main-rdmc|' 'new|/tmp/gmac/new-rdmc|' 'newnone|/tmp/gmac/new-rdmc|--wire-security none'; do
    IFS='|' read -r L B X <<< \"\$v\"
    RDMC=\$B RDMC_ALGORITHMS=ring MPI_ALGORITHMS='' $S/allreduce_netlab.sh $N 250mbit 1048576 7 4 $OUT.\$L --completion interrupt \$X > /dev/null 2>>$OUT.log || echo \"\$L failed\"
  done
  RDMC=/tmp/gmac/new-rdmc RDMC_ALGORITHMS='' MPI_ALGORITHMS='4 5' $S/allreduce_netlab.sh $N 250mbit 1048576 7 4 $OUT.mpi > /dev/null 2>>$OUT.log || echo mpi failed
  echo round \$i \$(date +%T)
done"
