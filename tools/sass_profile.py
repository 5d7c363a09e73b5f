#!/usr/bin/env python3
"""Summarise an Nsight Compute source-page CSV (`ncu -i R --page source --csv --print-source sass`):
executed warp instructions per opcode and the hottest SASS lines. The column holding the executed
instructions is found by name ("Instructions Executed", else the first column with "Executed" in it).
Usage: sass_profile.py FILE.csv [--top N]"""
import argparse
import collections
import csv
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    head_i = next((i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r)), None)
    if head_i is None:
        print(f"sass_profile: no header with a 'Source' column in {a.csv}", file=sys.stderr)
        return 2
    head = [c.strip() for c in rows[head_i]]
    src = head.index("Source")
    ex = next((i for i, c in enumerate(head) if c == "Instructions Executed"), None)
    if ex is None:
        ex = next((i for i, c in enumerate(head) if "Executed" in c), None)
    if ex is None:
        print(f"sass_profile: no executed-instructions column in {head}", file=sys.stderr)
        return 2
    addr = head.index("Address") if "Address" in head else None
    lines = []
    for r in rows[head_i + 1:]:
        if len(r) <= max(src, ex):
            continue
        try:
            n = float(r[ex].replace(",", ""))
        except ValueError:
            continue
        lines.append((n, r[addr] if addr is not None else "", r[src].strip()))
    total = sum(n for n, _, _ in lines)
    print(f"executed warp instructions: {total:.0f} over {len(lines)} SASS lines")
    ops = collections.Counter()
    for n, _, s in lines:
        op = s.split()[0] if s else "?"
        if op.startswith("@"):
            op = s.split()[1] if len(s.split()) > 1 else op
        ops[op.split(".")[0]] += n
    print("by opcode: " + ", ".join(f"{o} {100 * n / total:.1f}%" for o, n in ops.most_common(16)))
    print(f"hottest {a.top} lines (executed, address, SASS):")
    for n, ad, s in sorted(lines, key=lambda t: -t[0])[: a.top]:
        print(f"  {n:10.0f}  {ad:>6}  {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
