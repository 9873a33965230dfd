#!/bin/bash
# srun8.sh N: run8 with perf stat (syscall counts) on every rank
N=${1:-400}; B=${B:-/tmp/hs28/stdin-rdmc}; MODE=interrupt; ALG=binomial-pipeline
cd /tmp/hs28; cp members8 m8.tmp
E="-e context-switches,task-clock,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_writev,syscalls:sys_enter_write,syscalls:sys_enter_futex"
for r in 1 2 3 4 5 6 7; do
  perf stat -x, $E -o s$r.txt -- $B member --bench --members m8.tmp --rank $r --key-file key --max-size 1048576 --completion $MODE --algorithm $ALG --json > q$r.out 2> q$r.err &
done
python3 -c "import time,sys
time.sleep(1.5)
for i in range($N):
  print(\"send 1024 1\",flush=True); time.sleep(0.005)
print(\"close\",flush=True)" | perf stat -x, $E -o s0.txt -- $B member --bench --members m8.tmp --rank 0 --key-file key --max-size 1048576 --completion $MODE --algorithm $ALG --json > q0.out 2> q0.err &
wait
for r in 0 1 2 3 4 5 6 7; do echo -n "r$r "; grep -v "^#" s$r.txt | grep -v "^$" | awk -F, -v n=$N '{split($3,a,":"); printf "%s=%.2f ", (a[2]?a[2]:$3), $1/n}'; echo; done
