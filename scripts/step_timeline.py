#!/usr/bin/env python3
"""Summarise the step timeline (a build with -DMVLLM_STEP_TIMELINE=ON, the CSV written through
MVLLM_STEP_TIMELINE_OUT): where the time of a CUDA decode step goes, kernel by kernel.

Each record is one CTA at its PDL wait: the wait's call site (FNV-1a hash of the file name, line),
the grid size, the block, the SM, %globaltimer when the CTA reached the wait ("enter") and when the
wait returned ("release"). A kernel's wait returns once every earlier kernel has completed, so the
first release of kernel k + 1 is the end of kernel k: "span" below is the time from a kernel's first
release to the next one's, the kernel's share of the step's critical path. "lead" is how long its
first CTA was resident before the release (the overlap that programmatic launch buys); "late" is
how many of its CTAs arrived after the release (waves beyond the first).

Launches are told apart by their call site and grid (the records are in release order); steps by
a gap: the first kernel of a step arrives after the previous step's last release. Steps whose
kernel sequence has the most common length are kept, the first and the last are left out.

Usage: scripts/step_timeline.py FILE.csv [--steps N]  prints the median over steps of each kernel
of the step (its site, grid, span, lead, late CTAs), then the sum of spans per site and grid.
"""
import csv
import glob
import os
import statistics
import sys


def fnv(name):
    h = 2166136261
    for c in name.encode():
        h = ((h ^ c) * 16777619) & 0xFFFFFFFF
    return h


def site_names():
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'src', 'backend', 'cuda')
    return {fnv(os.path.basename(p)): os.path.basename(p) for p in glob.glob(os.path.join(src, '*.cu*'))}


def launches(rows):
    out = []
    for r in rows:
        sig = (r['file'], r['line'], r['grid'])
        if not out or out[-1]['sig'] != sig:
            out.append({'sig': sig, 'enter': r['enter'], 'first': r['release'], 'last': r['release'], 'n': 0,
                        'releases': []})
        k = out[-1]
        k['n'] += 1
        k['enter'] = min(k['enter'], r['enter'])
        k['last'] = max(k['last'], r['release'])
        k['releases'].append((r['enter'], r['release']))
    return out


def steps(ks, gap_ns=3000):
    out, cur = [], []
    for i, k in enumerate(ks):
        if cur and k['enter'] > ks[i - 1]['last'] + gap_ns:
            out.append(cur)
            cur = []
        cur.append(k)
    if cur:
        out.append(cur)
    return out


def main(argv):
    if not argv:
        print(__doc__)
        return 2
    path = argv[0]
    with open(path) as f:
        rows = [{k: int(v) for k, v in r.items()} for r in csv.DictReader(f)]
    rows.sort(key=lambda r: r['release'])
    names = site_names()
    st = steps(launches(rows))
    if len(st) < 3:
        print(f'{path}: {len(st)} steps, too few')
        return 1
    lengths = [len(s) for s in st[1:-1]]
    mode = statistics.mode(lengths)
    keep = [s for s in st[1:-1] if len(s) == mode]
    sig0 = [k['sig'] for k in keep[0]]
    keep = [s for s in keep if [k['sig'] for k in s] == sig0]
    print(f'{path}: {len(rows)} CTA records, {len(st)} steps, {len(keep)} kept of {mode} kernels each')
    step_ns = [s[-1]['first'] - s[0]['first'] for s in keep]
    print(f'first release to last release, median: {statistics.median(step_ns) / 1000:.1f} us')

    def name(sig):
        return f"{names.get(sig[0], hex(sig[0]))}:{sig[1]} [{sig[2]}]"

    print('| # | kernel (wait site, grid) | span us | lead us | late CTAs | at us |')
    print('|---|---|---|---|---|---|')
    totals = {}
    for j in range(mode - 1):
        span = statistics.median(s[j + 1]['first'] - s[j]['first'] for s in keep)
        lead = statistics.median(s[j]['first'] - s[j]['enter'] for s in keep)
        late = statistics.median(sum(1 for e, _ in s[j]['releases'] if e > s[j]['first']) for s in keep)
        at = statistics.median(s[j]['first'] - s[0]['first'] for s in keep)
        t = totals.setdefault(keep[0][j]['sig'], [0, 0.0])
        t[0] += 1
        t[1] += span
        print(f'| {j} | {name(keep[0][j]["sig"])} | {span / 1000:.2f} | {lead / 1000:.2f} | {late:.0f} | {at / 1000:.1f} |')
    print('\n| kernel | launches per step | span us per step | per launch |')
    print('|---|---|---|---|')
    for sig, (n, span) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        print(f'| {name(sig)} | {n} | {span / 1000:.1f} | {span / n / 1000:.2f} |')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
