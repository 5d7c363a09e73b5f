"""OpNode and SubGraph: the seed's graph description, names in and names out.

A SubGraph is a small dataflow graph over named values: each OpNode reads values defined earlier
(graph inputs or earlier nodes' outputs) and defines new ones. It carries no dtypes or shapes:
those come from the tensors handed to FusionScheduler.dispatch, and cache_key(dtypes, shapes)
names one concrete instance. Structure is checked by the C++ verifier when the SubGraph is built
(unknown op, wrong arity, a value used before it is defined or defined twice -> ValueError), and
types when it is compiled. Op names are opfuse's (include/opfuse/ops.def; `opfuse.op_names()`).
Both classes are frozen and hashable, so graphs can be dict keys and module-level constants.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Tuple

from . import _opfuse
from ._dtypes import dtype_name


def _names(value, what: str) -> Tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError(f"{what} must be a sequence of names, not the string {value!r} (write ({value!r},))")
    out = tuple(value)
    for v in out:
        if not isinstance(v, str):
            raise TypeError(f"{what} must hold strings, got {v!r}")
    return out


def _freeze(value):
    if isinstance(value, Mapping):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


@dataclass(frozen=True)
class OpNode:
    """One operation: `op_type` (e.g. "silu", "mul", "rms_norm"), input and output value names,
    and attributes (e.g. {"eps": 1e-6}; ints, floats, strings, lists of ints)."""
    op_type: str
    inputs: Tuple[str, ...]
    outputs: Tuple[str, ...]
    attrs: Optional[Mapping[str, Any]] = None

    def __post_init__(self):
        if not isinstance(self.op_type, str):
            raise TypeError(f"op_type must be a string, got {self.op_type!r}")
        object.__setattr__(self, "inputs", _names(self.inputs, "OpNode.inputs"))
        object.__setattr__(self, "outputs", _names(self.outputs, "OpNode.outputs"))
        if self.attrs is not None:
            if not isinstance(self.attrs, Mapping):
                raise TypeError(f"attrs must be a dict, got {self.attrs!r}")
            object.__setattr__(self, "attrs", dict(self.attrs))

    def __hash__(self):
        return hash((self.op_type, self.inputs, self.outputs, _freeze(self.attrs or {})))

    def _canonical(self):
        return [self.op_type, list(self.inputs), list(self.outputs), _freeze(self.attrs or {})]


@dataclass(frozen=True)
class SubGraph:
    """A graph: nodes in order, the names of its inputs and of its outputs."""
    nodes: Tuple[OpNode, ...]
    input_names: Tuple[str, ...]
    output_names: Tuple[str, ...]
    name: str = field(default="subgraph", compare=False)

    def __post_init__(self):
        nodes = tuple(self.nodes)
        for n in nodes:
            if not isinstance(n, OpNode):
                raise TypeError(f"SubGraph.nodes must hold OpNode objects, got {n!r}")
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "input_names", _names(self.input_names, "input_names"))
        object.__setattr__(self, "output_names", _names(self.output_names, "output_names"))
        _opfuse.check_spec(self.nodes, self.input_names, self.output_names, self.name)

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    def structure_key(self) -> str:
        """A stable hash of the nodes, attributes, input and output names (not the name)."""
        canon = json.dumps([[n._canonical() for n in self.nodes], list(self.input_names),
                            list(self.output_names)], sort_keys=True, default=repr)
        return hashlib.sha256(canon.encode()).hexdigest()[:16]

    def _types(self, dtypes, shapes):
        def per_input(values, what):
            if isinstance(values, Mapping):
                missing = [n for n in self.input_names if n not in values]
                extra = [n for n in values if n not in self.input_names]
                if missing or extra:
                    raise ValueError(f"{what}: missing {missing}, unknown {extra} (inputs are {list(self.input_names)})")
                return [values[n] for n in self.input_names]
            values = list(values)
            if len(values) != len(self.input_names):
                raise ValueError(f"{what}: {len(values)} given for {len(self.input_names)} inputs "
                                 f"{list(self.input_names)}")
            return values
        dts = [dtype_name(d) for d in per_input(dtypes, "dtypes")]
        shp = []
        for s in per_input(shapes, "shapes"):
            dims = tuple(int(d) for d in s)
            if any(d < 0 for d in dims):
                raise ValueError(f"negative dim in shape {dims}")
            shp.append(dims)
        return list(zip(dts, shp))

    def cache_key(self, dtypes, shapes) -> str:
        """The key of this graph instantiated at these input dtypes and shapes (each a sequence
        parallel to input_names, or a dict by input name). Equal graphs and types give equal keys."""
        parts = [f"{n}:{dt}[{','.join(map(str, s))}]"
                 for n, (dt, s) in zip(self.input_names, self._types(dtypes, shapes))]
        return f"{self.structure_key()}|{';'.join(parts)}"

    def to_text(self, dtypes, shapes) -> str:
        """The verified graph in opfuse's text format (.ofg), e.g. for `opfuse explain`."""
        return _opfuse.print_graph(self.nodes, self.input_names, self.output_names, self.name,
                                   self._types(dtypes, shapes))
