"""FusionConfig: the seed's fields and defaults, plus opfuse's own knobs.

The first six fields are the seed's (enable_fusion, enable_cache, min_tensor_elements=1024,
min_nodes_for_fusion=2, fallback_on_error, debug_mode) and mean what they mean in the C++
FusionConfig (include/opfuse/config.h), to which _to_native() maps them; the rest are opfuse's:
kill switches, group size, the device and the CUDA variant, and a profile for should_fuse. Values
are checked when the config is built and again when a scheduler uses it (the dataclass is
mutable): a wrong type or an unknown kill-switch name is an error, never ignored.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional, Tuple

from . import _opfuse

DEVICES = ("auto", "cpu", "cuda")
VARIANTS = ("auto", "unfused", "library", "jit")


@dataclass
class FusionConfig:
    # --- the seed's fields and defaults
    enable_fusion: bool = True        # master switch: False runs every op on its own (never-fuse)
    enable_cache: bool = True         # keep compiled programs and JIT kernels (memory + disk)
    min_tensor_elements: int = 1024   # groups over smaller tensors run unfused
    min_nodes_for_fusion: int = 2     # a generic group needs at least this many ops
    fallback_on_error: bool = True    # a failed fused compile runs unfused (logged), a failed pass is rolled back
    debug_mode: bool = False          # print cache hits/misses and fusion verdicts; re-verify after every pass
    # --- opfuse's own
    max_group_size: int = 64          # generic groups stop growing here
    disabled: Tuple[str, ...] = ()    # kill switches: pattern or pass names (as OPFUSE_DISABLE)
    use_env: bool = True              # also apply OPFUSE_DISABLE from the environment
    device: str = "auto"              # auto (where the tensors are) | cpu | cuda
    variant: str = "auto"             # CUDA: auto | unfused | library | jit
    profile: Optional[str] = None     # profile_result.json consulted by should_fuse
    name: str = field(default="FusionConfig", repr=False, compare=False)

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        for f in ("enable_fusion", "enable_cache", "fallback_on_error", "debug_mode", "use_env"):
            if not isinstance(getattr(self, f), bool):
                raise TypeError(f"FusionConfig.{f} must be a bool, got {getattr(self, f)!r}")
        for f, low in (("min_tensor_elements", 0), ("min_nodes_for_fusion", 1), ("max_group_size", 1)):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"FusionConfig.{f} must be an int, got {v!r}")
            if v < low:
                raise ValueError(f"FusionConfig.{f} must be >= {low}, got {v}")
        if isinstance(self.disabled, str):
            self.disabled = tuple(s for s in self.disabled.split(",") if s)
        self.disabled = tuple(self.disabled)
        if self.device not in DEVICES:
            raise ValueError(f"FusionConfig.device must be one of {DEVICES}, got {self.device!r}")
        if self.variant not in VARIANTS:
            raise ValueError(f"FusionConfig.variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.profile is not None and not isinstance(self.profile, str):
            raise TypeError(f"FusionConfig.profile must be a path string or None, got {self.profile!r}")
        _opfuse.check_config(self._to_native())

    def _to_native(self) -> dict:
        d = asdict(self)
        d["disabled"] = list(self.disabled)
        return d

    @staticmethod
    def known_disable_names() -> Tuple[str, ...]:
        """Names `disabled` may hold: the patterns, then the passes that can be switched off."""
        return tuple(_opfuse.known_disable_names())
