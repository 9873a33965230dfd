#!/usr/bin/env python3
"""The last message of a traced `rdmc bench` run (RDMC_EVENT_TIMELINE=DIR):
when the root wrote its last block, when each member got its last four
blocks and completed, in ms from the root's first send.  tail.py DIR"""
import json,glob,os,sys
P={}
for f in sorted(glob.glob(sys.argv[1]+'/*.jsonl')):
    ev=[json.loads(l) for l in open(f)]
    if ev: P[os.path.basename(f)]=[(e['t'],e['file'].split('/')[-1]+':'+str(e['line'])) for e in ev]
KEY={'send':'member.rs:667','recv':'member.rs:331','first':'member.rs:510','done':'member.rs:691','arr':'link.rs:855','sent':'link.rs:713'}
def times(p,k): return [t for t,kk in P[p] if kk==KEY[k]]
root=[p for p in P if not times(p,'arr')][0]
rd=times(root,'done'); rs=[t for t in times(root,'send') if t>rd[1]]; t0=rs[0]
print('root last send %.2f'%((rs[-1]-t0)/1e6))
for p in sorted([p for p in P if p!=root], key=lambda p: [t for t in times(p,'arr') if t>t0][0]):
    d=times(p,'done'); a=[(t-t0)/1e6 for t in times(p,'arr') if d[1]<t<=d[2]]
    print(p,'first arr %.2f | arrivals of the last 4 blocks %s | done %.2f'%(a[0],' '.join('%.2f'%x for x in a[-4:]),(d[2]-t0)/1e6))
