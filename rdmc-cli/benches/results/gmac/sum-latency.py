import json,glob,statistics as st,sys
tag=sys.argv[1]
for v in ['polling','hybrid','interrupt']:
    rows=[]
    for d in sorted(glob.glob(f'/tmp/lat/{tag}-{v}-[0-9]*')):
        if d.endswith('.log'): continue
        rs=[json.loads(l) for l in open(d+'/results.jsonl')]
        r=[x for x in rs if x['system']=='rdmc' and x['experiment']=='small_latency']
        m=[x['seconds'] for x in rs if x['system']=='mpi' and x['experiment']=='small_latency']
        if not r or not m: continue
        rows.append((r[0]['seconds']*1e6,min(m)*1e6,r[0]['seconds']/min(m),r[0].get('member_cpu_seconds',0)*1e6))
    if not rows: continue
    f=lambda i:'%.3f (%.3f-%.3f)'%(st.median([x[i] for x in rows]),min(x[i] for x in rows),max(x[i] for x in rows))
    print(v,len(rows),'rdmc us',f(0),'MPI us',f(1),'ratio',f(2),'cpu us',f(3))
