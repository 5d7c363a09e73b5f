#!/usr/bin/env python3
"""Checks that every #include in src/ and include/ points down the layer order (docs/layers.md).

A file's layer is its top folder under src/ (src/kernels/norm.cu -> kernels); include/opfuse/ is the
bottom layer and may include nothing from src/. An include of a header in a higher layer fails the
check with the file, the line and both layers. Run by scripts/test.sh (CI) on the sources, so every
build configuration is covered.

Usage: python3 scripts/check_layers.py [--root DIR]   (exit 1 on an upward include, 2 on bad usage)
"""
import argparse
import re
import sys
from pathlib import Path

# Bottom up; a file may include its own layer and any layer before it. Keep in step with docs/layers.md.
LAYERS = [
    "include",    # include/opfuse: the public API and the op table (ops.def)
    "util",       # small helpers with no opfuse types beyond Status
    "ir",         # graph, dtypes, shapes, text format, graph edits, host tensors
    "target",     # the device description and the launch-shape rules derived from it (host-only)
    "ops",        # per-op definition records: inference, CPU reference, decomposition; the verifier
    "fusion",     # patterns, generic grouping, group info
    "scheduler",  # profile database, cost model, should_fuse
    "passes",     # one pass per file, the pipeline, the kill-switch names
    "codegen",    # kernel IR, CUDA C emitter, CPU interpreter
    "jit",        # NVRTC, kernel cache, background compile
    "cuda",       # the CUDA base: device query, launch records, error checks
    "kernels",    # hand-written library kernels and their planners
    "runtime",    # backends and executors
    "model",      # config, weights, tokenizers, engine
    "bench",      # op suite, e2e benchmark, profiler, evaluator, reports
    "cli",        # the opfuse command
]
RANK = {name: i for i, name in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SUFFIXES = {".h", ".cc", ".cu", ".cuh", ".def", ".in"}


def layer_of_file(rel: Path):
    parts = rel.parts
    if parts[0] == "include":
        return "include"
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    return None


def layer_of_include(inc: str):
    top = inc.split("/", 1)[0]
    if top == "opfuse":
        return "include"
    return top if top in RANK else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    args = ap.parse_args()
    root = Path(args.root)
    if not (root / "src").is_dir():
        print(f"check_layers.py: {root} has no src/", file=sys.stderr)
        return 2
    bad = []
    unknown = set()
    files = 0
    for base in ("src", "include"):
        for path in sorted((root / base).rglob("*")):
            if not path.is_file() or path.suffix not in SUFFIXES:
                continue
            rel = path.relative_to(root)
            layer = layer_of_file(rel)
            if layer is None:
                continue
            if layer not in RANK:
                unknown.add(layer)
                continue
            files += 1
            for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = layer_of_include(m.group(1))
                if target is None:
                    continue
                if RANK[target] > RANK[layer]:
                    bad.append(f"{rel}:{lineno}: includes \"{m.group(1)}\" ({layer} -> {target}: upward)")
    for layer in sorted(unknown):
        bad.append(f"src/{layer}/: a folder that is not in the layer list (scripts/check_layers.py, docs/layers.md)")
    for b in bad:
        print(b)
    print(f"check_layers.py: {files} files, {len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
