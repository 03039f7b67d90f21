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
the period of that sequence, starting at a one-CTA kernel that runs once per period (the decode
step's embedding lookup) or else after the longest gap. Complete steps with the common sequence are
kept; the last kernel of a step has no span (the next step starts after the host's turn).

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


def period(sigs, lo=2, hi=4000):
    """The smallest p under which the sequence repeats (99 % of the compared positions agree: a
    layer's period agrees at ~95 %, broken where the step's first and last kernels sit)."""
    for p in range(lo, min(hi, len(sigs) // 2)):
        n = len(sigs) - p
        if sum(1 for i in range(n) if sigs[i] == sigs[i + p]) >= 0.99 * n:
            return p
    return None


def steps(ks):
    sigs = [k['sig'] for k in ks]
    p = period(sigs)
    if p is None:
        return []
    counts = {}
    for sg in sigs[:p]:
        counts[sg] = counts.get(sg, 0) + 1
    ones = [i for i in range(p) if sigs[i][2] == 1 and counts[sigs[i]] == 1]
    if ones:
        start = ones[0]
    else:
        gaps = [ks[i + 1]['first'] - ks[i]['first'] for i in range(p)]
        start = (gaps.index(max(gaps)) + 1) % p
    return [ks[i:i + p] for i in range(start, len(ks) - p + 1, p)]


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
    if len(st) < 2:
        print(f'{path}: {len(st)} steps, too few')
        return 1
    sig_lists = [tuple(k['sig'] for k in s) for s in st]
    common = statistics.mode(sig_lists)
    keep = [s for s, sg in zip(st, sig_lists) if sg == common]
    mode = len(common)
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
