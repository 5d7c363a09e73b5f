#!/usr/bin/env python3
"""Per-kernel device time of decode steps from a CUPTI kernel trace (dev/cupti_trace, the nsys
stand-in): the CSV that libopfuse_cupti_trace.so writes at exit.

  CUDA_INJECTION64_PATH=$PWD/build/cupti_trace/libopfuse_cupti_trace.so \\
  OPFUSE_CUPTI_TRACE_OUT=trace.csv  <decode run>
  python3 tools/kernel_trace_summary.py trace.csv --per-step K [--steps N] [--first N] [--json out.json]

The trace times kernels where they run (inside the replayed decode graph, with PDL overlap and warm
clocks). Sorted by start, the last N*K kernels are taken as the last N decode steps of K kernels
each (K: kernels per decode step, which bench e2e prints). Printed:
  - a markdown table of the kernels grouped by short name (namespaces, argument lists and template
    arguments dropped, except GemvKernel<T, MR, SWIGLU, U, NORM, ROPE, KS>, whose instances are the
    different projections: GemvKernel[norm+rope mr1], GemvKernel[plain ks4 mr1], ...), with count
    per step, mean us, us per step and share of the step span;
  - the mean step span (first start to last end of a step) and mean sum of kernel durations;
  - the first --first kernels of the last step with their duration and the gap from the previous
    kernel's end to their start (negative: overlapped, e.g. by programmatic dependent launch).
"""
import argparse
import csv
import json
import re
import sys


def split_top(s, sep=","):
    """Split s at sep outside <...> and (...)."""
    out, depth, cur = [], 0, ""
    for c in s:
        depth += (c in "<(") - (c in ">)")
        if c == sep and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += c
    return out + [cur.strip()]


def drop_nested(s, open_, close):
    """s without its top-level open_...close groups (template or argument lists)."""
    out, depth = "", 0
    for c in s:
        if c == open_:
            depth += 1
        elif c == close and depth:
            depth -= 1
        elif depth == 0:
            out += c
    return out


def short(name):
    name = name.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    name = re.sub(r"^void ", "", name.strip())
    name = name.replace("opfuse::", "").replace("kernels::", "")
    depth = 0  # the argument list: the first '(' outside template arguments
    for i, c in enumerate(name):
        depth += (c == "<") - (c == ">")
        if c == "(" and depth == 0:
            name = name[:i]
            break
    m = re.match(r"GemvKernel<(.*)>$", name)
    if m:
        a = split_top(m.group(1))
        if len(a) == 7:  # T, MR, SWIGLU, U, NORM, ROPE, KS
            on = lambda v: v in ("true", "1", "(bool)1")
            num = lambda v: re.sub(r"^\(\w+\)|[uUlL]+$", "", v)
            tags = "+".join(t for t, v in (("swiglu", a[2]), ("norm", a[4]), ("rope", a[5])) if on(v))
            ks = num(a[6])
            return f"GemvKernel[{tags or 'plain'}{'' if ks == '1' else ' ks' + ks} mr{num(a[1])}]"
    return drop_nested(name, "<", ">").strip()


def load(path, device=None):
    """(start, end, name) rows, sorted; with `device`, that GPU's only (a multi-GPU trace's
    `device` column; a trace without the column holds one GPU's)."""
    try:
        with open(path, newline="", errors="replace") as f:
            rows = [(int(r["start_ns"]), int(r["end_ns"]), r["name"]) for r in csv.DictReader(f)
                    if device is None or int(r.get("device") or 0) == device]
    except (OSError, KeyError, ValueError) as e:
        sys.exit(f"{path}: not a cupti_trace CSV ({type(e).__name__}: {e})")
    return sorted(rows)


def by_name(a):
    rows = load(a.csv, a.device)
    pats = {}
    for opt in ("match", "after"):
        try:
            pats[opt] = re.compile(getattr(a, opt)) if getattr(a, opt) else None
        except re.error as e:
            sys.exit(f"--{opt}: {e}")
    pat, after = pats["match"], pats["after"]
    groups = {}
    for i, (s0, e, name) in enumerate(rows):
        key = short(name)
        if pat and not pat.search(key):
            continue
        if after and (i == 0 or not after.search(short(rows[i - 1][2]))):
            continue
        g = groups.setdefault(key, ([], []))
        g[0].append((e - s0) / 1e3)
        if i > 0:
            g[1].append((s0 - rows[i - 1][1]) / 1e3)
    q = lambda v, f: sorted(v)[min(len(v) - 1, int(f * len(v)))] if v else float("nan")
    out = {}
    print("| kernel | count | median us | min us | p90 us | median gap us |")
    print("|---|---:|---:|---:|---:|---:|")
    for key, (d, gaps) in sorted(groups.items(), key=lambda kv: -len(kv[1][0])):
        if len(d) < a.min_count:
            continue
        out[key] = {"count": len(d), "median_us": q(d, 0.5), "min_us": min(d), "p90_us": q(d, 0.9),
                    "median_gap_us": q(gaps, 0.5)}
        print(f"| {key} | {len(d)} | {q(d, 0.5):.2f} | {min(d):.2f} | {q(d, 0.9):.2f} | {q(gaps, 0.5):.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--per-step", type=int, help="kernels per decode step (required unless --by-name)")
    ap.add_argument("--by-name", action="store_true",
                    help="instead of decode steps: per kernel name, its count, median / min / p90 duration and the "
                         "median gap from the previous kernel's end to its start (in a benchmark that spins before "
                         "each timed call: the launch latency the timing events see)")
    ap.add_argument("--match", help="--by-name: only kernel names (shortened) matching this regex (re.search)")
    ap.add_argument("--min-count", type=int, default=1, help="--by-name: only kernels seen at least this often")
    ap.add_argument("--after", help="--by-name: only kernels right after one whose (shortened) name matches this regex, "
                                    "e.g. the benchmarks' spin kernels: the timed samples, not warm-up or host loops")
    ap.add_argument("--steps", type=int, default=8, help="decode steps averaged (the last ones)")
    ap.add_argument("--first", type=int, default=10, help="kernels of the last step listed one by one")
    ap.add_argument("--json", help="also write the numbers here")
    ap.add_argument("--device", type=int, help="only this GPU's kernels (a multi-GPU trace, e.g. tensor parallel: rank r is GPU r)")
    a = ap.parse_args()
    if a.by_name:
        return by_name(a)
    if a.per_step is None:
        sys.exit("--per-step is required (or --by-name)")
    k = a.per_step
    if k < 1 or a.steps < 1:
        sys.exit("--per-step and --steps must be positive")
    rows = load(a.csv, a.device)
    n = min(a.steps, len(rows) // k)
    if n < 1:
        sys.exit(f"{a.csv}: {len(rows)} kernels, fewer than one step of {k}")
    base = len(rows) - n * k
    steps = [rows[base + s * k:base + (s + 1) * k] for s in range(n)]
    groups = {}
    for step in steps:
        for s0, e, name in step:
            g = groups.setdefault(short(name), [0, 0.0])
            g[0] += 1
            g[1] += (e - s0) / 1e3
    span = sum((max(e for _, e, _ in st) - st[0][0]) / 1e3 for st in steps) / n
    busy = sum((e - s0) / 1e3 for st in steps for s0, e, _ in st) / n

    out = {"steps": n, "kernels_per_step": k, "span_us": span, "sum_us": busy, "kernels": {}, "first": []}
    print("| kernel | per step | mean us | us per step | share of span |")
    print("|---|---:|---:|---:|---:|")
    for key, (c, us) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        per = us / n
        print(f"| {key} | {c / n:g} | {us / c:.2f} | {per:.1f} | {100 * per / span:.1f}% |")
        out["kernels"][key] = {"count_per_step": c / n, "mean_us": us / c, "us_per_step": per,
                               "share": per / span}
    print(f"\n{n} steps of {k} kernels: mean span {span:.1f} us, mean kernel time {busy:.1f} us "
          f"({100 * busy / span:.0f}% of the span)")

    print("\nfirst kernels of the last step (gap = start - previous kernel's end, us):")
    for i in range(len(rows) - k, len(rows) - k + min(a.first, k)):
        s0, e, name = rows[i]
        gap = (s0 - rows[i - 1][1]) / 1e3 if i > 0 else None
        gap_s = "     -" if gap is None else f"{gap:+6.2f}"
        print(f"  {i - (len(rows) - k):3d} {short(name):40s} {(e - s0) / 1e3:8.2f} us  gap {gap_s}")
        out["first"].append({"kernel": short(name), "us": (e - s0) / 1e3, "gap_us": gap})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
