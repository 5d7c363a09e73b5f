"""opfuse with torch tensors through DLPack.

CPU part (runs wherever torch is installed): bf16 through DLPack, caller-provided outputs, and
DLPack producers other than torch. GPU part (skips without CUDA; run on the device machine by
tools/python_gpu_check.sh): zero copies (the program ran on the tensors' own pointers), the
caller's current stream, results equal to torch's own ops within f32/bf16 bounds.
"""
import numpy as np
import pytest

from opfuse_test_util import import_opfuse, rel_err

opfuse = import_opfuse()
torch = pytest.importorskip("torch")
from opfuse import FusionConfig, FusionScheduler  # noqa: E402
from opfuse import patterns  # noqa: E402

BOUNDS = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}


def torch_swiglu(gate, up):
    return (torch.nn.functional.silu(gate.float()) * up.float()).to(gate.dtype)


def torch_add_rms_norm(x, r, w, eps=1e-6):
    s = x.float() + r.float()
    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps) * w.float()
    return y.to(x.dtype), s.to(x.dtype)


def err(a, b):
    return rel_err(a.detach().float().cpu().numpy(), b.detach().float().cpu().numpy())


class OnlyDLPack:
    """A DLPack producer that is not a torch tensor (as cupy or jax arrays are to opfuse)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None, **kw):
        return self.t.__dlpack__(stream=stream) if self.t.is_cuda else self.t.__dlpack__()

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def _gen(device):
    return torch.Generator(device=device).manual_seed(7)


def rand(shape, dtype, device, scale=1.0):
    return ((torch.rand(shape, generator=_gen(device), device=device) * 2 - 1) * scale).to(dtype)


# ------------------------------------------------------------------ CPU (torch via DLPack)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_torch_tensors(dtype):
    gate, up = rand((16, 256), dtype, "cpu", 4), rand((16, 256), dtype, "cpu").flip(0).contiguous()
    out = FusionScheduler().dispatch(patterns.create_swiglu_pattern(), {"gate": gate, "up": up})
    y = out["output"]
    assert torch.is_tensor(y) and y.dtype == dtype and y.shape == gate.shape
    assert err(y, torch_swiglu(gate, up)) < BOUNDS[dtype]


def test_cpu_outputs_written_into_caller_tensors():
    g = patterns.create_add_rms_norm_pattern(with_residual_out=True)
    x, r, w = rand((8, 128), torch.float32, "cpu"), rand((8, 128), torch.float32, "cpu", 2), rand((128,), torch.float32, "cpu")
    y = torch.full((8, 128), float("nan"))
    s = torch.full((8, 128), float("nan"))
    out = FusionScheduler().dispatch(g, {"x": x, "residual": r, "weight": w}, outputs={"output": y, "sum": s})
    assert out["output"] is y and out["sum"] is s
    ry, rs = torch_add_rms_norm(x, r, w)
    assert err(y, ry) < 1e-5 and err(s, rs) < 1e-5


def test_cpu_other_dlpack_producers_get_dlpack_tensors():
    gate, up = rand((4, 64), torch.float32, "cpu", 3), rand((4, 64), torch.float32, "cpu")
    out = FusionScheduler().dispatch(patterns.create_swiglu_pattern(), {"gate": OnlyDLPack(gate), "up": OnlyDLPack(up)})
    y = out["output"]
    assert isinstance(y, opfuse.DLPackTensor) and y.shape == (4, 64) and y.dtype == "f32"
    assert err(torch.from_dlpack(y), torch_swiglu(gate, up)) < 1e-5
    with pytest.raises(RuntimeError, match="already consumed"):
        y.__dlpack__()


def test_cpu_dlpack_errors():
    sched = FusionScheduler()
    g = patterns.create_swiglu_pattern()
    x = rand((8, 8), torch.float32, "cpu")
    with pytest.raises(ValueError, match="not contiguous"):
        sched.dispatch(g, {"gate": x.t(), "up": x})
    with pytest.raises(ValueError, match="overlaps input"):
        sched.dispatch(g, {"gate": x, "up": x.clone()}, outputs={"output": x})
    with pytest.raises(ValueError, match="mix numpy arrays and DLPack"):
        sched.dispatch(g, {"gate": x, "up": np.ones((8, 8), np.float32)})
    with pytest.raises(ValueError, match="float64"):
        sched.dispatch(g, {"gate": x.double(), "up": x.double()})
    with pytest.raises(ValueError, match="must be f32\\[8, 8\\]"):
        sched.dispatch(g, {"gate": x, "up": x.clone()}, outputs={"output": torch.empty(8, 4)})


# ------------------------------------------------------------------ CUDA
cuda = pytest.mark.skipif(not torch.cuda.is_available() or not opfuse.cuda_available()[0],
                          reason="needs a CUDA device and an opfuse built with CUDA "
                                 f"({opfuse.cuda_available()[1]})")


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fuse", [True, False])
def test_cuda_swiglu_zero_copy(dtype, fuse):
    sched = FusionScheduler(FusionConfig(enable_fusion=fuse))
    gate, up = rand((32, 4096), dtype, "cuda", 4), rand((32, 4096), dtype, "cuda").flip(0).contiguous()
    out = sched.dispatch(patterns.create_swiglu_pattern(), {"gate": gate, "up": up})
    y = out["output"]
    torch.cuda.current_stream().synchronize()
    assert torch.is_tensor(y) and y.is_cuda and y.dtype == dtype
    ld = sched.last_dispatch
    assert ld["input_ptrs"] == {"gate": gate.data_ptr(), "up": up.data_ptr()}     # no copies in
    assert ld["output_ptrs"] == {"output": y.data_ptr()}                          # none out
    assert ld["stream"] == torch.cuda.current_stream().cuda_stream
    assert err(y, torch_swiglu(gate, up)) < BOUNDS[dtype]
    assert ld["kernels_per_run"] == (1 if fuse else 2), ld


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_add_rms_norm_into_caller_outputs_on_a_side_stream(dtype):
    g = patterns.create_add_rms_norm_pattern(with_residual_out=True)
    x, r, w = rand((64, 2048), dtype, "cuda"), rand((64, 2048), dtype, "cuda", 2).flip(0), rand((2048,), dtype, "cuda")
    r = r.contiguous()
    y = torch.full_like(x, float("nan"))
    s = torch.full_like(x, float("nan"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    sched = FusionScheduler()
    with torch.cuda.stream(side):
        out = sched.dispatch(g, {"x": x, "residual": r, "weight": w}, outputs={"output": y, "sum": s})
    side.synchronize()
    assert out["output"] is y and out["sum"] is s
    assert sched.last_dispatch["stream"] == side.cuda_stream
    assert sched.last_dispatch["output_ptrs"] == {"output": y.data_ptr(), "sum": s.data_ptr()}
    ry, rs = torch_add_rms_norm(x, r, w)
    assert err(y, ry) < BOUNDS[dtype] and err(s, rs) < BOUNDS[dtype]


@cuda
def test_cuda_program_cache_and_other_producers():
    sched = FusionScheduler()
    g = patterns.create_swiglu_pattern()
    gate, up = rand((8, 1024), torch.float32, "cuda", 3), rand((8, 1024), torch.float32, "cuda")
    a = sched.dispatch(g, {"gate": gate, "up": up})["output"]
    b = sched.dispatch(g, {"gate": OnlyDLPack(gate), "up": OnlyDLPack(up)})["output"]
    torch.cuda.synchronize()
    assert isinstance(b, opfuse.DLPackTensor) and b.device == (2, gate.device.index or 0)
    assert torch.equal(a, torch.from_dlpack(b))
    st = sched.get_cache_stats()
    assert (st["misses"], st["hits"]) == (1, 1)


@cuda
def test_cuda_device_mismatch_is_an_error():
    x = rand((4, 8), torch.float32, "cuda")
    with pytest.raises(ValueError, match="different devices"):
        FusionScheduler().dispatch(patterns.create_swiglu_pattern(), {"gate": x, "up": x.cpu()})
