"""scripts/check_layers.py (docs/layers.md): the real tree passes, and an upward include, a public
header reaching into src/ and an unknown folder each fail it with the file and line named."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_layers.py"


def run(root):
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root)], capture_output=True, text=True)


def test_the_tree_has_no_upward_include():
    r = run(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 problem(s)" in r.stdout


def make_tree(tmp_path, files):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def test_upward_include_fails_with_file_and_line(tmp_path):
    root = make_tree(tmp_path, {
        "src/ir/graph.cc": '#include "ir/graph.h"\n#include "runtime/backend.h"\n',
        "src/runtime/backend.h": '#include "ir/graph.h"\n',
        "include/opfuse/graph.h": "#pragma once\n",
    })
    r = run(root)
    assert r.returncode == 1
    assert "src/ir/graph.cc:2" in r.stdout and "ir -> runtime" in r.stdout


def test_public_header_may_not_include_src(tmp_path):
    root = make_tree(tmp_path, {"include/opfuse/graph.h": '#include "ir/ops.def"\n', "src/ir/x.cc": ""})
    r = run(root)
    assert r.returncode == 1
    assert "include/opfuse/graph.h:1" in r.stdout


def test_unknown_folder_fails(tmp_path):
    root = make_tree(tmp_path, {"src/newthing/a.cc": '#include "ir/graph.h"\n'})
    r = run(root)
    assert r.returncode == 1
    assert "src/newthing/" in r.stdout


def test_missing_src_is_usage_error(tmp_path):
    assert run(tmp_path).returncode == 2
