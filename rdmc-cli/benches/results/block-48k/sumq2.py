import json,glob,sys
# per run dir: rdmc binomial pipeline vs every MPI variant (algorithm+segment)
for d in sorted(glob.glob(sys.argv[1]+'/*')):
    try: f=open(d+'/results.jsonl')
    except: continue
    rows={}
    for l in f:
        r=json.loads(l)
        if r.get('experiment')!='latency': continue
        rows[(r['nodes'],r['size'],r['system'],r['algorithm'],r.get('block_size'))]=r
    keys=sorted(rows)
    for (n,s) in sorted({(k[0],k[1]) for k in keys}):
        u=[v for k,v in rows.items() if k[:3]==(n,s,'unicast')][0]['seconds']
        rd=[v for k,v in rows.items() if k[:4]==(n,s,'rdmc','binomial-pipeline')]
        mp={(k[3],k[4]):v for k,v in rows.items() if k[:3]==(n,s,'mpi')}
        line='%-8s n=%2d %4dMiB uni %.4f'%(d.split('/')[-1],n,s>>20,u)
        if rd:
            r=rd[0]; line+=' | rdmc %.4f (%.4f-%.4f) x%.4f'%(r['seconds'],min(r['all']),max(r['all']),r['seconds']/u)
        forced=[v['seconds'] for (a,b),v in mp.items() if a!='default']
        for (a,b),v in sorted(mp.items(), key=lambda x:(x[0][0],x[0][1] or 0)):
            line+=' | %s%s %.4f'%(a, '' if not b else '/%dK'%(b>>10), v['seconds'])
        if rd and forced: line+=' | rdmc/bestforced %.4f'%(rd[0]['seconds']/min(forced))
        print(line)
