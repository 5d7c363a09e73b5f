"""opfuse.Engine: the Llama-family engine (src/model/llama/engine.h), token ids in and out.

    eng = opfuse.Engine()                         # built-in tiny model on the CPU, random weights
    eng = opfuse.Engine("TinyLlama-1.1B", backend="cuda", strategy="smart_schedule")
    eng = opfuse.Engine(tensor_parallel=2)        # split over 2 ranks (docs/tensor_parallel.md; cpu)
    out = eng.generate([[1, 15043, 29892]], max_new_tokens=16)   # {"tokens": [[...]], "decode_ms": ...}

Strategies: never_fuse, always_fuse, smart_schedule (or never / always / smart). Prompts are
token ids (one list per sequence; a single list of ints is one sequence); text needs the tokenizer,
which is not bound yet. Engine errors are the C++ messages (a prompt longer than the context is a
ValueError naming both numbers).
"""
from __future__ import annotations

from typing import List, Sequence, Union

from . import _opfuse


class Engine:
    def __init__(self, model_dir: str = "", backend: str = "cpu", strategy: str = "always_fuse", batch: int = 1,
                 max_context: int = 0, dtype: str = "", weight_seed: int = 0, builtin: str = "",
                 profile: str = "", tensor_parallel: int = 1):
        if not getattr(_opfuse, "has_engine", False):
            raise _opfuse.UnavailableError("this opfuse module was built without the Llama engine "
                                           "(src/model/llama/engine.h was not in the tree)")
        self._native = _opfuse.Engine(str(model_dir), backend, strategy, batch, max_context, dtype, weight_seed,
                                      builtin, profile, tensor_parallel)

    def generate(self, prompts: Union[Sequence[int], Sequence[Sequence[int]]], max_new_tokens: int = 16,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                 stop_at_eos: bool = False) -> dict:
        """Prefills each prompt and decodes max_new_tokens steps. Returns {"tokens": new ids per
        sequence, "prefill_ms", "decode_ms", "decode_steps", "ms_per_token", "kernels_per_decode_step"}."""
        prompts = list(prompts)
        if prompts and all(isinstance(t, int) for t in prompts):
            prompts = [prompts]
        ids: List[List[int]] = [list(p) for p in prompts]
        return self._native.generate(ids, max_new_tokens, temperature, top_k, top_p, seed, stop_at_eos)

    def __getattr__(self, name):
        # device, strategy, model_name, batch, tensor_parallel, context, compile_ms, kernels_per_decode_step
        return getattr(self._native, name)

    def __repr__(self):
        return f"Engine(model={self.model_name!r}, device={self.device!r}, strategy={self.strategy!r})"
