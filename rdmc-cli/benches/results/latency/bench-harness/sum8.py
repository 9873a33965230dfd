import json,os
nm=int(os.environ.get('NM','8'))
def ev(r): return [json.loads(l) for l in open('/tmp/hs28/q%d.out'%r)]
e0=ev(0)
s={x['seq']:x['t'] for x in e0 if x.get('event')=='sent'}
def cpu_per(evs,kind):
  xs=[(x['seq'],x['cpu']) for x in evs if x.get('event')==kind and 'seq' in x]
  a=[x for x in xs if x[0]>=50]
  if len(a)<2: return float('nan')
  return (a[-1][1]-a[0][1])/(a[-1][0]-a[0][0])*1e6
cpus=[cpu_per(e0,'sent')]
last={}
for r in range(1,nm):
  e=ev(r)
  for x in e:
    if x.get('event')=='delivered': last[x['seq']]=max(last.get(x['seq'],0),x['t'])
  cpus.append(cpu_per(e,'delivered'))
lat=sorted((last[k]-s[k])/1000 for k in s if k in last and k>=50)
n=len(lat)
print("n %d p50 %.0f us | cpu/msg us: total %.0f root %.0f | %s"%(n,lat[n//2],sum(cpus),cpus[0]," ".join("%.0f"%c for c in cpus[1:])))
