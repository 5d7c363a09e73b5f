"""tools/prefill_table.py: issue 32 item 4's table — matmul and attention TFLOP/s of prefill cases
against the run's GEMM ceiling (the best variant that passed its check, torch eager beside it), whole
prefills' model TFLOP/s from e2e reports — and bad input exits 2."""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "prefill_table.py"
TINY = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
        "num_key_value_heads": 4, "vocab_size": 32000}


def case(op, rows, width, flops, variants, eager_us=None, phase="prefill"):
    return {"id": f"patterns/{op}/bf16/rows={rows}/h={width}", "op": op, "rows": rows, "width": width, "phase": phase,
            "flops": flops, "variants": variants, "peer": {"eager_us": eager_us, "compile_us": None}}


def ops_report():
    return {"dtype": "bf16", "device": {"name": "fake"}, "ceilings": {"gemm_tflops": {"bf16": 800.0}}, "cases": [
        # the failed variant is faster but never counts: best = jit at 2 us -> 1e12 / 2e-6 / 1e12 = 500 TFLOP/s
        case("matmul", 128, 2048, 1e9, {"library": {"us": 1.0, "correct": False}, "jit": {"us": 2.0, "correct": True}},
             eager_us=4.0),
        case("attention", 128, 2048, 2e8, {"library": {"us": 1.0, "correct": True}}),
        case("matmul", 1, 2048, 1e6, {"library": {"us": 1.0, "correct": True}}, phase="decode"),  # not prefill
    ]}


def e2e_report(ms, model="builtin:tinyllama-1.1b"):
    return {"config": {"model": model}, "results": {"always_fuse": {
        "[prefill=128, decode=0]": {"prefill_ms": ms, "batch": 1, "kernels_per_prefill": 315},
        "[prefill=128, decode=32]": {"prefill_ms": 99.0, "batch": 1}}}}


def model_flops(c, length):
    h, f, d = c["hidden_size"], c["intermediate_size"], c["hidden_size"] // c["num_attention_heads"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    proj = h * heads * d + 2 * h * kv * d + heads * d * h + 3 * h * f
    return c["num_hidden_layers"] * (2 * proj * length + 4 * heads * d * length * (length + 1) // 2) + 2 * c["vocab_size"] * h


def run(tmp_path, ops, *e2e):
    o = tmp_path / "ops.json"
    o.write_text(json.dumps(ops) if not isinstance(ops, str) else ops)
    args = [sys.executable, str(SCRIPT), "--ops", str(o), "--json", str(tmp_path / "s.json")]
    for i, (name, rep, cfg) in enumerate(e2e):
        p = tmp_path / f"e{i}.json"
        p.write_text(json.dumps(rep))
        spec = f"{name}={p}"
        if cfg is not None:
            c = tmp_path / f"c{i}.json"
            c.write_text(json.dumps(cfg))
            spec += f"@{c}"
        args += ["--e2e", spec]
    r = subprocess.run(args, capture_output=True, text=True)
    s = tmp_path / "s.json"
    return r, (json.loads(s.read_text()) if r.returncode == 0 and s.exists() else None)


def test_rows_from_reports(tmp_path):
    r, j = run(tmp_path, ops_report(), ("tiny", e2e_report(2.0), None), ("same", e2e_report(4.0, "x"), TINY))
    assert r.returncode == 0, r.stderr
    assert j["gemm_ceiling_tflops"] == 800.0
    assert [row["length"] for row in j["rows"]] == [128]  # the decode case and the decode=32 e2e case are left out
    row = j["rows"][0]
    assert row["matmul_h2048"]["variant"] == "jit" and abs(row["matmul_h2048"]["tflops"] - 500.0) < 1e-9
    assert abs(row["matmul_h2048"]["torch_tflops"] - 250.0) < 1e-9
    assert abs(row["attention"]["tflops"] - 200.0) < 1e-9
    want = model_flops(TINY, 128) / 2.0 / 1e9
    assert abs(row["e2e"]["tiny"]["tflops"] - want) < 1e-6
    assert abs(row["e2e"]["same"]["tflops"] - want / 2) < 1e-6  # the given config, twice the time
    assert "| 128 | 500 (62%) / torch 250 |" in r.stdout


def test_bad_input_exits_2(tmp_path):
    r, _ = run(tmp_path, "{not json")
    assert r.returncode == 2 and "prefill_table:" in r.stderr
    r, _ = run(tmp_path, {"cases": []})  # no ceilings
    assert r.returncode == 2 and "ceilings" in r.stderr
    r, _ = run(tmp_path, ops_report(), ("hf", e2e_report(1.0, "some/checkpoint"), None))  # sizes unknown
    assert r.returncode == 2 and "config.json" in r.stderr
