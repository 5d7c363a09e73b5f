"""opfuse: operator fusion for LLM inference, from Python.

    from opfuse import FusionScheduler, FusionConfig, SubGraph, OpNode
    from opfuse.patterns import create_swiglu_pattern

The API keeps the names of the seed it grew from (FusionScheduler, FusionConfig, SubGraph,
OpNode, patterns); everything behind it is the C++ compiler and runtime (the _opfuse extension).
docs/python.md describes it.
"""
from . import _opfuse
from ._opfuse import UnavailableError, built_with_cuda
from .config import FusionConfig
from .engine import Engine
from .scheduler import DLPackTensor, FusionDecision, FusionScheduler
from .subgraph import OpNode, SubGraph
from . import patterns

__all__ = ["Engine", "FusionConfig", "FusionScheduler", "FusionDecision", "SubGraph", "OpNode", "DLPackTensor",
           "UnavailableError", "patterns", "op_names", "cuda_available", "built_with_cuda"]


def op_names():
    """Every op type an OpNode may name (include/opfuse/ops.def)."""
    return list(_opfuse.op_names())


def cuda_available():
    """(True, device name) when a CUDA device can run programs, else (False, the reason)."""
    return tuple(_opfuse.cuda_available())
