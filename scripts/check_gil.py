#!/usr/bin/env python3
"""Checks the Python module's C++ (python/src/*.cc) for Python API use while the GIL is released.

Inside a scope that holds a `py::gil_scoped_release` (until its closing brace), no line may build or
raise a Python exception or touch a Python object: `Unwrap(`, `ThrowStatus(`, `Check(`, `throw`,
`py::` (other than `py::gil_scoped_acquire`, which opens a nested scope where all of it is allowed
again). Doing so crashes the interpreter (issue 28: `Program(..., "cuda")` on a machine without a GPU
segfaulted in ThrowStatus). Braces are counted per line (an #else branch starts from the scopes open
at its #if); string and comment contents are ignored.
Exit 0 when clean, 1 with one line per finding."""
import pathlib
import re
import sys

FORBIDDEN = re.compile(r"\bUnwrap\(|\bThrowStatus\(|\bCheck\(|\bthrow\b|\bpy::(?!gil_scoped_acquire\b)")


def strip(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    return line.split("//", 1)[0]


def check(path):
    bad = []
    depth = 0
    released = []  # depth at which each open release scope lives
    acquired = []  # depth of nested acquire scopes
    branches = []  # len(released) at each open #if: an #else branch does not inherit the #if branch's scopes
    for no, raw in enumerate(path.read_text().splitlines(), 1):
        line = strip(raw)
        directive = line.strip()
        if directive.startswith("#if"):
            branches.append(len(released))
            continue
        if directive.startswith(("#else", "#elif")) and branches:
            del released[branches[-1]:]
            continue
        if directive.startswith("#endif") and branches:
            branches.pop()
            continue
        if released and not acquired and "gil_scoped_release" not in line and FORBIDDEN.search(line):
            bad.append(f"{path}:{no}: Python API while the GIL is released: {raw.strip()}")
        if "gil_scoped_release" in line:
            released.append(depth)
        if "gil_scoped_acquire" in line and released:
            acquired.append(depth)
        for ch in line:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                while acquired and acquired[-1] > depth:  # a scope at depth d ends when depth drops below d
                    acquired.pop()
                while released and released[-1] > depth:
                    released.pop()
    return bad


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    files = sorted((root / "python" / "src").glob("*.cc")) if len(sys.argv) < 2 else [pathlib.Path(p) for p in sys.argv[1:]]
    bad = [b for f in files for b in check(f)]
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
