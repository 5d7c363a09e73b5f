#!/usr/bin/env python3
"""kernel_ab inside a Python process (session 13, issue 4): the peer's process runs the same 134 MB
cubin (and a plain copy) 1.1 µs (H200) to 3.6 µs (H100) faster in place than kernel_ab or bench ops.
This runs kernel_ab's own loop (build/kab/libkab.so, kernel_ab.cu built with -DKAB_LIB) in this
process after --mode sets it up, to find which part of the PyTorch process does it:
  plain    nothing (ctypes only)
  import   import torch
  init     torch.cuda.init() and one small tensor (torch's context and allocator up)
  alloc    init, then torch holds 1 GiB on the device
  compile  init, then torch.compile of an rms norm run once at 16384 x 2048 (Inductor, Triton, workers)
  tbufs    init, then kernel_ab runs on PyTorch's tensors (--ext): x as bench_peer makes it (randn f32 -> bf16),
           y torch.empty; --fill-x const|random overwrites x in place first (0x3c bytes / uniform bf16)
Usage: kab_in_torch.py --mode MODE -- KERNEL_AB_ARGS...
"""
import argparse
import ctypes
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", default="plain", choices=["plain", "import", "init", "alloc", "compile", "tbufs"])
    p.add_argument("--fill-x", choices=["randn", "const", "random"], default="randn")
    p.add_argument("--lib", default="build/kab/libkab.so")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    a = p.parse_args()
    keep = []
    if a.mode != "plain":
        import torch
        if a.mode in ("init", "alloc", "compile", "tbufs"):
            torch.cuda.init()
            keep.append(torch.ones(16, device="cuda"))
        if a.mode == "alloc":
            keep.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
        if a.mode == "compile":
            def rms(x, w):
                return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
            f = torch.compile(rms)
            x = torch.randn(16384, 2048, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(2048, device="cuda", dtype=torch.bfloat16)
            keep.append(f(x, w))
            torch.cuda.synchronize()
    ext = []
    if a.mode == "tbufs":
        g = torch.Generator(device="cuda")
        g.manual_seed(1)
        x = torch.randn(16384, 2048, generator=g, device="cuda", dtype=torch.float32).to(torch.bfloat16)
        if a.fill_x == "const":
            x.view(torch.uint8).fill_(0x3C)
        elif a.fill_x == "random":
            x.uniform_(-2, 2)
        y = torch.empty_like(x)
        keep += [x, y]
        torch.cuda.synchronize()
        ext = ["--ext", f"x={x.data_ptr()},y={y.data_ptr()}"]
        print(f"x {x.data_ptr():#x} y {y.data_ptr():#x} fill {a.fill_x}")
    lib = ctypes.CDLL(a.lib)
    args = ["kernel_ab"] + ext + [x for x in a.rest if x != "--"]
    argv = (ctypes.c_char_p * len(args))(*[s.encode() for s in args])
    lib.kab_main.restype = ctypes.c_int
    lib.kab_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    sys.stdout.flush()
    print(f"mode {a.mode}", flush=True)
    return lib.kab_main(len(args), argv)


if __name__ == "__main__":
    sys.exit(main())
