"""Tests of tools/kernel_trace_summary.py (decode-step summary of a dev/cupti_trace kernel CSV).

Run: python3 -m pytest -q tests/python/test_kernel_trace_summary.py   (CPU only, stdlib + pytest).

A synthetic trace, written out of order: one warm-up kernel, then two steps of three kernels (a
GemvKernel with template arguments, a quoted name with commas, a plain name), run through the real
command line; the --json numbers and the printed table are checked against values worked out by hand.
"""
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "kernel_trace_summary.py"

HEADER = "start_ns,end_ns,duration_ns,graph_node_id,grid_x,grid_y,grid_z,block_x,registers,name\n"
GEMV = '"void opfuse::kernels::(anonymous namespace)::GemvKernel<__half, 1, false, 4, true, true, 1>' \
       '(opfuse::kernels::(anonymous namespace)::GemvParams<__half>)"'
FOO = '"void opfuse::kernels::<unnamed>::Foo<int, 2>(int, float)"'


def row(start, end, name):
    return f"{start},{end},{end - start},7,64,1,1,128,32,{name}\n"


ROWS = [  # (start, end, name) in ns; steps: [1000, 5000] and [10000, 14500]
    (10000, 11800, GEMV), (11500, 13000, FOO), (13500, 14500, "bar"),
    (1000, 3000, GEMV), (2500, 4000, FOO), (4500, 5000, "bar"),
    (0, 500, "warmup"),
]


def run(args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_two_steps(tmp_path):
    csv_path, json_path = tmp_path / "trace.csv", tmp_path / "out.json"
    csv_path.write_text(HEADER + "".join(row(*r) for r in ROWS))
    p = run([csv_path, "--per-step", 3, "--json", json_path])
    assert p.returncode == 0, p.stderr
    out = json.loads(json_path.read_text())
    assert out["steps"] == 2 and out["kernels_per_step"] == 3  # the warm-up kernel is left out
    assert out["span_us"] == pytest.approx((4.0 + 4.5) / 2)
    assert out["sum_us"] == pytest.approx((4.0 + 4.3) / 2)
    k = out["kernels"]
    assert set(k) == {"GemvKernel[norm+rope mr1]", "Foo", "bar"}
    assert k["GemvKernel[norm+rope mr1]"]["mean_us"] == pytest.approx(1.9)
    assert k["Foo"]["count_per_step"] == 1 and k["Foo"]["mean_us"] == pytest.approx(1.5)
    assert k["bar"]["us_per_step"] == pytest.approx(0.75)
    first = out["first"]
    assert [f["kernel"] for f in first] == ["GemvKernel[norm+rope mr1]", "Foo", "bar"]
    assert [f["gap_us"] for f in first] == pytest.approx([5.0, -0.3, 0.5])  # Foo overlaps the GEMV
    assert "| GemvKernel[norm+rope mr1] | 1 | 1.90 | 1.9 | 44.7% |" in p.stdout
    assert "2 steps of 3 kernels: mean span 4.2 us, mean kernel time 4.2 us" in p.stdout


@pytest.mark.parametrize("name, short", [
    ("void opfuse::kernels::<unnamed>::GemvKernel<__nv_bfloat16, 2, 1, 4, 1, 0, 1>(P)", "GemvKernel[swiglu+norm mr2]"),
    ("void opfuse::kernels::<unnamed>::GemvKernel<__half, 1, false, 8, false, false, 4>(P)", "GemvKernel[plain ks4 mr1]"),
    ("void at::native::kernel<4, at::F<float>>(int, at::F<float>)", "at::native::kernel"),
])
def test_short_names(name, short):
    import importlib.util
    spec = importlib.util.spec_from_file_location("kernel_trace_summary", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.short(name) == short


def test_too_short(tmp_path):
    csv_path = tmp_path / "trace.csv"
    csv_path.write_text(HEADER + row(0, 500, "warmup") + row(600, 900, "bar"))
    p = run([csv_path, "--per-step", 3])
    assert p.returncode != 0
    assert "2 kernels, fewer than one step of 3" in p.stderr


def test_by_name(tmp_path):
    # Sorted by start: warmup [0,500], GEMV [1000,3000], FOO [2500,4000], bar [4500,5000], GEMV
    # [10000,11800], FOO [11500,13000], bar [13500,14500]. Gaps from the previous kernel's end:
    # GEMV 0.5 and 5.0, FOO -0.5 and -0.3, bar 0.5 and 0.5.
    csv_path, json_path = tmp_path / "trace.csv", tmp_path / "out.json"
    csv_path.write_text(HEADER + "".join(row(*r) for r in ROWS))
    p = run([csv_path, "--by-name", "--min-count", 2, "--json", json_path])
    assert p.returncode == 0, p.stderr
    out = json.loads(json_path.read_text())
    assert set(out) == {"GemvKernel[norm+rope mr1]", "Foo", "bar"}  # warmup: seen once
    g = out["GemvKernel[norm+rope mr1]"]
    assert g["count"] == 2 and g["min_us"] == pytest.approx(1.8) and g["median_us"] == pytest.approx(2.0)
    assert g["median_gap_us"] == pytest.approx(5.0)  # upper median of [0.5, 5.0]
    assert out["Foo"]["median_gap_us"] == pytest.approx(-0.3)
    assert out["bar"]["median_us"] == pytest.approx(1.0) and out["bar"]["min_us"] == pytest.approx(0.5)
    assert "| bar | 2 | 1.00 | 0.50 | 1.00 | 0.50 |" in p.stdout
    p = run([csv_path, "--by-name", "--match", "^Foo$"])
    assert p.returncode == 0, p.stderr
    assert "| Foo | 2 |" in p.stdout and "bar" not in p.stdout
    p = run([csv_path, "--by-name", "--after", "^Foo$", "--json", json_path])  # only the bars
    assert p.returncode == 0, p.stderr
    assert set(json.loads(json_path.read_text())) == {"bar"}
    p = run([csv_path, "--by-name", "--match", "("])
    assert p.returncode != 0 and "--match" in p.stderr
    p = run([csv_path])
    assert p.returncode != 0 and "--per-step is required" in p.stderr


def test_device_filter_splits_a_multi_gpu_trace(tmp_path):
    # Two GPUs' kernels interleaved in time (tensor parallel: rank r on GPU r), with the device column.
    header = "start_ns,end_ns,duration_ns,device,graph_node_id,grid_x,grid_y,grid_z,block_x,registers,name\n"
    def drow(dev, start, end, name):
        return f"{start},{end},{end - start},{dev},7,64,1,1,128,32,{name}\n"
    rows = [drow(0, 1000, 3000, "a"), drow(1, 1100, 1600, "b"), drow(0, 4000, 5000, "c"), drow(1, 2000, 6000, "d")]
    csv_path = tmp_path / "trace.csv"
    csv_path.write_text(header + "".join(rows))
    for dev, span, names in ((0, 4.0, {"a", "c"}), (1, 4.9, {"b", "d"})):
        json_path = tmp_path / f"out{dev}.json"
        p = run([csv_path, "--per-step", 2, "--steps", 1, "--device", dev, "--json", json_path])
        assert p.returncode == 0, p.stderr
        out = json.loads(json_path.read_text())
        assert set(out["kernels"]) == names
        assert out["span_us"] == pytest.approx(span)
    # Without --device both GPUs' kernels count, merged by start time.
    p = run([csv_path, "--per-step", 4, "--steps", 1, "--json", tmp_path / "all.json"])
    assert p.returncode == 0, p.stderr
    assert set(json.loads((tmp_path / "all.json").read_text())["kernels"]) == {"a", "b", "c", "d"}
