import json,glob,sys
for d in sys.argv[1:]:
    rows={}
    for l in open(d+'/results.jsonl'):
        r=json.loads(l)
        if r.get('experiment')!='latency': continue
        k=(r['nodes'],r['size'],r['system'],r['algorithm']+str(r.get('block_size') or ''))
        rows[k]=r
    for (n,s,sy,al),r in sorted(rows.items()):
        if sy=='unicast': continue
        u=rows[(n,s,'unicast','tcp-copy')]['seconds']
        best=min(v['seconds'] for k,v in rows.items() if k[0]==n and k[1]==s and k[2]=='mpi' and k[3]!='default') if any(k[0]==n and k[2]=='mpi' for k in rows) else float('nan')
        print('%s n=%2d %4dMiB %-5s %-22s %.4f (%.4f-%.4f) x uni %.4f  ÷ MPI best forced %.4f'%(d.split('/')[-1],n,s>>20,sy,al,r['seconds'],min(r['all']),max(r['all']),r['seconds']/u,r['seconds']/best))
