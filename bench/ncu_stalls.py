# Warp-stall samples of an ncu source page (CSV: ncu -i X --page source --csv --print-source sass):
# the totals per stall reason, then the N instructions with the most samples and their top reason.
# Usage: python3 bench/ncu_stalls.py X_src.csv [N]
import csv,sys,collections
f=sys.argv[1]
rows=list(csv.reader(open(f)))
hdr=rows[1]; data=rows[2:]
ix={h:i for i,h in enumerate(hdr)}
stall_cols=[h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
tot=collections.Counter(); total=0
for r in data:
    for c in stall_cols:
        v=r[ix[c]]
        if v and v!='-': tot[c]+=int(v)
    total+=int(r[ix['Warp Stall Sampling (All Samples)']] or 0)
print('total samples',total)
for c,v in tot.most_common(10): print(f'  {c:28s} {v:7d} {100*v/total:5.1f}%')
# top instructions
data.sort(key=lambda r:-int(r[ix['Warp Stall Sampling (All Samples)']] or 0))
for r in data[:int(sys.argv[2]) if len(sys.argv)>2 else 25]:
    s=int(r[ix['Warp Stall Sampling (All Samples)']]); 
    top=max(stall_cols,key=lambda c:int(r[ix[c]] or 0) if r[ix[c]] not in ('','-') else 0)
    print(f"{s:6d} {100*s/total:5.1f}% {r[ix['Address']][-5:]} {r[ix['Source']].strip()[:60]:60s} {top}")
