"""Tests of tools/eval_peer.py (PyTorch eager / torch.compile baselines of the `opfuse eval` problems).

eval_peer.py times through tools/bench_peer.py's Timer, which reads its options from the argparse
namespace it is given: every `self.args.<name>` the Timer reads must exist in eval_peer's arguments
(a flag added to bench_peer.py and not here broke every prefill problem with an AttributeError, found
only on the GPU). Needs no torch: the names come from the source, the namespace from parse_args.
"""
import importlib.util
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load(name):
    sys.path.insert(0, str(ROOT / "tools"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_eval_peer_gives_the_timer_every_option_it_reads():
    timer_src = (ROOT / "tools" / "bench_peer.py").read_text()
    start = timer_src.index("class Timer")
    end = timer_src.find("\nclass ", start + 1)
    used = set(re.findall(r"self\.args\.([a-z_]+)", timer_src[start:end if end > 0 else None]))
    assert "reps" in used and "no_rotate_outputs" in used  # the scan sees the Timer's reads
    ns = load("eval_peer").parse_args(["--problems", "p.json", "--baseline", "b.json"])
    missing = sorted(n for n in used if not hasattr(ns, n))
    assert not missing, f"eval_peer.py's arguments lack what bench_peer.Timer reads: {missing}"
