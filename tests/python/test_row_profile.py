"""Tests of tools/row_profile.py (the table of tools/row_profile.sh's Nsight Compute CSVs).

Run: python3 -m pytest -q tests/python/test_row_profile.py   (CPU only, stdlib + pytest).

Synthetic `ncu --csv --page raw` files (a log line before the header, a units row, one or two kernel
rows, numbers with thousands separators) and a bench report giving the case's bytes, run through the
real command line; the --json numbers and the printed table are checked against values worked out by
hand.
"""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "row_profile.py"

COLS = ["ID", "Kernel Name", "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
        "lts__t_bytes.sum", "smsp__inst_executed.sum", "smsp__issue_active.avg.pct_of_peak_sustained_active",
        "sm__warps_active.avg.pct_of_peak_sustained_active", "launch__registers_per_thread", "launch__block_size",
        "launch__grid_size", "launch__cluster_dim_x", "launch__shared_mem_per_block_dynamic",
        "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio"]
UNITS = ["", "", "ns", "byte", "Mbyte", "byte", "inst", "%", "%", "register/thread", "", "", "", "byte",
         "ratio", "ratio", "ratio", "ratio", "ratio"]


def csv_text(rows):
    q = lambda cells: ",".join(f'"{c}"' for c in cells) + "\n"
    return "==PROF== Connected to process 1\n" + q(COLS) + q(UNITS) + "".join(q(r) for r in rows)


def kernel(name, ns, rd, wr_mb, inst, cluster="1"):
    return ["0", name, f"{ns:,}", f"{rd:,}", wr_mb, "3,000,000", f"{inst:,}", "61.5", "64.2", "29", "704", "12,192",
            cluster, "0", "3.9", "1.2", "2.5", "1.0", "2.7"]


def run(args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_one_kernel_against_the_case_bytes(tmp_path):
    # logsumexp 100 x 1000 bf16: 200000 bytes read; 100000 elements
    (tmp_path / "ncu_logsumexp_100x1000_jit.csv").write_text(csv_text([kernel("fz_lse", 107_000, 200_000, "0.002", 48_700)]))
    (tmp_path / "bench_logsumexp_100x1000_jit").mkdir()
    (tmp_path / "bench_logsumexp_100x1000_jit" / "bench_report.json").write_text(json.dumps({"cases": [{"bytes": 200_200}]}))
    r = run([tmp_path, "--json", tmp_path / "out.json"])
    assert r.returncode == 0, r.stderr
    rec = json.loads((tmp_path / "out.json").read_text())[0]
    assert rec["case"] == "logsumexp_100x1000_jit"
    assert rec["us"] == 107.0                        # 107,000 ns
    assert rec["dram_read"] == 200_000
    assert rec["dram_write"] == 2000                 # 0.002 Mbyte
    assert rec["warp_inst"] == 48_700 and rec["elems"] == 100_000
    assert list(rec["stalls"])[:3] == ["long_scoreboard", "not_selected", "wait"]  # "selected" is not a stall
    assert "selected" not in rec["stalls"]
    line = next(l for l in r.stdout.splitlines() if l.startswith("| logsumexp_100x1000_jit"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2] == "107.0" and cells[3] == "1.00" and cells[6] == "0.487"  # µs, read/case, inst/element
    assert cells[12].startswith("long_scoreboard 3.9, not_selected 2.7, wait 2.5")


def test_several_kernels_and_a_missing_profile(tmp_path):
    rows = [kernel("Copy16Kernel", 50_000, 1_000, "0.001", 10), kernel("Copy16Kernel", 51_000, 1_000, "0.001", 10, "2")]
    (tmp_path / "ncu_copy_10x10_copy.csv").write_text(csv_text(rows))
    (tmp_path / "ncu_softmax_8x64_library.csv").write_text("==ERROR== no kernels were profiled\n")
    r = run([tmp_path, "--json", tmp_path / "out.json"])
    assert r.returncode == 0, r.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    assert [o["case"] for o in out] == ["copy_10x10_copy#0", "copy_10x10_copy#1", "softmax_8x64_library"]
    assert out[0]["case_bytes"] == 400                 # a bf16 copy of 10 x 10: read and write
    assert out[1]["cluster"] == 2
    assert out[2] == {"case": "softmax_8x64_library", "error": "no profile"}
    assert "704×12192 c2" in r.stdout


def test_no_csv_is_an_error(tmp_path):
    r = run([tmp_path])
    assert r.returncode != 0
    assert "no ncu_*.csv" in r.stderr
