#!/usr/bin/env python3
"""Where one decode step's time goes (issue 32 item 3): the table of tools/decode_profile.sh.

    tools/decode_profile.py NCU_CSV --kernels N --ms-per-token MS --weight-bytes B [--json OUT]

NCU_CSV is `ncu --csv --page raw` over a whole `opfuse generate` run (prefill, the capture's eager
run, then decode steps replayed from the CUDA graph); the step is the last N kernels (N = the
engine's kernels per decode step). Per kernel function: launches, device µs, DRAM bytes read and
written, and the bandwidth they reach; then the step's totals against its wall-clock ms/token
(the rest is time between kernels) and against the weight bytes a step must read.
"""
import argparse
import json
import re
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from row_profile import parse, scaled  # noqa: E402


def short(name):
    """A kernel's function name without template arguments or parameters."""
    n = re.sub(r"\(.*$", "", name)
    depth, out = 0, []
    for ch in n:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    n = "".join(out).strip()
    return n.split("::")[-1] or name


def summarize(recs, kernels, ms_per_token, weight_bytes):
    if kernels <= 0 or len(recs) < kernels:
        raise ValueError(f"{len(recs)} kernels profiled, fewer than one step's {kernels}")
    step = recs[-kernels:]
    by = {}
    for r in step:
        k = short(r.get("Kernel Name", "?"))
        t = scaled(r, "gpu__time_duration.sum", "us") or 0.0
        rd = scaled(r, "dram__bytes_read.sum", "bytes") or 0.0
        wr = scaled(r, "dram__bytes_write.sum", "bytes") or 0.0
        e = by.setdefault(k, {"kernel": k, "launches": 0, "us": 0.0, "read_bytes": 0.0, "write_bytes": 0.0})
        e["launches"] += 1
        e["us"] += t
        e["read_bytes"] += rd
        e["write_bytes"] += wr
    rows = sorted(by.values(), key=lambda e: -e["us"])
    for e in rows:
        e["gb_per_s"] = (e["read_bytes"] + e["write_bytes"]) / (e["us"] * 1e3) if e["us"] > 0 else 0.0
    dev_us = sum(e["us"] for e in rows)
    read = sum(e["read_bytes"] for e in rows)
    return {
        "kernels": kernels,
        "device_us": dev_us,
        "wall_us_per_token": ms_per_token * 1e3,
        "between_kernels_us": ms_per_token * 1e3 - dev_us,
        "dram_read_bytes": read,
        "weight_bytes": weight_bytes,
        "read_over_weights": read / weight_bytes if weight_bytes else None,
        "by_kernel": rows,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--kernels", type=int, required=True, help="kernels per decode step")
    ap.add_argument("--ms-per-token", type=float, required=True, help="the engine's wall-clock ms per decode step")
    ap.add_argument("--weight-bytes", type=float, required=True, help="bytes of weights one step must read")
    ap.add_argument("--json", help="write the summary here")
    a = ap.parse_args()
    try:
        s = summarize(parse(a.csv), a.kernels, a.ms_per_token, a.weight_bytes)
    except ValueError as e:
        sys.exit(f"decode_profile.py: {e}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(s, f, indent=1)
    print(f"step: {s['kernels']} kernels, {s['device_us']:.1f} us on the device, {s['wall_us_per_token']:.1f} us wall "
          f"({s['between_kernels_us']:.1f} us between kernels); DRAM read {s['dram_read_bytes'] / 1e6:.1f} MB for "
          f"{s['weight_bytes'] / 1e6:.1f} MB of weights")
    print("| kernel | launches | us | % of device time | DRAM read MB | GB/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for e in s["by_kernel"]:
        print(f"| {e['kernel']} | {e['launches']} | {e['us']:.1f} | {100 * e['us'] / s['device_us']:.1f} | "
              f"{e['read_bytes'] / 1e6:.2f} | {e['gb_per_s']:.0f} |")


if __name__ == "__main__":
    main()
