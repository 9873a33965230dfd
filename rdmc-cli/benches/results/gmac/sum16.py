import json,glob,re,statistics as st
from collections import defaultdict
rows=defaultdict(list)
for f in sorted(glob.glob('/tmp/gmac/out/n16-*/results.jsonl'))+sorted(glob.glob('/tmp/gmac/out/n16-*/*.jsonl')):
    pass
for d in sorted(glob.glob('/tmp/gmac/out/n16-*-[0-9]')):
    m=re.search(r'n16-(\w+)-(\d+)$',d); b,i=m.group(1),m.group(2)
    for f in glob.glob(d+'/*.jsonl'):
        for l in open(f):
            r=json.loads(l)
            if r.get('experiment')!='latency': continue
            rows[(r['size'],r.get('system'),r.get('algorithm'),b)].append((int(i),r['seconds'],min(r['all']),max(r['all'])))
for f in sorted(glob.glob('/tmp/gmac/out/mpi-*.json')):
    m=re.search(r'mpi-(\w+)-(\d+)\.json',f)
    try: r=json.loads(open(f).read().splitlines()[0])
    except Exception: continue
    rows[(r['size'],'mpi','pipeline','')].append((int(m.group(2)),r['seconds'],min(r['all']),max(r['all'])))
for k in sorted(rows):
    v=sorted(rows[k])
    print(k, ' '.join('%d:%.4f(%.4f-%.4f)'%x for x in v))
