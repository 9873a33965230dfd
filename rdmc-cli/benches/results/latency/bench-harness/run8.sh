#!/bin/bash
# run8.sh MODE N [ALG] -> 8 members on loopback, N 1 KiB messages 5 ms apart; latency = last receiver
MODE=${1:-interrupt}; N=${2:-400}; ALG=${3:-binomial-pipeline}; B=${B:-/tmp/lead-rdmc}; NM=${NM:-8}
cd /tmp/hs28; head -$NM members8 > m8.tmp
PIDS=""
for r in $(seq 1 $((NM-1))); do
  $B member --bench --members m8.tmp --rank $r --key-file key --max-size 1048576 --completion $MODE --algorithm $ALG --json > q$r.out 2> q$r.err &
  PIDS="$PIDS $!"
done
python3 -c "import time,sys
time.sleep(1.5)
for i in range($N):
  print(\"send 1024 1\",flush=True); time.sleep(0.005)
print(\"close\",flush=True)" | $B member --bench --members m8.tmp --rank 0 --key-file key --max-size 1048576 --completion $MODE --algorithm $ALG --json > q0.out 2> q0.err &
wait
NM=$NM python3 /tmp/hs28/sum8.py
