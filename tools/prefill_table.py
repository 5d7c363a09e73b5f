#!/usr/bin/env python3
"""Prefill TFLOP/s against the GEMM ceiling (issue 32 item 4), from the reports tools/prefill_check.sh
writes: `opfuse bench ops` (matmul and attention pattern cases at several row counts, the cuBLASLt
ceiling measured in the same run, torch's times when a peer was merged) and `opfuse bench e2e`
(whole prefills of several lengths).

  python3 tools/prefill_table.py --ops DIR/bench_report.json [--e2e NAME=e2e.json[@config.json] ...]
                                 [--json summary.json]

Per prefill length L, one markdown row: the matmul cases (TFLOP/s, MFU = TFLOP/s / ceiling; the
best variant that passed its check) and torch eager's time on the same case; the attention case
(causal, T = S = L) likewise; the whole prefill's ms and its model TFLOP/s. Model flops: 2 x (every
projection's weights) x L for the layers, 2 x vocab x hidden for the LM head (last row only, as the
engine computes it), and 4 x heads x head_dim x L(L+1)/2 a layer for causal attention (the op suite's
count). Each --e2e is one model (a column pair NAME ms / TFLOP/s); its sizes come from the config.json
after @ or, for the builtin model, TinyLlama-1.1B's. Exit 2 on a missing or malformed report or an
unknown model.
"""
import argparse
import json
import sys

TINYLLAMA = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
             "num_key_value_heads": 4, "vocab_size": 32000}


def die(msg):
    print(f"prefill_table: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        die(f"{path}: {e}")


def model_flops(c, length):
    h, f, n = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim") or h // heads
    proj = h * (heads * d) + 2 * h * (kv * d) + (heads * d) * h + 3 * h * f  # q, k, v, o, gate, up, down
    attn = 4 * heads * d * length * (length + 1) // 2
    return n * (2 * proj * length + attn) + 2 * c["vocab_size"] * h


def best(case):
    """(µs, variant) of the fastest variant that passed its check, or (None, None)."""
    ok = [(v["us"], name) for name, v in case.get("variants", {}).items()
          if v.get("us") is not None and v.get("correct") is not False and not v.get("error")]
    return min(ok) if ok else (None, None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", required=True, help="bench_report.json of `opfuse bench ops`")
    ap.add_argument("--e2e", action="append", default=[],
                    help="NAME=REPORT[@CONFIG]: `opfuse bench e2e` JSON with [prefill=L, decode=0] cases, and the "
                         "model's config.json (default: TinyLlama-1.1B's, for the builtin model)")
    ap.add_argument("--json", help="write the rows here too")
    a = ap.parse_args()
    ops = load(a.ops)
    try:
        ceiling = ops["ceilings"]["gemm_tflops"][ops["dtype"]]
        cases = ops["cases"]
    except (KeyError, TypeError) as e:
        die(f"{a.ops}: no {e} (not a bench ops report?)")
    rows = {}
    for c in cases:
        if c.get("op") not in ("matmul", "attention") or c.get("phase") != "prefill":
            continue
        us, variant = best(c)
        peer = c.get("peer") or {}
        r = rows.setdefault(c["rows"], {})
        key = f"matmul_h{c['width']}" if c["op"] == "matmul" else "attention"
        r[key] = {"us": us, "variant": variant, "tflops": c["flops"] / us / 1e6 if us else None,
                  "torch_eager_us": peer.get("eager_us"), "torch_compile_us": peer.get("compile_us"),
                  "torch_tflops": c["flops"] / peer["eager_us"] / 1e6 if peer.get("eager_us") else None}
    e2e = {}  # name -> length -> {ms, tflops, kernels}
    for spec in a.e2e:
        name, _, rest = spec.partition("=")
        path, _, cfg_path = rest.partition("@")
        if not name or not path:
            die(f"--e2e {spec!r}: expected NAME=REPORT[@CONFIG]")
        d = load(path)
        cfg = load(cfg_path) if cfg_path else None
        if cfg is None:
            model = d.get("config", {}).get("model", "")
            if not model.startswith("builtin:tinyllama"):
                die(f"{path}: model {model!r}: give its config.json after @")
            cfg = TINYLLAMA
        per = e2e.setdefault(name, {})
        for case, r in d.get("results", {}).get("always_fuse", {}).items():
            if r.get("prefill_ms") is None or "decode=0" not in case:
                continue
            length = int(case.split("prefill=")[1].split(",")[0].rstrip("]"))
            fl = model_flops(cfg, length) * r.get("batch", 1)
            per[length] = {"ms": r["prefill_ms"], "tflops": fl / r["prefill_ms"] / 1e9, "kernels": r.get("kernels_per_prefill")}
    fmt = lambda x, spec: "—" if x is None else format(x, spec)

    def cell(x):
        if not x or x["tflops"] is None:
            return "—"
        s = f"{x['tflops']:.0f} ({x['tflops'] / ceiling:.0%})"
        if x.get("torch_tflops"):
            s += f" / torch {x['torch_tflops']:.0f}"
        return s

    print(f"GEMM ceiling (cuBLASLt 8192³ {ops['dtype']}, same run): {ceiling:.0f} TFLOP/s; device {ops.get('device')}")
    names = list(e2e)
    print("| prefill length | matmul [L, 2048] × [2048, 5632]: TFLOP/s (MFU) | matmul [L, 4096] × [4096, 4096] | "
          "causal GQA attention 32/4 × 64, T = S = L |" + "".join(f" {n} prefill: ms, model TFLOP/s (MFU) |" for n in names))
    print("|---:|---:|---:|---:|" + "---:|" * len(names))
    out = []
    lengths = set(rows)
    for per in e2e.values():
        lengths |= set(per)
    for length in sorted(lengths):
        r = rows.get(length, {})
        line = f"| {length} | {cell(r.get('matmul_h2048'))} | {cell(r.get('matmul_h4096'))} | {cell(r.get('attention'))} |"
        for n in names:
            e = e2e[n].get(length)
            line += " — |" if not e else f" {e['ms']:.2f}, {e['tflops']:.0f} ({e['tflops'] / ceiling:.0%}) |"
        print(line)
        out.append({"length": length, **r, "e2e": {n: e2e[n].get(length) for n in names}})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gemm_ceiling_tflops": ceiling, "device": ops.get("device"), "rows": out}, f, indent=1)


if __name__ == "__main__":
    main()
