"""Per member: the share of one message's time its downlink carried 0, 1, 2
or 3+ blocks at once (first frame -> block received) and its uplink (issue ->
received at the target), from the members' trace logs (see timeline.py).

    occupancy.py LOGDIR/NNN-rdmc-binomial-pipeline-n16-slow-named [SEQ]
"""
import os, sys, collections
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
from timeline import read_events
pref=sys.argv[1]; n=16; seq=sys.argv[2] if len(sys.argv)>2 else '1'
ev=[read_events(f'{pref}-{r}.log') for r in range(n)]
sends=[collections.defaultdict(list) for _ in range(n)]; arr=[collections.defaultdict(list) for _ in range(n)]; rec=[collections.defaultdict(list) for _ in range(n)]
order=[]
for r,e in enumerate(ev):
    for t,m,f,peer in e:
        if m=='block send': sends[r][int(f['to'])].append((t,f.get('seq'),int(f['block'])))
        elif m in('block received','first block received'): rec[r][int(f['from'])].append((t,f.get('seq'),int(f['block'])))
        elif m=='block arriving' and peer is not None: arr[r][peer].append(t)
X=[]
for r in range(n):
    for to,l in sends[r].items():
        for j,(t,s,b) in enumerate(l):
            if s!=seq: continue
            a=arr[to][r][j] if j<len(arr[to][r]) else None
            rc=rec[to][r][j][0] if j<len(rec[to][r]) else None
            X.append(dict(fr=r,to=to,b=b,issue=t,arr=a,rec=rc))
start=min(x['issue'] for x in X)
for x in X:
    for k in('issue','arr','rec'): x[k]=(x[k]-start)*1e3 if x[k] else None
ms=lambda v:'%.0f'%v
lastfast=max(x['rec'] for x in X if x['to'] not in (5,))
print('transfers',len(X),'fast last %.0f ms'%lastfast, 'slow last %.0f'%max(x['rec'] for x in X if x['to']==5))
def occ(intervals,T):
    # time with 0,1,2,3+ concurrent
    pts=[]
    for a,b in intervals: pts+= [(a,1),(b,-1)]
    pts.sort(); c=0; last=0; acc=collections.Counter()
    for t,d in pts:
        if t>T: break
        acc[min(c,3)]+=t-last; c+=d; last=t
    acc[min(c,3)]+=max(0,T-last)
    return [acc[i]/T for i in range(4)]
T=lastfast
print('downlink occupancy (arriving->received) fraction of [0,fast last] with 0/1/2/3+ blocks')
for r in range(1,n):
    iv=[(x['arr'],x['rec']) for x in X if x['to']==r and x['arr'] is not None]
    o=occ(iv,T); print(r,' '.join('%.2f'%v for v in o), 'blocks',len(iv))
print('uplink occupancy (issue->received at target)')
for r in range(n):
    iv=[(x['issue'],x['rec']) for x in X if x['fr']==r and x['rec'] is not None]
    o=occ(iv,T); print(r,' '.join('%.2f'%v for v in o),'sends',len(iv), 'to', dict(collections.Counter(x['to'] for x in X if x['fr']==r)))
print()
r0=sorted([x for x in X if x['fr']==0], key=lambda x:x['issue'])
pipe=[x for x in r0 if x['to'] not in (5,15)]
to5=[x for x in r0 if x['to']==5]
print('root pipeline sends: last issue %.0f, last received %.0f; first send to 5 issued %.0f received %.0f'%(pipe[-1]['issue'],max(x['rec'] for x in pipe),to5[0]['issue'],to5[0]['rec']))
# root pipeline block receive pace over time: every 16th
for x in pipe[::24]+pipe[-3:]: print(' b%d -> %d issue %.0f arr %.0f rec %.0f'%(x['b'],x['to'],x['issue'],x['arr'],x['rec']))
# duration (arr->rec) of root pipeline sends before/after first send to 5
t5=to5[0]['issue']
import statistics
bef=[x['rec']-x['arr'] for x in pipe if x['issue']<t5]; aft=[x['rec']-x['arr'] for x in pipe if x['issue']>=t5]
print('root->fast wire ms median before first send to 5: %.1f (%d), after: %s (%d)'%(statistics.median(bef),len(bef),statistics.median(aft) if aft else '-',len(aft)))
# fast receivers' completion: each receiver's last block time
print('fast receivers last block:', {r:round(max(x['rec'] for x in X if x['to']==r)) for r in range(1,16) if r!=5})
# when do the fast receivers get block 255 / the last 10 blocks, and from whom
for r in (1,9,15):
    l=sorted([x for x in X if x['to']==r], key=lambda x:x['rec'])[-4:]
    print(r,[(x['fr'],x['b'],round(x['issue']),round(x['rec'])) for x in l])
