"""Shared helpers of the opfuse Python tests: importing the module and comparing results.

The module is found through PYTHONPATH=<build>/python (scripts/test.sh sets it to build/cpu/python).
Without it the tests skip with the reason - unless OPFUSE_REQUIRE_PYTHON=1 (set by scripts/test.sh),
where a missing module is a failure, so CI cannot pass by skipping.
"""
import os

import numpy as np
import pytest


def import_opfuse():
    try:
        import opfuse
    except ImportError as e:
        if os.environ.get("OPFUSE_REQUIRE_PYTHON") == "1":
            raise
        pytest.skip(f"opfuse module not importable ({e}); build it (cmake --preset cpu) and set "
                    f"PYTHONPATH=build/cpu/python", allow_module_level=True)
    return opfuse


def rel_err(out, ref) -> float:
    """||out - ref|| / ||ref|| in float64; NaN anywhere gives inf."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    if not np.all(np.isfinite(out)):
        return float("inf")
    denom = np.linalg.norm(ref)
    assert denom > 0, "reference is all zeros: the test would prove nothing"
    return float(np.linalg.norm(out - ref) / denom)


def signed_random(rng, shape, dtype=np.float32, scale=1.0):
    """Fresh signed random values (never zeros)."""
    return (rng.uniform(-scale, scale, size=shape)).astype(dtype)
