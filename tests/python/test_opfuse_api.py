"""The opfuse Python API on the CPU (numpy): config, graphs, dispatch, should_fuse, cache, errors.

Every dispatch result is compared with a numpy reference on fresh signed random inputs.
"""
import math

import numpy as np
import pytest

from opfuse_test_util import import_opfuse, rel_err, signed_random

opfuse = import_opfuse()
from opfuse import FusionConfig, FusionScheduler, OpNode, SubGraph  # noqa: E402
from opfuse import patterns  # noqa: E402

F32_BOUND = 1e-5


def silu(x):
    return x / (1.0 + np.exp(-x.astype(np.float64)))


def rms_norm(x, w, eps):
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# ------------------------------------------------------------------ FusionConfig
def test_config_has_the_seed_defaults():
    c = FusionConfig()
    assert (c.enable_fusion, c.enable_cache, c.min_tensor_elements, c.min_nodes_for_fusion,
            c.fallback_on_error, c.debug_mode) == (True, True, 1024, 2, True, False)
    assert (c.max_group_size, c.disabled, c.device, c.variant) == (64, (), "auto", "auto")


def test_config_rejects_bad_values():
    with pytest.raises(TypeError, match="enable_fusion must be a bool"):
        FusionConfig(enable_fusion="yes")
    with pytest.raises(ValueError, match="min_nodes_for_fusion must be >= 1"):
        FusionConfig(min_nodes_for_fusion=0)
    with pytest.raises(ValueError, match="device"):
        FusionConfig(device="tpu")
    with pytest.raises(ValueError, match="swigluu") as e:
        FusionConfig(disabled=("swigluu",))
    assert "swiglu" in str(e.value).replace("swigluu", "")  # the message lists the valid names
    assert "swiglu" in FusionConfig.known_disable_names()


def test_mutated_config_is_checked_again_by_the_scheduler():
    c = FusionConfig()
    c.variant = "fastest"
    with pytest.raises(ValueError, match="variant"):
        FusionScheduler(c)


# ------------------------------------------------------------------ OpNode / SubGraph
def test_subgraph_structure_errors_name_the_node():
    with pytest.raises(ValueError, match="unknown op 'sigmoidd'"):
        SubGraph((OpNode("sigmoidd", ("x",), ("y",)),), ("x",), ("y",))
    with pytest.raises(ValueError, match="input 'z' is not a graph input or an earlier node's output"):
        SubGraph((OpNode("mul", ("x", "z"), ("y",)),), ("x",), ("y",))
    with pytest.raises(ValueError, match="takes 2 inputs, got 1"):
        SubGraph((OpNode("mul", ("x",), ("y",)),), ("x",), ("y",))
    with pytest.raises(ValueError, match="defined twice"):
        SubGraph((OpNode("neg", ("x",), ("y",)), OpNode("neg", ("x",), ("y",))), ("x",), ("y",))
    with pytest.raises(ValueError, match="output 'w' is never defined"):
        SubGraph((OpNode("neg", ("x",), ("y",)),), ("x",), ("w",))
    with pytest.raises(TypeError, match="not the string"):
        OpNode("neg", "x", ("y",))


def test_subgraphs_are_values():
    a, b = patterns.create_swiglu_pattern(), patterns.create_swiglu_pattern()
    assert a == b and hash(a) == hash(b) and len(a) == 2
    assert a != patterns.create_geglu_pattern()


def test_cache_key_tracks_structure_dtypes_and_shapes():
    g = patterns.create_swiglu_pattern()
    k = g.cache_key(["f32", "f32"], [(4, 8), (4, 8)])
    assert k == g.cache_key({"gate": np.float32, "up": "float32"}, {"gate": [4, 8], "up": (4, 8)})
    assert k != g.cache_key(["f16", "f16"], [(4, 8), (4, 8)])
    assert k != g.cache_key(["f32", "f32"], [(4, 16), (4, 16)])
    assert k != patterns.create_geglu_pattern().cache_key(["f32", "f32"], [(4, 8), (4, 8)])
    e1 = patterns.create_add_rms_norm_pattern(eps=1e-6).cache_key(["f32"] * 3, [(2, 8), (2, 8), (8,)])
    e2 = patterns.create_add_rms_norm_pattern(eps=1e-5).cache_key(["f32"] * 3, [(2, 8), (2, 8), (8,)])
    assert e1 != e2
    with pytest.raises(ValueError, match="float64"):
        g.cache_key(["float64", "f32"], [(4, 8), (4, 8)])
    with pytest.raises(ValueError, match="1 given for 2 inputs"):
        g.cache_key(["f32"], [(4, 8)])


def test_to_text_is_the_verified_graph():
    text = patterns.create_swiglu_pattern().to_text(["f16", "f16"], [(3, 64), (3, 64)])
    assert "silu" in text and "f16[3, 64]" in text


# ------------------------------------------------------------------ dispatch (numpy)
@pytest.mark.parametrize("enable_fusion", [True, False])
def test_seed_swiglu_dispatch_matches_numpy(rng, enable_fusion):
    sched = FusionScheduler(FusionConfig(enable_fusion=enable_fusion))
    gate, up = signed_random(rng, (32, 256), scale=4), signed_random(rng, (32, 256))
    gate0, up0 = gate.copy(), up.copy()
    out = sched.dispatch(patterns.create_swiglu_pattern(), {"gate": gate, "up": up})
    assert list(out) == ["output"]
    y = out["output"]
    assert y.dtype == np.float32 and y.shape == (32, 256)
    assert rel_err(y, silu(gate) * up) < F32_BOUND
    assert np.array_equal(gate, gate0) and np.array_equal(up, up0), "inputs were mutated"


def test_seed_fallback_example(rng):
    """The seed's first example: fusion off, a hand-written silu/mul graph."""
    graph = SubGraph(
        nodes=(OpNode("silu", ("x",), ("y1",)), OpNode("mul", ("y1", "x"), ("y2",))),
        input_names=("x",),
        output_names=("y2",),
    )
    x = signed_random(rng, (16, 128), scale=3)
    out = FusionScheduler(FusionConfig(enable_fusion=False)).dispatch(graph, {"x": x})
    assert rel_err(out["y2"], silu(x) * x) < F32_BOUND


def test_add_rms_norm_with_residual_out(rng):
    g = patterns.create_add_rms_norm_pattern(eps=1e-5, with_residual_out=True)
    x, r, w = signed_random(rng, (8, 512)), signed_random(rng, (8, 512)), signed_random(rng, (512,))
    out = FusionScheduler().dispatch(g, {"x": x, "residual": r, "weight": w})
    assert list(out) == ["output", "sum"]
    s = x.astype(np.float64) + r
    assert rel_err(out["sum"], s) < F32_BOUND
    assert rel_err(out["output"], rms_norm(s, w, 1e-5)) < F32_BOUND
    d = FusionScheduler().should_fuse(g, {"x": (8, 512), "residual": (8, 512), "weight": (512,)})
    assert d.fuse and any(gr["kind"] == "pattern:add_rms_norm" and gr["fuse"] for gr in d.groups), d.groups


def _gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _rope(x, c, s):
    h = x.shape[-1] // 2
    return x * c + np.concatenate([-x[..., h:], x[..., :h]], axis=-1) * s


# name -> (factory kwargs, inputs builder, numpy reference)
PATTERN_CASES = {
    "swiglu": ({}, lambda r: {"gate": signed_random(r, (64, 128), scale=4), "up": signed_random(r, (64, 128))},
               lambda i: silu(i["gate"]) * i["up"]),
    "geglu": ({}, lambda r: {"gate": signed_random(r, (64, 128), scale=3), "up": signed_random(r, (64, 128))},
              lambda i: _gelu(i["gate"].astype(np.float64)) * i["up"]),
    "add_rms_norm": ({}, lambda r: {"x": signed_random(r, (16, 256)), "residual": signed_random(r, (16, 256)),
                                    "weight": signed_random(r, (256,))},
                     lambda i: rms_norm(i["x"].astype(np.float64) + i["residual"], i["weight"], 1e-6)),
    "rms_norm": ({}, lambda r: {"x": signed_random(r, (16, 256)), "weight": signed_random(r, (256,))},
                 lambda i: rms_norm(i["x"], i["weight"], 1e-6)),
    "layer_norm": ({}, lambda r: {"x": signed_random(r, (16, 256), scale=2), "weight": signed_random(r, (256,)),
                                  "bias": signed_random(r, (256,))},
                   lambda i: ((i["x"] - i["x"].mean(-1, keepdims=True))
                              / np.sqrt(i["x"].astype(np.float64).var(-1, keepdims=True) + 1e-5)
                              * i["weight"] + i["bias"])),
    "softmax": ({"scale": 0.125}, lambda r: {"x": signed_random(r, (16, 256), scale=8)},
                lambda i: _softmax(i["x"].astype(np.float64) * 0.125)),
    "rope": ({"head_dim": 64}, lambda r: {"x": signed_random(r, (16, 4, 64)), "cos": signed_random(r, (16, 1, 64)),
                                          "sin": signed_random(r, (16, 1, 64))},
             lambda i: _rope(i["x"].astype(np.float64), i["cos"], i["sin"])),
}


def test_every_pattern_has_a_case():
    assert set(PATTERN_CASES) == set(patterns.ALL_PATTERNS)
    for name in patterns.ALL_PATTERNS:
        assert name in FusionConfig.known_disable_names(), name


@pytest.mark.parametrize("name", sorted(PATTERN_CASES))
def test_pattern_is_found_and_matches_numpy(rng, name):
    kwargs, make_inputs, reference = PATTERN_CASES[name]
    graph = patterns.ALL_PATTERNS[name](**kwargs)
    inputs = make_inputs(rng)
    sched = FusionScheduler()
    d = sched.should_fuse(graph, {k: v.shape for k, v in inputs.items()})
    assert d.fuse, d.reason
    assert [g["kind"] for g in d.groups if g["fuse"]] == [f"pattern:{name}"], d.groups
    out = sched.dispatch(graph, inputs)
    assert rel_err(out["output"], reference(inputs)) < F32_BOUND
    # the kill switch turns the pattern off, and the answer stays the same
    off = FusionScheduler(FusionConfig(disabled=(name,)))
    groups = off.should_fuse(graph, {k: v.shape for k, v in inputs.items()}).groups
    assert not any(g["kind"] == f"pattern:{name}" and g["fuse"] for g in groups), groups
    if name != "add_rms_norm":  # its graph holds an rms_norm op: with the pattern off, nothing "would have matched"
        assert any(f"pattern {name} disabled" in g["reason"] for g in groups), groups
    assert rel_err(off.dispatch(graph, inputs)["output"], reference(inputs)) < F32_BOUND


def test_f16_and_int_dtypes(rng):
    g = patterns.create_swiglu_pattern()
    gate, up = signed_random(rng, (4, 300), np.float16, 4), signed_random(rng, (4, 300), np.float16)
    y = FusionScheduler().dispatch(g, {"gate": gate, "up": up})["output"]
    assert y.dtype == np.float16
    assert rel_err(y, silu(gate.astype(np.float32)) * up.astype(np.float32)) < 2e-3
    add = SubGraph((OpNode("add", ("a", "b"), ("c",)),), ("a", "b"), ("c",))
    a, b = rng.integers(-1000, 1000, (5, 7), dtype=np.int32), rng.integers(-1000, 1000, (5, 7), dtype=np.int32)
    c = FusionScheduler().dispatch(add, {"a": a, "b": b})["c"]
    assert c.dtype == np.int32 and np.array_equal(c, a + b)


# ------------------------------------------------------------------ should_fuse
def test_should_fuse_reasons():
    g = patterns.create_swiglu_pattern()
    big = {"gate": (32, 4096), "up": (32, 4096)}
    d = FusionScheduler().should_fuse(g, big)
    assert d.fuse and bool(d) and "swiglu" in d.reason and d.groups[0]["variant"] in ("library", "jit")
    small = FusionScheduler().should_fuse(g, {"gate": (2, 4), "up": (2, 4)})
    assert not small.fuse and "1024" in small.reason, small.reason
    off = FusionScheduler(FusionConfig(enable_fusion=False)).should_fuse(g, big)
    assert not off.fuse and off.reason
    single = FusionScheduler().should_fuse(patterns.create_gelu_pattern(), {"x": (64, 64)})
    assert not single.fuse and single.reason
    assert "bf16" in FusionScheduler().should_fuse(g, big, dtypes={"gate": "bf16", "up": "bf16"}).graph


def test_should_fuse_profile_must_exist():
    with pytest.raises(LookupError, match="no_such_profile.json"):
        FusionScheduler(FusionConfig(profile="/nonexistent/no_such_profile.json")).should_fuse(
            patterns.create_swiglu_pattern(), {"gate": (32, 4096), "up": (32, 4096)})


# ------------------------------------------------------------------ cache
def test_program_cache_counts(rng):
    sched = FusionScheduler()
    g = patterns.create_swiglu_pattern()
    a = {"gate": signed_random(rng, (8, 256)), "up": signed_random(rng, (8, 256))}
    sched.dispatch(g, a)
    sched.dispatch(g, a)
    s = sched.get_cache_stats()
    assert (s["misses"], s["hits"], s["compiles"], s["size"]) == (1, 1, 1, 1)
    assert s["compile_ms"] > 0 and "jit" in s and "compiles" in s["jit"]
    assert sched.last_dispatch["cache_hit"] is True
    sched.dispatch(g, {"gate": signed_random(rng, (4, 256)), "up": signed_random(rng, (4, 256))})
    assert sched.get_cache_stats()["size"] == 2
    sched.clear_cache()
    s = sched.get_cache_stats()
    assert s["size"] == 0 and s["misses"] == 2
    sched.dispatch(g, a)
    assert sched.get_cache_stats()["misses"] == 3


def test_cache_off_compiles_every_time(rng):
    sched = FusionScheduler(FusionConfig(enable_cache=False))
    g = patterns.create_swiglu_pattern()
    a = {"gate": signed_random(rng, (8, 256)), "up": signed_random(rng, (8, 256))}
    for _ in range(3):
        sched.dispatch(g, a)
    s = sched.get_cache_stats()
    assert (s["compiles"], s["hits"], s["size"]) == (3, 0, 0)


def test_debug_mode_logs_hits_and_misses(rng, capsys):
    sched = FusionScheduler(FusionConfig(debug_mode=True))
    g = patterns.create_swiglu_pattern()
    a = {"gate": signed_random(rng, (8, 256)), "up": signed_random(rng, (8, 256))}
    sched.dispatch(g, a)
    sched.dispatch(g, a)
    err = capsys.readouterr().err
    assert "[FusionScheduler] Cache miss" in err and "[FusionScheduler] Cache hit" in err
    assert "pattern:swiglu" in err


# ------------------------------------------------------------------ errors
def test_bad_inputs_raise_with_the_cpp_message(rng):
    sched = FusionScheduler()
    g = patterns.create_swiglu_pattern()
    x = signed_random(rng, (4, 8))
    with pytest.raises(ValueError, match="missing inputs \\['up'\\]"):
        sched.dispatch(g, {"gate": x})
    with pytest.raises(ValueError, match="shape|broadcast|match"):   # the verifier's message
        sched.dispatch(g, {"gate": x, "up": signed_random(rng, (4, 9))})
    with pytest.raises(ValueError, match="dtype|f16|f32"):
        sched.dispatch(g, {"gate": x, "up": x.astype(np.float16)})
    with pytest.raises(ValueError, match="float64"):
        sched.dispatch(g, {"gate": x.astype(np.float64), "up": x.astype(np.float64)})
    with pytest.raises(TypeError, match="numpy arrays or DLPack tensors"):
        sched.dispatch(g, {"gate": [[1.0]], "up": x})
    with pytest.raises(ValueError, match="device is 'cuda'"):
        FusionScheduler(FusionConfig(device="cuda")).dispatch(g, {"gate": x, "up": x})
    with pytest.raises(TypeError, match="SubGraph"):
        sched.dispatch("silu", {"gate": x})
    bad_attr = SubGraph((OpNode("reshape", ("x",), ("y",), {"shape": [5, 5]}),), ("x",), ("y",))
    with pytest.raises(ValueError, match="reshape"):
        sched.dispatch(bad_attr, {"x": x})


def test_strided_numpy_input_is_read_correctly(rng):
    x = signed_random(rng, (64, 64), scale=3)
    out = FusionScheduler().dispatch(patterns.create_gelu_pattern(), {"x": x.T})
    assert rel_err(out["output"], _gelu(x.T.astype(np.float64))) < F32_BOUND


def test_unavailable_is_a_runtime_error():
    assert issubclass(opfuse.UnavailableError, RuntimeError)
    ok, reason = opfuse.cuda_available()
    if ok:
        pytest.skip("a CUDA device is present")
    assert "no CUDA device" in reason
    g = patterns.create_swiglu_pattern()
    with pytest.raises(opfuse.UnavailableError, match="no CUDA device"):
        opfuse._opfuse.Program(g.nodes, g.input_names, g.output_names, g.name,
                               [("f32", (4, 8)), ("f32", (4, 8))], FusionConfig()._to_native(), "cuda", "auto")


def test_engine_tensor_parallel_cpu():
    if not opfuse._opfuse.has_engine:
        pytest.skip("module built without src/model/llama/engine.h")
    one = opfuse.Engine(backend="cpu").generate([1, 2, 3], max_new_tokens=5)
    eng = opfuse.Engine(backend="cpu", tensor_parallel=2)
    assert eng.tensor_parallel == 2
    assert eng.generate([1, 2, 3], max_new_tokens=5)["tokens"] == one["tokens"]
    with pytest.raises(ValueError, match="num_attention_heads 4 is not a multiple of 3"):
        opfuse.Engine(backend="cpu", tensor_parallel=3)


def test_op_names_come_from_ops_def():
    names = opfuse.op_names()
    assert {"silu", "mul", "rms_norm", "add_rms_norm", "swiglu", "matmul"} <= set(names)


# ------------------------------------------------------------------ Engine
def test_engine_tiny_cpu():
    if not opfuse._opfuse.has_engine:
        pytest.skip("module built without src/model/llama/engine.h")
    eng = opfuse.Engine(backend="cpu", strategy="always_fuse")
    a = eng.generate([1, 2, 3], max_new_tokens=4)
    b = opfuse.Engine(backend="cpu", strategy="always_fuse").generate([[1, 2, 3]], max_new_tokens=4)
    assert len(a["tokens"]) == 1 and len(a["tokens"][0]) == 4
    assert a["tokens"] == b["tokens"], "greedy decoding with the same seed must repeat"
    assert a["decode_steps"] >= 3 and a["decode_ms"] > 0
    with pytest.raises(ValueError, match="context"):
        eng.generate([1] * (eng.context + 1), max_new_tokens=1)
    with pytest.raises(ValueError, match="strateg"):
        opfuse.Engine(backend="cpu", strategy="sometimes")
