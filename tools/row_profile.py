#!/usr/bin/env python3
"""The table of tools/row_profile.sh: one row per ncu CSV (`ncu --csv --page raw`) in DIR.

  python3 tools/row_profile.py DIR [--json out.json]

DIR holds ncu_<op>_<rows>x<cols>_<variant>.csv files (and bench_<tag>/bench_report.json with the
case's bytes where the bench finished). Per case: the profiled kernel, its device time, DRAM bytes
read and written against the case's bytes (1.00 = each byte once), L2 bytes, warp instructions per
element of the row matrix, issue-slot use, achieved occupancy, registers, launch shape, and the three
largest stall reasons in cycles per issued instruction. Nothing is estimated: a missing metric is "-".
"""
import argparse
import csv
import glob
import io
import json
import os
import re
import sys


def num(v):
    try:
        return float(str(v).replace(",", ""))
    except ValueError:
        return None


def parse(path):
    """One record per profiled kernel."""
    text = open(path, errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        return []
    rows = list(csv.reader(io.StringIO(text[start:])))
    if len(rows) < 3:
        return []
    head, units = rows[0], rows[1]
    recs = []
    for data in rows[2:]:
        out = {h: data[i] for i, h in enumerate(head) if i < len(data)}
        out["_units"] = {h: units[i] for i, h in enumerate(head) if i < len(units)}
        recs.append(out)
    return recs


def scaled(rec, key, to):
    """Metric `key` in µs (time) or bytes, from ncu's unit column (`to` names which, for the reader)."""
    v = num(rec.get(key, ""))
    if v is None:
        return None
    u = rec["_units"].get(key, "")
    f = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "ns": 1e-3, "nsecond": 1e-3, "us": 1, "usecond": 1,
         "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}.get(u)
    if f is None:
        return None
    return v * f


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--json")
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.dir, "ncu_*.csv")))
    if not files:
        sys.exit(f"row_profile.py: no ncu_*.csv in {a.dir}")
    out = []
    print("| case | kernel | µs | DRAM rd/case | DRAM wr/case | L2/case | warp-inst/elem | issue % | occ % | regs | block×grid | smem | top stalls (cycles/inst) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|")
    for f in files:
        tag = os.path.basename(f)[4:-4]
        m = re.match(r"(.+)_(\d+)x(\d+)_(\w+)$", tag)
        recs = parse(f)
        if not m or not recs:
            print(f"| {tag} | no profile (see ncu_{tag}_stderr.log) |" + " |" * 11)
            out.append({"case": tag, "error": "no profile"})
            continue
        for k, rec in enumerate(recs):
            out.append(row(a, tag if len(recs) == 1 else f"{tag}#{k}", m, rec))
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)


def row(a, tag, m, rec):
    """One kernel's record (and its table line, printed) of case `tag` (match `m`: op, rows, cols, variant)."""
    rows, cols = int(m.group(2)), int(m.group(3))
    elems = rows * cols
    case_bytes = None
    rep = os.path.join(a.dir, f"bench_{tag.split('#')[0]}", "bench_report.json")
    if os.path.exists(rep):
        try:
            cs = json.load(open(rep)).get("cases") or []
            case_bytes = cs[0].get("bytes") if cs else None
        except (OSError, ValueError):
            pass
    if m.group(4) == "copy":
        case_bytes = 2 * elems * 2
    us = scaled(rec, "gpu__time_duration.sum", "usecond")
    rd = scaled(rec, "dram__bytes_read.sum", "byte")
    wr = scaled(rec, "dram__bytes_write.sum", "byte")
    l2 = scaled(rec, "lts__t_bytes.sum", "byte")
    inst = num(rec.get("smsp__inst_executed.sum", ""))
    stalls = []
    for k, v in rec.items():
        s = re.match(r"smsp__average_warps_issue_stalled_(.+)_per_issue_active\.ratio$", k)
        if s and num(v) is not None and s.group(1) != "selected":
            stalls.append((num(v), s.group(1)))
    stalls.sort(reverse=True)
    r = {"case": tag, "kernel": rec.get("Kernel Name", ""), "us": us, "dram_read": rd, "dram_write": wr, "l2_bytes": l2,
         "case_bytes": case_bytes, "warp_inst": inst, "elems": elems,
         "issue_pct": num(rec.get("smsp__issue_active.avg.pct_of_peak_sustained_active", "")),
         "occupancy_pct": num(rec.get("sm__warps_active.avg.pct_of_peak_sustained_active", "")),
         "regs": num(rec.get("launch__registers_per_thread", "")), "block": num(rec.get("launch__block_size", "")),
         "grid": num(rec.get("launch__grid_size", "")), "cluster": num(rec.get("launch__cluster_dim_x", "")),
         "smem_dyn": num(rec.get("launch__shared_mem_per_block_dynamic", "")),
         "xu_inst": num(rec.get("smsp__inst_executed_pipe_xu.sum", "")), "stalls": dict((n, v) for v, n in stalls)}

    def frac(x):
        return f"{x / case_bytes:.2f}" if x is not None and case_bytes else "-"

    def fmt(x, spec):
        return format(x, spec) if x is not None else "-"

    top = ", ".join(f"{n} {v:.1f}" for v, n in stalls[:3])
    shape = f"{fmt(r['block'], '.0f')}×{fmt(r['grid'], '.0f')}" + (f" c{r['cluster']:.0f}" if r["cluster"] and r["cluster"] > 1 else "")
    print(f"| {tag} | {r['kernel'][:40]} | {fmt(us, '.1f')} | {frac(rd)} | {frac(wr)} | {frac(l2)} | "
          f"{fmt(inst / elems if inst else None, '.3f')} | {fmt(r['issue_pct'], '.0f')} | {fmt(r['occupancy_pct'], '.0f')} | "
          f"{fmt(r['regs'], '.0f')} | {shape} | {fmt(r['smem_dyn'], '.0f')} | {top} |")
    return r


if __name__ == "__main__":
    main()
