"""FusionScheduler: dispatch a SubGraph on tensors, with a cache of compiled programs.

dispatch(graph, inputs) is the seed's entry point. Per call:
  1. the inputs say where to run: numpy arrays -> the CPU reference backend; objects with
     __dlpack__ (torch tensors, ...) -> their device (CUDA tensors run on the GPU, CPU ones on
     the CPU). Mixing the two kinds or devices is a ValueError: opfuse never moves data for you.
  2. the key is graph.cache_key(dtypes, shapes) + device + config; a hit reuses the compiled
     program (enable_cache), a miss compiles one (pass pipeline + should_fuse + kernels).
  3. a fused compile that fails with an internal error runs the graph unfused instead when
     fallback_on_error is set; the reason goes to stderr and into get_cache_stats()["fallbacks"].
     Bad input (ValueError/TypeError) is never "fallen back" from.
  4. CUDA tensors are passed by pointer (DLPack) and the program is enqueued on the caller's
     current stream (torch.cuda.current_stream().cuda_stream, or `stream=`); results go into the
     tensors given in `outputs=`, else into torch.empty tensors on the inputs' device (torch
     inputs), else into DLPackTensor objects opfuse allocated (other producers). Nothing is copied
     and nothing synchronises. CPU runs copy into and out of the reference backend's storage.
last_dispatch records what the last call did (key, cache hit, device, stream, the pointers it
ran on) - the GPU tests check zero-copy with it.
"""
from __future__ import annotations

import sys
import time
from collections import OrderedDict
from typing import Any, Dict, Mapping, Optional

from . import _opfuse
from ._dtypes import TORCH_NAMES, dtype_name
from .config import FusionConfig
from .subgraph import SubGraph

_DL_CPU, _DL_CUDA = 1, 2
_NUMPY_NAMES = {"f32": "float32", "f16": "float16", "i32": "int32", "i64": "int64", "bool": "bool"}


class FusionDecision:
    """should_fuse's answer: .fuse (bool), .reason (why), .groups (one dict per fusion group:
    kind, ops, fuse, reason, variant, name, source), .notes (the passes' notes), .graph (text)."""

    def __init__(self, d: dict):
        self.fuse = bool(d["fuse"])
        self.reason = d["reason"]
        self.groups = list(d["groups"])
        self.notes = list(d["notes"])
        self.graph = d["graph"]

    def __bool__(self):
        return self.fuse

    def __repr__(self):
        return f"FusionDecision(fuse={self.fuse}, reason={self.reason!r})"


class DLPackTensor:
    """An output opfuse allocated (for DLPack inputs from a producer other than torch). Hand it to
    any DLPack consumer once: torch.from_dlpack(t), numpy.from_dlpack(t), cupy.from_dlpack(t)."""

    def __init__(self, capsule, dtype: str, shape, device):
        self._capsule = capsule
        self.dtype = dtype
        self.shape = tuple(shape)
        self.device = device          # (DLPack device type, id): (1, 0) CPU, (2, n) CUDA n

    def __dlpack__(self, stream=None, **kwargs):
        if self._capsule is None:
            raise RuntimeError("this DLPackTensor was already consumed")
        cap, self._capsule = self._capsule, None
        return cap

    def __dlpack_device__(self):
        return self.device

    def __repr__(self):
        return f"DLPackTensor(dtype={self.dtype}, shape={self.shape}, device={self.device})"


def _is_torch(t) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.is_tensor(t)


class FusionScheduler:
    def __init__(self, config: Optional[FusionConfig] = None):
        if config is None:
            config = FusionConfig()
        if not isinstance(config, FusionConfig):
            raise TypeError(f"FusionScheduler takes a FusionConfig, got {config!r}")
        config.validate()
        self.config = config
        self._programs: "OrderedDict[str, Any]" = OrderedDict()
        self._stats = {"hits": 0, "misses": 0, "compiles": 0, "compile_ms": 0.0, "fallbacks": 0,
                       "dispatches": 0}
        self.last_dispatch: Optional[Dict[str, Any]] = None

    # ------------------------------------------------------------------ logging
    def _debug(self, msg: str) -> None:
        if self.config.debug_mode:
            print(f"[FusionScheduler] {msg}", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ API
    def should_fuse(self, graph: SubGraph, shapes, dtypes=None) -> FusionDecision:
        """The fusion verdict for `graph` at these input shapes (and dtypes, default f32): the pass
        pipeline's groups, each with should_fuse's decision and reason."""
        self._check_graph(graph)
        if dtypes is None:
            dtypes = {n: "f32" for n in graph.input_names}
        self.config.validate()
        d = _opfuse.should_fuse(graph.nodes, graph.input_names, graph.output_names, graph.name,
                                graph._types(dtypes, shapes), self.config._to_native(), self.config.profile or "")
        decision = FusionDecision(d)
        self._debug(f"should_fuse {graph.name}: {decision.fuse}: {decision.reason}")
        return decision

    def get_cache_stats(self) -> Dict[str, Any]:
        """Program cache counters (hits, misses, compiles, compile_ms wall time, fallbacks, size)
        and the JIT kernel cache's (under "jit": memory/disk hits, misses, compiles, compile_ms)."""
        out = dict(self._stats)
        out["size"] = len(self._programs)
        out["enabled"] = self.config.enable_cache
        out["jit"] = _opfuse.kernel_cache_stats()
        return out

    def clear_cache(self) -> None:
        """Drops the compiled programs and the JIT cache's in-memory kernels (the disk cache stays:
        `opfuse cache` tools manage it). Counters are cumulative and are kept."""
        self._programs.clear()
        _opfuse.clear_kernel_cache_memory()

    def dispatch(self, graph: SubGraph, inputs: Mapping[str, Any], outputs: Optional[Mapping[str, Any]] = None,
                 stream: Optional[int] = None) -> Dict[str, Any]:
        """Runs `graph` on `inputs` (name -> tensor) and returns {output name: tensor}."""
        self._check_graph(graph)
        if not isinstance(inputs, Mapping):
            raise TypeError(f"inputs must be a dict of name -> tensor, got {type(inputs).__name__}")
        missing = [n for n in graph.input_names if n not in inputs]
        extra = [n for n in inputs if n not in graph.input_names]
        if missing or extra:
            raise ValueError(f"graph {graph.name}: missing inputs {missing}, unknown inputs {extra} "
                             f"(inputs are {list(graph.input_names)})")
        outputs = dict(outputs or {})
        unknown = [n for n in outputs if n not in graph.output_names]
        if unknown:
            raise ValueError(f"graph {graph.name}: {unknown} are not outputs (outputs are {list(graph.output_names)})")
        self.config.validate()
        self._stats["dispatches"] += 1

        values = [inputs[n] for n in graph.input_names]
        numpy_kind = [self._is_numpy(v) for v in values]
        if all(numpy_kind):
            return self._dispatch_numpy(graph, values, outputs)
        if any(numpy_kind):
            raise ValueError("inputs mix numpy arrays and DLPack tensors; opfuse never copies between devices: "
                             "pass all of one kind")
        return self._dispatch_dlpack(graph, values, outputs, stream)

    # ------------------------------------------------------------------ internals
    @staticmethod
    def _check_graph(graph):
        if not isinstance(graph, SubGraph):
            raise TypeError(f"expected a SubGraph, got {type(graph).__name__}")

    @staticmethod
    def _is_numpy(v) -> bool:
        np = sys.modules.get("numpy")
        if np is not None and isinstance(v, np.ndarray):
            return True
        if hasattr(v, "__dlpack__") and hasattr(v, "__dlpack_device__"):
            return False
        raise TypeError(f"inputs must be numpy arrays or DLPack tensors (torch, cupy, ...), got {type(v).__name__}")

    def _program(self, graph, types, device: str):
        key = f"{graph.cache_key([t[0] for t in types], [t[1] for t in types])}@{device}|" \
              f"{sorted(self.config._to_native().items())!r}"
        if self.config.enable_cache and key in self._programs:
            self._stats["hits"] += 1
            self._programs.move_to_end(key)
            self._debug(f"Cache hit: {key.split('@')[0]}")
            return self._programs[key], key, True
        self._stats["misses"] += 1
        self._debug(f"Cache miss: {key.split('@')[0]}")
        kind = "cuda" if device.startswith("cuda") else "cpu"
        native = self.config._to_native()
        t0 = time.perf_counter()
        try:
            prog = _opfuse.Program(graph.nodes, graph.input_names, graph.output_names, graph.name, types, native,
                                   kind, self.config.variant)
        except (ValueError, TypeError, LookupError, _opfuse.UnavailableError):
            raise
        except (RuntimeError, NotImplementedError) as e:
            if not (self.config.fallback_on_error and self.config.enable_fusion):
                raise
            self._stats["fallbacks"] += 1
            print(f"[FusionScheduler] fused compile of {graph.name} failed ({e}); falling back to unfused execution",
                  file=sys.stderr, flush=True)
            native = dict(native, enable_fusion=False)
            prog = _opfuse.Program(graph.nodes, graph.input_names, graph.output_names, graph.name, types, native,
                                   kind, "unfused" if kind == "cuda" else self.config.variant)
        self._stats["compiles"] += 1
        self._stats["compile_ms"] += (time.perf_counter() - t0) * 1e3
        if self.config.debug_mode:
            for g in prog.groups:
                self._debug(f"  group {g['name']} [{g['kind']}]: {'fuse' if g['fuse'] else 'no'}: {g['reason']} "
                            f"-> {g['variant']}")
            for f in prog.fallbacks:
                self._debug(f"  fallback: {f}")
        if self.config.enable_cache:
            self._programs[key] = prog
        return prog, key, False

    def _dispatch_numpy(self, graph, values, outputs):
        if outputs:
            raise ValueError("outputs= is for DLPack tensors; numpy results are returned as new arrays")
        if self.config.device == "cuda":
            raise ValueError("FusionConfig.device is 'cuda' but the inputs are numpy arrays (host memory); "
                             "pass CUDA tensors, or use device='auto' or 'cpu'")
        import numpy as np
        types = [(dtype_name(v.dtype), tuple(v.shape)) for v in values]
        prog, key, hit = self._program(graph, types, "cpu")
        # C-contiguous views (a copy only for strided arrays); results come back as bytes + type.
        ran = prog.run_numpy({n: (t[0], np.ascontiguousarray(v)) for n, t, v in zip(graph.input_names, types, values)})
        result = {}
        for n, (dt, shape, data) in ran.items():
            if dt == "bf16":
                raise TypeError(f"output '{n}' is bf16, which numpy cannot hold: pass torch tensors (DLPack) "
                                f"to get bf16 results")
            result[n] = np.frombuffer(data, dtype=_NUMPY_NAMES[dt]).reshape(shape)
        self.last_dispatch = {"key": key.split("@")[0], "device": "cpu", "cache_hit": hit, "stream": None,
                              "input_ptrs": {n: v.ctypes.data for n, v in zip(graph.input_names, values)},
                              "output_ptrs": {n: result[n].ctypes.data for n in graph.output_names},
                              "steps_per_run": prog.steps_per_run}
        return {n: result[n] for n in graph.output_names}

    def _dispatch_dlpack(self, graph, values, outputs, stream):
        devices = {tuple(v.__dlpack_device__()) for v in values}
        if len(devices) != 1:
            raise ValueError(f"inputs live on different devices {sorted(devices)}; opfuse never copies between devices")
        dev_type, dev_id = next(iter(devices))
        if dev_type not in (_DL_CPU, _DL_CUDA):
            raise ValueError(f"DLPack device type {dev_type} is not supported (CPU = 1, CUDA = 2)")
        if dev_type == _DL_CPU and self.config.device == "cuda":
            raise ValueError("FusionConfig.device is 'cuda' but the inputs are in host memory; move them to the GPU first")
        if dev_type == _DL_CUDA and self.config.device == "cpu":
            raise ValueError("FusionConfig.device is 'cpu' but the inputs are CUDA tensors; move them to the host first")
        for n, o in outputs.items():
            if tuple(o.__dlpack_device__()) != (dev_type, dev_id):
                raise ValueError(f"output '{n}' is on DLPack device {tuple(o.__dlpack_device__())}, "
                                 f"the inputs on {(dev_type, dev_id)}")
        torch_inputs = any(_is_torch(v) for v in values)
        if dev_type == _DL_CUDA:
            if stream is None:
                stream = 0
                if torch_inputs:
                    torch = sys.modules["torch"]
                    stream = torch.cuda.current_stream(dev_id).cuda_stream
            # DLPack: 1 names the legacy default stream (0 is reserved); the producer orders its
            # pending work before `stream`.
            dl_stream = stream if stream != 0 else 1
            caps = [v.__dlpack__(stream=dl_stream) for v in values]
        else:
            stream = 0
            caps = [v.__dlpack__() for v in values]
        infos = [_opfuse.dlpack_info(c) for c in caps]
        types = [(i["dtype"], tuple(i["shape"])) for i in infos]
        device = "cpu" if dev_type == _DL_CPU else f"cuda:{dev_id}"
        prog, key, hit = self._program(graph, types, device)

        result = dict(outputs)
        if torch_inputs:
            torch = sys.modules["torch"]
            tdev = values[0].device
            for name, dt, shape in prog.outputs:
                if name not in result:
                    result[name] = torch.empty(tuple(shape), dtype=getattr(torch, TORCH_NAMES[dt]), device=tdev)
        out_caps = {}
        for n, t in result.items():
            out_caps[n] = t.__dlpack__(stream=dl_stream) if dev_type == _DL_CUDA else t.__dlpack__()
        ran = prog.run_dlpack(dict(zip(graph.input_names, caps)), out_caps, stream)
        specs = {name: (dt, shape) for name, dt, shape in prog.outputs}
        for n, cap in ran["outputs"].items():
            dt, shape = specs[n]
            result[n] = DLPackTensor(cap, dt, shape, (dev_type, dev_id))
        self.last_dispatch = {"key": key.split("@")[0], "device": device, "cache_hit": hit, "stream": stream,
                              "input_ptrs": dict(ran["input_ptrs"]), "output_ptrs": dict(ran["output_ptrs"]),
                              "steps_per_run": prog.steps_per_run, "kernels_per_run": prog.kernels_per_run,
                              "fallbacks": list(prog.fallbacks)}
        return {n: result[n] for n in graph.output_names}
