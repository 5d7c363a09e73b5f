#!/usr/bin/env python3
"""Issue 30's targets, checked against one `opfuse bench ops --shapes random:N` report (with the
PyTorch peer merged by `opfuse bench report --peer`). Nothing is estimated: a target with no measured
case says "no data", never "met".

  python3 tools/sweep_targets.py DIR/bench_report.json [--json out.json] [--strict]

For each case, opfuse's time is its best correct fused variant (library or jit); a case where no
fused variant is correct is a miss of every target it enters. Targets:
  copy_floor      cases moving >= 8 MB: opfuse at >= 85 % of the same-size copy timed the same way
                  (copy_same_us / opfuse us), every case
  copy_median     the same fraction, median >= 92 %
  vs_compile_gm   geometric mean of opfuse us / torch.compile us <= 0.95 (separate-process reading)
  vs_compile_max  no case above 1.10x torch.compile
  vocab_rows      rows of >= 32000 columns, <= 64 rows: opfuse within 2x of the same-size copy
Bad input: one line, exit 2. --strict: exit 1 when a target is missed or has no data.
"""
import argparse
import json
import math
import statistics
import sys

BIG_BYTES = 8 << 20
COPY_FLOOR, COPY_MEDIAN = 0.85, 0.92
GM_BOUND, MAX_BOUND = 0.95, 1.10
VOCAB_COLS, VOCAB_ROWS, VOCAB_BOUND = 32000, 64, 2.0


def best_fused(case):
    """(us, variant) of the fastest correct fused variant, or (None, reason)."""
    best = None
    for name in ("library", "jit"):
        v = (case.get("variants") or {}).get(name)
        if not v or not v.get("correct") or not isinstance(v.get("us"), (int, float)):
            continue
        if best is None or v["us"] < best[0]:
            best = (v["us"], name)
    return best if best else (None, "no correct fused variant")


def evaluate(report):
    cases = report.get("cases")
    if not isinstance(cases, list):
        raise ValueError("bench_report.json: 'cases' is not a list")
    rows, wrong = [], []
    for c in cases:
        us, variant = best_fused(c)
        copy = c.get("copy_same_us")
        peer = c.get("peer") or {}
        comp = peer.get("compile_us") if not peer.get("compile_error") else None
        if us is None:
            wrong.append(c.get("id"))
        rows.append({"id": c.get("id"), "op": c.get("op"), "rows": c.get("rows"), "width": c.get("width"),
                     "bytes": c.get("bytes", 0), "us": us, "variant": variant, "copy_us": copy, "compile_us": comp,
                     "copy_frac": copy / us if us and copy else None, "vs_compile": us / comp if us and comp else None})
    big = [r for r in rows if r["bytes"] >= BIG_BYTES]
    fracs = [r["copy_frac"] if r["copy_frac"] is not None else 0.0 for r in big]
    ratios = [r["vs_compile"] for r in rows if r["vs_compile"] is not None]
    vocab = [r for r in rows if (r["width"] or 0) >= VOCAB_COLS and (r["rows"] or 0) <= VOCAB_ROWS]
    vocab_x = [1.0 / r["copy_frac"] if r["copy_frac"] else math.inf for r in vocab]
    t = {}
    t["copy_floor"] = {"met": bool(big) and min(fracs) >= COPY_FLOOR, "cases": len(big),
                       "worst": min(fracs) if fracs else None, "misses": sum(f < COPY_FLOOR for f in fracs)}
    t["copy_median"] = {"met": bool(big) and statistics.median(fracs) >= COPY_MEDIAN, "cases": len(big),
                        "value": statistics.median(fracs) if fracs else None}
    gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None
    t["vs_compile_gm"] = {"met": gm is not None and gm <= GM_BOUND, "cases": len(ratios), "value": gm}
    t["vs_compile_max"] = {"met": bool(ratios) and max(ratios) <= MAX_BOUND, "cases": len(ratios),
                           "worst": max(ratios) if ratios else None, "misses": sum(x > MAX_BOUND for x in ratios)}
    t["vocab_rows"] = {"met": bool(vocab) and max(vocab_x) <= VOCAB_BOUND, "cases": len(vocab),
                       "worst": max(vocab_x) if vocab_x else None, "misses": sum(x > VOCAB_BOUND for x in vocab_x)}
    return t, rows, wrong


def fmt(v, spec=".3f"):
    return "—" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description="Issue 30's targets from a random-sweep bench report")
    ap.add_argument("report")
    ap.add_argument("--json")
    ap.add_argument("--strict", action="store_true")
    ap.add_argument("--worst", type=int, default=15, help="list this many worst cases per ratio (default 15)")
    a = ap.parse_args()
    try:
        with open(a.report) as f:
            report = json.load(f)
        targets, rows, wrong = evaluate(report)
    except (OSError, ValueError) as e:
        print(f"sweep_targets.py: {a.report}: {e}", file=sys.stderr)
        return 2
    print(f"device: {report.get('device', {}).get('name', '?') if isinstance(report.get('device'), dict) else report.get('device')}")
    print(f"command: {report.get('command', '?')}")
    print("| target | met | cases | value / worst | misses |\n|---|---|---:|---:|---:|")
    for name, t in targets.items():
        val = t.get("value", t.get("worst"))
        print(f"| {name} | {'yes' if t['met'] else 'NO' if t['cases'] else 'no data'} | {t['cases']} | {fmt(val)} | {t.get('misses', '')} |")
    if wrong:
        print(f"\nno correct fused variant: {len(wrong)}: " + ", ".join(wrong[:20]))
    by_copy = sorted((r for r in rows if r["copy_frac"] is not None and r["bytes"] >= BIG_BYTES), key=lambda r: r["copy_frac"])
    print(f"\nworst vs same-size copy (>= 8 MB):\n| case | variant | us | copy us | copy/us |\n|---|---|---:|---:|---:|")
    for r in by_copy[:a.worst]:
        print(f"| {r['id']} | {r['variant']} | {fmt(r['us'], '.1f')} | {fmt(r['copy_us'], '.1f')} | {fmt(r['copy_frac'])} |")
    by_comp = sorted((r for r in rows if r["vs_compile"] is not None), key=lambda r: -r["vs_compile"])
    print(f"\nworst vs torch.compile:\n| case | variant | us | compile us | us/compile |\n|---|---|---:|---:|---:|")
    for r in by_comp[:a.worst]:
        print(f"| {r['id']} | {r['variant']} | {fmt(r['us'], '.1f')} | {fmt(r['compile_us'], '.1f')} | {fmt(r['vs_compile'])} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"targets": targets, "cases": rows, "no_correct_variant": wrong}, f, indent=1)
    if a.strict and (wrong or not all(t["met"] for t in targets.values())):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
