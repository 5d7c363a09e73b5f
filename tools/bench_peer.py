#!/usr/bin/env python3
"""PyTorch peer timings for the op-benchmark cases: eager and torch.compile, per case of cases.json.

  python3 tools/bench_peer.py --cases DIR/cases.json --out DIR/peer.json [--ids REGEX] [--no-compile] [--reps N]
  python3 tools/bench_peer.py --cases DIR/cases.json --check        validate only (no torch needed)

Why it exists: `opfuse bench ops` times each case (a small graph at a decode or prefill size) and
writes DIR/cases.json; this script times the *same* cases as a PyTorch user would write them, so
`opfuse bench report --peer peer.json` can put opfuse next to torch eager and torch.compile.

How it is built:
- One op table (OPS): per contract op, the input/output names in order, a shape check that runs
  without torch (so a malformed cases.json is rejected, exit 2, before anything is imported or
  written), the idiomatic torch function (what a user writes: F.rms_norm, F.layer_norm,
  F.scaled_dot_product_attention, F.embedding, torch.remainder, ...), and an independent float64
  reference written out in basic torch ops.
- Timing follows DESIGN.md "Measuring" with the rules of opfuse's own harness
  (src/bench/cuda/timing.h, op_runner.cc), so the two columns are measured alike: signed random
  inputs (torch.randn, fixed seed; |x|+0.5 where the case says positive); K rotated input sets
  (K = ceil(2 L2 / rotated bytes) <= 32; weights such as matmul b or attention k/v are one shared
  copy, as opfuse's runner keeps them); an L2 flush (a write of 2x L2) before each sample when the
  K sets stay under 2x L2; a gate before the start event, opened once the call is enqueued (Gate;
  --no-gate: the old fixed spin), so events time device work, not launch latency. Prefill: CUDA events around one call, median of --reps. Decode: R calls over
  the sets captured in one CUDA graph, replay time / R, median of --replays (capture failure is
  recorded and the case timed with per-call events). Host time per call: perf_counter around
  back-to-back calls without sync.
- torch.compile compiles the same Python function (default mode, dynamic=False, fullgraph=True so
  a graph break is an error rather than a silent partial eager run), with torch._dynamo.reset()
  per case so no recompile limit can turn it into eager behind our back.
- Correctness guards the peer numbers: eager vs the float64 reference (computed on the same
  device), compile vs eager and vs float64, relative L2 error against per-dtype bounds (the ones
  tests/jit_cases.h uses); non-finite or all-zero outputs and mutated inputs are flagged.
- A case that fails (unsupported op, OOM, compile error) records its error and the run goes on.
  peer.json is rewritten atomically (temp file + os.replace) after every case, "complete": false
  until the last one, so an interrupted run leaves a valid partial file and never a torn one.

Exit codes: 0 ran (per-case errors are in peer.json), 1 cannot run at all (no torch, no CUDA
device), 2 bad arguments or unreadable/malformed cases.json.
"""
import argparse
import gc
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

SCHEMA = 1
EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

DTYPES = ("bf16", "f16", "f32", "f64", "i32", "i64", "bool")
FLOAT_DTYPES = ("bf16", "f16", "f32", "f64")
INT_DTYPES = ("i32", "i64")
# Relative-L2 bounds per dtype, as tests/jit_cases.h Bound().
# The measuring constants of opfuse's harness (src/bench/harness.h): read from the "harness" block of
# the cases.json being timed (configure_harness), never kept here, so the two harnesses cannot drift.
# The correctness bound of each case is its "bound" (opfuse's ErrorBound).
HARNESS = None
HARNESS_KEYS = ("gate_lead_us", "gate_max_us", "l2_factor", "max_sets")
PHASES = ("decode", "prefill")

# Filled by load_torch(); the op builders read them at call time, so this module imports without torch.
torch = None
F = None


class CasesError(Exception):
    """cases.json is unreadable or breaks the contract (exit 2)."""


class Unsupported(Exception):
    """The peer cannot run this case (recorded per case)."""


# ---------------------------------------------------------------------------------------------
# Contract checks (pure Python)
# ---------------------------------------------------------------------------------------------

def _fail(case_id, msg):
    raise CasesError(f"case {case_id!r}: {msg}")


class CaseView:
    """Typed access to one case's declared tensors for the per-op checks."""

    def __init__(self, case):
        self.id = case["id"]
        self.inputs = case["inputs"]
        self.outputs = case["outputs"]
        self.attrs = case.get("attrs", {})

    def shape(self, name):
        for t in self.inputs + self.outputs:
            if t["name"] == name:
                return list(t["shape"])
        _fail(self.id, f"no tensor named {name!r}")

    def dtype(self, name):
        for t in self.inputs + self.outputs:
            if t["name"] == name:
                return t["dtype"]
        _fail(self.id, f"no tensor named {name!r}")

    def expect_shape(self, name, shape):
        got = self.shape(name)
        if got != list(shape):
            _fail(self.id, f"{name} has shape {got}, expected {list(shape)}")

    def expect_rank(self, name, rank):
        got = self.shape(name)
        if len(got) != rank:
            _fail(self.id, f"{name} has shape {got}, expected rank {rank}")
        return got

    def expect_float(self, *names):
        for n in names:
            if self.dtype(n) not in FLOAT_DTYPES:
                _fail(self.id, f"{n} has dtype {self.dtype(n)}, expected a float dtype")

    def expect_same_dtype(self, name, like):
        if self.dtype(name) != self.dtype(like):
            _fail(self.id, f"{name} has dtype {self.dtype(name)}, expected {self.dtype(like)} (as {like})")

    def number(self, key, required=True, default=None):
        if key not in self.attrs:
            if required:
                _fail(self.id, f"attrs.{key} is required")
            return default
        v = self.attrs[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            _fail(self.id, f"attrs.{key} must be a finite number, got {v!r}")
        return v

    def flag(self, key):
        v = self.attrs.get(key, 0)
        if v not in (0, 1, True, False):
            _fail(self.id, f"attrs.{key} must be 0 or 1, got {v!r}")
        return bool(v)


def _check_rowwise(c, x="x", y="y", y_dtype_like=None):
    r, w = c.expect_rank(x, 2)
    c.expect_float(x)
    c.expect_shape(y, [r, w])
    if y_dtype_like:
        c.expect_same_dtype(y, y_dtype_like)
    return r, w


def _check_unary(c):
    _check_rowwise(c, y_dtype_like="x")


def _check_cast(c):
    r, w = c.expect_rank("x", 2)
    c.expect_shape("y", [r, w])
    to = c.attrs.get("to")
    if to is not None and to != c.dtype("y"):
        _fail(c.id, f"attrs.to is {to!r} but y has dtype {c.dtype('y')}")
    if c.dtype("y") not in FLOAT_DTYPES:
        _fail(c.id, f"cast to {c.dtype('y')} is not in the contract (float targets only)")


def _check_binary(c, bool_out=False):
    r, w = c.expect_rank("a", 2)
    c.expect_float("a")
    c.expect_shape("b", [r, w])
    c.expect_same_dtype("b", "a")
    c.expect_shape("y", [r, w])
    if bool_out:
        if c.dtype("y") != "bool":
            _fail(c.id, f"y has dtype {c.dtype('y')}, expected bool")
    else:
        c.expect_same_dtype("y", "a")


def _check_gather(c):
    v, w = c.expect_rank("table", 2)
    c.expect_float("table")
    (r,) = c.expect_rank("ids", 1)
    if c.dtype("ids") not in INT_DTYPES:
        _fail(c.id, f"ids has dtype {c.dtype('ids')}, expected i32 or i64")
    c.expect_shape("y", [r, w])
    c.expect_same_dtype("y", "table")


def _check_reduce(c):
    r, w = c.expect_rank("x", 2)
    c.expect_float("x")
    c.expect_shape("y", [r, 1])
    if c.dtype("y") not in FLOAT_DTYPES:
        _fail(c.id, f"y has dtype {c.dtype('y')}, expected a float dtype")


def _check_matmul(c):
    m, k = c.expect_rank("a", 2)
    n, k2 = c.expect_rank("b", 2)
    c.expect_float("a")
    c.expect_same_dtype("b", "a")
    if k2 != k:
        _fail(c.id, f"a is {[m, k]} and b is {[n, k2]}: b must be [N, K] with K = {k} (y = a.b^T)")
    c.expect_shape("y", [m, n])
    c.expect_same_dtype("y", "a")
    if c.number("n", required=False, default=n) != n or c.number("k", required=False, default=k) != k:
        _fail(c.id, f"attrs n/k ({c.attrs.get('n')}, {c.attrs.get('k')}) disagree with the shapes (N={n}, K={k})")


def _check_softmax(c):
    _check_rowwise(c, y_dtype_like="x")
    c.number("scale")


def _check_attention(c):
    t, hq, d = c.expect_rank("q", 3)
    s, hkv, d2 = c.expect_rank("k", 3)
    c.expect_float("q")
    c.expect_same_dtype("k", "q")
    c.expect_same_dtype("v", "q")
    c.expect_shape("v", [s, hkv, d2])
    if d2 != d:
        _fail(c.id, f"q head dim {d} != k head dim {d2}")
    if hkv < 1 or hq % hkv != 0:
        _fail(c.id, f"Hq={hq} is not a multiple of Hkv={hkv}")
    if t > s:
        _fail(c.id, f"T={t} queries > S={s} keys")
    c.expect_shape("y", [t, hq, d])
    c.expect_same_dtype("y", "q")
    c.flag("causal")
    c.number("scale")
    for key, val in (("hq", hq), ("hkv", hkv), ("d", d)):
        if c.number(key, required=False, default=val) != val:
            _fail(c.id, f"attrs.{key}={c.attrs[key]} disagrees with the shapes ({val})")


def _check_layernorm(c):
    r, w = _check_rowwise(c, y_dtype_like="x")
    c.expect_shape("w", [w])
    c.expect_shape("b", [w])
    c.expect_same_dtype("w", "x")
    c.expect_same_dtype("b", "x")
    c.number("eps")


def _check_rmsnorm(c):
    r, w = _check_rowwise(c, y_dtype_like="x")
    c.expect_shape("w", [w])
    c.expect_same_dtype("w", "x")
    c.number("eps")


def _check_add_rmsnorm(c):
    r, w = _check_rowwise(c, y_dtype_like="x")
    c.expect_shape("r", [r, w])
    c.expect_shape("s", [r, w])
    c.expect_shape("w", [w])
    for n in ("r", "w", "s"):
        c.expect_same_dtype(n, "x")
    c.number("eps")


def _check_glu(c):
    r, w = c.expect_rank("g", 2)
    c.expect_float("g")
    c.expect_shape("u", [r, w])
    c.expect_same_dtype("u", "g")
    c.expect_shape("y", [r, w])
    c.expect_same_dtype("y", "g")


def _check_rope(c):
    t, h, d = c.expect_rank("x", 3)
    c.expect_float("x")
    if d % 2:
        _fail(c.id, f"head dim D={d} must be even for rotate_half")
    c.expect_shape("cos", [t, 1, d])
    c.expect_shape("sin", [t, 1, d])
    c.expect_float("cos", "sin")
    c.expect_shape("y", [t, h, d])
    c.expect_same_dtype("y", "x")


# ---------------------------------------------------------------------------------------------
# Torch implementations (what a user writes) and float64 references (basic ops, written out)
# ---------------------------------------------------------------------------------------------

class Features:
    """What the installed torch supports, probed once."""

    def __init__(self, gqa_mode="auto"):
        self.rms_norm = hasattr(F, "rms_norm")
        q = torch.zeros(1, 2, 2, 4)
        kv = torch.zeros(1, 1, 2, 4)
        self.sdpa_scale = _accepts(lambda: F.scaled_dot_product_attention(q, q, q, scale=0.5))
        self.sdpa_gqa = _accepts(lambda: F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True))
        self.gqa_mode = gqa_mode

    def describe(self):
        return {"F.rms_norm": self.rms_norm, "sdpa_scale": self.sdpa_scale, "sdpa_enable_gqa": self.sdpa_gqa,
                "gqa_mode": self.gqa_mode}


def _accepts(call):
    try:
        call()
        return True
    except (TypeError, RuntimeError):
        return False


def _attrs(case):
    return case.get("attrs", {})


def _shape_of(case, name):
    return CaseView(case).shape(name)


def _out_dtype(case, i=0):
    return torch_dtype(case["outputs"][i]["dtype"])


def _build_unary(fn_name):
    def build(case, feat, device):
        f = {"exp2": torch.exp2, "log2": torch.log2, "sin": torch.sin, "recip": torch.reciprocal,
             "sqrt": torch.sqrt}[fn_name]

        def fn(x):
            return f(x)
        return fn, f"torch.{f.__name__}"
    return build


def _ref_unary(fn_name):
    def ref(case, x):
        if fn_name == "exp2":
            return [torch.pow(2.0, x)]
        if fn_name == "log2":
            return [torch.log(x) / math.log(2.0)]
        if fn_name == "sin":
            return [torch.sin(x)]
        if fn_name == "recip":
            return [1.0 / x]
        return [torch.sqrt(x)]
    return ref


def _build_cast(case, feat, device):
    to = _out_dtype(case)

    def fn(x):
        return x.to(to)
    return fn, f"x.to({to})"


def _build_binary(op):
    def build(case, feat, device):
        if op == "add":
            def fn(a, b):
                return a + b
            return fn, "a + b"
        if op == "mul":
            def fn(a, b):
                return a * b
            return fn, "a * b"
        if op == "mod":
            def fn(a, b):
                return torch.remainder(a, b)
            return fn, "torch.remainder(a, b)"

        def fn(a, b):
            return a < b
        return fn, "a < b"
    return build


def _ref_binary(op):
    def ref(case, a, b):
        if op == "add":
            return [a + b]
        if op == "mul":
            return [a * b]
        if op == "mod":
            return [a - torch.floor(a / b) * b]
        return [a < b]
    return ref


def _build_gather(case, feat, device):
    def fn(table, ids):
        return F.embedding(ids, table)
    return fn, "F.embedding(ids, table)"


def _ref_gather(case, table, ids):
    return [table[ids.long()]]


def _build_reduce(op):
    def build(case, feat, device):
        in_dt = torch_dtype(CaseView(case).dtype("x"))
        out_dt = _out_dtype(case)
        kw = {} if out_dt == in_dt else {"dtype": out_dt}
        if op == "sum":
            def fn(x):
                return x.sum(dim=-1, keepdim=True, **kw)
            return fn, "x.sum(-1, keepdim=True" + (f", dtype={out_dt})" if kw else ")")

        def fn(x):
            y = x.amax(dim=-1, keepdim=True)
            return y.to(out_dt) if kw else y
        return fn, "x.amax(-1, keepdim=True)" + (f".to({out_dt})" if kw else "")
    return build


def _ref_reduce(op):
    def ref(case, x):
        if op == "sum":
            return [x.sum(dim=-1, keepdim=True)]
        return [x.max(dim=-1, keepdim=True).values]
    return ref


def _build_matmul(case, feat, device):
    def fn(a, b):
        return F.linear(a, b)
    return fn, "F.linear(a, b)"


def _ref_matmul(case, a, b):
    return [a @ b.t()]


def _build_softmax(case, feat, device):
    scale = float(_attrs(case)["scale"])
    if scale == 1.0:
        def fn(x):
            return torch.softmax(x, dim=-1)
        return fn, "torch.softmax(x, -1)"

    def fn(x):
        return torch.softmax(x * scale, dim=-1)
    return fn, "torch.softmax(x * scale, -1)"


def _ref_softmax(case, x):
    z = x * float(_attrs(case)["scale"])
    e = torch.exp(z - z.max(dim=-1, keepdim=True).values)
    return [e / e.sum(dim=-1, keepdim=True)]


def _build_softmax_plain(case, feat, device):
    def fn(x):
        return torch.softmax(x, dim=-1)
    return fn, "torch.softmax(x, -1)"


def _ref_softmax_plain(case, x):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return [e / e.sum(dim=-1, keepdim=True)]


def _check_softmax_causal(c):
    r, w = _check_rowwise(c, y_dtype_like="x")
    c.number("scale")
    if r > w:
        _fail(c.id, f"causal softmax of {r} rows over {w} keys leaves rows fully masked")


def _causal_masked(x, scale):
    """Scores of R queries over W keys aligned to the end: query i sees keys 0 .. i + W - R (the
    mask is built inside the function, so torch.compile fuses it rather than reading a tensor)."""
    r, w = x.shape[-2], x.shape[-1]
    rows = torch.arange(r, device=x.device).unsqueeze(-1)
    cols = torch.arange(w, device=x.device).unsqueeze(0)
    return (x * scale).masked_fill(cols > rows + (w - r), float("-inf"))


def _build_softmax_causal(case, feat, device):
    scale = float(_attrs(case)["scale"])

    def fn(x):
        return torch.softmax(_causal_masked(x, scale), dim=-1)
    return fn, "torch.softmax((x * scale).masked_fill(causal, -inf), -1)"


def _ref_softmax_causal(case, x):
    z = _causal_masked(x, float(_attrs(case)["scale"]))
    e = torch.exp(z - z.max(dim=-1, keepdim=True).values)
    return [e / e.sum(dim=-1, keepdim=True)]


def _build_logsumexp(case, feat, device):
    def fn(x):
        return torch.logsumexp(x, dim=-1, keepdim=True)
    return fn, "torch.logsumexp(x, -1, keepdim=True)"


def _ref_logsumexp(case, x):
    return [torch.logsumexp(x, dim=-1, keepdim=True)]


def _build_gelu(case, feat, device):
    def fn(x):
        return F.gelu(x)
    return fn, "F.gelu(x)"


def _gelu64(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _ref_gelu(case, x):
    return [_gelu64(x)]


def attention_mask_needed(t, s, causal):
    """'none', 'is_causal' or 'explicit': how SDPA expresses the contract's causal rule
    (query i, the last T of S positions, sees keys j < i + S - T + 1)."""
    if not causal or t == 1:
        return "none"          # the single query is the last position: it sees every key
    if t == s:
        return "is_causal"     # SDPA's top-left causal rule is the contract's when T == S
    return "explicit"          # SDPA's is_causal is top-left aligned; the contract is bottom-right


def _build_attention(case, feat, device):
    c = CaseView(case)
    t, hq, d = c.shape("q")
    s, hkv, _ = c.shape("k")
    group = hq // hkv
    causal = c.flag("causal")
    scale = float(c.attrs["scale"])
    mode = attention_mask_needed(t, s, causal)
    mask = None
    if mode == "explicit":
        i = torch.arange(t, device=device).unsqueeze(1)
        j = torch.arange(s, device=device).unsqueeze(0)
        mask = j < i + (s - t + 1)            # True = attend
    if group == 1:
        gqa = "none"
    elif feat.gqa_mode == "native" or (feat.gqa_mode == "auto" and feat.sdpa_gqa):
        # Measured on an H200 with torch 2.11 (T=1..512, S=512..4096, 32/4 heads): enable_gqa was
        # 1.5-12x faster than repeat_interleave, with an explicit mask too; so auto prefers it.
        if not feat.sdpa_gqa:
            raise Unsupported("--gqa native: this torch's SDPA has no enable_gqa")
        gqa = "enable_gqa"
    else:
        gqa = "repeat_interleave"
    kw = {}
    if gqa == "enable_gqa":
        kw["enable_gqa"] = True
    if mode == "is_causal":
        kw["is_causal"] = True
    if mask is not None:
        kw["attn_mask"] = mask
    prescale = not feat.sdpa_scale
    if not prescale:
        kw["scale"] = scale
    default_scale = 1.0 / math.sqrt(d)

    def fn(q, k, v):
        # [T, H, D] -> [1, H, T, D]: SDPA's fused kernels need 4-D inputs.
        qh = q.unsqueeze(0).transpose(1, 2)
        kh = k.unsqueeze(0).transpose(1, 2)
        vh = v.unsqueeze(0).transpose(1, 2)
        if gqa == "repeat_interleave":
            kh = kh.repeat_interleave(group, dim=1)
            vh = vh.repeat_interleave(group, dim=1)
        if prescale:
            qh = qh * (scale / default_scale)
        y = F.scaled_dot_product_attention(qh, kh, vh, **kw)
        return y.transpose(1, 2).reshape(t, hq, d)
    desc = f"F.scaled_dot_product_attention (4-D; gqa={gqa}; mask={mode}{'; q pre-scaled' if prescale else ''})"
    return fn, desc


def _ref_attention(case, q, k, v):
    c = CaseView(case)
    t, hq, d = q.shape
    s, hkv, _ = k.shape
    group = hq // hkv
    scale = float(c.attrs["scale"])
    causal = c.flag("causal")
    y = torch.empty_like(q)
    i = torch.arange(t, device=q.device).unsqueeze(1)
    j = torch.arange(s, device=q.device).unsqueeze(0)
    allowed = (j < i + (s - t + 1)) if causal else torch.ones(t, s, dtype=torch.bool, device=q.device)
    chunk = max(1, (1 << 26) // max(s, 1))   # bound the f64 score matrix to ~512 MB
    for h in range(hq):
        kk = k[:, h // group, :]
        vv = v[:, h // group, :]
        for r0 in range(0, t, chunk):
            r1 = min(t, r0 + chunk)
            sc = (q[r0:r1, h, :] @ kk.t()) * scale
            sc = sc.masked_fill(~allowed[r0:r1], float("-inf"))
            p = torch.exp(sc - sc.max(dim=-1, keepdim=True).values)
            p = p / p.sum(dim=-1, keepdim=True)
            y[r0:r1, h, :] = p @ vv
    return [y]


def _build_layernorm(case, feat, device):
    eps = float(_attrs(case)["eps"])
    w = _shape_of(case, "x")[-1]

    def fn(x, weight, bias):
        return F.layer_norm(x, (w,), weight, bias, eps)
    return fn, "F.layer_norm"


def _ref_layernorm(case, x, w, b):
    eps = float(_attrs(case)["eps"])
    mu = x.mean(dim=-1, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
    return [(x - mu) / torch.sqrt(var + eps) * w + b]


def _rmsnorm_fn(feat, width, eps):
    if feat.rms_norm:
        def norm(x, weight):
            return F.rms_norm(x, (width,), weight, eps)
        return norm, "F.rms_norm"

    def norm(x, weight):  # the Hugging Face LlamaRMSNorm formula
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return weight * xf.to(x.dtype)
    return norm, "manual x*rsqrt(mean(x^2)+eps)*w (HF LlamaRMSNorm: f32 math, cast, *w)"


def _build_rmsnorm(case, feat, device):
    norm, desc = _rmsnorm_fn(feat, _shape_of(case, "x")[-1], float(_attrs(case)["eps"]))

    def fn(x, w):
        return norm(x, w)
    return fn, desc


def _rms64(x, w, eps):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def _ref_rmsnorm(case, x, w):
    return [_rms64(x, w, float(_attrs(case)["eps"]))]


def _build_add_rmsnorm(case, feat, device):
    norm, desc = _rmsnorm_fn(feat, _shape_of(case, "x")[-1], float(_attrs(case)["eps"]))

    def fn(x, r, w):
        s = x + r
        return norm(s, w), s
    return fn, "s = x + r; " + desc + "(s)"


def _ref_add_rmsnorm(case, x, r, w):
    s = x + r
    return [_rms64(s, w, float(_attrs(case)["eps"])), s]


def _build_swiglu(case, feat, device):
    def fn(g, u):
        return F.silu(g) * u
    return fn, "F.silu(g) * u"


def _ref_swiglu(case, g, u):
    return [g / (1.0 + torch.exp(-g)) * u]


def _build_geglu(case, feat, device):
    def fn(g, u):
        return F.gelu(g) * u
    return fn, "F.gelu(g) * u"


def _ref_geglu(case, g, u):
    return [_gelu64(g) * u]


def _build_rope(case, feat, device):
    c = CaseView(case)
    half = c.shape("x")[-1] // 2
    out_dt = torch_dtype(c.dtype("y"))
    mixed = c.dtype("cos") != c.dtype("x") or c.dtype("sin") != c.dtype("x")

    def rotate_half(x):
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    if mixed:   # e.g. f32 cos/sin tables with bf16 activations: promote, then back to y's dtype
        def fn(x, cos, sin):
            return (x * cos + rotate_half(x) * sin).to(out_dt)
        return fn, "(x*cos + rotate_half(x)*sin).to(y dtype) (torch.cat)"

    def fn(x, cos, sin):
        return x * cos + rotate_half(x) * sin
    return fn, "x*cos + rotate_half(x)*sin (torch.cat)"


def _ref_rope(case, x, cos, sin):
    half = x.shape[-1] // 2
    rot = torch.empty_like(x)
    rot[..., :half] = -x[..., half:]
    rot[..., half:] = x[..., :half]
    return [x * cos + rot * sin]


class OpSpec:
    """inputs/outputs: names in contract order; shared: the weight-like inputs that opfuse's runner
    (src/bench/op_suite.cc, TensorSpec::rotate = false) keeps as one copy across the rotated sets."""

    def __init__(self, inputs, outputs, check, build, ref, shared=()):
        self.inputs, self.outputs, self.check, self.build, self.ref = inputs, outputs, check, build, ref
        self.shared = shared


OPS = {}
for _n in ("exp2", "log2", "sin", "recip", "sqrt"):
    OPS[_n] = OpSpec(("x",), ("y",), _check_unary, _build_unary(_n), _ref_unary(_n))
OPS["cast"] = OpSpec(("x",), ("y",), _check_cast, _build_cast, lambda case, x: [x])
for _n in ("add", "mul", "mod", "less_than"):
    OPS[_n] = OpSpec(("a", "b"), ("y",), (lambda n: lambda c: _check_binary(c, bool_out=n == "less_than"))(_n),
                     _build_binary(_n), _ref_binary(_n))
OPS["gather"] = OpSpec(("table", "ids"), ("y",), _check_gather, _build_gather, _ref_gather, shared=("table",))
for _n in ("sum", "max"):
    OPS[_n] = OpSpec(("x",), ("y",), _check_reduce, _build_reduce(_n), _ref_reduce(_n))
OPS["matmul"] = OpSpec(("a", "b"), ("y",), _check_matmul, _build_matmul, _ref_matmul, shared=("b",))
OPS["softmax"] = OpSpec(("x",), ("y",), _check_softmax, _build_softmax, _ref_softmax)
OPS["softmax_plain"] = OpSpec(("x",), ("y",), _check_unary, _build_softmax_plain, _ref_softmax_plain)
OPS["softmax_causal"] = OpSpec(("x",), ("y",), _check_softmax_causal, _build_softmax_causal, _ref_softmax_causal)
OPS["logsumexp"] = OpSpec(("x",), ("y",), _check_reduce, _build_logsumexp, _ref_logsumexp)
OPS["gelu"] = OpSpec(("x",), ("y",), _check_unary, _build_gelu, _ref_gelu)
OPS["attention"] = OpSpec(("q", "k", "v"), ("y",), _check_attention, _build_attention, _ref_attention,
                          shared=("k", "v"))
OPS["layernorm"] = OpSpec(("x", "w", "b"), ("y",), _check_layernorm, _build_layernorm, _ref_layernorm,
                          shared=("w", "b"))
OPS["rmsnorm"] = OpSpec(("x", "w"), ("y",), _check_rmsnorm, _build_rmsnorm, _ref_rmsnorm, shared=("w",))
OPS["add_rmsnorm"] = OpSpec(("x", "r", "w"), ("y", "s"), _check_add_rmsnorm, _build_add_rmsnorm, _ref_add_rmsnorm,
                            shared=("w",))
OPS["swiglu"] = OpSpec(("g", "u"), ("y",), _check_glu, _build_swiglu, _ref_swiglu)
OPS["geglu"] = OpSpec(("g", "u"), ("y",), _check_glu, _build_geglu, _ref_geglu)
OPS["rope"] = OpSpec(("x", "cos", "sin"), ("y",), _check_rope, _build_rope, _ref_rope)


# ---------------------------------------------------------------------------------------------
# Loading and validating cases.json
# ---------------------------------------------------------------------------------------------

def _check_tensor_list(case_id, key, lst):
    if not isinstance(lst, list) or not lst:
        _fail(case_id, f"{key} must be a non-empty list")
    names = set()
    for i, t in enumerate(lst):
        where = f"{key}[{i}]"
        if not isinstance(t, dict):
            _fail(case_id, f"{where} must be an object")
        name = t.get("name")
        if not isinstance(name, str) or not name:
            _fail(case_id, f"{where}.name must be a non-empty string")
        if name in names:
            _fail(case_id, f"{where}: duplicate tensor name {name!r}")
        names.add(name)
        if t.get("dtype") not in DTYPES:
            _fail(case_id, f"{where} ({name}).dtype {t.get('dtype')!r} is not one of {list(DTYPES)}")
        shape = t.get("shape")
        if (not isinstance(shape, list)
                or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape)):
            _fail(case_id, f"{where} ({name}).shape must be a list of positive integers, got {shape!r}")


def validate_case(case, index):
    """Checks one case against the contract. Returns None, or the reason the peer cannot run it
    (an op outside the table). Raises CasesError when the case is malformed."""
    if not isinstance(case, dict):
        raise CasesError(f"cases[{index}] must be an object")
    cid = case.get("id")
    if not isinstance(cid, str) or not cid:
        raise CasesError(f"cases[{index}].id must be a non-empty string")
    for key in ("op", "dtype", "phase"):
        if not isinstance(case.get(key), str):
            _fail(cid, f"{key} must be a string")
    if case["phase"] not in PHASES:
        _fail(cid, f"phase {case['phase']!r} is not one of {list(PHASES)}")
    if case["dtype"] not in DTYPES:
        _fail(cid, f"dtype {case['dtype']!r} is not one of {list(DTYPES)}")
    for key in ("rows", "width", "bytes", "flops"):
        if key in case and (not isinstance(case[key], int) or isinstance(case[key], bool) or case[key] < 0):
            _fail(cid, f"{key} must be a non-negative integer, got {case[key]!r}")
    if "attrs" in case and not isinstance(case["attrs"], dict):
        _fail(cid, "attrs must be an object")
    b = case.get("bound")
    if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) or b < 0:
        _fail(cid, f"bound must be a non-negative number (opfuse's rel_err bound), got {b!r}")
    _check_tensor_list(cid, "inputs", case.get("inputs"))
    _check_tensor_list(cid, "outputs", case.get("outputs"))
    spec = OPS.get(case["op"])
    if spec is None:
        return f"unsupported op {case['op']!r} (the peer implements: {', '.join(sorted(OPS))})"
    in_names = tuple(t["name"] for t in case["inputs"])
    out_names = tuple(t["name"] for t in case["outputs"])
    if in_names != spec.inputs:
        _fail(cid, f"op {case['op']} takes inputs {list(spec.inputs)} in that order, got {list(in_names)}")
    if out_names != spec.outputs:
        _fail(cid, f"op {case['op']} has outputs {list(spec.outputs)}, got {list(out_names)}")
    spec.check(CaseView(case))
    return None


def configure_harness(block, where):
    """Takes opfuse's harness constants from a cases.json / problems.json "harness" block. Raises CasesError."""
    global HARNESS
    if not isinstance(block, dict):
        raise CasesError(f"{where}: no 'harness' block (written by an older opfuse: run it again)")
    for k in HARNESS_KEYS:
        v = block.get(k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise CasesError(f"{where}: harness.{k} must be a positive number, got {v!r}")
    HARNESS = {k: block[k] for k in HARNESS_KEYS}


def harness(key):
    if HARNESS is None:
        raise RuntimeError("bench_peer: the harness constants were not loaded (configure_harness)")
    return HARNESS[key]


def load_cases(path):
    """Returns (cases, unsupported: {id: reason}) and takes the harness constants (configure_harness).
    Raises CasesError."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise CasesError(f"cannot read {path}: {e.strerror or e}")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CasesError(f"{path} is not valid JSON: {e}")
    if not isinstance(doc, dict):
        raise CasesError(f"{path}: the top level must be an object")
    if doc.get("schema") != SCHEMA:
        raise CasesError(f"{path}: schema is {doc.get('schema')!r}, this script reads schema {SCHEMA}")
    cases = doc.get("cases")
    if not isinstance(cases, list):
        raise CasesError(f"{path}: 'cases' must be a list")
    configure_harness(doc.get("harness"), path)
    seen = set()
    unsupported = {}
    for i, case in enumerate(cases):
        try:
            reason = validate_case(case, i)
        except CasesError as e:
            raise CasesError(f"{path}: {e}")
        if case["id"] in seen:
            raise CasesError(f"{path}: duplicate case id {case['id']!r}")
        seen.add(case["id"])
        if reason:
            unsupported[case["id"]] = reason
    return cases, unsupported


# ---------------------------------------------------------------------------------------------
# Torch helpers: dtypes, inputs, comparison
# ---------------------------------------------------------------------------------------------

def load_torch():
    global torch, F
    if torch is None:
        import torch as _torch
        import torch.nn.functional as _F
        torch, F = _torch, _F
    return torch


def torch_dtype(name):
    return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "f64": torch.float64,
            "i32": torch.int32, "i64": torch.int64, "bool": torch.bool}[name]


def is_shared(case, t):
    """Whether input t is one copy shared by all rotated sets: the case's own "rotate" field when
    it has one, else the op table's weights (as opfuse's runner does)."""
    if "rotate" in t:
        return not t["rotate"]
    spec = OPS.get(case["op"])
    return bool(spec) and t["name"] in spec.shared


def make_inputs(case, device, gen, share_from=None):
    """One input set: signed randn; |x|+0.5 where attrs say positive; ids uniform in [0, vocab).
    With share_from (an earlier set), the shared inputs are that set's tensors, not new ones."""
    attrs = case.get("attrs", {})
    vocab = None
    if case["op"] == "gather":
        vocab = case["inputs"][0]["shape"][0]
    out = []
    for i, t in enumerate(case["inputs"]):
        if share_from is not None and is_shared(case, t):
            out.append(share_from[i])
            continue
        dt = torch_dtype(t["dtype"])
        if t["dtype"] in INT_DTYPES:
            hi = vocab if (case["op"] == "gather" and t["name"] == "ids") else 1000
            x = torch.randint(0, hi, t["shape"], generator=gen, device=device, dtype=torch.int64).to(dt)
        elif t["dtype"] == "bool":
            x = torch.randint(0, 2, t["shape"], generator=gen, device=device) > 0
        else:
            x = torch.randn(t["shape"], generator=gen, device=device, dtype=torch.float32)
            if attrs.get("positive") or (t["name"] == "b" and attrs.get("positive_b")):
                x = x.abs_().add_(0.5)
            x = x.to(dt)
        out.append(x)
    return out


DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i32": 4, "i64": 8, "bool": 1}


def tensor_bytes(t):
    n = 1
    for d in t["shape"]:
        n *= d
    return n * DTYPE_BYTES[t["dtype"]]


def set_bytes(case):
    """Bytes of all of a case's input tensors (an inputs-like list)."""
    return sum(tensor_bytes(t) for t in case["inputs"])


def plan_sets(case, l2_bytes, budget_bytes, max_sets):
    """(K, flush), opfuse's rule (src/bench/cuda/op_runner.cc AllocateCase): rotated bytes = the
    non-shared inputs + the outputs; K = ceil(2 L2 / rotated) within [1, max_sets] and the memory
    budget (which the shared inputs use first); flush L2 before each sample when K sets together
    stay under 2 L2 (2: harness l2_factor). Raises Unsupported when not even one set fits."""
    rotated = max(1, sum(tensor_bytes(t) for t in case["inputs"] if not is_shared(case, t))
                  + sum(tensor_bytes(t) for t in case["outputs"]))
    shared = sum(tensor_bytes(t) for t in case["inputs"] if is_shared(case, t))
    target = harness("l2_factor") * l2_bytes
    k = min(max(1, -(-target // rotated)), max(1, max_sets)) if l2_bytes > 0 else min(2, max(1, max_sets))
    k = min(k, (budget_bytes - shared) // rotated)
    if k < 1:
        raise Unsupported(f"needs {(rotated + shared) / (1 << 30):.2f} GiB for one input/output set; "
                          f"the budget is {budget_bytes / (1 << 30):.2f} GiB")
    return int(k), bool(l2_bytes > 0 and k * rotated < target)


def rel_err(out, ref):
    """Relative L2 error (as tests/jit_cases.h RelErr); for bool outputs the mismatch fraction.
    Where the reference itself is not finite (recip of an input that is exactly 0), the output must
    be the same inf/nan (else the error is nan); the norm runs over the finite elements."""
    if out.dtype == torch.bool or ref.dtype == torch.bool:
        return float((out.to(ref.device) != ref).float().mean().item())
    o = out.to(device=ref.device, dtype=torch.float64)
    r = ref.to(torch.float64)
    finite = torch.isfinite(r)
    if not bool(finite.all()):
        ro, rr = o[~finite], r[~finite]
        if not bool(((ro == rr) | (torch.isnan(ro) & torch.isnan(rr))).all()):
            return float("nan")
        o, r = o[finite], r[finite]
    num = torch.linalg.vector_norm(o - r).item()
    den = torch.linalg.vector_norm(r).item()
    return num / max(den, 1e-30)


def case_bound(case):
    """The rel_err bound opfuse checks the case against (cases.json "bound", its ErrorBound)."""
    return float(case["bound"])


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def check_outputs(case, outs):
    """Output count, shapes and dtypes as declared; raises RuntimeError naming the mismatch."""
    decl = case["outputs"]
    if len(outs) != len(decl):
        raise RuntimeError(f"torch function returned {len(outs)} outputs, the case declares {len(decl)}")
    for o, d in zip(outs, decl):
        if list(o.shape) != d["shape"] or o.dtype != torch_dtype(d["dtype"]):
            raise RuntimeError(f"output {d['name']}: torch gives {list(o.shape)} {o.dtype}, "
                               f"the case declares {d['shape']} {d['dtype']}")


def output_flags(case, outs, tag, ref=None):
    """Non-finite values where the reference is finite (or there is no reference), all-zero outputs."""
    flags = []
    for i, (o, d) in enumerate(zip(outs, case["outputs"])):
        if o.dtype == torch.bool:
            continue
        bad = ~torch.isfinite(o)
        if ref is not None:
            bad &= torch.isfinite(ref[i]).to(bad.device)
        if bool(bad.any()):
            flags.append(f"{tag}: output {d['name']} has {int(bad.sum())} non-finite value(s) where the "
                         f"reference is finite")
        elif o.numel() > 1 and not bool((o != 0).any()):
            flags.append(f"{tag}: output {d['name']} is all zero")
    return flags


def short_error(e, limit=600):
    msg = " ".join(f"{type(e).__name__}: {e}".split())
    if "out of memory" in msg.lower():
        # torch's OOM text runs to a paragraph of advice; keep what was asked for and what was free.
        asked = re.search(r"Tried to allocate \S+ [KMGT]?i?B", msg)
        free = re.search(r"GPU \d+ has a total capacity of \S+ \S+ of which \S+ \S+ is free", msg)
        msg = "out of memory: " + ("; ".join(m.group(0) for m in (asked, free) if m) or msg[:200])
    return msg if len(msg) <= limit else msg[:limit] + " ..."


# ---------------------------------------------------------------------------------------------
# Timing (the rules of src/bench/cuda/timing.h, so both sides measure alike)
# ---------------------------------------------------------------------------------------------

# The shortest spin before a timed sample under --no-gate (the protocol before the gate): long
# enough that the host has always finished enqueuing the call when the spin ends.
SPIN_FLOOR_US = 100.0

# The gate before each timed sample, opfuse's LaunchGate (src/bench/cuda/bench_kernels.cu, timing.h):
# one thread writes its ticket to `running`, then waits until the host raises `release` to it (or
# max_ns of %globaltimer pass: it writes 1 to `timed_out`). All three are in mapped host memory. PTX,
# so the driver compiles it for whatever GPU this is (sm_70 and later).
GATE_PTX = r"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry opfuse_gate(.param .u64 release_p, .param .u64 running_p, .param .u64 ticket_p,
                            .param .u64 max_ns_p, .param .u64 timed_out_p)
{
    .reg .pred %p<3>;
    .reg .b32 %r<2>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [release_p];
    ld.param.u64 %rd2, [running_p];
    ld.param.u64 %rd3, [ticket_p];
    ld.param.u64 %rd4, [max_ns_p];
    ld.param.u64 %rd5, [timed_out_p];
    st.volatile.global.u64 [%rd2], %rd3;
    membar.sys;
    mov.u64 %rd6, %globaltimer;
WAIT:
    ld.volatile.global.u64 %rd7, [%rd1];
    setp.ge.u64 %p1, %rd7, %rd3;
    @%p1 bra DONE;
    mov.u64 %rd8, %globaltimer;
    sub.u64 %rd9, %rd8, %rd6;
    setp.gt.u64 %p2, %rd9, %rd4;
    @%p2 bra GAVE_UP;
    nanosleep.u32 100;
    bra.uni WAIT;
GAVE_UP:
    mov.u32 %r1, 1;
    st.volatile.global.u32 [%rd5], %r1;
    membar.sys;
DONE:
    ret;
}
"""


_CUDA = None


def cuda_driver():
    """libcuda.so.1 through ctypes (loaded once), with the argument types of the entry points this
    script calls: the gate's mapped host flags, PTX kernels (PtxKernel), the L2 persisting reset."""
    global _CUDA
    if _CUDA is None:
        import ctypes
        lib = ctypes.CDLL("libcuda.so.1")
        P, U64 = ctypes.c_void_p, ctypes.c_uint64
        lib.cuMemHostAlloc.argtypes = [ctypes.POINTER(P), ctypes.c_size_t, ctypes.c_uint]
        lib.cuMemHostGetDevicePointer_v2.argtypes = [ctypes.POINTER(U64), P, ctypes.c_uint]
        lib.cuModuleLoadData.argtypes = [ctypes.POINTER(P), ctypes.c_char_p]
        lib.cuModuleGetFunction.argtypes = [ctypes.POINTER(P), P, ctypes.c_char_p]
        lib.cuLaunchKernel.argtypes = [P] + [ctypes.c_uint] * 7 + [P, ctypes.POINTER(P), P]
        lib.cuCtxResetPersistingL2Cache.argtypes = []
        _CUDA = lib
    return _CUDA


class PtxKernel:
    """Kernel `name` of a PTX text, loaded through the driver (so it compiles for whatever GPU this is);
    launch() passes 64-bit integer arguments. Errors name `what` and the failing call."""

    def __init__(self, ptx, name, what):
        import ctypes
        import torch
        # The driver API needs a current context: the one torch's runtime makes current on its first
        # CUDA call (a caller may build this before any tensor is on the GPU: CUresult 201 otherwise).
        torch.empty(1, device="cuda")
        self.ct, self.lib, self.what = ctypes, cuda_driver(), what
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        self._check(self.lib.cuModuleLoadData(ctypes.byref(mod), ptx.encode()), "cuModuleLoadData")
        self._check(self.lib.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), "cuModuleGetFunction")
        self.fn = fn

    def _check(self, rc, call):
        if rc != 0:
            raise RuntimeError(f"{self.what}: {call} failed (CUresult {rc})")

    def launch(self, grid, block, stream, args):
        """One launch of grid x block threads on `stream` (a cudaStream_t as int)."""
        ct = self.ct
        vals = [ct.c_uint64(a) for a in args]
        params = (ct.c_void_p * len(vals))(*[ct.cast(ct.pointer(v), ct.c_void_p) for v in vals])
        self._check(self.lib.cuLaunchKernel(self.fn, grid, 1, 1, block, 1, 1, 0, ct.c_void_p(stream), params, None),
                    "cuLaunchKernel")


class Gate:
    """Holds the current stream before a timed sample until the host opens it (see GATE_PTX). The
    host enqueues gate, start event, the call and the end event, waits until the GPU is at the gate,
    harness gate_lead_us more, and opens it: every call — torch.compile's (~45 µs of host work) and opfuse's
    (~15) alike — has been queued the same short time when its start event fires. With a fixed spin
    instead, a call enqueued long before the spin ended measured 0.3-0.5 µs slower on an H200
    (dev/kernel_ab/peer_ab.py --delay-us; removed, see git history), which favoured slow host paths."""

    def __init__(self):
        import ctypes
        lib = cuda_driver()
        P, U64 = ctypes.c_void_p, ctypes.c_uint64

        def check(rc, what):
            if rc != 0:
                raise RuntimeError(f"gate: {what} failed (CUresult {rc})")
        host = P()
        check(lib.cuMemHostAlloc(ctypes.byref(host), 64, 0x02), "cuMemHostAlloc(DEVICEMAP)")  # freed at exit
        dev = U64()
        check(lib.cuMemHostGetDevicePointer_v2(ctypes.byref(dev), host, 0), "cuMemHostGetDevicePointer")
        self.release = U64.from_address(host.value)
        self.running = U64.from_address(host.value + 8)
        self.timed_out = ctypes.c_uint32.from_address(host.value + 16)
        self.release.value = self.running.value = self.timed_out.value = 0
        self.dev = dev.value
        self.kernel = PtxKernel(GATE_PTX, "opfuse_gate", "gate")
        self.ticket = 0

    def enqueue(self, stream):
        """Queues the next gate on `stream` (a cudaStream_t as int); returns its ticket."""
        self.ticket += 1
        self.kernel.launch(1, 1, stream, [self.dev, self.dev + 8, self.ticket, int(harness("gate_max_us") * 1000),
                                          self.dev + 16])
        return self.ticket

    def open(self, ticket, wait=True):
        """Opens gate `ticket`: first (wait=True) until the GPU is at it, then harness gate_lead_us more."""
        if wait:
            t_end = time.perf_counter() + 1.0
            while self.running.value < ticket:
                if self.timed_out.value or time.perf_counter() > t_end:
                    self.release.value = ticket
                    raise RuntimeError("gate: the GPU did not reach the gate within 1 s")
            t_end = time.perf_counter() + harness("gate_lead_us") * 1e-6
            while time.perf_counter() < t_end:
                pass
        self.release.value = ticket

    def check(self):
        if self.timed_out.value:
            self.timed_out.value = 0  # one timed-out sample fails its case, not every case after it
            raise RuntimeError("gate timed out: the host opened it more than 2 s late — the call, or a tool around the "
                               "process (compute-sanitizer serialises launches), waited for the stream the gate holds")


# L2Tags' demote kernel: every 128-byte line of [p, p + 128 * lines) back to L2::evict_normal priority
# (applypriority: sm_80 and later; a line not in L2 is left alone).
DEMOTE_PTX = r"""
.version 7.4
.target sm_80
.address_size 64
.visible .entry opfuse_l2_demote(.param .u64 p, .param .u64 lines)
{
    .reg .pred %p<3>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [p];
    ld.param.u64 %rd2, [lines];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mul.wide.u32 %rd3, %r1, %r2;
    cvt.u64.u32 %rd4, %r3;
    add.s64 %rd5, %rd3, %rd4;
    mov.u32 %r4, %nctaid.x;
    mul.wide.u32 %rd6, %r4, %r2;
LOOP:
    setp.ge.u64 %p1, %rd5, %rd2;
    @%p1 bra DONE;
    shl.b64 %rd7, %rd5, 7;
    add.s64 %rd7, %rd1, %rd7;
    applypriority.global.L2::evict_normal [%rd7], 128;
    add.s64 %rd5, %rd5, %rd6;
    bra.uni LOOP;
DONE:
    ret;
}
"""


class L2Tags:
    """Undoes L2::evict_last tags before each sample. torch.compile's Triton reduction kernels load their
    input with eviction_policy='evict_last' (for their second pass over the row); neither a memset flush
    nor a case bigger than L2 streaming through displaces such lines, so call i + 1 found part of call
    i's input still in L2 — for whatever read it next, torch.compile's kernel or opfuse's in this
    process: ~1.6 µs of a 134 MB rms norm on an H200 (dev/kernel_ab/state_probe.sh,
    tags_ab.sh; removed, see git history). Modes:
      demote  (default) a kernel on the stream, before the gate, puts every line of the case's tensors
              (all input sets) back to evict_normal priority: the next sample's inputs are as cold as
              for a kernel that never tags, and nothing else changes;
      reset   cuCtxResetPersistingL2Cache with the stream idle (every tagged line in L2; its host time
              leaves the GPU idle longer before the sample, which read ~0.1-0.2 µs slower);
      keep    nothing (the rule before demote)."""

    def __init__(self, mode):
        self.mode = mode
        self.lib = cuda_driver()
        self.kernel = PtxKernel(DEMOTE_PTX, "opfuse_l2_demote", "l2 tags: demote") if mode == "demote" else None
        self._spans = (None, [])  # (the sets list, its spans): one case's sets at a time

    def spans(self, sets):
        """(first 128-byte line, lines) of every distinct CUDA tensor in `sets`, cached for the last list."""
        if self._spans[0] is not sets:
            seen, out = set(), []
            for st in sets:
                for t in st:
                    if not isinstance(t, torch.Tensor) or not t.is_cuda or t.numel() == 0:
                        continue
                    lo = t.data_ptr() & ~127
                    hi = t.data_ptr() + t.numel() * t.element_size()
                    if (lo, hi) not in seen:
                        seen.add((lo, hi))
                        out.append((lo, (hi - lo + 127) // 128))
            self._spans = (sets, out)
        return self._spans[1]

    def clear(self, stream, sets):
        if self.mode == "reset":
            stream.synchronize()
            rc = self.lib.cuCtxResetPersistingL2Cache()
            if rc != 0:
                raise RuntimeError(f"cuCtxResetPersistingL2Cache failed (CUresult {rc})")
        elif self.mode == "demote":
            for lo, lines in self.spans(sets):
                self.kernel.launch(max(1, min((lines + 255) // 256, 1024)), 256, stream.cuda_stream, [lo, lines])


class Timer:
    """One sample = [L2 tags undone (L2Tags), L2 flush, finished] + gate + start event + the call (or one graph replay of R
    calls) + end event, the gate opened (Gate) once the call and the end event are enqueued and the
    GPU waits at it: the start event never waits on the host (events time device work, not launch
    latency), and every call is queued the same short time when it starts, whatever its host cost.
    With --no-gate, the protocol before the gate: a spin (torch.cuda._sleep, calibrated to µs at
    start) of 1.5 x the measured host time per call + 5 µs, at least SPIN_FLOOR_US (at most 2000),
    before an event-timed call, SPIN_FLOOR_US before a graph replay."""

    def __init__(self, args, device, l2_bytes):
        self.args = args
        self.device = device
        self.cuda = device.type == "cuda"
        self.l2 = l2_bytes
        self.flush_buf = None
        self.cycles_per_us = None
        self.gate = None
        self.l2_tags = None
        if self.cuda:
            mode = getattr(args, "l2_tags", "demote")
            if mode != "keep":
                self.l2_tags = L2Tags(mode)
            self.flush_buf = torch.empty(max(int(harness("l2_factor") * l2_bytes), 1 << 20), dtype=torch.uint8,
                                         device=device)
            self.cycles_per_us = self._calibrate_spin()
            if not getattr(args, "no_gate", False):
                self.gate = Gate()
        self._flushes = 0

    def _sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def _calibrate_spin(self):
        if not hasattr(torch.cuda, "_sleep"):
            return None
        cycles = 1 << 21
        torch.cuda._sleep(cycles)
        self._sync()
        rates = []
        for _ in range(3):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            torch.cuda._sleep(cycles)
            e.record()
            self._sync()
            rates.append(cycles / (s.elapsed_time(e) * 1000.0))
        return max(rates)   # the fastest clock seen: a spin is then at least as long as asked

    def spin_note(self):
        if not self.cuda:
            return "no spin (cpu)"
        if self.gate:
            return (f"a gate kernel (PTX, mapped host flags) before the start event, opened {harness('gate_lead_us'):g} us after "
                    f"the GPU waits at it with the call already enqueued")
        if self.cycles_per_us is None:
            return "no spin kernel (torch.cuda._sleep missing): events may include launch latency"
        return f"spin kernel torch.cuda._sleep calibrated at {self.cycles_per_us:.0f} cycles/us"

    def _spin(self, us):
        if self.cycles_per_us:
            torch.cuda._sleep(int(us * self.cycles_per_us))

    def _flush(self):
        self._flushes += 1
        self.flush_buf.fill_(self._flushes & 0x7F)

    def _gated(self, enqueue_call, flush, sets):
        """One gated sample: [L2 tags of `sets` undone (L2Tags), flush, finished, so it never delays an
        open gate] gate, start event, enqueue_call() (-> result), end event, open the gate, wait for the
        end event; returns (result, µs)."""
        stream = torch.cuda.current_stream(self.device)
        if self.l2_tags:
            self.l2_tags.clear(stream, sets)
        if flush:
            self._flush()
            stream.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ticket = self.gate.enqueue(stream.cuda_stream)
        opened = False
        try:
            s.record()
            out = enqueue_call()
            e.record()
            stream.query()  # submits what is enqueued
            self.gate.open(ticket)
            opened = True
        finally:
            if not opened:
                self.gate.open(ticket, wait=False)
        e.synchronize()
        self.gate.check()
        return out, s.elapsed_time(e) * 1000.0

    def _cpu_samples(self, fn, sets):
        ts = []
        for i in range(self.args.reps):
            t0 = time.perf_counter()
            fn(*sets[i % len(sets)])
            ts.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(ts)

    def warm(self, fn, sets):
        """Every set at least once, then more calls: nothing is left to allocate or compile."""
        for i in range(len(sets) * max(1, self.args.warmup)):
            fn(*sets[i % len(sets)])
        self._sync()

    def host_time(self, fn, sets):
        """Host wall time per call over back-to-back calls without sync."""
        k, n = len(sets), self.args.host_calls
        self._sync()
        t0 = time.perf_counter()
        for i in range(n):
            fn(*sets[i % k])
        t1 = time.perf_counter()
        self._sync()
        return (t1 - t0) / n * 1e6

    def events(self, fn, sets, flush, host_us):
        """CUDA events around one call; median µs of --reps samples. The outputs rotate with the
        input sets, as opfuse's runner rotates its K output sets: the result of call i is kept until
        call i + K replaces it, so the caching allocator cannot hand every call the same (L2-hot)
        output block (--no-rotate-outputs drops each result at once, the behaviour before)."""
        if not self.cuda:
            return self._cpu_samples(fn, sets)
        k, n = len(sets), self.args.reps
        keep = [None] * k
        rotate = not self.args.no_rotate_outputs
        if self.gate:
            us = []
            for i in range(n):
                out, t = self._gated(lambda: fn(*sets[i % k]), flush, sets)
                us.append(t)
                if rotate:
                    keep[i % k] = out
                del out
            return statistics.median(us)

        def one(i):
            out = fn(*sets[i % k])
            if rotate:
                keep[i % k] = out

        spin = min(max(1.5 * host_us + 5.0, SPIN_FLOOR_US), 2000.0)
        # bound the queue: a long spin + many calls must not block the host
        return statistics.median(self._spun(n, one, flush, spin, sets, sync_every=16))

    def _spun(self, n, enqueue, flush, spin_us, sets, sync_every=None):
        """The rule before the gate (--no-gate): n samples of [L2 tags of `sets` undone, flush] + spin + start event +
        enqueue(i) + end event, all enqueued (waiting for sample i's end every `sync_every`), then
        read; returns µs per sample."""
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            if self.l2_tags:  # reset: the stream idle first, so each sample then waits for the one before
                self.l2_tags.clear(torch.cuda.current_stream(self.device), sets)
            if flush:
                self._flush()
            self._spin(spin_us)
            starts[i].record()
            enqueue(i)
            ends[i].record()
            if sync_every and i % sync_every == sync_every - 1:
                ends[i].synchronize()
        self._sync()
        return [s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)]

    def graph(self, fn, sets, flush):
        """R = K * ceil(--graph-calls / K) calls over the K sets in one CUDA graph; median over
        replays of replay µs / R."""
        k = len(sets)
        calls = k * (-(-self.args.graph_calls // k))
        side = torch.cuda.Stream(device=self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for i in range(max(3, k)):
                fn(*sets[i % k])
        torch.cuda.current_stream(self.device).wait_stream(side)
        self._sync()
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g):
                for i in range(calls):
                    fn(*sets[i % k])
            g.replay()
            self._sync()
            n = self.args.replays
            if self.gate:
                us = statistics.median(self._gated(g.replay, flush, sets)[1] / calls for _ in range(n))
            else:
                us = statistics.median(t / calls for t in self._spun(n, lambda i: g.replay(), flush, SPIN_FLOOR_US, sets))
        finally:
            del g
        return us, f"cuda_graph calls={calls} sets={k} flush={int(flush)} replays={n}"

    def device_time(self, fn, sets, phase, flush, host_us):
        """(µs, method) per the case's phase; decode falls back to events when capture fails."""
        if not self.cuda:
            return self.events(fn, sets, flush, host_us), f"cpu perf_counter per call, sets={len(sets)}"
        if phase == "decode" and not self.args.no_graph:
            try:
                return self.graph(fn, sets, flush)
            except Exception as e:  # capture can fail for reasons of the op; record and time otherwise
                reason = short_error(e, 300)
                try:
                    self._sync()
                except Exception:
                    pass
                us = self.events(fn, sets, flush, host_us)
                return us, (f"events (CUDA-graph capture failed: {reason}; per-call events), sets={len(sets)} "
                            f"flush={int(flush)} samples={self.args.reps}")
        us = self.events(fn, sets, flush, host_us)
        return us, (f"events sets={len(sets)} flush={int(flush)} samples={self.args.reps} "
                    f"outputs={'one block' if self.args.no_rotate_outputs else 'rotated'}")


# ---------------------------------------------------------------------------------------------
# opfuse in this process (--opfuse-lib): its kernels timed by this Timer, beside torch.compile's
# ---------------------------------------------------------------------------------------------

OPFUSE_VARIANTS = ("auto", "unfused", "library", "jit")  # capi/opfuse_capi.h opfuse_capi_create


class OpfuseLib:
    """libopfuse_capi.so (capi/opfuse_capi.h) through ctypes. program(graph_text, variant) builds the
    case's graph as `opfuse bench ops` does and returns fn(*inputs) -> outputs: it allocates the
    outputs with torch (so they rotate through PyTorch's allocator exactly like torch.compile's
    results) and enqueues opfuse's kernels on torch's current stream."""

    def __init__(self, path):
        import ctypes
        self.ct = ctypes
        self.lib = ctypes.CDLL(path)
        L, P, C, S = self.lib, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
        L.opfuse_capi_create.restype, L.opfuse_capi_create.argtypes = P, [C, C, C, S]
        for f in ("opfuse_capi_num_inputs", "opfuse_capi_num_outputs", "opfuse_capi_kernels_per_run"):
            getattr(L, f).restype, getattr(L, f).argtypes = ctypes.c_int, [P]
        for f in ("opfuse_capi_input_name", "opfuse_capi_output_name"):
            getattr(L, f).restype, getattr(L, f).argtypes = C, [P, ctypes.c_int]
        L.opfuse_capi_run.restype = ctypes.c_int
        L.opfuse_capi_run.argtypes = [P, ctypes.POINTER(P), ctypes.POINTER(P), P, C, S]
        L.opfuse_capi_destroy.restype, L.opfuse_capi_destroy.argtypes = None, [P]

    def program(self, case, variant, device):
        ct, L = self.ct, self.lib
        err = ct.create_string_buffer(2048)
        h = L.opfuse_capi_create(case["graph"].encode(), variant.encode(), err, len(err))
        if not h:
            raise RuntimeError(f"opfuse {variant}: {err.value.decode(errors='replace')}")
        ins = [L.opfuse_capi_input_name(h, i).decode() for i in range(L.opfuse_capi_num_inputs(h))]
        outs = [L.opfuse_capi_output_name(h, i).decode() for i in range(L.opfuse_capi_num_outputs(h))]
        in_pos = {t["name"]: i for i, t in enumerate(case["inputs"])}
        out_pos = {t["name"]: i for i, t in enumerate(case["outputs"])}
        missing = [n for n in ins if n not in in_pos] + [n for n in outs if n not in out_pos]
        if missing or len(outs) != len(case["outputs"]):
            L.opfuse_capi_destroy(h)
            raise RuntimeError(f"opfuse {variant}: graph names {missing or outs} do not match the case")
        in_idx, out_idx = [in_pos[n] for n in ins], [out_pos[n] for n in outs]
        decl = case["outputs"]
        in_arr, out_arr = (ct.c_void_p * max(len(ins), 1))(), (ct.c_void_p * max(len(outs), 1))()

        def fn(*xs):
            res = [torch.empty(d["shape"], dtype=torch_dtype(d["dtype"]), device=device) for d in decl]
            for j, i in enumerate(in_idx):
                in_arr[j] = xs[i].data_ptr()
            for j, i in enumerate(out_idx):
                out_arr[j] = res[i].data_ptr()
            stream = torch.cuda.current_stream(device).cuda_stream
            if L.opfuse_capi_run(h, in_arr, out_arr, stream, err, len(err)) != 0:
                raise RuntimeError(f"opfuse {variant} run: {err.value.decode(errors='replace')}")
            return tuple(res)

        fn.close = lambda: L.opfuse_capi_destroy(h)
        fn.kernels = lambda: L.opfuse_capi_kernels_per_run(h)
        return fn


# ---------------------------------------------------------------------------------------------
# Running one case
# ---------------------------------------------------------------------------------------------

def new_result(case):
    return {"id": case["id"], "op": case.get("op"), "phase": case.get("phase"), "dtype": case.get("dtype"),
            "eager_us": None, "compile_us": None, "eager_host_us": None, "compile_host_us": None,
            "compile_error": None, "eager_error": None,
            "impl": None, "sets": None, "flush": None, "eager_timing": None, "compile_timing": None,
            "compile_s": None, "bound": case_bound(case), "rel_err": {}, "flags": []}


def _free(device):
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def run_case(case, ctx):
    """Measures one case; every failure lands in the result, nothing propagates."""
    args, device, timer, feat = ctx["args"], ctx["device"], ctx["timer"], ctx["feat"]
    res = new_result(case)
    if case["id"] in ctx["unsupported"]:
        res["eager_error"] = res["compile_error"] = ctx["unsupported"][case["id"]]
        return res
    spec = OPS[case["op"]]
    sets = ref = out_e = None
    try:
        fn, res["impl"] = spec.build(case, feat, device)
        budget = ctx["budget"]()
        k, flush = plan_sets(case, timer.l2, budget, args.max_sets or harness("max_sets"))
        gen = torch.Generator(device=device)
        gen.manual_seed(args.seed)
        sets = [make_inputs(case, device, gen)]
        while len(sets) < k:
            sets.append(make_inputs(case, device, gen, share_from=sets[0]))
        res["sets"], res["flush"] = k, flush
    except Exception as e:
        res["eager_error"] = res["compile_error"] = "setup: " + short_error(e)
        sets = None
        _free(device)
        return res

    # float64 reference of set 0, on the same device.
    try:
        with torch.no_grad():
            ins64 = [x if x.dtype in (torch.int32, torch.int64, torch.bool) else x.double() for x in sets[0]]
            ref = list(spec.ref(case, *ins64))
            del ins64
    except Exception as e:
        ref = None
        res["flags"].append("float64 reference failed: " + short_error(e, 300))
        _free(device)

    bound = res["bound"]

    def judge(key, outs, against):
        errs = [rel_err(o, r) for o, r in zip(outs, against)]
        err = max(errs)
        # A comparison result has no rounding excuse: bool outputs must match exactly.
        b = 0.0 if any(o.dtype == torch.bool for o in outs) else bound
        res["rel_err"][key] = err if math.isfinite(err) else None
        if not (err <= b):
            res["flags"].append(f"{key} rel_err {err:.3g} > bound {b:g}")

    def correctness(f, tag):
        before = [x.clone() for x in sets[0]]
        outs = as_tuple(f(*sets[0]))
        timer._sync()
        check_outputs(case, outs)
        if not all(torch.equal(a, b) for a, b in zip(before, sets[0])):
            res["flags"].append(f"{tag}: the call mutated its inputs")
        res["flags"].extend(output_flags(case, outs, tag, ref))
        if ref is not None:
            judge(f"{tag}_vs_f64", outs, ref)
        return outs

    def measure(f, tag):
        timer.warm(f, sets)
        host = timer.host_time(f, sets)
        us, how = timer.device_time(f, sets, case["phase"], flush, host)
        res[f"{tag}_host_us"], res[f"{tag}_us"], res[f"{tag}_timing"] = host, us, how

    # Eager.
    try:
        with torch.no_grad():
            out_e = correctness(fn, "eager")
            measure(fn, "eager")
    except Exception as e:
        res["eager_error"] = short_error(e)
        res["eager_us"] = res["eager_host_us"] = None
        out_e = None
        _free(device)

    # torch.compile and opfuse (--opfuse-lib: the same sets, Timer and checks, in this process): each
    # built and checked first, then timed in --interleave rounds, in turn (compile, opfuse variants,
    # compile, ...), each round a full measurement; the result is the median of the rounds, so slow
    # drift over the run (clocks, the GPU warming) does not favour whichever is timed first.
    timed = []   # (tag, fn)
    cfn = None
    owned = []   # opfuse programs to close
    try:
        if args.no_compile:
            res["compile_error"] = "skipped (--no-compile)"
        else:
            try:
                torch._dynamo.reset()
                cfn = torch.compile(fn, dynamic=False, fullgraph=True)
                t0 = time.perf_counter()
                with torch.no_grad():
                    out_c = correctness(cfn, "compile")
                res["compile_s"] = time.perf_counter() - t0
                if out_e is not None:
                    judge("compile_vs_eager", out_c, out_e)
                del out_c
                timed.append(("compile", cfn))
            except Exception as e:
                res["compile_error"] = short_error(e)
                res["compile_us"] = res["compile_host_us"] = None
        lib = ctx.get("opfuse")
        for variant in (args.opfuse_variants.split(",") if lib else []):
            tag = f"opfuse_{variant}"
            try:
                ofn = lib.program(case, variant, device)
                owned.append(ofn)
                with torch.no_grad():
                    outs = correctness(ofn, tag)
                    if out_e is not None:
                        judge(f"{tag}_vs_eager", outs, out_e)
                    del outs
                res[f"{tag}_kernels"] = ofn.kernels()
                timed.append((tag, ofn))
            except Exception as e:
                res[f"{tag}_error"] = short_error(e)
                res[f"{tag}_us"] = res[f"{tag}_host_us"] = None
        hosts, rounds, hows = {}, {}, {}
        for tag, f in list(timed):
            try:
                with torch.no_grad():
                    timer.warm(f, sets)
                    hosts[tag] = timer.host_time(f, sets)
            except Exception as e:
                res[f"{tag}_error"] = short_error(e)
                timed.remove((tag, f))
        for _ in range(args.interleave):
            for tag, f in list(timed):
                try:
                    with torch.no_grad():
                        us, hows[tag] = timer.device_time(f, sets, case["phase"], flush, hosts[tag])
                    rounds.setdefault(tag, []).append(us)
                except Exception as e:
                    res[f"{tag}_error"] = short_error(e)
                    rounds.pop(tag, None)
                    timed.remove((tag, f))
        for tag, _ in timed:
            n = len(rounds[tag])
            res[f"{tag}_host_us"], res[f"{tag}_us"] = hosts[tag], statistics.median(rounds[tag])
            res[f"{tag}_timing"] = hows[tag] + (f"; median of {n} rounds interleaved with "
                                                f"{', '.join(t for t, _ in timed if t != tag) or 'nothing'}" if n > 1 else "")
    finally:
        for ofn in owned:
            try:
                timer._sync()
            except Exception:
                pass
            ofn.close()
        del cfn
        try:
            torch._dynamo.reset()
        except Exception:
            pass
    sets = ref = out_e = None
    _free(device)
    return res


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------

def _finite(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def write_atomic(path, doc):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".peer.", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(_finite(doc), f, indent=1, allow_nan=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def driver_version():
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        if p.returncode == 0 and p.stdout.strip():
            return p.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def _fmt(v):
    return "-" if v is None else (f"{v:.2f}" if v < 100 else f"{v:.1f}")


def print_table(results, out=sys.stdout):
    idw = max([len("id")] + [len(r["id"]) for r in results])
    hdr = f"{'id':<{idw}}  {'eager us':>10}  {'compile us':>10}  {'eager host':>10}  {'comp host':>10}  note"
    print(hdr, file=out)
    print("-" * len(hdr), file=out)
    for r in results:
        note = []
        if r.get("eager_error"):
            note.append("eager: " + r["eager_error"][:60])
        if r.get("compile_error") and not r["compile_error"].startswith("skipped"):
            note.append("compile: " + r["compile_error"][:60])
        if r.get("flags"):
            note.append(f"{len(r['flags'])} flag(s)")
        print(f"{r['id']:<{idw}}  {_fmt(r.get('eager_us')):>10}  {_fmt(r.get('compile_us')):>10}  "
              f"{_fmt(r.get('eager_host_us')):>10}  {_fmt(r.get('compile_host_us')):>10}  {'; '.join(note)}", file=out)


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Time the op-benchmark cases of cases.json with PyTorch eager and torch.compile "
                    "(the peer numbers for `opfuse bench report --peer`).",
        epilog="Exit codes: 0 ran (per-case errors are recorded in peer.json), 1 cannot run (no torch / no CUDA "
               "device), 2 bad arguments or unreadable/malformed cases.json.")
    p.add_argument("--cases", required=True, help="cases.json written by `opfuse bench ops` (schema 1)")
    p.add_argument("--out", help="peer.json to write (atomically); required unless --check")
    p.add_argument("--ids", help="only cases whose id matches this regular expression (re.search)")
    p.add_argument("--no-compile", action="store_true", help="time torch eager only")
    p.add_argument("--reps", type=int, default=100,
                   help="event-timed samples per measurement (prefill; one call each; default 100, >= 50 recommended)")
    p.add_argument("--no-rotate-outputs", action="store_true",
                   help="prefill: drop each call's result at once (the allocator then reuses one output block, "
                        "L2-hot at sizes that fit); by default results are kept for K calls, as opfuse rotates outputs")
    p.add_argument("--no-gate", action="store_true",
                   help="time with the fixed spin before each sample (the rule before the gate; opfuse's own "
                        "harness now opens a gate once the call is enqueued), for A/B")
    p.add_argument("--l2-tags", choices=["demote", "reset", "keep"], default="demote",
                   help="before each sample, undo L2::evict_last tags: torch.compile's reduction kernels load their "
                        "inputs so, and the tagged lines survive the flush into the next call. demote (default): a "
                        "kernel puts the case's tensors back to normal priority; reset: cuCtxResetPersistingL2Cache; "
                        "keep: nothing (the rule before demote), for A/B")
    p.add_argument("--opfuse-lib", help="libopfuse_capi.so (built with the cuda preset; tools/build_carry.sh packs it): "
                                        "also time opfuse's kernels in this process, with this script's Timer, "
                                        "beside torch.compile's (results opfuse_<variant>_us)")
    p.add_argument("--opfuse-variants", default="library,jit",
                   help="with --opfuse-lib: opfuse variants to time (default library,jit)")
    p.add_argument("--replays", type=int, default=25,
                   help="timed CUDA-graph replays per decode measurement (default 25)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls per input set before timing (default 5)")
    p.add_argument("--host-calls", type=int, default=200,
                   help="back-to-back calls for the host time per call (default 200)")
    p.add_argument("--graph-calls", type=int, default=64,
                   help="decode: calls per captured graph, rounded up to a multiple of the sets (default 64)")
    p.add_argument("--interleave", type=int, default=1,
                   help="time torch.compile and each opfuse variant in this many rounds, in turn, and keep each one's "
                        "median over the rounds (default 1: one measurement each)")
    p.add_argument("--max-sets", type=int, default=None,
                   help="most rotated input sets per case (default: opfuse's, cases.json harness.max_sets)")
    p.add_argument("--max-sets-mib", type=int, default=None,
                   help="memory budget for one case's input/output sets, MiB (default: half the free device memory)")
    p.add_argument("--seed", type=int, default=1234, help="torch.Generator seed for the inputs (default 1234)")
    p.add_argument("--gqa", choices=("auto", "native", "repeat"), default="auto",
                   help="attention with Hq > Hkv: SDPA enable_gqa (native), repeat_interleave of kv heads (repeat), "
                        "or auto: enable_gqa when supported and no explicit mask is needed, else repeat")
    p.add_argument("--no-graph", action="store_true", help="decode cases: events instead of CUDA graph replay")
    p.add_argument("--device", default="cuda",
                   help="torch device (default cuda); 'cpu' only for testing the script: perf_counter times")
    p.add_argument("--resume", action="store_true",
                   help="keep the results already in --out (an interrupted run's partial file) and run only the "
                        "cases it lacks; use the same options as before")
    p.add_argument("--check", action="store_true",
                   help="validate cases.json, list the cases that would run, and exit (no torch needed)")
    args = p.parse_args(argv)
    for name in ("reps", "replays", "host_calls", "graph_calls", "max_sets", "max_sets_mib", "interleave"):
        v = getattr(args, name)
        if v is not None and v < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0:
        p.error("--warmup must be >= 0")
    if not args.check and not args.out:
        p.error("--out is required (or use --check)")
    if args.ids is not None:
        try:
            args.ids_re = re.compile(args.ids)
        except re.error as e:
            p.error(f"--ids: bad regular expression {args.ids!r}: {e}")
    else:
        args.ids_re = None
    bad = [v for v in args.opfuse_variants.split(",") if v not in OPFUSE_VARIANTS]
    if bad:
        p.error(f"--opfuse-variants: unknown variant(s) {', '.join(bad)} ({', '.join(OPFUSE_VARIANTS)})")
    if args.opfuse_lib and not os.path.isfile(args.opfuse_lib):
        p.error(f"--opfuse-lib {args.opfuse_lib}: no such file")
    if args.out and os.path.isdir(args.out):
        p.error(f"--out {args.out} is a directory")
    if args.out and not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        p.error(f"--out: directory of {args.out} does not exist")
    return args


def load_resume(path):
    """{id: result} of an earlier peer.json at path (none when it does not exist yet)."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError) as e:
        raise CasesError(f"--resume: cannot read {path}: {e}")
    if not isinstance(old, dict) or old.get("schema") != SCHEMA or not isinstance(old.get("results"), list):
        raise CasesError(f"--resume: {path} is not a peer.json of schema {SCHEMA}")
    return {r["id"]: r for r in old["results"] if isinstance(r, dict) and isinstance(r.get("id"), str)}


def method_string(args, timer, feat):
    if not timer.cuda:
        dev = "CPU testing mode: device time = median perf_counter of single calls; not comparable with GPU numbers"
    else:
        dev = (f"opfuse's rules (src/bench/cuda/timing.h): prefill: CUDA events around one call, median of "
               f"{args.reps}; decode: one CUDA-graph replay of R = K*ceil({args.graph_calls}/K) calls over the K "
               f"rotated sets / R, median of {args.replays} replays (per-call events if capture fails, reason per "
               f"case); before each sample "
               + ({"demote": "the case's tensors demoted to evict_normal in L2 (undoes evict_last tags), ",
                   "reset": "L2 lines tagged evict_last reset to normal (cuCtxResetPersistingL2Cache, stream idle), "}
                  [timer.l2_tags.mode] if timer.l2_tags else "L2 lines tagged evict_last kept (--l2-tags keep), ")
               + f"an L2 flush (fill_ of {timer.flush_buf.numel() >> 20} MiB, L2 "
               f"{timer.l2 >> 20} MiB) when the K sets stay under 2x L2, and "
               + (f"{timer.spin_note()}, so events time device work only and every call waits alike"
                  if timer.gate else
                  f"a spin kernel (1.5x host time + 5 us, at least {SPIN_FLOOR_US:g} us, before a call, "
                  f"{SPIN_FLOOR_US:g} us before a replay; {timer.spin_note()}) so events time device work only"))
    return (f"{dev}; sets: K = ceil({harness('l2_factor'):g} L2 / rotated bytes) <= {args.max_sets or harness('max_sets')}, weights (matmul b, attention k/v, "
            f"norm w/b, gather table) shared; {args.warmup} warm-up calls per set; inputs torch.randn seed "
            f"{args.seed} (|x|+0.5 where positive); host: perf_counter over {args.host_calls} back-to-back calls "
            f"without sync / {args.host_calls}; torch.compile(fn, dynamic=False, fullgraph=True) default mode, "
            f"dynamo reset per case, warmed up; correctness: rel L2 err vs a float64 reference on the device; "
            f"features {feat.describe()}")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        cases, unsupported = load_cases(args.cases)
    except CasesError as e:
        print(f"bench_peer: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.ids_re is not None:
        cases = [c for c in cases if args.ids_re.search(c["id"])]
    if args.check:
        for c in cases:
            why = unsupported.get(c["id"])
            print(f"{c['id']}" + (f"  (skipped: {why})" if why else ""))
        print(f"bench_peer: {len(cases)} case(s) valid, {sum(c['id'] in unsupported for c in cases)} unsupported",
              file=sys.stderr)
        return EXIT_OK
    if not cases:
        print("bench_peer: no case matches" + (f" --ids {args.ids!r}" if args.ids else ""), file=sys.stderr)
    try:
        done = load_resume(args.out) if args.resume else {}
    except CasesError as e:
        print(f"bench_peer: error: {e}", file=sys.stderr)
        return EXIT_USAGE

    try:
        load_torch()
    except Exception as e:
        print(f"bench_peer: cannot import torch: {e}", file=sys.stderr)
        return EXIT_FAIL
    try:
        device = torch.device(args.device)
    except Exception as e:
        print(f"bench_peer: error: --device {args.device!r}: {e}", file=sys.stderr)
        return EXIT_USAGE
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print("bench_peer: no CUDA device visible to torch (torch.cuda.is_available() is False)", file=sys.stderr)
            return EXIT_FAIL
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
        props = torch.cuda.get_device_properties(device)
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
        if l2 <= 0:
            l2 = 64 << 20
            print("bench_peer: torch does not report L2_cache_size; assuming 64 MiB", file=sys.stderr)

        def budget():
            free = torch.cuda.mem_get_info(device)[0] // 2
            return free if args.max_sets_mib is None else min(free, args.max_sets_mib << 20)
        dev_name, driver = props.name, driver_version()
    elif device.type == "cpu":
        l2 = 0

        def budget():
            return (args.max_sets_mib or 1024) << 20
        dev_name, driver = "cpu", None
    else:
        print(f"bench_peer: error: --device must be cuda[:N] or cpu, got {args.device!r}", file=sys.stderr)
        return EXIT_USAGE

    feat = Features(args.gqa)
    timer = Timer(args, device, l2)
    opfuse_lib = None
    if args.opfuse_lib:
        if device.type != "cuda":
            sys.exit("--opfuse-lib needs a CUDA device")
        try:
            opfuse_lib = OpfuseLib(args.opfuse_lib)
        except OSError as e:
            print(f"bench_peer: --opfuse-lib {args.opfuse_lib}: {e}", file=sys.stderr)
            sys.exit(2)
    ctx = {"args": args, "device": device, "timer": timer, "feat": feat, "budget": budget, "opfuse": opfuse_lib,
           "unsupported": unsupported}
    try:
        import triton  # noqa: F401
        triton_version = triton.__version__
    except Exception:
        triton_version = None
    doc = {"schema": SCHEMA, "device": dev_name, "driver": driver, "torch": torch.__version__,
           "cuda": torch.version.cuda, "triton": triton_version,
           "method": method_string(args, timer, feat),
           "command": " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv),
           "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "complete": False, "results": []}
    # Results in case order; with --resume the kept ones are in every write, from the first on.
    results = {c["id"]: done[c["id"]] for c in cases if c["id"] in done}
    if done:
        doc["resumed"] = len(results)

    def save():
        doc["results"] = [results[c["id"]] for c in cases if c["id"] in results]
        write_atomic(args.out, doc)
    save()
    n = len(cases)
    for i, case in enumerate(cases):
        if case["id"] in done:
            print(f"[{i + 1}/{n}] {case['id']}: kept from {args.out} (--resume)", file=sys.stderr, flush=True)
            continue
        t0 = time.perf_counter()
        print(f"[{i + 1}/{n}] {case['id']} ...", file=sys.stderr, flush=True)
        res = run_case(case, ctx)
        results[case["id"]] = res
        save()
        bits = [f"eager {_fmt(res['eager_us'])} us", f"compile {_fmt(res['compile_us'])} us"]
        if res["eager_error"]:
            bits.append(f"eager error: {res['eager_error'][:120]}")
        if res["compile_error"] and not args.no_compile:
            bits.append(f"compile error: {res['compile_error'][:120]}")
        bits.extend(res["flags"])
        print(f"[{i + 1}/{n}]   {'; '.join(bits)} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    doc["complete"] = True
    doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    save()
    print_table(doc["results"])
    flagged = sum(1 for r in doc["results"] if r.get("flags"))
    failed = sum(1 for r in doc["results"] if r.get("eager_error"))
    print(f"bench_peer: {n} case(s), {failed} eager failure(s), {flagged} flagged; wrote {args.out}", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
