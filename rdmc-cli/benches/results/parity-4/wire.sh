#!/bin/bash
# Summaries of the per-host egress captures of one `rdmc bench --quick --nodes 4
# --algorithms binomial-pipeline --runs 2 --warmup 1` run (rdmc on port 7102, then
# MPI_Bcast default and forced pipeline): per TCP connection, its data bytes and
# pure ACKs (payload 0); then per message, each rdmc host's bytes on its uplink
# (payload + 66 header bytes per MSS-sized segment, as tbf counts them).
# Capture: ip netns exec rdmc-hI tcpdump -i eth0 -s 96 -Q out -w hI.pcap tcp
cd "${1:-.}"
for h in 0 1 2 3; do
  echo "== host rdmc-h$h (10.77.0.$((h + 1))): connections with > 1 MB of data or > 500 pure ACKs"
  tcpdump -r h$h.pcap -nn -tt 2>/dev/null | awk '{src=$3; dst=$5; sub(":","",dst); k=src">"dst; if(!(k in f)) f[k]=$1; l[k]=$1; if($NF==0) a[k]++; else b[k]+=$NF}
    END{for(k in f) if (b[k]>1000000 || a[k]>500) printf "%.3f-%.3f %s data %d pure-acks %d\n", f[k]%1000, l[k]%1000, k, b[k], a[k]}' | sort -n
done
for h in 0 3; do
  echo "== rdmc messages on rdmc-h$h's uplink (data frames > 100 B, split at gaps > 12 ms)"
  tcpdump -r h$h.pcap -nn -tt 2>/dev/null | awk '($3 ~ /\.7102$/ || $5 ~ /\.7102:$/) && $NF>100 {t=$1; len=$NF; seg=int((len+1447)/1448); wire=len+66*seg;
    if (p && t-p>0.012) {printf "%.4f-%.4f: %.4f s, %d bytes\n", s%1000, p%1000, p-s, b; b=0; s=t} if(!s) s=t; b+=wire; p=t}
    END{printf "%.4f-%.4f: %.4f s, %d bytes\n", s%1000, p%1000, p-s, b}'
done
echo "== sizes of the data skbs (one per frame): rdmc rank 3, then MPI's second relay"
tcpdump -r h3.pcap -nn 2>/dev/null | awk '$5 ~ /7102/ && $NF>0 {print $NF}' | sort -n | uniq -c | sort -rn | head -5
tcpdump -r h2.pcap -nn 2>/dev/null | awk '$3 !~ /7102/ && $5 !~ /7102/ && $NF>20000 {print $NF}' | sort -n | uniq -c | sort -rn | head -3
