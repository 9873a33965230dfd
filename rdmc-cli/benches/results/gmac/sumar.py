import json,sys,statistics as st
N=sys.argv[1]
def load(v): return [json.loads(l) for l in open(f'/tmp/gmac/out/ar{N}.{v}')]
mpi=load('mpi')
# group mpi rows per round: 2 per round (alg 4, 5)
mr=[min(mpi[i]['seconds'],mpi[i+1]['seconds']) for i in range(0,len(mpi)-1,2)]
print('MPI best per round ms', ' '.join('%.2f'%(x*1e3) for x in mr), 'median %.2f'%(st.median(mr)*1e3), 'algs', [r.get('algorithm') for r in mpi[:2]])
for v in ['main','new','newnone']:
    r=load(v); s=[x['seconds'] for x in r]
    ratios=[a/b for a,b in zip(s,mr)]
    print(v, 'ms', ' '.join('%.2f'%(x*1e3) for x in s), 'median %.2f'%(st.median(s)*1e3), 'ratio median %.3f (%.3f-%.3f)'%(st.median(ratios),min(ratios),max(ratios)), 'exact', all(x['exact'] for x in r))
