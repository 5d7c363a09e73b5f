#!/usr/bin/env python3
"""Table of after/before ratios from tools/before_after.sh's directory.

Per `opfuse bench ops` variant: the geometric mean and the range of after_us / before_us over the cases
both runs measured (below 1: after is faster), and how many cases changed correctness. Per e2e case and
strategy: decode ms/token (or prefill ms) before, after, ratio, and the kernels per step of each.

Usage: python3 tools/before_after_table.py DIR [--per-case] [--pair B A]   (exit 2 when DIR lacks the runs' JSON)
  --per-case  also list every bench ops case whose time moved by more than 3 %, biggest change first
  --pair B A  compare the runs named B and A (ops_B/, ops_A/, e2e_B.json ...) instead of before and after
The e2e table is left out when the run had no e2e part (BA_E2E=0: no e2e_*.json).
"""
import json
import math
import sys
from pathlib import Path


def load(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        print(f"before_after_table.py: {path}: {e}", file=sys.stderr)
        sys.exit(2)


PAIR = {"before": "before", "after": "after"}  # run names in DIR (--pair)


def variant_times(d):
    """{variant: {case id: {"before"|"after": (us, correct)}}} over the cases each run measured."""
    runs = {w: load(d / f"ops_{PAIR[w]}" / "bench_report.json") for w in ("before", "after")}
    per = {}
    for w, j in runs.items():
        for c in j["cases"]:
            for v, r in (c.get("variants") or {}).items():
                if r.get("us") and not r.get("error"):
                    per.setdefault(v, {}).setdefault(c["id"], {})[w] = (r["us"], r.get("correct"))
    return per


def ops_table(d):
    out = ["| bench ops variant | cases | geomean after/before | min | max | correctness changed |", "|---|---:|---:|---:|---:|---:|"]
    for v, cases in sorted(variant_times(d).items()):
        ratios, changed = [], 0
        for both in cases.values():
            if "before" in both and "after" in both:
                ratios.append(both["after"][0] / both["before"][0])
                changed += both["after"][1] != both["before"][1]
        if ratios:
            g = math.exp(sum(map(math.log, ratios)) / len(ratios))
            out.append(f"| {v} | {len(ratios)} | {g:.3f} | {min(ratios):.3f} | {max(ratios):.3f} | {changed} |")
    return out


def per_case_table(d):
    rows = []
    for v, cases in variant_times(d).items():
        for cid, t in cases.items():
            if "before" in t and "after" in t:
                rows.append((cid, v, t["before"][0], t["after"][0]))
    rows = sorted((r for r in rows if abs(r[3] / r[2] - 1) > 0.03), key=lambda r: abs(math.log(r[3] / r[2])), reverse=True)
    out = ["| case | variant | before µs | after µs | after/before |", "|---|---|---:|---:|---:|"]
    out += [f"| {cid} | {v} | {b:.1f} | {a:.1f} | {a / b:.3f} |" for cid, v, b, a in rows]
    return out


def e2e_table(d):
    runs = {w: load(d / f"e2e_{PAIR[w]}.json")["results"] for w in ("before", "after")}
    out = ["| e2e strategy | case | before | after | after/before | kernels/step before, after |", "|---|---|---:|---:|---:|---|"]
    for s in sorted(runs["after"]):
        for case, a in sorted(runs["after"][s].items()):
            b = runs["before"].get(s, {}).get(case)
            if not b:
                continue
            key = "decode_ms_per_token" if a.get("decode_ms_per_token") else "prefill_ms"
            unit = "ms/token" if key == "decode_ms_per_token" else "ms prefill"
            out.append(f"| {s} | {case} | {b[key]:.3f} {unit} | {a[key]:.3f} | {a[key] / b[key]:.3f} | "
                       f"{b.get('kernels_per_decode_step')}, {a.get('kernels_per_decode_step')} |")
    return out


def main():
    args = sys.argv[1:]
    per_case = "--per-case" in args
    args = [a for a in args if a != "--per-case"]
    if "--pair" in args:
        i = args.index("--pair")
        if len(args) < i + 3:
            print(__doc__, file=sys.stderr)
            return 2
        PAIR["before"], PAIR["after"] = args[i + 1], args[i + 2]
        del args[i:i + 3]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    d = Path(args[0])
    device = (d / "device.txt").read_text().strip() if (d / "device.txt").exists() else "?"
    print(f"device: {device}; {PAIR['after']} against {PAIR['before']}\n")
    print("\n".join(ops_table(d)))
    if per_case:
        print()
        print("\n".join(per_case_table(d)))
    if (d / f"e2e_{PAIR['after']}.json").exists() or (d / f"e2e_{PAIR['before']}.json").exists():
        print()
        print("\n".join(e2e_table(d)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
