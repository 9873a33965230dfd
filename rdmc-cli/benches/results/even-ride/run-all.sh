#!/bin/bash
cd /work/main
B=./target/release/rdmc
for r in 2 3 4; do
  $B bench --quick --algorithms binomial-pipeline --runs 5 --out /tmp/m/q$r > /tmp/m/q$r.log 2>&1
done
$B bench --only latency --nodes 16 --algorithms binomial-pipeline --runs 5 --out /tmp/m/n16 > /tmp/m/n16.log 2>&1
for i in 1 2 3 4 5 6 7; do $B demo --transport tcp --nodes 2 --size 256MiB --messages 4 --completion interrupt --baseline --wire-security none --json >> /tmp/m/pair2.jsonl 2>>/tmp/m/pair.err; done
for i in 1 2 3; do $B demo --transport tcp --nodes 8 --size 256MiB --messages 4 --completion interrupt --baseline --wire-security none --json >> /tmp/m/pair8.jsonl 2>>/tmp/m/pair.err; done
for i in 1 2 3 4 5 6 7; do $B demo --transport mem --nodes 8 --size 256MiB --baseline --json >> /tmp/m/mem.jsonl 2>>/tmp/m/mem.err; done
for i in 1 2 3 4 5; do ./target/release/examples/idle_cpu tcp default 10 >> /tmp/m/idle.txt 2>&1; done
echo ALLDONE
