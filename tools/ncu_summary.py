#!/usr/bin/env python3
"""Per-kernel device time of the last decode step from an `ncu --csv` run (tools/decode_check.sh).

  python3 tools/ncu_summary.py ncu.csv --last K [--json out.json]

ncu profiles every kernel (CUDA-graph nodes one by one, clocks left alone: --clock-control none),
so the times are each kernel alone, without launch gaps. The last K kernels are the last decode
step when K is the kernels per decode step (opfuse bench e2e prints it). Kernels are grouped by a
short name (template arguments dropped) and sorted by total time.
"""
import argparse
import csv
import io
import json
import re
import sys


def short(name):
    name = name.replace("<unnamed>::", "").replace("(anonymous namespace)::", "")
    name = re.sub(r"\(.*$", "", name)  # argument list
    name = re.sub(r"<.*>", "", name)   # template arguments
    name = name.replace("opfuse::kernels::", "").replace("(anonymous namespace)::", "")
    return name.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--last", type=int, required=True, help="kernels per decode step")
    ap.add_argument("--json")
    a = ap.parse_args()
    text = open(a.csv, errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"{a.csv}: no ncu CSV header found")
    rows = [r for r in csv.DictReader(io.StringIO(text[start:])) if r.get("Metric Name") == "gpu__time_duration.sum"]
    if len(rows) < a.last:
        sys.exit(f"{a.csv}: {len(rows)} kernels profiled, fewer than --last {a.last}")
    rows = rows[-a.last:]
    groups = {}
    total = 0.0
    for r in rows:
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        us = v / 1000.0 if unit.startswith("n") else v / 1e6 if unit.startswith("p") else v if unit.startswith("u") else v * 1000
        key = short(r["Kernel Name"])
        g = groups.setdefault(key, [0, 0.0])
        g[0] += 1
        g[1] += us
        total += us
    print(f"| kernel | count | total us | mean us | share |\n|---|---:|---:|---:|---:|")
    for k, (n, us) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"| {k[:70]} | {n} | {us:.1f} | {us / n:.2f} | {100 * us / total:.1f}% |")
    print(f"| **sum of {a.last} kernels** | | **{total:.1f}** | | |")
    if a.json:
        json.dump({"kernels": a.last, "total_us": total,
                   "groups": {k: {"count": n, "total_us": us} for k, (n, us) in groups.items()}}, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
