import json,glob,re,statistics as st,sys
from collections import defaultdict
base=sys.argv[1] if len(sys.argv)>1 else '/tmp/cf/ab'
rows=defaultdict(dict)
for d in sorted(glob.glob(base+'/*-[0-9]')):
    m=re.search(r'/([\w]+)-(\d+)$',d); v,i=m.group(1),int(m.group(2))
    try: lines=open(d+'/results.jsonl').read().splitlines()
    except Exception: continue
    for l in lines:
        r=json.loads(l)
        if r.get('experiment')!='latency': continue
        key=(r['nodes'],r['size'])
        name={'rdmc':r['algorithm'],'mpi':'mpi-'+r['algorithm'],'unicast':'unicast'}[r['system']]
        rows[key].setdefault((v,i),{})[name]=(r['seconds'],min(r['all']),max(r['all']))
for key in sorted(rows):
    print('nodes=%d size=%d'%key)
    agg=defaultdict(list)
    for (v,i),d in sorted(rows[key].items(), key=lambda x:(x[0][1],x[0][0])):
        bp=d.get('binomial-pipeline'); mp=d.get('mpi-pipeline'); u=d.get('unicast')
        if not (bp and mp and u): continue
        print('  %-6s %d  BP %.4f (%.4f-%.4f)  MPIpipe %.4f (%.4f-%.4f)  uni %.4f  BP/MPI %.4f  BP/uni %.4f'%(v,i,*bp,*mp,u[0],bp[0]/mp[0],bp[0]/u[0]))
        agg[v].append(bp[0]/mp[0]); agg['mpi@'+v].append(mp[0]); agg['bp@'+v].append(bp[0])
    for v in sorted(agg): print('   ',v,'median %.4f'%st.median(agg[v]), ' '.join('%.4f'%x for x in agg[v]))
