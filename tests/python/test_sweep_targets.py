"""tools/sweep_targets.py: issue 30's targets computed from a bench report — the best correct fused
variant per case, the copy fraction of cases >= 8 MB, the torch.compile ratios, vocabulary-wide rows —
and bad input exits 2."""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "sweep_targets.py"


def case(cid, rows, width, nbytes, lib_us, jit_us, copy_us, compile_us, correct=True):
    return {"id": cid, "op": "rmsnorm", "rows": rows, "width": width, "bytes": nbytes, "copy_same_us": copy_us,
            "variants": {"library": {"us": lib_us, "correct": correct}, "jit": {"us": jit_us, "correct": correct}},
            "peer": {"compile_us": compile_us, "compile_error": None}}


def run(tmp_path, report, *args):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(report) if not isinstance(report, str) else report)
    out = tmp_path / "t.json"
    r = subprocess.run([sys.executable, str(SCRIPT), str(p), "--json", str(out), *args], capture_output=True, text=True)
    return r, (json.loads(out.read_text()) if out.exists() else None)


def test_targets_from_a_report(tmp_path):
    big = 16 << 20
    report = {"device": {"name": "fake"}, "command": "opfuse bench ops --shapes random:3:1", "cases": [
        case("a", 4096, 4096, big, 10.0, 12.0, 9.5, 11.0),    # best = library 10: copy 0.95, 0.909 x compile
        case("b", 2, 128256, big, 30.0, 20.0, 5.0, 10.0),     # best = jit 20: copy 0.25, 2 x compile, vocab 4x
        case("c", 1, 64, 256, 3.0, 4.0, 2.0, 3.0),            # small: not in the copy targets
    ]}
    r, j = run(tmp_path, report)
    assert r.returncode == 0, r.stderr
    t = j["targets"]
    assert t["copy_floor"]["cases"] == 2 and not t["copy_floor"]["met"]
    assert abs(t["copy_floor"]["worst"] - 0.25) < 1e-9
    assert t["vs_compile_max"]["misses"] == 1 and abs(t["vs_compile_max"]["worst"] - 2.0) < 1e-9
    gm = (10 / 11 * 2.0 * 1.0) ** (1 / 3)
    assert abs(t["vs_compile_gm"]["value"] - gm) < 1e-9
    assert t["vocab_rows"]["cases"] == 1 and abs(t["vocab_rows"]["worst"] - 4.0) < 1e-9
    assert {c["id"]: c["variant"] for c in j["cases"]} == {"a": "library", "b": "jit", "c": "library"}
    r, _ = run(tmp_path, report, "--strict")
    assert r.returncode == 1


def test_wrong_variants_never_count(tmp_path):
    report = {"cases": [case("w", 4096, 4096, 16 << 20, 1.0, 1.0, 9.0, 9.0, correct=False)]}
    r, j = run(tmp_path, report)
    assert r.returncode == 0
    assert j["no_correct_variant"] == ["w"]
    assert j["targets"]["copy_floor"]["worst"] == 0.0
    assert j["targets"]["vs_compile_gm"]["cases"] == 0 and not j["targets"]["vs_compile_gm"]["met"]


def test_bad_input_exits_2(tmp_path):
    r, _ = run(tmp_path, "{not json")
    assert r.returncode == 2 and "sweep_targets.py" in r.stderr
    r, _ = run(tmp_path, {"cases": 3})
    assert r.returncode == 2
