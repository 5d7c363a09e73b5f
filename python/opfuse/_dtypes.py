"""Dtype names: one mapping from what callers pass (opfuse names, numpy dtypes, torch dtypes,
strings such as "float32") to opfuse's names (f32, f16, bf16, i32, i64, bool).

No implicit conversion happens anywhere in opfuse: an unsupported dtype (float64, uint8, ...) is a
ValueError naming it, and the caller converts explicitly.
"""

_ALIASES = {
    "f32": "f32", "float32": "f32", "float": "f32",
    "f16": "f16", "float16": "f16", "half": "f16",
    "bf16": "bf16", "bfloat16": "bf16",
    "i32": "i32", "int32": "i32",
    "i64": "i64", "int64": "i64", "long": "i64",
    "bool": "bool", "bool_": "bool",
}
NAMES = ("f32", "f16", "bf16", "i32", "i64", "bool")
# opfuse name -> torch attribute name
TORCH_NAMES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "i32": "int32", "i64": "int64",
               "bool": "bool"}


def dtype_name(dtype) -> str:
    """The opfuse name of `dtype` (a str, a numpy dtype or type, or a torch dtype)."""
    if isinstance(dtype, str):
        text = dtype
    elif type(dtype).__module__.startswith("torch"):
        text = str(dtype)                     # "torch.bfloat16"
    else:
        try:
            import numpy as np
            text = np.dtype(dtype).name       # np.float32, np.dtype("f4"), "float32"
        except TypeError:
            raise TypeError(f"not a dtype: {dtype!r}") from None
    key = text[len("torch."):] if text.startswith("torch.") else text
    name = _ALIASES.get(key)
    if name is None:
        raise ValueError(f"dtype {text!r} is not an opfuse dtype (expected one of {', '.join(NAMES)}); "
                         f"convert the tensor explicitly")
    return name
