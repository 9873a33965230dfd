#!/usr/bin/env python3
# Every 2 s: each lab host's TCP counters, read from /proc/PID/net/{snmp,netstat} of a process in
# the host's namespace (no process started per sample). One line per sample: time and, per host, the
# counters below.
import os, time, subprocess, sys
KEYS = ['RetransSegs', 'TCPLossProbes', 'TCPLossProbeRecovery', 'TCPTimeouts', 'TCPSpuriousRTOs',
        'TCPDSACKRecv', 'TCPFastRetrans', 'TCPSlowStartRetrans', 'TCPLostRetransmit', 'TCPDelivered']
pids = {}
def counters(pid):
    out = {}
    for f in ('snmp', 'netstat'):
        lines = open('/proc/%d/net/%s' % (pid, f)).read().split('\n')
        for a, b in zip(lines[0::2], lines[1::2]):
            ka, kb = a.split(), b.split()
            for k, v in zip(ka[1:], kb[1:]):
                out[k] = int(v)
    return out
end = time.time() + float(sys.argv[1])
while time.time() < end:
    row = []
    for h in range(16):
        ns = 'rdmc-h%d' % h
        pid = pids.get(ns)
        try:
            if pid is None or not os.path.exists('/proc/%d' % pid):
                p = subprocess.run(['ip', 'netns', 'pids', ns], capture_output=True, text=True).stdout.split()
                pid = int(p[0]) if p else None
                pids[ns] = pid
            c = counters(pid) if pid else None
        except Exception:
            c = None; pids[ns] = None
        row.append(','.join(str(c.get(k, 0)) for k in KEYS) if c else '_')
    print('%.2f %s' % (time.time(), ' '.join(row)), flush=True)
    time.sleep(2)
