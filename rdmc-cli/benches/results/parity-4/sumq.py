import json,glob,sys
for d in sorted(glob.glob(sys.argv[1]+'/*-[0-9]')):
    rows={}
    for l in open(d+'/results.jsonl'):
        r=json.loads(l)
        if r.get('experiment')!='latency': continue
        rows[(r['nodes'],r['size'],r['system'],r['algorithm'])]=r
    for (n,s,sy,al),r in sorted(rows.items()):
        if sy=='unicast': continue
        u=rows[(n,s,'unicast','tcp-copy')]['seconds']
        mp=rows.get((n,s,'mpi','pipeline'))
        best=min(v['seconds'] for k,v in rows.items() if k[0]==n and k[1]==s and k[2]=='mpi')
        print('%s n=%2d %4dMiB %-5s %-18s %.4f (%.4f-%.4f) x uni %.4f  ÷ MPI best %.4f'%(d.split('/')[-1],n,s>>20,sy,al,r['seconds'],min(r['all']),max(r['all']),r['seconds']/u,r['seconds']/best))
