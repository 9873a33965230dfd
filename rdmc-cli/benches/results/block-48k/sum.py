import json,glob,sys
for d in sorted(glob.glob(sys.argv[1]+'/r*-*')):
    if d.endswith('.log'): continue
    rows={}
    try: f=open(d+'/results.jsonl')
    except: continue
    for l in f:
        r=json.loads(l)
        if r.get('experiment')!='latency': continue
        rows[(r['nodes'],r['size'],r['system'],r['algorithm'])]=r
    for (n,s,sy,al),r in sorted(rows.items()):
        u=rows[(n,s,'unicast','tcp-copy')]['seconds']
        print('%-12s n=%2d %-8s %-18s %.4f (%.4f-%.4f) x uni %.5f'%(d.split('/')[-1],n,sy,al,r['seconds'],min(r['all']),max(r['all']),r['seconds']/u))
