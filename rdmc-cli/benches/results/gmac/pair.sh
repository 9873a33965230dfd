#!/bin/bash
# alternate old/new pair demo, authenticated default
for i in $(seq 1 $1); do
  for b in main new; do
    /tmp/gmac/$b-rdmc demo --transport tcp --nodes 2 --size 256MiB --messages 4 --completion interrupt --baseline --json 2>/dev/null | sed "s/^{/{\"bin\":\"$b\",/" >> pair.jsonl
  done
done
