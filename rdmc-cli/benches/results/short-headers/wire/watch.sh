#!/bin/bash
# every 0.5 s: per lab host, TCP OutSegs/RetransSegs and the egress tbf's sent bytes/packets/drops
while true; do
  t=$(date +%s.%N)
  for i in 0 1 2 3 4 5 6 7; do
    h=rdmc-h$i
    ip netns pids $h >/dev/null 2>&1 || continue
    s=$(ip netns exec $h awk '/^Tcp:/{n++; if(n==2) print $12, $13}' /proc/net/snmp 2>/dev/null)
    q=$(ip netns exec $h tc -s qdisc show dev eth0 2>/dev/null | awk '/Sent/{print $2, $4, $7; exit}')
    [ -n "$s" ] && echo "$t $h $s $q"
  done
  sleep 0.5
done
