"""README.md's Python example runs exactly as written (the first ```python block that imports opfuse)."""
import pathlib
import re

from opfuse_test_util import import_opfuse

import_opfuse()
README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    examples = [b for b in blocks if "import opfuse" in b or "from opfuse" in b]
    assert examples, "README.md has no Python example"
    scope = {}
    exec(compile(examples[0], "README.md example", "exec"), scope)
    out = scope["outputs"]["output"]
    ref = scope["gate_tensor"] / (1 + __import__("numpy").exp(-scope["gate_tensor"])) * scope["up_tensor"]
    assert abs(out - ref).max() <= 1e-5 * abs(ref).max()
