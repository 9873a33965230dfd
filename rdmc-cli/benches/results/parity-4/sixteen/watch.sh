#!/bin/bash
# every 0.5 s: drops of every tbf in the lab (root-side veths: traffic toward host i; eth0 in host i: its uplink), and every host's TCP retransmissions
while true; do
  t=$(date +%s.%N)
  d=$(for i in $(seq 0 15); do tc -s qdisc show dev rdmc-v$i 2>/dev/null | awk -v i=$i '/Sent/{gsub(",","",$7); printf " v%d:%s", i, $7; exit}'; done)
  r=""
  for i in $(seq 0 15); do
    x=$(ip netns exec rdmc-h$i awk '/^Tcp:/{n++; if(n==2) print $13}' /proc/net/snmp 2>/dev/null)
    y=$(tc -n rdmc-h$i -s qdisc show dev eth0 2>/dev/null | awk '/Sent/{gsub(",","",$7); print $7; exit}')
    r="$r h$i:${x:-_}/${y:-_}"
  done
  echo "$t DOWN$d UPRETR$r"
  sleep 1
done
