#!/usr/bin/env python3
"""Which part of the peer's timing loop makes a 134 MB kernel run faster in place (session 13, issue 4)?

peer_ab (bench_peer's Timer) times the 16-byte copy of 16384 x 2048 bf16 ~1.1 µs (H200) / ~3.6 µs (H100)
faster than kernel_ab does, in the same process and on the same PyTorch tensors (kab_in_torch.py), with
the gate or a spin. This times one cubin kernel (ctypes cuLaunchKernel, as peer_ab) several ways:
  timer_alloc   bench_peer Timer.events, the output torch.empty per call (peer_ab's launcher)
  timer_fixed   bench_peer Timer.events, one fixed output
  batch_spin    kernel_ab's loop in Python: all samples enqueued at once, each [torch.cuda._sleep 100 µs,
                start event, call, end event], one sync at the end
  each_spin     the same, waiting for each sample's end event before the next
--companion interleaves each round with another path timed the same way (peer_ab --paths compile,copy_v1 made
the copy fast, --paths copy_v1 alone did not): compile (torch.compile of an rms norm: one Triton reduction
kernel), compile_mul (torch.compile of x * 2: one Triton pointwise kernel), eager_rms (the rms norm in eager
PyTorch: several kernels), eager (x * 2, a fresh 64 MB output per call), none. --show-ptrs prints the output addresses the timed paths got.
Usage: loop_ab.py --cubin build/kab/big_rows.cubin --fn copy_v1 --grid 16384 --block 256 --args x,y,N
"""
import argparse
import os
import statistics
import sys
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import bench_peer as bp  # noqa: E402
import peer_ab  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cubin", required=True)
    p.add_argument("--fn", required=True)
    p.add_argument("--grid", type=int, required=True)
    p.add_argument("--block", type=int, required=True)
    p.add_argument("--args", required=True, help="x (input), w (bf16 C), y (output), N (i32 numel)")
    p.add_argument("--rows", type=int, default=16384)
    p.add_argument("--cols", type=int, default=2048)
    p.add_argument("--samples", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--modes", default="timer_alloc,timer_fixed,batch_spin,each_spin")
    p.add_argument("--companion", default="none", choices=["none", "compile", "eager", "eager_rms", "compile_mul"])
    p.add_argument("--show-ptrs", action="store_true")
    p.add_argument("--flush", action="store_true", help="timer modes: bench_peer's L2 flush (a fill_ of 2 x L2) "
                                                         "before each sample")
    p.add_argument("--l2-tags", default="demote", choices=["demote", "reset", "keep"],
                   help="timer samples: bench_peer's --l2-tags (undo evict_last tags before each sample)")
    p.add_argument("--no-gate", action="store_true", help="bench_peer's spin instead of its gate (under ncu, which "
                                                           "serialises launches)")
    a = p.parse_args()
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    case = {"inputs": [{"name": "x", "shape": [a.rows, a.cols], "dtype": "bf16"},
                       {"name": "w", "shape": [a.cols], "dtype": "bf16"}],
            "outputs": [{"name": "y", "shape": [a.rows, a.cols], "dtype": "bf16"}]}
    g = torch.Generator(device=dev)
    g.manual_seed(1)
    x = torch.randn(a.rows, a.cols, generator=g, device=dev, dtype=torch.float32).to(torch.bfloat16)
    w = torch.randn(a.cols, generator=g, device=dev, dtype=torch.float32).to(torch.bfloat16)
    lib = peer_ab.cuda_driver()
    fn, keep = peer_ab.load(lib, a.cubin, a.fn)
    spec = a.args.split(",")
    alloc = peer_ab.launcher(lib, fn, a.grid, a.block, 0, spec, case, dev)
    y_fixed = torch.empty(a.rows, a.cols, device=dev, dtype=torch.bfloat16)
    fixed = peer_ab.launcher(lib, fn, a.grid, a.block, 0, spec, case, dev, outs=[y_fixed])

    targs = types.SimpleNamespace(no_gate=a.no_gate, l2_tags=a.l2_tags, reps=a.samples, no_rotate_outputs=False, warmup=5, host_calls=50,
                                  replays=25, graph_calls=64, no_graph=False, max_sets=32)
    timer = bp.Timer(targs, dev, int(torch.cuda.get_device_properties(dev).L2_cache_size))
    cyc = timer.cycles_per_us or 1980.0
    sets = [[x, w]]
    evs = [torch.cuda.Event(enable_timing=True) for _ in range(2 * a.samples)]

    def loop(each):
        for i in range(a.samples):
            torch.cuda._sleep(int(100 * cyc))
            evs[2 * i].record()
            fixed(x, w)
            evs[2 * i + 1].record()
            if each:
                evs[2 * i + 1].synchronize()
        torch.cuda.synchronize()
        return statistics.median(evs[2 * i].elapsed_time(evs[2 * i + 1]) * 1e3 for i in range(a.samples))

    def rms(x, w):
        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()).to(x.dtype)
    comp = None
    if a.companion == "compile":
        comp = torch.compile(rms, dynamic=False, fullgraph=True)
    elif a.companion == "compile_mul":
        comp = torch.compile(lambda x, w: x * 2, dynamic=False, fullgraph=True)
    elif a.companion == "eager_rms":
        comp = rms
    elif a.companion == "eager":
        comp = lambda x, w: x * 2  # noqa: E731
    ptrs = {}

    def traced(tag, f):
        def g(*xs):
            out = f(*xs)
            if a.show_ptrs:
                ptrs.setdefault(tag, set()).add(hex(out[0].data_ptr() if isinstance(out, tuple) else out.data_ptr()))
            return out
        return g
    alloc = traced("alloc", alloc)
    if comp is not None:
        comp = traced("companion", comp)
    modes = a.modes.split(",")
    res = {m: [] for m in modes}
    with torch.no_grad():
        for f in (alloc, fixed) + ((comp,) if comp is not None else ()):
            timer.warm(f, sets)
        for _ in range(a.rounds):
            if comp is not None:
                res.setdefault("companion", []).append(timer.events(comp, sets, a.flush, 60.0))
            for m in modes:
                if m == "timer_alloc":
                    res[m].append(timer.events(alloc, sets, a.flush, 30.0))
                elif m == "timer_fixed":
                    res[m].append(timer.events(fixed, sets, a.flush, 30.0))
                elif m == "batch_spin":
                    res[m].append(loop(False))
                elif m == "each_spin":
                    res[m].append(loop(True))
    print(f"{torch.cuda.get_device_name(dev)}, {a.fn} {a.rows} x {a.cols}, {a.samples} samples per round, "
          f"companion {a.companion}, {'L2 flushed before each timer sample, ' if a.flush else ''}"
          f"L2 tags: {a.l2_tags}, {timer.spin_note()}")
    if a.show_ptrs:
        print(f"x {hex(x.data_ptr())}, fixed y {hex(y_fixed.data_ptr())}; " + "; ".join(f"{k}: {sorted(v)}" for k, v in ptrs.items()))
    print("| loop | µs per round | median |\n|---|---|---:|")
    for m, v in res.items():
        print(f"| {m} | {' '.join(f'{t:.2f}' for t in v)} | {statistics.median(v):.2f} |")
    del keep


if __name__ == "__main__":
    main()
