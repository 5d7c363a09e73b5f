"""Tests of tools/before_after_table.py (the after/before table of tools/before_after.sh's runs).

Run: python3 -m pytest -q tests/python/test_before_after_table.py   (CPU only, stdlib + pytest).

Three synthetic `opfuse bench ops` reports (before, after, also) with times chosen so that every
ratio is known by hand; the real command line prints the geometric mean, range and per-case rows for
the default pair and for --pair, and refuses a missing report with exit 2.
"""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "before_after_table.py"


def report(d, name, times, correct=True):
    (d / f"ops_{name}").mkdir()
    cases = [{"id": cid, "variants": {"jit": {"us": us, "correct": correct}}} for cid, us in times.items()]
    (d / f"ops_{name}" / "bench_report.json").write_text(json.dumps({"cases": cases}))


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def rows(out, variant="jit"):
    return [line for line in out.splitlines() if line.startswith(f"| {variant} |")]


def test_default_pair_and_named_pair(tmp_path):
    report(tmp_path, "before", {"a": 10.0, "b": 20.0})
    report(tmp_path, "after", {"a": 5.0, "b": 40.0})           # ratios 0.5 and 2.0: geomean 1.000
    report(tmp_path, "also", {"a": 2.5, "b": 20.0}, correct=False)  # vs after: 0.5, 0.5; vs before 0.25, 1.0
    r = run(tmp_path, "--per-case")
    assert r.returncode == 0, r.stderr
    assert rows(r.stdout) == ["| jit | 2 | 1.000 | 0.500 | 2.000 | 0 |"]
    assert "| b | jit | 20.0 | 40.0 | 2.000 |" in r.stdout
    r = run(tmp_path, "--pair", "after", "also")
    assert r.returncode == 0, r.stderr
    assert "also against after" in r.stdout
    assert rows(r.stdout) == ["| jit | 2 | 0.500 | 0.500 | 0.500 | 2 |"]
    r = run(tmp_path, "--pair", "before", "also", "--per-case")
    assert rows(r.stdout) == ["| jit | 2 | 0.500 | 0.250 | 1.000 | 2 |"]
    assert "| a | jit | 10.0 | 2.5 | 0.250 |" in r.stdout


def test_missing_run_or_pair_argument_is_exit_2(tmp_path):
    report(tmp_path, "before", {"a": 1.0})
    r = run(tmp_path, "--pair", "before", "nope")
    assert r.returncode == 2 and "ops_nope" in r.stderr
    r = run(tmp_path, "--pair", "before")
    assert r.returncode == 2
