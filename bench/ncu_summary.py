#!/usr/bin/env python3
"""Sums `ncu --csv --metrics gpu__time_duration.sum` rows per kernel name: time, launches, share.
Usage: ncu_summary.py LOG [TOP]"""
import csv
import sys
from collections import defaultdict

UNIT = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}


def main():
    rows = [l for l in open(sys.argv[1], errors="replace") if l.startswith('"')]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    total, count = defaultdict(float), defaultdict(int)
    for r in csv.DictReader(rows):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r["Kernel Name"].split("(")[0][:70]
        total[name] += float(r["Metric Value"].replace(",", "")) * UNIT.get(r["Metric Unit"], 1.0)
        count[name] += 1
    s = sum(total.values()) or 1.0
    print(f"{'kernel':70s} {'launches':>8s} {'total us':>10s} {'share':>6s}")
    for name, t in sorted(total.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{name:70s} {count[name]:8d} {t:10.1f} {100 * t / s:5.1f}%")
    print(f"{'all kernels':70s} {sum(count.values()):8d} {s:10.1f}")


if __name__ == "__main__":
    main()
