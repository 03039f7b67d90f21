#!/usr/bin/env python3
"""Summarise the decode attention's timeline (a build with -DMVLLM_ATTN_TIMELINE=ON, CSV files
written through MVLLM_ATTN_TIMELINE_OUT).

Each record is one CTA: %globaltimer (ns) and clock64 at fourteen marks: 0 entry, 1 metadata read,
2 early loads issued, 3 griddepcontrol.wait over, 4 Q fragments built (its last value back), 5 tiles
done, 6 the CTA's warps merged (partials stored), 7 split counted or cluster merge done, 8 final
merge done (0 when this CTA did not merge), 9 the tiles left for after the wait issued, 10 the
first Q value back, 11 the cluster merge's first barrier passed, 12 its items stored, 13 (builds
from session 52) thread 0's remote values of its item back, before its stores (0 where not
reached; builds before session 47 used 11-13 for probes of Q's inputs, which sat on the chain).
Records of one launch share a K-cache pointer; a launch is split from the
next one with the same pointer by a gap in its start times.

Usage: scripts/attention_timeline.py [--detail] FILE.csv [...]  prints, per file, medians over the
launches (the first two and the last left out) of each phase in ns, and the launch-to-launch
period; --detail adds whether the CTAs' spread is tied to SMs or splits.
"""
import csv
import statistics
import sys


def load(path):
    with open(path) as f:
        return [{k: int(v) for k, v in row.items()} for row in csv.DictReader(f)]


def launches(rows, gap_ns=20000):
    by_cache = {}
    for r in rows:
        by_cache.setdefault(r["kc"], []).append(r)
    out = []
    for rs in by_cache.values():
        rs.sort(key=lambda r: r["ns0"])
        cur = [rs[0]]
        for r in rs[1:]:
            if r["ns0"] - cur[-1]["ns0"] > gap_ns:
                out.append(cur)
                cur = []
            cur.append(r)
        out.append(cur)
    out.sort(key=lambda rs: min(r["ns0"] for r in rs))
    return out


def end(r):
    return r["ns8"] or r["ns7"] or r["ns6"]


def med(xs):
    return statistics.median(xs) if xs else float("nan")


PHASES = [  # name, from mark, to mark
    ("metadata", 0, 1), ("early_loads", 1, 2), ("q", 3, 4), ("q_issue", 3, 9), ("q_first", 9, 10),
    ("q_rest", 10, 4), ("tiles", 4, 5),
    ("warp_merge", 5, 6), ("split_count", 6, 7), ("final_merge", 7, 8),
    ("cm_barrier", 6, 11), ("cm_items", 11, 12), ("cm_loads", 11, 13), ("cm_stores", 13, 12), ("cm_exit", 12, 7),
]


def summarise(path):
    L = launches(load(path))
    stats = []
    for rs in L:
        s = {"ctas": len(rs)}
        for name, a, b in PHASES:
            s[name] = med([r[f"ns{b}"] - r[f"ns{a}"] for r in rs if r.get(f"ns{b}") and r.get(f"ns{a}")])
        w0 = min(r["ns3"] for r in rs)
        s["waits"] = w0 - min(r["ns0"] for r in rs)  # first CTA: entry to wait over
        s["wait_to_end"] = max(end(r) for r in rs) - w0
        # The spread of the CTAs after the wait: when the first and the last finished their tiles
        # and stored their partials, and when the merging CTA (if any) began its final merge.
        s["tiles_first"] = min(r["ns5"] for r in rs if r["ns5"]) - w0
        s["tiles_last"] = max(r["ns5"] for r in rs) - w0
        s["stored_last"] = max(r["ns6"] for r in rs) - w0
        if any(r.get("ns11") for r in rs):  # the cluster merge: its last CTA past the first barrier, done storing
            s["cm_pass_last"] = max(r["ns11"] for r in rs) - w0
            s["cm_stored_last"] = max(r["ns12"] for r in rs) - w0
        mergers = [r for r in rs if r["ns8"]]
        if mergers:
            s["merge_begin"] = min(r["ns7"] for r in mergers) - w0
        s["_w0"], s["_end"] = w0, max(end(r) for r in rs)
        stats.append(s)
    for a, b in zip(stats, stats[1:]):
        a["end_to_next_wait"] = b["_w0"] - a["_end"]
        a["period"] = b["_w0"] - a["_w0"]
    core = stats[2:-1] if len(stats) > 3 else stats[:-1]
    keys = [k for k in core[0] if not k.startswith("_")] if core else []
    print(f"{path}: {len(stats)} launches")
    print("  " + "  ".join(f"{k}={med([s[k] for s in core if k in s]):.0f}" for k in keys))


def detail(path):
    """Whether the CTAs' spread is systematic: tile-done times (after the first wait) by SM and
    by split, across the launches that recorded every CTA."""
    L = launches(load(path))
    full = max(len(rs) for rs in L)
    L = [rs for rs in L if len(rs) == full]
    by_sm, by_split, stream, wait_spread, shared = {}, {}, [], [], []
    for rs in L:
        w0 = min(r["ns3"] for r in rs)
        per_sm = {}
        for r in rs:
            per_sm[r["sm"]] = per_sm.get(r["sm"], 0) + 1
        shared.append(sum(n for n in per_sm.values() if n > 1))  # CTAs that shared their SM
        wait_spread.append(max(r["ns3"] for r in rs) - w0)
        for r in rs:
            t = r["ns5"] - w0
            by_sm.setdefault(r["sm"], []).append(t)
            by_split.setdefault(r["z"], []).append(t)
            stream.append(r["ns5"] - r["ns4"])
    sm_med = sorted(med(v) for v in by_sm.values())
    sm_sd = med([statistics.pstdev(v) for v in by_sm.values() if len(v) > 1])
    splits = [f"{z}:{med(v):.0f}" for z, v in sorted(by_split.items())]
    print(f"  {len(L)} full launches of {full} CTAs; wait over, spread {med(wait_spread):.0f}")
    print(f"  CTAs sharing an SM with another of their launch: median {med(shared):.0f}, max {max(shared)}")
    print(f"  tiles done by SM: medians {sm_med[0]:.0f}..{sm_med[-1]:.0f}, per-SM stdev across launches {sm_sd:.0f}")
    print(f"  stream (Q ready to tiles done): min {min(stream)} median {med(stream):.0f} max {max(stream)}")
    print("  tiles done by split: " + " ".join(splits))


if __name__ == "__main__":
    args = sys.argv[1:]
    more = "--detail" in args
    for p in (a for a in args if a != "--detail"):
        summarise(p)
        if more:
            detail(p)
