"""Tests of tools/bench_peer.py (the PyTorch peer of `opfuse bench ops`).

Run: python3 -m pytest tests/python   (needs pytest; numpy and torch are optional).

Three layers, so the file is useful on the CPU-only CI machine and more so where torch exists:
- always: cases.json validation through the real command line (malformed -> exit 2, a clear
  message, no output file), bad arguments -> exit 2, --check without torch, and the op table against
  the contract (op names, input/output names in order) written out here a second time on purpose.
- with numpy + torch (CPU): every op's torch implementation, and the script's own float64 reference,
  against an independent numpy float64 reference on tiny shapes; attention in all its mask/GQA
  variants; then an end-to-end CPU run of the sample cases (--device cpu --no-compile) that checks
  peer.json's shape and correctness fields, and that a failing case is recorded while the run goes on.
The GPU timing path (CUDA graphs, events, L2 flush) needs a GPU and is exercised on the device.
"""
import copy
import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "bench_peer.py"
SAMPLE = pathlib.Path(__file__).resolve().parent / "data" / "cases_sample.json"


def importorskip(name):
    """pytest.importorskip that also skips on a broken install (ImportError, not only a missing module),
    and works on older pytest (Debian 12 ships 7.2, without importorskip's exc_type)."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        pytest.skip(f"{name} not importable: {e}")


def _load_module():
    spec = importlib.util.spec_from_file_location("bench_peer", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bp = _load_module()

# The contract (cases.json section of the task): op -> (inputs in order, outputs).
CONTRACT = {
    "exp2": (("x",), ("y",)), "log2": (("x",), ("y",)), "sin": (("x",), ("y",)),
    "recip": (("x",), ("y",)), "sqrt": (("x",), ("y",)), "cast": (("x",), ("y",)),
    "add": (("a", "b"), ("y",)), "mul": (("a", "b"), ("y",)), "mod": (("a", "b"), ("y",)),
    "less_than": (("a", "b"), ("y",)), "gather": (("table", "ids"), ("y",)),
    "sum": (("x",), ("y",)), "max": (("x",), ("y",)), "matmul": (("a", "b"), ("y",)),
    "softmax": (("x",), ("y",)), "gelu": (("x",), ("y",)), "attention": (("q", "k", "v"), ("y",)),
    "layernorm": (("x", "w", "b"), ("y",)), "rmsnorm": (("x", "w"), ("y",)),
    "add_rmsnorm": (("x", "r", "w"), ("y", "s")), "swiglu": (("g", "u"), ("y",)),
    "geglu": (("g", "u"), ("y",)), "rope": (("x", "cos", "sin"), ("y",)),
}


# The random sweep's extra ops (`opfuse bench ops --shapes random:N`, src/bench/op_suite.cc SweepOps).
SWEEP_CONTRACT = {
    "softmax_plain": (("x",), ("y",)), "softmax_causal": (("x",), ("y",)), "logsumexp": (("x",), ("y",)),
}


def run_script(*args, timeout=600):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def sample_doc():
    with open(SAMPLE) as f:
        return json.load(f)


def case_by_op(doc, op):
    return next(c for c in doc["cases"] if c["op"] == op)


# ------------------------------------------------------------------------------------------------
# Without torch
# ------------------------------------------------------------------------------------------------

def test_op_table_covers_the_contract():
    assert set(CONTRACT) <= set(bp.OPS), f"missing ops: {sorted(set(CONTRACT) - set(bp.OPS))}"
    for op, (ins, outs) in CONTRACT.items():
        assert bp.OPS[op].inputs == ins, op
        assert bp.OPS[op].outputs == outs, op


def test_op_table_covers_the_sweep_ops():
    for op, (ins, outs) in SWEEP_CONTRACT.items():
        assert op in bp.OPS, op
        assert bp.OPS[op].inputs == ins, op
        assert bp.OPS[op].outputs == outs, op


def test_sample_cases_are_valid_and_cover_every_op():
    cases, unsupported = bp.load_cases(SAMPLE)
    assert unsupported == {}
    assert {c["op"] for c in cases} == set(CONTRACT)
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids))
    for c in cases:   # bytes as the contract defines them: inputs once + outputs once
        assert c["bytes"] == bp.set_bytes(c) + bp.set_bytes({"inputs": c["outputs"]}), c["id"]


def test_check_mode_runs_without_torch_and_lists_cases():
    p = run_script("--cases", SAMPLE, "--check", "--ids", "attention")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split()
    assert len(lines) == 3 and all("attention" in line for line in lines)
    assert "3 case(s) valid" in p.stderr


def _mutations():
    """(label, function that breaks a copy of the sample doc, text the error must contain)."""
    def setp(path, value):
        def f(doc):
            obj = doc
            for key in path[:-1]:
                obj = obj[key]
            obj[path[-1]] = value
        return f

    def rms(doc):
        return next(i for i, c in enumerate(doc["cases"]) if c["op"] == "rmsnorm")

    def att(doc):
        return next(i for i, c in enumerate(doc["cases"]) if c["op"] == "attention")

    def mm(doc):
        return next(i for i, c in enumerate(doc["cases"]) if c["op"] == "matmul")

    def dup(doc):
        doc["cases"][1]["id"] = doc["cases"][0]["id"]

    def swap_inputs(doc):
        c = doc["cases"][rms(doc)]
        c["inputs"].reverse()

    def drop_eps(doc):
        del doc["cases"][rms(doc)]["attrs"]["eps"]

    def bad_k(doc):
        c = doc["cases"][mm(doc)]
        c["inputs"][1]["shape"][1] += 1

    def bad_heads(doc):
        c = doc["cases"][att(doc)]
        c["inputs"][0]["shape"][1] = 3
        c["outputs"][0]["shape"][1] = 3
        c["attrs"]["hq"] = 3

    def bad_out_shape(doc):
        c = doc["cases"][rms(doc)]
        c["outputs"][0]["shape"] = [1, 2]

    def neg_dim(doc):
        doc["cases"][0]["inputs"][0]["shape"] = [8, -1]

    def bool_dim(doc):
        doc["cases"][0]["inputs"][0]["shape"] = [True, 64]

    def no_inputs(doc):
        doc["cases"][0]["inputs"] = []

    def lt_not_bool(doc):
        c = next(c for c in doc["cases"] if c["op"] == "less_than")
        c["outputs"][0]["dtype"] = "bf16"

    def nan_scale(doc):
        c = next(c for c in doc["cases"] if c["op"] == "softmax")
        c["attrs"]["scale"] = "0.5"

    def add_rms_one_output(doc):
        c = next(c for c in doc["cases"] if c["op"] == "add_rmsnorm")
        c["outputs"] = c["outputs"][:1]

    def no_harness(doc):
        del doc["harness"]

    return [
        ("schema", setp(["schema"], 2), "schema"),
        ("no_harness", no_harness, "no 'harness' block"),
        ("harness_gate_lead", setp(["harness", "gate_lead_us"], "5"), "harness.gate_lead_us must be a positive number"),
        ("harness_max_sets", setp(["harness", "max_sets"], 0), "harness.max_sets must be a positive number"),
        ("bound_missing", setp(["cases", 0, "bound"], None), "bound must be a non-negative number"),
        ("bound_negative", setp(["cases", 0, "bound"], -1e-3), "bound must be a non-negative number"),
        ("cases_not_list", setp(["cases"], {}), "'cases' must be a list"),
        ("case_not_object", setp(["cases", 0], 7), "cases[0] must be an object"),
        ("no_id", setp(["cases", 0, "id"], ""), "cases[0].id"),
        ("duplicate_id", dup, "duplicate case id"),
        ("bad_phase", setp(["cases", 0, "phase"], "train"), "phase"),
        ("bad_dtype", setp(["cases", 0, "inputs", 0, "dtype"], "bf17"), "dtype 'bf17'"),
        ("negative_dim", neg_dim, "positive integers"),
        ("bool_dim", bool_dim, "positive integers"),
        ("no_inputs", no_inputs, "inputs must be a non-empty list"),
        ("input_order", swap_inputs, "takes inputs ['x', 'w']"),
        ("missing_eps", drop_eps, "attrs.eps is required"),
        ("matmul_k_mismatch", bad_k, "b must be [N, K]"),
        ("gqa_heads", bad_heads, "not a multiple of Hkv"),
        ("output_shape", bad_out_shape, "y has shape [1, 2]"),
        ("less_than_dtype", lt_not_bool, "expected bool"),
        ("scale_not_number", nan_scale, "attrs.scale must be a finite number"),
        ("add_rmsnorm_outputs", add_rms_one_output, "has outputs ['y', 's']"),
    ]


@pytest.mark.parametrize("label,mutate,needle", _mutations(), ids=[m[0] for m in _mutations()])
def test_malformed_cases_exit_2(tmp_path, label, mutate, needle):
    doc = copy.deepcopy(sample_doc())
    mutate(doc)
    bad = tmp_path / "cases.json"
    bad.write_text(json.dumps(doc))
    out = tmp_path / "peer.json"
    p = run_script("--cases", bad, "--out", out)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert needle in p.stderr, p.stderr
    assert "bench_peer: error:" in p.stderr
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [bad]     # no temp file left behind either
    with pytest.raises(bp.CasesError):           # and the library call agrees
        bp.load_cases(bad)


def test_harness_constants_come_from_cases_json(tmp_path):
    """The peer keeps no copy of opfuse's measuring constants or bounds: they are the cases.json's."""
    doc = copy.deepcopy(sample_doc())
    doc["harness"] = {"gate_lead_us": 7.5, "gate_max_us": 1e6, "l2_factor": 3, "max_sets": 5}
    doc["cases"][0]["bound"] = 0.125
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(doc))
    cases, _ = bp.load_cases(path)
    assert bp.harness("gate_lead_us") == 7.5 and bp.harness("l2_factor") == 3 and bp.harness("max_sets") == 5
    assert bp.case_bound(cases[0]) == 0.125
    # K = ceil(3 L2 / rotated) capped by max_sets: a case of 1 KiB rotated bytes and a 4 KiB "L2"
    # needs 12 sets, gets 5 (the flush then runs: 5 KiB < 12 KiB).
    case = {"inputs": [{"name": "x", "dtype": "f32", "shape": [128], "rotate": True}],
            "outputs": [{"name": "y", "dtype": "f32", "shape": [128]}]}
    assert bp.plan_sets(case, 4096, 1 << 30, bp.harness("max_sets")) == (5, True)
    source = SCRIPT.read_text()
    for copied in ("GATE_LEAD_US =", "BOUNDS =", "3e-2"):
        assert copied not in source, f"bench_peer.py keeps its own {copied!r}"


@pytest.mark.parametrize("content,needle", [
    (None, "cannot read"),
    ("{not json", "not valid JSON"),
    ("[1, 2]", "top level must be an object"),
    (b"\xff\xfe", "not valid JSON"),
])
def test_unreadable_cases_exit_2(tmp_path, content, needle):
    path = tmp_path / "cases.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    p = run_script("--cases", path, "--out", tmp_path / "peer.json")
    assert p.returncode == 2
    assert needle in p.stderr, p.stderr
    assert not (tmp_path / "peer.json").exists()


@pytest.mark.parametrize("args,needle", [
    (["--out", "X"], "--cases"),                            # --cases missing
    (["--cases", str(SAMPLE)], "--out is required"),
    (["--cases", str(SAMPLE), "--out", "X", "--reps", "0"], "--reps must be >= 1"),
    (["--cases", str(SAMPLE), "--out", "X", "--ids", "("], "bad regular expression"),
    (["--cases", str(SAMPLE), "--out", "/nonexistent-dir/peer.json"], "does not exist"),
    (["--cases", str(SAMPLE), "--out", "X", "--gqa", "sometimes"], "--gqa"),
    (["--cases", str(SAMPLE), "--out", "X", "--bogus"], "unrecognized arguments"),
    (["--cases", str(SAMPLE), "--out", "X", "--opfuse-variants", "library,fast"], "unknown variant(s) fast"),
    (["--cases", str(SAMPLE), "--out", "X", "--opfuse-lib", "/nonexistent/libopfuse_capi.so"], "no such file"),
])
def test_bad_arguments_exit_2(args, needle):
    p = run_script(*args)
    assert p.returncode == 2
    assert needle in p.stderr, p.stderr


def test_unknown_op_is_recorded_not_fatal(tmp_path):
    doc = sample_doc()
    extra = copy.deepcopy(doc["cases"][0])
    extra["id"] = "micro/frobnicate/bf16"
    extra["op"] = "frobnicate"
    doc["cases"] = [extra]
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(doc))
    cases, unsupported = bp.load_cases(path)
    assert "unsupported op 'frobnicate'" in unsupported["micro/frobnicate/bf16"]
    p = run_script("--cases", path, "--check")
    assert p.returncode == 0
    assert "skipped: unsupported op" in p.stdout


def test_plan_sets_follows_opfuse_rule():
    l2 = 50 << 20
    # rmsnorm 32 x 2048 bf16: rotated = x + y = 256 KiB; w is shared.
    case = case_by_op(sample_doc(), "rmsnorm")
    case = copy.deepcopy(case)
    case["inputs"][0]["shape"] = case["outputs"][0]["shape"] = [32, 2048]
    case["inputs"][1]["shape"] = [2048]
    assert bp.is_shared(case, case["inputs"][1]) and not bp.is_shared(case, case["inputs"][0])
    assert bp.plan_sets(case, l2, 4 << 30, 1000) == (400, False)     # ceil(100 MiB / 256 KiB): past 2x L2
    assert bp.plan_sets(case, l2, 4 << 30, 32) == (32, True)         # capped: the sets fit in L2, so flush
    assert bp.plan_sets(case, l2, 1 << 20, 32) == (3, True)          # the memory budget caps K too
    with pytest.raises(bp.Unsupported, match="GiB for one input/output set"):
        bp.plan_sets(case, l2, 100 << 10, 32)
    # matmul decode: the 5632 x 2048 weight is shared, only a and y rotate.
    mm = copy.deepcopy(case_by_op(sample_doc(), "matmul"))
    mm["inputs"][0]["shape"], mm["inputs"][1]["shape"], mm["outputs"][0]["shape"] = [1, 2048], [5632, 2048], [1, 5632]
    k, flush = bp.plan_sets(mm, l2, 4 << 30, 32)
    assert (k, flush) == (32, True)
    # An explicit "rotate" in the case wins over the op table.
    mm["inputs"][1]["rotate"] = True
    assert bp.plan_sets(mm, l2, 4 << 30, 32) == (5, False)           # 23 MB sets: 5 exceed 100 MiB
    big = {"op": "exp2", "inputs": [{"name": "x", "dtype": "bf16", "shape": [16384, 8192]}],
           "outputs": [{"name": "y", "dtype": "bf16", "shape": [16384, 8192]}]}
    assert bp.plan_sets(big, l2, 4 << 30, 32) == (1, False)          # one 512 MiB set is past 2x L2
    assert bp.plan_sets(big, 0, 4 << 30, 32) == (2, False)           # cpu: two sets, no flush


def test_make_inputs_shares_weights_across_sets():
    torch = importorskip("torch")
    bp.load_torch()
    case = case_by_op(sample_doc(), "matmul")
    gen = torch.Generator().manual_seed(0)
    s0 = bp.make_inputs(case, torch.device("cpu"), gen)
    s1 = bp.make_inputs(case, torch.device("cpu"), gen, share_from=s0)
    assert s1[1] is s0[1]                      # b: the shared weight
    assert not torch.equal(s1[0], s0[0])       # a: a fresh rotated input


def test_attention_mask_choice():
    assert bp.attention_mask_needed(1, 100, True) == "none"
    assert bp.attention_mask_needed(64, 64, True) == "is_causal"
    assert bp.attention_mask_needed(8, 64, True) == "explicit"
    assert bp.attention_mask_needed(8, 64, False) == "none"


def test_write_atomic_replaces_whole_file(tmp_path):
    out = tmp_path / "peer.json"
    out.write_text("old")
    bp.write_atomic(str(out), {"schema": 1, "x": float("nan"), "y": [1.5, float("inf")]})
    assert json.loads(out.read_text()) == {"schema": 1, "x": None, "y": [1.5, None]}
    assert [p.name for p in tmp_path.iterdir()] == ["peer.json"]


# ------------------------------------------------------------------------------------------------
# With numpy and torch (CPU)
# ------------------------------------------------------------------------------------------------

def _np_erf(x):
    np = importorskip("numpy")
    return np.vectorize(math.erf)(x)


def np_reference(case, ins):
    """Independent float64 numpy reference of one case; returns the list of outputs."""
    np = importorskip("numpy")
    op, a = case["op"], case.get("attrs", {})
    if op == "exp2":
        return [np.exp2(ins[0])]
    if op == "log2":
        return [np.log2(ins[0])]
    if op == "sin":
        return [np.sin(ins[0])]
    if op == "recip":
        return [1.0 / ins[0]]
    if op == "sqrt":
        return [np.sqrt(ins[0])]
    if op == "cast":
        return [ins[0]]
    if op == "add":
        return [ins[0] + ins[1]]
    if op == "mul":
        return [ins[0] * ins[1]]
    if op == "mod":
        return [np.mod(ins[0], ins[1])]                      # floored, sign of the divisor
    if op == "less_than":
        return [ins[0] < ins[1]]
    if op == "gather":
        return [ins[0][ins[1].astype(np.int64)]]
    if op == "sum":
        return [ins[0].sum(axis=-1, keepdims=True)]
    if op == "max":
        return [ins[0].max(axis=-1, keepdims=True)]
    if op == "matmul":
        return [ins[0] @ ins[1].T]
    if op == "softmax":
        z = ins[0] * a["scale"]
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        return [e / e.sum(axis=-1, keepdims=True)]
    if op == "gelu":
        x = ins[0]
        return [0.5 * x * (1 + _np_erf(x / math.sqrt(2)))]
    if op == "attention":
        q, k, v = ins
        t, hq, d = q.shape
        s, hkv, _ = k.shape
        y = np.zeros_like(q)
        for h in range(hq):
            kv = h // (hq // hkv)
            for i in range(t):
                sc = (k[:, kv, :] @ q[i, h, :]) * a["scale"]
                if a["causal"]:
                    sc = np.where(np.arange(s) < i + s - t + 1, sc, -np.inf)
                p = np.exp(sc - sc.max())
                y[i, h, :] = (p / p.sum()) @ v[:, kv, :]
        return [y]
    if op == "layernorm":
        x, w, b = ins
        mu = x.mean(-1, keepdims=True)
        return [(x - mu) / np.sqrt(x.var(-1, keepdims=True) + a["eps"]) * w + b]
    if op == "rmsnorm":
        x, w = ins
        return [x / np.sqrt((x * x).mean(-1, keepdims=True) + a["eps"]) * w]
    if op == "add_rmsnorm":
        x, r, w = ins
        s = x + r
        return [s / np.sqrt((s * s).mean(-1, keepdims=True) + a["eps"]) * w, s]
    if op == "swiglu":
        g, u = ins
        return [g / (1 + np.exp(-g)) * u]
    if op == "geglu":
        g, u = ins
        return [0.5 * g * (1 + _np_erf(g / math.sqrt(2))) * u]
    if op == "rope":
        x, c, s = ins
        half = x.shape[-1] // 2
        rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return [x * c + rot * s]
    if op in ("softmax_plain", "softmax_causal"):
        z = ins[0] * (a["scale"] if op == "softmax_causal" else 1.0)
        if op == "softmax_causal":
            r, w = z.shape
            z = np.where(np.arange(w)[None, :] > np.arange(r)[:, None] + (w - r), -np.inf, z)
        e = np.exp(z - z.max(-1, keepdims=True))
        return [e / e.sum(-1, keepdims=True)]
    if op == "logsumexp":
        m = ins[0].max(-1, keepdims=True)
        return [np.log(np.exp(ins[0] - m).sum(-1, keepdims=True)) + m]
    raise AssertionError(f"no numpy reference for {op}")


def _as_f32(case):
    """The same case with every float tensor in f32 (tight comparison on CPU)."""
    c = copy.deepcopy(case)
    for t in c["inputs"] + c["outputs"]:
        if t["dtype"] in ("bf16", "f16"):
            t["dtype"] = "f32"
    return c


def _attention_case(t, s, hq, hkv, d, causal):
    return {"id": f"att/{t}/{s}/{hq}/{hkv}/{causal}", "op": "attention", "dtype": "f32", "phase": "decode",
            "inputs": [{"name": "q", "dtype": "f32", "shape": [t, hq, d]},
                       {"name": "k", "dtype": "f32", "shape": [s, hkv, d]},
                       {"name": "v", "dtype": "f32", "shape": [s, hkv, d]}],
            "outputs": [{"name": "y", "dtype": "f32", "shape": [t, hq, d]}],
            "attrs": {"causal": causal, "scale": 0.3, "hq": hq, "hkv": hkv, "d": d}}


def _sweep_case(op, r, w):
    c = {"id": f"sweep/{op}/{r}x{w}", "op": op, "dtype": "f32", "phase": "decode",
         "inputs": [{"name": "x", "dtype": "f32", "shape": [r, w]}],
         "outputs": [{"name": "y", "dtype": "f32", "shape": [r, 1 if op == "logsumexp" else w]}], "attrs": {}}
    if op == "softmax_causal":
        c["attrs"] = {"scale": 0.125, "causal": 1}
    return c


def _torch_cases():
    doc = sample_doc()
    cases = [(c["id"], _as_f32(c)) for c in doc["cases"]]
    for op, r, w in [("softmax_plain", 3, 7), ("softmax_causal", 5, 9), ("softmax_causal", 4, 4), ("logsumexp", 3, 1001)]:
        c = _sweep_case(op, r, w)
        cases.append((c["id"], c))
    for args in [(5, 5, 4, 2, 8, 1), (3, 11, 4, 2, 8, 1), (1, 9, 4, 1, 8, 1), (4, 9, 2, 2, 8, 0), (6, 6, 6, 3, 8, 0)]:
        c = _attention_case(*args)
        cases.append((c["id"], c))
    return cases


@pytest.fixture(scope="module")
def torch_env():
    importorskip("numpy")
    torch = importorskip("torch")
    bp.load_torch()
    return torch


def _run_impl(torch, case, feat):
    import numpy as np
    gen = torch.Generator().manual_seed(7)
    ins = bp.make_inputs(case, torch.device("cpu"), gen)
    fn, impl = bp.OPS[case["op"]].build(case, feat, torch.device("cpu"))
    outs = bp.as_tuple(fn(*ins))
    bp.check_outputs(case, outs)
    np_ins = [x.double().numpy() if x.is_floating_point() else x.numpy() for x in ins]
    want = np_reference(case, np_ins)
    ins64 = [x.double() if x.is_floating_point() else x for x in ins]
    refs = bp.OPS[case["op"]].ref(case, *ins64)
    for o, r, w in zip(outs, refs, want):
        if w.dtype == np.bool_:
            assert np.array_equal(o.numpy(), w)
            assert np.array_equal(r.numpy(), w)
            continue
        err = np.linalg.norm(o.double().numpy() - w) / max(np.linalg.norm(w), 1e-30)
        assert err < 2e-6, (case["id"], impl, err)
        err64 = np.linalg.norm(r.numpy() - w) / max(np.linalg.norm(w), 1e-30)
        assert err64 < 1e-12, (case["id"], "float64 reference", err64)
        assert np.linalg.norm(w) > 0
    return impl


@pytest.mark.parametrize("cid,case", _torch_cases(), ids=[c[0] for c in _torch_cases()])
def test_torch_impl_matches_numpy_float64(torch_env, cid, case):
    feat = bp.Features("auto")
    _run_impl(torch_env, case, feat)


@pytest.mark.parametrize("mode", ["native", "repeat"])
@pytest.mark.parametrize("shape", [(3, 11, 4, 2, 8, 1), (5, 5, 6, 2, 8, 1), (1, 7, 4, 1, 8, 1)])
def test_attention_gqa_modes(torch_env, mode, shape):
    feat = bp.Features(mode)
    if mode == "native" and not feat.sdpa_gqa:
        pytest.skip("this torch's SDPA has no enable_gqa")
    impl = _run_impl(torch_env, _attention_case(*shape), feat)
    assert (f"gqa={'enable_gqa' if mode == 'native' else 'repeat_interleave'}") in impl


def test_attention_without_sdpa_scale_kwarg(torch_env):
    feat = bp.Features("repeat")
    feat.sdpa_scale = False           # the q pre-scaling path of old torch
    impl = _run_impl(torch_env, _attention_case(3, 7, 4, 2, 8, 1), feat)
    assert "pre-scaled" in impl


def test_rmsnorm_manual_formula(torch_env):
    feat = bp.Features("auto")
    feat.rms_norm = False             # the torch < 2.4 path
    doc = sample_doc()
    for op in ("rmsnorm", "add_rmsnorm"):
        impl = _run_impl(torch_env, _as_f32(case_by_op(doc, op)), feat)
        assert "manual" in impl


def test_rope_with_f32_tables_and_bf16_x(torch_env):
    c = copy.deepcopy(case_by_op(sample_doc(), "rope"))
    c["inputs"][1]["dtype"] = c["inputs"][2]["dtype"] = "f32"
    bp.validate_case(c, 0)
    torch = torch_env
    ins = bp.make_inputs(c, torch.device("cpu"), torch.Generator().manual_seed(1))
    fn, _ = bp.OPS["rope"].build(c, bp.Features(), torch.device("cpu"))
    out = fn(*ins)
    assert out.dtype == torch.bfloat16
    ref = bp.OPS["rope"].ref(c, *[x.double() for x in ins])[0]
    assert bp.rel_err(out, ref) < 3e-2


def test_inputs_follow_the_case_attrs(torch_env):
    torch = torch_env
    doc = sample_doc()
    gen = torch.Generator().manual_seed(3)
    (x,) = bp.make_inputs(case_by_op(doc, "log2"), torch.device("cpu"), gen)
    assert float(x.min()) >= 0.5
    a, b = bp.make_inputs(case_by_op(doc, "mod"), torch.device("cpu"), gen)
    assert float(b.min()) >= 0.5 and float(a.min()) < 0      # a stays signed
    table, ids = bp.make_inputs(case_by_op(doc, "gather"), torch.device("cpu"), gen)
    assert ids.dtype == torch.int32 and int(ids.min()) >= 0 and int(ids.max()) < table.shape[0]
    (x,) = bp.make_inputs(case_by_op(doc, "exp2"), torch.device("cpu"), gen)
    assert x.dtype == torch.bfloat16 and float(x.min()) < 0 < float(x.max())


def test_rel_err_detects_wrong_results(torch_env):
    torch = torch_env
    ref = torch.randn(100, dtype=torch.float64)
    assert bp.rel_err(ref.float(), ref) < 1e-7
    assert bp.rel_err(ref * 1.1, ref) == pytest.approx(0.1, rel=1e-6)
    assert math.isnan(bp.rel_err(torch.full((100,), float("nan")), ref))
    assert bp.rel_err(torch.tensor([True, False]), torch.tensor([True, True])) == 0.5
    # Infinite reference elements (recip of an exact 0) must be matched, and are left out of the norm.
    inf = float("inf")
    ref_inf = torch.tensor([1.0, inf, -inf, 2.0], dtype=torch.float64)
    assert bp.rel_err(torch.tensor([1.0, inf, -inf, 2.0]), ref_inf) == 0.0
    assert math.isnan(bp.rel_err(torch.tensor([1.0, inf, inf, 2.0]), ref_inf))
    assert math.isnan(bp.rel_err(torch.tensor([1.0, 5.0, -inf, 2.0]), ref_inf))
    case = {"outputs": [{"name": "y", "dtype": "f32", "shape": [4]}]}
    assert bp.output_flags(case, [torch.tensor([1.0, inf, -inf, 2.0])], "eager", [ref_inf]) == []
    flags = bp.output_flags(case, [torch.tensor([inf, inf, -inf, 2.0])], "eager", [ref_inf])
    assert flags == ["eager: output y has 1 non-finite value(s) where the reference is finite"]
    assert bp.output_flags(case, [torch.zeros(4)], "eager", [ref_inf]) == ["eager: output y is all zero"]


def test_end_to_end_cpu_run(torch_env, tmp_path):
    doc = sample_doc()
    broken = copy.deepcopy(case_by_op(doc, "rmsnorm"))
    broken["id"] = "patterns/unknown/bf16"
    broken["op"] = "unknown_op"
    doc["cases"].insert(3, broken)
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps(doc))
    out = tmp_path / "peer.json"
    p = run_script("--cases", cases, "--out", out, "--device", "cpu", "--no-compile", "--reps", "3",
                   "--warmup", "1", "--host-calls", "5")
    assert p.returncode == 0, p.stderr
    peer = json.loads(out.read_text())
    assert peer["schema"] == 1 and peer["complete"] is True
    for key in ("device", "driver", "torch", "cuda", "method"):
        assert key in peer
    assert [r["id"] for r in peer["results"]] == [c["id"] for c in doc["cases"]]
    for r in peer["results"]:
        for key in ("eager_us", "compile_us", "eager_host_us", "compile_host_us", "compile_error", "eager_error"):
            assert key in r
        if r["id"] == broken["id"]:
            assert "unsupported op" in r["eager_error"]
            assert r["eager_us"] is None
            continue
        assert r["eager_error"] is None, r
        assert r["eager_us"] > 0 and r["eager_host_us"] > 0
        assert r["compile_us"] is None and r["compile_error"] == "skipped (--no-compile)"
        assert r["flags"] == [], r
        assert r["rel_err"]["eager_vs_f64"] <= r["bound"], r
    assert f"[{len(doc['cases'])}/{len(doc['cases'])}]" in p.stderr
    assert "eager us" in p.stdout and broken["id"] in p.stdout


@pytest.mark.skipif(not os.environ.get("BENCH_PEER_COMPILE_TEST"),
                    reason="torch.compile on CPU takes ~1 min; set BENCH_PEER_COMPILE_TEST=1")
def test_end_to_end_cpu_compile(torch_env, tmp_path):
    out = tmp_path / "peer.json"
    p = run_script("--cases", SAMPLE, "--out", out, "--device", "cpu", "--ids", "rmsnorm|less_than",
                   "--reps", "3", "--warmup", "1", "--host-calls", "5")
    assert p.returncode == 0, p.stderr
    for r in json.loads(out.read_text())["results"]:
        assert r["compile_error"] is None, r
        assert r["compile_us"] > 0 and r["compile_s"] > 0
        assert r["rel_err"]["compile_vs_eager"] <= r["bound"]
        assert r["flags"] == [], r


def test_resume_keeps_done_results_and_runs_the_rest(torch_env, tmp_path):
    out = tmp_path / "peer.json"
    common = ["--cases", SAMPLE, "--out", out, "--device", "cpu", "--no-compile", "--reps", "2", "--warmup", "1",
              "--host-calls", "2"]
    p = run_script(*common, "--ids", "micro/(exp2|add)/")
    assert p.returncode == 0, p.stderr
    first = {r["id"]: r for r in json.loads(out.read_text())["results"]}
    assert len(first) == 2
    p = run_script(*common, "--ids", "micro/(exp2|add|mul)/", "--resume")
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["complete"] and doc["resumed"] == 2
    got = {r["id"]: r for r in doc["results"]}
    assert set(got) == set(first) | {"micro/mul/f32/rows=8/w=64"}
    for cid, r in first.items():
        assert got[cid] == r                  # carried over unchanged, not re-measured
    assert "kept from" in p.stderr
    out.write_text("{broken")
    p = run_script(*common, "--resume")
    assert p.returncode == 2 and "--resume: cannot read" in p.stderr


def test_short_error_condenses_torch_oom_text():
    class OutOfMemoryError(RuntimeError):
        pass
    e = OutOfMemoryError("CUDA out of memory. Tried to allocate 256.00 GiB. GPU 0 has a total capacity of 139.80 GiB "
                         "of which 139.01 GiB is free. Including non-PyTorch memory, this process has 802.00 MiB "
                         "memory in use. " + "advice " * 100)
    assert bp.short_error(e) == ("out of memory: Tried to allocate 256.00 GiB; GPU 0 has a total capacity of "
                                 "139.80 GiB of which 139.01 GiB is free")
    assert bp.short_error(ValueError("x" * 1000), limit=50) == "ValueError: " + "x" * 38 + " ..."


def test_gate_ptx_assembles():
    """The gate's PTX (loaded by the driver on the GPU) is valid PTX: ptxas, where the toolkit is
    installed, assembles it for sm_80 and sm_90 (CUDA 13 has no sm_70 any more; the PTX targets sm_70 for
    older drivers), and the kernel takes the five u64
    parameters Gate.enqueue passes."""
    import re
    import shutil
    ptxas = shutil.which("ptxas") or next((p for p in ("/usr/local/cuda/bin/ptxas",) if os.path.exists(p)), None)
    if not ptxas:
        pytest.skip("ptxas not installed")
    params = re.search(r"\.entry opfuse_gate\((.*?)\)", bp.GATE_PTX, re.S).group(1)
    assert params.count(".param .u64") == 5
    for arch in ("sm_80", "sm_90"):
        p = subprocess.run([ptxas, f"-arch={arch}", "-", "-o", os.devnull], input=bp.GATE_PTX, text=True,
                           capture_output=True)
        assert p.returncode == 0, p.stderr
    broken = bp.GATE_PTX.replace("nanosleep.u32 100;", "nanosleep.u32 ;")
    assert subprocess.run([ptxas, "-arch=sm_90", "-", "-o", os.devnull], input=broken, text=True,
                          capture_output=True).returncode != 0
