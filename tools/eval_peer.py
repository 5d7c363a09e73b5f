#!/usr/bin/env python3
"""PyTorch eager and torch.compile baselines of the `opfuse eval` problems, merged into baseline_time.json.

  opfuse eval list --json > problems.json
  python3 tools/eval_peer.py --problems problems.json --baseline baseline_time.json [--names REGEX] [--no-compile]
  python3 tools/eval_peer.py --problems problems.json --check        validate + translate only (no torch needed)

Why: `opfuse eval baseline` times opfuse's op-by-op path; the issue 7 target is stated against
PyTorch eager and reported beside torch.compile, so this script times the *same* problems (the
.ofg graph of each, as `opfuse eval list --json` prints it) as PyTorch runs them, on the same GPU,
and adds "torch_eager" and "torch_compile" entries per problem to the baseline file.

How:
- Each problem's graph is translated op by op into a Python function over torch tensors (TORCH_OPS:
  rms_norm -> F.rms_norm when present, layer_norm -> F.layer_norm, attention -> F.scaled_dot_product
  _attention with GQA, matmul -> torch.matmul / x @ w.T, embedding -> F.embedding, ...). Eager runs
  that function; torch.compile compiles it (dynamic=False, fullgraph=True, _dynamo.reset() per
  problem), exactly as tools/bench_peer.py does for the op benchmark.
- Timing is bench_peer's Timer (the rules of opfuse's own harness: rotated input sets, L2 flush,
  spin kernel before the start event, events per call for prefill, CUDA-graph replay for decode),
  imported, not copied.
- Correctness guards the numbers: eager and compile outputs are compared with a float64 run of the
  same translation (relative L2 within the per-dtype bound), outputs must be finite and not all
  zero, inputs must be unmodified. A problem that fails records its error and no time.
- The baseline file must name the same device (torch.cuda.get_device_name); it is rewritten
  atomically after every problem.

Exit codes: 0 ran (per-problem errors are in the file), 1 cannot run (no torch / CUDA), 2 bad
arguments, unreadable or malformed files, an op the translation does not know (--check lists them).
"""
import argparse
import json
import math
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_peer as bp  # noqa: E402  (Timer, plan_sets, rel_err, short_error, write_atomic)

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

# ---------------------------------------------------------------- the graph text (a subset of .ofg)
LINE = re.compile(r"^(?P<outs>[A-Za-z_][\w, ]*)=\s*(?P<op>[a-z_0-9]+)\((?P<args>[^)]*)\)\s*(\{(?P<attrs>.*)\})?\s*$")


def parse_attrs(text):
    attrs = {}
    if not text:
        return attrs
    for part in re.split(r",\s*(?![^\[]*\])", text.strip()):
        if not part.strip():
            continue
        k, v = part.split("=", 1)
        v = v.strip()
        if v.startswith("["):
            attrs[k.strip()] = [int(x) for x in v.strip("[]").split(",") if x.strip()]
        else:
            try:
                attrs[k.strip()] = int(v)
            except ValueError:
                try:
                    attrs[k.strip()] = float(v)
                except ValueError:
                    attrs[k.strip()] = v
    return attrs


def parse_graph(text):
    """(inputs in order, nodes [(outs, op, args, attrs)], outputs)."""
    inputs, nodes, outputs = [], [], []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("graph "):
            continue
        m = re.match(r"^(input|param)\s+(\w+)\s*:", line)
        if m:
            inputs.append(m.group(2))
            continue
        if line.startswith("output "):
            outputs = [x.strip() for x in line[len("output "):].split(",")]
            continue
        m = LINE.match(line)
        if not m:
            raise ValueError(f"cannot translate line: {line!r}")
        outs = [x.strip() for x in m.group("outs").split(",") if x.strip()]
        args = [x.strip() for x in m.group("args").split(",") if x.strip()]
        nodes.append((outs, m.group("op"), args, parse_attrs(m.group("attrs"))))
    return inputs, nodes, outputs


KNOWN_OPS = {"rms_norm", "add_rms_norm", "layer_norm", "softmax", "swiglu", "geglu", "gelu", "gelu_tanh", "silu",
             "sigmoid", "tanh", "relu", "exp", "log", "sqrt", "rsqrt", "neg", "abs", "add", "sub", "mul", "div",
             "maximum", "minimum", "mean", "sum", "max", "argmax", "matmul", "attention", "embedding", "slice",
             "concat", "reshape", "constant", "rope", "cast"}


def translate(text):
    """A Python function f(*inputs) -> tuple of outputs for the graph text. Raises ValueError for
    an op it does not know (checked without torch)."""
    inputs, nodes, outputs = parse_graph(text)
    for outs, op, args, attrs in nodes:
        if op not in KNOWN_OPS:
            raise ValueError(f"op '{op}' has no torch translation")

    consts = {}  # 0-d constant tensors, made on the first call: a later call copies nothing to the GPU

    def fn(*xs):
        torch, F = bp.torch, bp.F
        env = dict(zip(inputs, xs))
        like = next((x for x in xs if x.is_floating_point()), xs[0])
        for outs, op, args, a in nodes:
            v = [env[x] for x in args]
            if op == "constant":
                r = float(a.get("value", 0.0))  # a Python scalar broadcasts without changing dtypes
            elif op in ("rms_norm", "add_rms_norm"):
                # The formula frameworks trace (HF LlamaRMSNorm: f32 statistics, then the weight).
                # Not F.rms_norm: in torch 2.11 it copies a host scalar per call, which defeats
                # CUDA-graph capture and would time a host->device copy instead of the kernels.
                eps = float(a.get("eps", 1e-6 if op == "rms_norm" else 1e-6))
                s_ = v[0] + v[1] if op == "add_rms_norm" else v[0]
                h = s_.float()
                n = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(s_.dtype) * v[-1]
                r = (n, s_) if op == "add_rms_norm" else n
            elif op == "layer_norm":
                r = F.layer_norm(v[0], (v[0].shape[-1],), v[1], v[2], float(a.get("eps", 1e-5)))
            elif op == "softmax":
                x = v[0] * float(a["scale"]) if "scale" in a else v[0]
                if len(v) > 1:
                    x = x + v[1]
                if a.get("causal"):
                    t, s = x.shape[-2], x.shape[-1]
                    mask = torch.ones(t, s, dtype=torch.bool, device=x.device).tril(s - t)
                    x = x.masked_fill(~mask, float("-inf"))
                r = torch.softmax(x, dim=-1)
            elif op == "swiglu":
                r = F.silu(v[0]) * v[1]
            elif op == "geglu":
                r = F.gelu(v[0]) * v[1]
            elif op == "gelu":
                r = F.gelu(v[0])
            elif op == "gelu_tanh":
                r = F.gelu(v[0], approximate="tanh")
            elif op in ("silu", "sigmoid", "tanh", "relu"):
                r = getattr(F, op)(v[0]) if op in ("silu", "relu") else getattr(torch, op)(v[0])
            elif op in ("exp", "log", "sqrt", "rsqrt", "neg", "abs"):
                r = getattr(torch, op)(v[0])
            elif op in ("add", "sub", "mul", "div", "maximum", "minimum"):
                r = getattr(torch, op)(v[0], v[1]) if op in ("maximum", "minimum") else \
                    {"add": lambda p, q: p + q, "sub": lambda p, q: p - q, "mul": lambda p, q: p * q,
                     "div": lambda p, q: p / q}[op](v[0], v[1])
            elif op in ("mean", "sum"):
                r = getattr(torch, op)(v[0], dim=-1, keepdim=True)
            elif op == "max":
                r = torch.amax(v[0], dim=-1, keepdim=True)
            elif op == "argmax":
                r = torch.argmax(v[0], dim=-1, keepdim=True)
            elif op == "matmul":
                r = v[0] @ (v[1].transpose(-1, -2) if a.get("transpose_b") else v[1])
            elif op == "attention":
                q, k, w = v[0].transpose(0, 1), v[1].transpose(0, 1), v[2].transpose(0, 1)  # [H, T, D]
                t, s = q.shape[1], k.shape[1]
                scale = float(a.get("scale", 1.0 / math.sqrt(q.shape[-1])))
                if k.shape[0] != q.shape[0]:
                    rep = q.shape[0] // k.shape[0]
                    k, w = k.repeat_interleave(rep, 0), w.repeat_interleave(rep, 0)
                mask = None
                if a.get("causal", 1) and t > 1:
                    mask = torch.ones(t, s, dtype=torch.bool, device=q.device).tril(s - t)
                r = F.scaled_dot_product_attention(q, k, w, attn_mask=mask, scale=scale).transpose(0, 1)
            elif op == "embedding":
                r = F.embedding(v[1].long(), v[0])
            elif op == "slice":
                ax = a.get("axis", -1)
                r = v[0].narrow(ax, a["start"], a["end"] - a["start"])
            elif op == "concat":
                r = torch.cat(v, dim=a.get("axis", -1))
            elif op == "reshape":
                r = v[0].reshape(a["shape"])
            elif op == "cast":
                r = v[0].to(bp.torch_dtype(a["dtype"]))
            elif op == "rope":
                x, cos, sin = v
                half = x.shape[-1] // 2
                rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
                r = x * cos + rot * sin
            if isinstance(r, float):
                # A host-to-device copy in every call would wait for the stream the timing gate holds
                # (and cannot be captured in a CUDA graph): the tensor is made once per device.
                key = (outs[0], str(like.device))
                if key not in consts:
                    consts[key] = torch.tensor(r, dtype=torch.float32, device=like.device)
                r = consts[key]
            rs = r if isinstance(r, tuple) else (r,)
            for name, val in zip(outs, rs):
                env[name] = val
        return tuple(env[o] for o in outputs)

    return fn, inputs, outputs


# ---------------------------------------------------------------- inputs, checks, timing
def make_inputs(case, device, gen, share_from=None):
    """One input set with the problem's fills: signed randn, |x|+0.5 ("positive" inputs of log,
    sqrt..., from the problem's graph), ids below the embedding table's rows."""
    torch = bp.torch
    out = []
    for i, t in enumerate(case["inputs"]):
        if share_from is not None and not t.get("rotate", True):
            out.append(share_from[i])
            continue
        dt = bp.torch_dtype(t["dtype"])
        if t["dtype"] in bp.INT_DTYPES:
            hi = t.get("id_range") or 1000
            x = torch.randint(0, hi, t["shape"], generator=gen, device=device, dtype=torch.int64).to(dt)
        else:
            x = torch.randn(t["shape"], generator=gen, device=device, dtype=torch.float32)
            if t.get("positive"):
                x = x.abs_().add_(0.5)
            x = x.to(dt)
        out.append(x)
    return out


def problem_case(p):
    """The problem's case dict with the fills the opfuse side uses (id_range from the graph)."""
    case = dict(p["case"])
    _, nodes, _ = parse_graph(case["graph"])
    shapes = {t["name"]: t["shape"] for t in case["inputs"]}
    for outs, op, args, a in nodes:
        if op == "embedding" and len(args) == 2:
            for t in case["inputs"]:
                if t["name"] == args[1]:
                    t["id_range"] = shapes[args[0]][0]
        if op in ("log", "sqrt", "rsqrt", "div", "mod", "pow", "recip"):
            for t in case["inputs"]:
                if t["name"] in args:
                    t["positive"] = True
    return case


def judge(outs, ref, case, tag, flags):
    bound = bp.case_bound(case)
    worst = 0.0
    for o, r in zip(outs, ref):
        if o.is_floating_point():
            if not bool(bp.torch.isfinite(o).all()):
                flags.append(f"{tag}: non-finite output")
            if not bool((o != 0).any()):
                flags.append(f"{tag}: all-zero output")
            e = bp.rel_err(o, r)
        else:
            e = 0.0 if bool((o.cpu() == r.cpu()).all()) else 1.0
        worst = max(worst, e if math.isfinite(e) else float("inf"))
    if not worst <= bound:
        flags.append(f"{tag}: rel_err {worst:.3g} > {bound:g}")
    return worst


def run_problem(p, ctx):
    torch, args, device, timer = bp.torch, ctx["args"], ctx["device"], ctx["timer"]
    case = problem_case(p)
    res = {"torch_eager": {"us": None}, "torch_compile": {"us": None}}
    try:
        fn, _, _ = translate(case["graph"])
        free, _ = torch.cuda.mem_get_info(device)
        k, flush = bp.plan_sets(case, timer.l2, free // 2, args.max_sets or bp.harness("max_sets"))
        gen = torch.Generator(device=device)
        gen.manual_seed(args.seed)
        sets = [make_inputs(case, device, gen)]
        while len(sets) < k:
            sets.append(make_inputs(case, device, gen, share_from=sets[0]))
        with torch.no_grad():
            ref = fn(*[x.double() if x.is_floating_point() else x for x in sets[0]])
    except Exception as e:  # setup failures are the problem's result
        msg = "setup: " + bp.short_error(e)
        res["torch_eager"]["error"] = res["torch_compile"]["error"] = msg
        return res
    variants = [("torch_eager", lambda: fn)]
    if not args.no_compile:
        def compiled():
            torch._dynamo.reset()
            return torch.compile(fn, dynamic=False, fullgraph=True)
        variants.append(("torch_compile", compiled))
    for key, make in variants:
        entry = res[key]
        try:
            f = make()
            before = [x.clone() for x in sets[0]]
            flags = []
            with torch.no_grad():
                outs = f(*sets[0])
                timer._sync()
                entry["rel_err"] = judge(outs, ref, case, key, flags)
                if not all(torch.equal(a, b) for a, b in zip(before, sets[0])):
                    flags.append(f"{key}: the call mutated its inputs")
                if flags:
                    entry["error"] = "; ".join(flags)
                    continue
                timer.warm(f, sets)
                host = timer.host_time(f, sets)
                us, how = timer.device_time(f, sets, case["phase"], flush, host)
            entry.update({"us": us, "method": how, "host_us": host, "correct": True})
        except Exception as e:
            entry["error"] = bp.short_error(e)
            entry["us"] = None
        finally:
            try:
                torch._dynamo.reset()
            except Exception:
                pass
    return res


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--problems", required=True, help="`opfuse eval list --json` output")
    p.add_argument("--baseline", help="baseline_time.json to merge into (required unless --check)")
    p.add_argument("--names", help="only problems whose name matches this regex (re.search)")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--check", action="store_true", help="validate and translate every problem, then exit")
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--replays", type=int, default=25)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--host-calls", type=int, default=200)
    p.add_argument("--graph-calls", type=int, default=64)
    p.add_argument("--max-sets", type=int, default=None, help="most rotated input sets (default: opfuse's, harness.max_sets)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--no-graph", action="store_true")
    p.add_argument("--no-rotate-outputs", action="store_true",
                   help="prefill: drop each call's result at once (bench_peer.py's flag; default: rotate like opfuse)")
    args = p.parse_args(argv)
    if not args.check and not args.baseline:
        p.error("--baseline is required unless --check")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        with open(args.problems) as f:
            doc = json.load(f)
        problems = doc["problems"]
        if doc.get("schema") != 1 or not isinstance(problems, list):
            raise ValueError("expected {\"schema\": 1, \"problems\": [...]}")
        bp.configure_harness(doc.get("harness"), args.problems)
        if args.names:
            problems = [p for p in problems if re.search(args.names, p["name"])]
        for p in problems:
            translate(p["case"]["graph"])
    except (OSError, ValueError, KeyError, TypeError, re.error, bp.CasesError) as e:
        print(f"eval_peer.py: {args.problems}: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.check:
        print(f"{len(problems)} problems translate")
        return EXIT_OK
    try:
        with open(args.baseline) as f:
            base = json.load(f)
        if base.get("schema") != 1 or not isinstance(base.get("problems"), dict):
            raise ValueError("expected {\"schema\": 1, \"problems\": {...}} (run `opfuse eval baseline` first)")
    except (OSError, ValueError) as e:
        print(f"eval_peer.py: {args.baseline}: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        bp.load_torch()
        torch = bp.torch
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device visible to torch")
    except Exception as e:
        print(f"eval_peer.py: cannot run: {e}", file=sys.stderr)
        return EXIT_FAIL
    device = torch.device("cuda")
    name = torch.cuda.get_device_name(device)
    have = base.get("device", {}).get("name", "")
    if have and have != name:
        print(f"eval_peer.py: {args.baseline} was measured on '{have}', torch sees '{name}'", file=sys.stderr)
        return EXIT_USAGE
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20)
    timer = bp.Timer(args, device, l2)
    ctx = {"args": args, "device": device, "timer": timer}
    base.setdefault("runs", []).append({"source": "torch_eager,torch_compile", "command": " ".join(sys.argv),
                                        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                        "torch": torch.__version__, "method": timer.spin_note()})
    for i, p in enumerate(problems):
        print(f"[{i + 1}/{len(problems)}] {p['name']}", file=sys.stderr, flush=True)
        res = run_problem(p, ctx)
        entry = base["problems"].setdefault(p["name"], {})
        entry.update(bp._finite(res))
        bp.write_atomic(args.baseline, base)
        e, c = res["torch_eager"], res["torch_compile"]
        fmt = lambda r: f"{r['us']:.2f}" if r.get("us") else "— " + (r.get("error") or "")[:80]
        print(f"| {p['name']} | {fmt(e)} | {fmt(c)} |")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
