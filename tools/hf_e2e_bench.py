#!/usr/bin/env python3
"""The Hugging Face transformers peer of `opfuse bench e2e` (issue 6), on the same GPU, same run.

Loads the model directory that `opfuse init-weights` wrote (same config, same random weights) into
transformers' LlamaForCausalLM and times, for each case "[prefill=P, decode=D(, batch=B)]":
  * eager:   model(...) with the default dynamic KV cache;
  * compiled: a StaticCache and torch.compile(mode="reduce-overhead") of the decode step (CUDA
    graphs), the "static-cache compiled" setup transformers documents for fast generation.
Prefill = one forward over the prompt (P tokens per sequence); decode = D greedy steps, one token per
sequence per step. Wall clock with torch.cuda.synchronize() around each phase — the same method as
opfuse bench e2e (engine call including the device sync). Median over --runs after one warm-up
(for compiled: the compilation warm-up runs first and is reported separately as compile_s).

Writes JSON: {"config": {...}, "results": {"hf_eager": {case: {...}}, "hf_compiled": {...}}} with the
same per-case keys as opfuse bench e2e (prefill_ms, decode_ms_per_token, total_ms, decode_tokens_per_s).

Usage: python3 tools/hf_e2e_bench.py --model DIR [--cases "[prefill=128, decode=32]" ...] [--runs 3]
       [--modes eager,compiled] [--output hf_e2e.json]
"""
import argparse
import json
import re
import statistics
import sys
import time


def parse_case(text):
    body = text.strip().lstrip("[").rstrip("]")
    case = {"prefill": None, "decode": 0, "batch": 1}
    for part in body.split(","):
        m = re.fullmatch(r"\s*(prefill|decode|batch)\s*=\s*(\d+)\s*", part)
        if not m:
            raise SystemExit(f"--cases '{text}': '{part}' is not prefill=N, decode=N or batch=N")
        case[m.group(1)] = int(m.group(2))
    if not case["prefill"]:
        raise SystemExit(f"--cases '{text}': prefill must be >= 1")
    label = (f"[prefill={case['prefill']}, decode={case['decode']}, batch={case['batch']}]" if case["batch"] > 1
             else f"[prefill={case['prefill']}, decode={case['decode']}]")
    return label, case


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model directory (opfuse init-weights --out DIR)")
    ap.add_argument("--cases", nargs="*", default=["[prefill=128, decode=32]", "[prefill=2048, decode=0]",
                                                   "[prefill=128, decode=32, batch=8]"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--modes", default="eager,compiled")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--output", default="")
    a = ap.parse_args()
    try:
        import torch
        import transformers
        from transformers import LlamaForCausalLM
    except ImportError as e:  # a clear message, exit 2 like the CLI
        print(f"hf_e2e_bench: needs torch and transformers: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("hf_e2e_bench: no CUDA device", file=sys.stderr)
        return 2
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    dev = torch.device("cuda")
    model = LlamaForCausalLM.from_pretrained(a.model, torch_dtype=dtype).to(dev).eval()
    vocab = model.config.vocab_size
    cases = [parse_case(c) for c in a.cases]
    modes = [m for m in a.modes.split(",") if m]
    results = {}
    notes = {}
    g = torch.Generator(device="cpu").manual_seed(a.seed)

    def sync():
        torch.cuda.synchronize()

    @torch.inference_mode()
    def run_eager(ids, decode):
        sync()
        t0 = time.perf_counter()
        out = model(input_ids=ids, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1, :].argmax(-1, keepdim=True)
        sync()
        t1 = time.perf_counter()
        toks = []
        for _ in range(decode):
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1, :].argmax(-1, keepdim=True)
            toks.append(nxt)
        sync()
        t2 = time.perf_counter()
        return (t1 - t0) * 1e3, (t2 - t1) * 1e3, torch.cat(toks, 1).cpu() if toks else None

    compiled_step = {}

    def make_compiled(batch, max_len):
        from transformers import StaticCache
        try:
            cache = StaticCache(config=model.config, max_batch_size=batch, max_cache_len=max_len, device=dev, dtype=dtype)
        except TypeError:  # newer transformers: max_batch_size/device inferred
            cache = StaticCache(config=model.config, max_cache_len=max_len)

        def step(ids, pos, cache_position):
            return model(input_ids=ids, position_ids=pos, cache_position=cache_position, past_key_values=cache,
                         use_cache=True).logits

        return cache, torch.compile(step, mode="reduce-overhead", fullgraph=True)

    @torch.inference_mode()
    def run_compiled(ids, decode, key):
        batch, plen = ids.shape
        cache, step = compiled_step[key]
        cache.reset()
        sync()
        t0 = time.perf_counter()
        cp = torch.arange(plen, device=dev)
        logits = model(input_ids=ids, cache_position=cp, past_key_values=cache, use_cache=True).logits
        nxt = logits[:, -1, :].argmax(-1, keepdim=True)
        sync()
        t1 = time.perf_counter()
        toks = []
        for i in range(decode):
            pos = torch.full((batch, 1), plen + i, device=dev, dtype=torch.long)
            cpos = torch.tensor([plen + i], device=dev)
            logits = step(nxt, pos, cpos)
            nxt = logits[:, -1, :].argmax(-1, keepdim=True).clone()
            toks.append(nxt)
        sync()
        t2 = time.perf_counter()
        return (t1 - t0) * 1e3, (t2 - t1) * 1e3, torch.cat(toks, 1).cpu() if toks else None

    for mode in modes:
        name = "hf_" + mode
        results[name] = {}
        for label, c in cases:
            ids = torch.randint(0, vocab, (c["batch"], c["prefill"]), generator=g).to(dev)
            compile_s = None
            try:
                if mode == "compiled":
                    key = (c["batch"], c["prefill"] + c["decode"])
                    if key not in compiled_step:
                        compiled_step[key] = make_compiled(c["batch"], c["prefill"] + c["decode"])
                    t = time.perf_counter()
                    run_compiled(ids, c["decode"], key)  # compiles (and captures) here
                    compile_s = time.perf_counter() - t
                    fn = lambda: run_compiled(ids, c["decode"], key)
                else:
                    run_eager(ids, c["decode"])  # warm-up
                    fn = lambda: run_eager(ids, c["decode"])
                pre, dec, first = [], [], None
                for r in range(a.runs):
                    p, d, toks = fn()
                    pre.append(p)
                    dec.append(d / max(c["decode"], 1))
                    if r == 0:
                        first = toks
                    elif toks is not None and not torch.equal(toks, first):
                        notes.setdefault(name, []).append(f"{label}: greedy tokens differ between runs")
                mpt = statistics.median(dec) if c["decode"] else 0.0
                results[name][label] = {
                    "prefill_ms": statistics.median(pre),
                    "decode_ms_per_token": mpt,
                    "total_ms": statistics.median(pre) + mpt * c["decode"],
                    "decode_tokens_per_s": 1000.0 * c["batch"] / mpt if mpt else 0.0,
                    "batch": c["batch"],
                    "compile_s": compile_s,
                }
            except Exception as e:  # noqa: BLE001 — recorded, never hidden
                results[name][label] = {"error": f"{type(e).__name__}: {e}"[:500]}
            print(f"{name} {label}: {results[name][label]}", file=sys.stderr)
    doc = {"config": {"model": a.model, "device": torch.cuda.get_device_name(), "dtype": a.dtype, "runs": a.runs,
                      "torch": torch.__version__, "transformers": transformers.__version__,
                      "timing": "wall clock with torch.cuda.synchronize() around prefill and around all decode steps; "
                                "median of runs after a warm-up (compiled: the compile run)"},
           "results": results, "notes": notes}
    if a.output:
        with open(a.output, "w") as f:
            json.dump(doc, f, indent=1)
    print("| peer | case | prefill ms | decode ms/token | tokens/s |")
    print("|---|---|---:|---:|---:|")
    for name, per in results.items():
        for label, r in per.items():
            if "error" in r:
                print(f"| {name} | {label} | error: {r['error'][:80]} | | |")
            else:
                print(f"| {name} | {label} | {r['prefill_ms']:.2f} | {r['decode_ms_per_token']:.3f} | {r['decode_tokens_per_s']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
