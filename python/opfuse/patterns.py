"""The LLM fusion patterns as SubGraphs, written the way a model traces them (primitives), so that
dispatching one shows the fuser finding the pattern: e.g. silu + mul becomes one swiglu kernel.

create_swiglu_pattern and create_add_rms_norm_pattern are the seed's (same node, input and output
names); the others cover opfuse's remaining patterns (src/fusion/patterns.h). Constants (eps,
scales) are f32 scalars, which broadcast against any float dtype. ALL_PATTERNS maps each pattern's
opfuse name (the kill-switch name, FusionConfig.disabled) to its factory.
"""
from __future__ import annotations

from typing import Callable, Dict, List

from .subgraph import OpNode, SubGraph


def _const(name: str, value: float) -> OpNode:
    return OpNode("constant", (), (name,), {"value": float(value), "dtype": "f32"})


def create_swiglu_pattern() -> SubGraph:
    """SwiGLU: output = silu(gate) * up (the Llama/Mistral FFN activation)."""
    return SubGraph(
        nodes=(
            OpNode("silu", ("gate",), ("gate_activated",)),
            OpNode("mul", ("gate_activated", "up"), ("output",)),
        ),
        input_names=("gate", "up"),
        output_names=("output",),
        name="swiglu",
    )


def create_add_rms_norm_pattern(eps: float = 1e-6, with_residual_out: bool = False) -> SubGraph:
    """Residual add + RMSNorm: output = rms_norm(x + residual, weight). With with_residual_out the
    sum is a second output (the residual stream carried to the next layer), as opfuse fuses it."""
    return SubGraph(
        nodes=(
            OpNode("add", ("x", "residual"), ("sum",)),
            OpNode("rms_norm", ("sum", "weight"), ("output",), {"eps": float(eps)}),
        ),
        input_names=("x", "residual", "weight"),
        output_names=("output", "sum") if with_residual_out else ("output",),
        name="add_rms_norm",
    )


def create_rms_norm_pattern(eps: float = 1e-6) -> SubGraph:
    """RMSNorm from primitives: x * rsqrt(mean(x*x) + eps) * weight."""
    return SubGraph(
        nodes=(
            OpNode("mul", ("x", "x"), ("sq",)),
            OpNode("mean", ("sq",), ("ms",)),
            _const("eps", eps),
            OpNode("add", ("ms", "eps"), ("ms_eps",)),
            OpNode("rsqrt", ("ms_eps",), ("inv",)),
            OpNode("mul", ("x", "inv"), ("normed",)),
            OpNode("mul", ("normed", "weight"), ("output",)),
        ),
        input_names=("x", "weight"),
        output_names=("output",),
        name="rms_norm",
    )


def create_layer_norm_pattern(eps: float = 1e-5) -> SubGraph:
    """LayerNorm from primitives: d = x - mean(x); d * rsqrt(mean(d*d) + eps) * weight + bias."""
    return SubGraph(
        nodes=(
            OpNode("mean", ("x",), ("mu",)),
            OpNode("sub", ("x", "mu"), ("d",)),
            OpNode("mul", ("d", "d"), ("d2",)),
            OpNode("mean", ("d2",), ("var",)),
            _const("eps", eps),
            OpNode("add", ("var", "eps"), ("var_eps",)),
            OpNode("rsqrt", ("var_eps",), ("inv",)),
            OpNode("mul", ("d", "inv"), ("normed",)),
            OpNode("mul", ("normed", "weight"), ("scaled",)),
            OpNode("add", ("scaled", "bias"), ("output",)),
        ),
        input_names=("x", "weight", "bias"),
        output_names=("output",),
        name="layer_norm",
    )


def create_softmax_pattern(scale: float = 1.0) -> SubGraph:
    """Softmax over the last axis from primitives: e = exp(x*scale - max(x*scale)); e / sum(e)."""
    return SubGraph(
        nodes=(
            _const("scale", scale),
            OpNode("mul", ("x", "scale"), ("y",)),
            OpNode("max", ("y",), ("m",)),
            OpNode("sub", ("y", "m"), ("shifted",)),
            OpNode("exp", ("shifted",), ("e",)),
            OpNode("sum", ("e",), ("s",)),
            OpNode("div", ("e", "s"), ("output",)),
        ),
        input_names=("x",),
        output_names=("output",),
        name="softmax",
    )


def create_geglu_pattern(approximate: str = "none") -> SubGraph:
    """GeGLU: output = gelu(gate) * up (approximate="tanh" for the tanh gelu)."""
    act = {"none": "gelu", "tanh": "gelu_tanh"}.get(approximate)
    if act is None:
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return SubGraph(
        nodes=(
            OpNode(act, ("gate",), ("gate_activated",)),
            OpNode("mul", ("gate_activated", "up"), ("output",)),
        ),
        input_names=("gate", "up"),
        output_names=("output",),
        name="geglu",
    )


def create_rope_pattern(head_dim: int) -> SubGraph:
    """RoPE, rotate-half form (Hugging Face Llama): x*cos + concat(-x[..., D/2:], x[..., :D/2])*sin.
    x is [..., head_dim]; cos and sin broadcast to x."""
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(f"head_dim must be a positive even number, got {head_dim}")
    half = head_dim // 2
    return SubGraph(
        nodes=(
            OpNode("mul", ("x", "cos"), ("x_cos",)),
            OpNode("slice", ("x",), ("x1",), {"axis": -1, "start": 0, "end": half}),
            OpNode("slice", ("x",), ("x2",), {"axis": -1, "start": half, "end": head_dim}),
            OpNode("neg", ("x2",), ("neg_x2",)),
            OpNode("concat", ("neg_x2", "x1"), ("rotated",), {"axis": -1}),
            OpNode("mul", ("rotated", "sin"), ("rot_sin",)),
            OpNode("add", ("x_cos", "rot_sin"), ("output",)),
        ),
        input_names=("x", "cos", "sin"),
        output_names=("output",),
        name="rope",
    )


def create_gelu_pattern() -> SubGraph:
    """A single gelu (the seed's one-op test graph: too small to fuse)."""
    return SubGraph(nodes=(OpNode("gelu", ("x",), ("output",)),), input_names=("x",), output_names=("output",),
                    name="gelu")


# opfuse pattern name -> factory (create_rope_pattern needs head_dim).
ALL_PATTERNS: Dict[str, Callable[..., SubGraph]] = {
    "swiglu": create_swiglu_pattern,
    "add_rms_norm": create_add_rms_norm_pattern,
    "rms_norm": create_rms_norm_pattern,
    "layer_norm": create_layer_norm_pattern,
    "softmax": create_softmax_pattern,
    "geglu": create_geglu_pattern,
    "rope": create_rope_pattern,
}

# The seed's list of ready-made LLM patterns.
LLM_FUSION_PATTERNS: List[SubGraph] = [create_swiglu_pattern(), create_add_rms_norm_pattern()]
