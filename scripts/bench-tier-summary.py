#!/usr/bin/env python3
"""Summarises `weft bench clusterfile` JSON files of alternating runs: per run and
configuration, first write+sync, rewrite write+sync (median of the repeats after the
first) and cold read (median), in MiB/s, and the tier's ratio to the best uncached
method of the same run. Usage: scripts/bench-tier-summary.py FILE.json... (from scripts/bench-alternate.sh)"""
import json, statistics, sys

MIB = 1 << 20

def figures(row):
    b = row["bytes"]
    runs = row["runs"]
    first = b / MIB / (runs[0][0] + runs[0][1])
    rew = [b / MIB / (w + s) for w, s, _ in runs[1:]]
    cold = [b / MIB / t for t in row.get("cold_runs") or []]
    return first, (statistics.median(rew) if rew else None), (statistics.median(cold) if cold else None)

for path in sys.argv[1:]:
    rows = json.load(open(path))["rows"]
    print(f"== {path}")
    for pattern in sorted({r["pattern"] for r in rows}):
        mine = [r for r in rows if r["pattern"] == pattern and "romio" not in r["method"]]
        unc = [figures(r) for r in mine if r["tier"] == "uncached"]
        best = [max(x[i] for x in unc if x[i] is not None) for i in range(3)] if unc else [None] * 3
        print(f"  {pattern}: best uncached first {best[0]:.0f}, rewrite {best[1]:.0f}, cold {best[2]:.0f} MiB/s")
        for r in mine:
            if "server_directed" not in r["method"]:
                continue
            f = figures(r)
            ratios = " ".join(f"{n} {v:.0f} ({v / bv:.2f}x)" for n, v, bv in zip(("first", "rewrite", "cold"), f, best) if v and bv)
            tier = r["tier"] if isinstance(r["tier"], str) else "separate " + str(r["tier"].get("separate"))
            print(f"    {tier:<14} {r['schedule']:<13} {ratios}")
