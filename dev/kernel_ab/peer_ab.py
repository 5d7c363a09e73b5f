#!/usr/bin/env python3
"""peer_ab: scratch probe (dev/, session 9, issue 4). Inside the peer's process (tools/bench_peer.py's
Timer, input sets, output rotation), time one case four ways, in interleaved rounds:

  compile      torch.compile(fn), as bench_peer times it (Triton's launcher)
  opfuse       libopfuse_capi.so (the executor; the JIT kernel through opfuse's static cudart)
  ours_drv     opfuse's JIT kernel from a cubin, launched with the driver's cuLaunchKernel (ctypes)
  triton_drv   torch.compile's own winning Triton kernel from its cubin, launched the same way

Question: when torch.compile is ahead of opfuse in the peer's process but not kernel against kernel
(dev/kernel_ab), is it the kernel, the launch path or the process?

  python3 dev/kernel_ab/peer_ab.py --cases build/kab/cases.json --id 'patterns/swiglu/bf16/rows=512/h=5632' \\
      --opfuse-lib build/c/libopfuse_capi.so --ours build/kab/n_swi.cubin:fz_swiglu_bf16_w5632_x512_v8:1408:256:g,u,y
The Triton kernel is found in TORCHINDUCTOR_CACHE_DIR (set it to an empty directory) by its
*.best_config after the compile; its arguments are the case's inputs, then its outputs in the order
given by --triton-outs, the i32 sizes and two null scratch pointers.
"""
import argparse
import ctypes
import glob
import json
import os
import statistics
import sys
import time
import types

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import bench_peer as bp  # noqa: E402

torch = bp.load_torch()


def cuda_driver():
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuModuleLoadData.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
    lib.cuModuleGetFunction.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p]
    lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 6 + [ctypes.c_uint, ctypes.c_void_p,
                                                                           ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    return lib


def load(lib, path, name):
    data = open(path, "rb").read()
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    assert lib.cuModuleLoadData(ctypes.byref(mod), data) == 0, f"cuModuleLoadData {path}"
    assert lib.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()) == 0, f"cuModuleGetFunction {name}"
    return fn, data  # keep the bytes alive


def rt_library(path):
    """dev/kernel_ab/rt_launch.cu's library: (load(image, name) -> handle, launch(handle, grid, block,
    params, stream, mode) -> rc); mode 0 cudaLaunchKernel through its static cudart, 1 cuLaunchKernel."""
    lib = ctypes.CDLL(path)
    lib.rt_load.restype, lib.rt_load.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p]
    lib.rt_launch.restype = ctypes.c_int
    lib.rt_launch.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p),
                              ctypes.c_void_p, ctypes.c_int]
    return lib


def launcher(lib, fn, grid, block, smem, argspec, case, device, rt=None, outs=None):
    """rt: (rt_library, mode) launches through dev/kernel_ab/rt_launch.cu instead of ctypes cuLaunchKernel."""
    """fn(*inputs) -> outputs: allocates the outputs with torch (or returns the given tensors `outs`, the same
    ones every call), launches on torch's current stream.
    argspec: names of the case's inputs / outputs, 'N' (i32 numel of the first input), 'R' / 'C'
    (i32 rows / cols), 'null'."""
    in_names = [t["name"] for t in case["inputs"]]
    decl = case["outputs"]
    out_names = [t["name"] for t in decl]
    shape0 = case["inputs"][0]["shape"]

    def f(*xs):
        res = list(outs) if outs is not None else [torch.empty(d["shape"], dtype=bp.torch_dtype(d["dtype"]), device=device)
                                                   for d in decl]
        store = []
        for a in argspec:
            if a in in_names:
                store.append(ctypes.c_void_p(xs[in_names.index(a)].data_ptr()))
            elif a in out_names:
                store.append(ctypes.c_void_p(res[out_names.index(a)].data_ptr()))
            elif a == "N":
                n = 1
                for d in shape0:
                    n *= d
                store.append(ctypes.c_int32(n))
            elif a == "R":
                store.append(ctypes.c_int32(shape0[0]))
            elif a == "C":
                store.append(ctypes.c_int32(shape0[-1]))
            elif a == "null":
                store.append(ctypes.c_void_p(0))
            else:
                raise ValueError(f"bad argument {a!r}")
        params = (ctypes.c_void_p * len(store))(*[ctypes.cast(ctypes.pointer(s), ctypes.c_void_p) for s in store])
        stream = torch.cuda.current_stream(device).cuda_stream
        if rt:
            rc = rt[0].rt_launch(fn, grid, block, params, ctypes.c_void_p(stream), rt[1])
        else:
            rc = lib.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, smem, ctypes.c_void_p(stream), params, None)
        if rc != 0:
            raise RuntimeError(f"cuLaunchKernel: {rc}")
        return tuple(res)
    return f


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", required=True)
    p.add_argument("--id", required=True)
    p.add_argument("--opfuse-lib", required=True)
    p.add_argument("--ours", required=True, action="append",
                   help="[LABEL=]CUBIN:FUNCTION:GRID:BLOCK:ARG,ARG,... (repeatable; LABEL default ours_drv)")
    p.add_argument("--rt-lib", help="build/kab/librt_launch.so (dev/kernel_ab/rt_launch.cu): adds the first --ours "
                                     "cubin launched from that library's static cudart (rt_runtime) and through "
                                     "the driver from it (rt_driver)")
    p.add_argument("--delay-us", type=float, action="append", default=[],
                   help="adds opfuse_dN and ours_drv_dN: the same calls after a host busy-wait of N µs (repeatable): "
                        "does the time the launch waits in the queue for the spin to end move the reading?")
    p.add_argument("--no-gate", action="store_true",
                   help="bench_peer's fixed spin before each sample instead of its gate (the rule before session 11)")
    p.add_argument("--rotate-order", action="store_true",
                   help="start each round at the next path (rotates the order) instead of the same order every round")
    p.add_argument("--triton-outs", default="", help="the Triton kernel's output order (default: the case's)")
    p.add_argument("--unchecked", action="append", default=[],
                   help="an --ours label whose outputs are not checked against torch.compile's (a copy or an "
                        "empty kernel timed beside the case as a reference; session 12)")
    p.add_argument("--paths", default="",
                   help="time only these paths (comma list of labels; all are still built and checked): does "
                        "interleaving with the other paths move a path's reading? (session 13)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--l2-tags", default="demote", choices=["demote", "reset", "keep"],
                   help="bench_peer's --l2-tags (undo evict_last tags before each sample)")
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--side-stream", action="store_true",
                   help="run everything on a stream torch creates instead of the legacy default stream")
    p.add_argument("--graph", action="store_true",
                   help="time by CUDA-graph replay (bench_peer's decode rule) instead of per-call events")
    p.add_argument("--spin-host-us", type=float, default=None,
                   help="with --no-gate: size every path's spin as if its host time were this many µs (spin = "
                        "1.5 x + 5), instead of each path's own measured host time (the gate has no spin to size)")
    a = p.parse_args()
    case = next(c for c in json.load(open(a.cases))["cases"] if c["id"] == a.id)
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    l2 = int(torch.cuda.get_device_properties(device).L2_cache_size)
    args = types.SimpleNamespace(no_gate=a.no_gate, l2_tags=a.l2_tags, reps=a.reps, no_rotate_outputs=False, warmup=5, host_calls=50, replays=25,
                                 graph_calls=64, no_graph=False, max_sets=32)
    timer = bp.Timer(args, device, l2)
    feat = bp.Features("auto")
    fn, _ = bp.OPS[case["op"]].build(case, feat, device)
    k, flush = bp.plan_sets(case, l2, torch.cuda.mem_get_info(device)[0] // 2, 32)
    gen = torch.Generator(device=device)
    gen.manual_seed(1)
    sets = [bp.make_inputs(case, device, gen)]
    while len(sets) < k:
        sets.append(bp.make_inputs(case, device, gen, share_from=sets[0]))
    cfn = torch.compile(fn, dynamic=False, fullgraph=True)
    with torch.no_grad():
        ref = bp.as_tuple(cfn(*sets[0]))
    torch.cuda.synchronize()
    lib = cuda_driver()
    fns = {"compile": cfn, "opfuse": bp.OpfuseLib(a.opfuse_lib).program(case, "jit", device)}
    keep1 = []
    for o in a.ours:
        label, _, o = o.rpartition("=")
        path, name, grid, block, spec = o.split(":")
        ofn, kb = load(lib, path, name)
        keep1.append(kb)
        fns[label or "ours_drv"] = launcher(lib, ofn, int(grid), int(block), 0, spec.split(","), case, device)
    if a.rt_lib:
        rtl = rt_library(a.rt_lib)
        label, _, o = a.ours[0].rpartition("=")
        path, name, grid, block, spec = o.split(":")
        image = open(path, "rb").read()
        keep1.append(image)
        h = rtl.rt_load(image, name.encode())
        if not h:
            sys.exit(f"rt_load {path} {name} failed")
        for mode, tag in ((0, "rt_runtime"), (1, "rt_driver")):
            fns[tag] = launcher(lib, h, int(grid), int(block), 0, spec.split(","), case, device, rt=(rtl, mode))
    def delayed(f, us):
        def g(*xs):
            t_end = time.perf_counter() + us * 1e-6
            while time.perf_counter() < t_end:
                pass
            return f(*xs)
        return g
    for d in a.delay_us:
        for base in ("opfuse", "ours_drv"):
            if base in fns:
                fns[f"{base}_d{d:g}"] = delayed(fns[base], d)
    # torch.compile's winner: the best_config's triton_cache_hash names the directory of its cubin.
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
    best = [json.load(open(f)) for f in glob.glob(os.path.join(cache, "**", "*.best_config"), recursive=True)]
    keep2 = None
    for b in best:
        cubins = glob.glob(os.path.join(cache, "triton", "**", b["triton_cache_hash"], "*.cubin"), recursive=True)
        if not cubins:
            continue
        meta = json.load(open(cubins[0][:-len(".cubin")] + ".json"))
        tname = meta["name"]
        threads = 32 * meta["num_warps"]
        n = 1
        for d in case["inputs"][0]["shape"]:
            n *= d
        rows = case["inputs"][0]["shape"][0]
        xblock = b.get("XBLOCK", 1)
        grid = rows // xblock if "R0_BLOCK" in b else n // xblock
        outs = a.triton_outs.split(",") if a.triton_outs else [t["name"] for t in case["outputs"]]
        tspec = [t["name"] for t in case["inputs"]] + outs + (["R", "C"] if "R0_BLOCK" in b else ["N"]) + ["null", "null"]
        tfn, keep2 = load(lib, cubins[0], tname)
        fns["triton_drv"] = launcher(lib, tfn, grid, threads, meta["shared"], tspec, case, device)
        print(f"triton: {tname} grid {grid} x {threads}, smem {meta['shared']}, args {','.join(tspec)}")
        break
    # Every path's outputs against torch.compile's (catches a wrong argument order).
    with torch.no_grad():
        for tag, f in fns.items():
            if tag in a.unchecked:
                print(f"check {tag}: skipped (--unchecked: not this case's function)")
                continue
            outs = bp.as_tuple(f(*sets[0]))
            torch.cuda.synchronize()
            for o, r in zip(outs, ref):
                err = ((o.float() - r.float()).norm() / r.float().norm()).item()
                print(f"check {tag}: rel err vs compile {err:.2e}")
                if not err < 2e-2:
                    sys.exit(f"{tag}: outputs differ from torch.compile's ({err:.2e})")
    if a.paths:
        want = a.paths.split(",")
        fns = {t: f for t, f in fns.items() if t in want}
    hosts = {}
    side = torch.cuda.Stream(device=device) if a.side_stream else torch.cuda.current_stream(device)
    torch.cuda.synchronize()
    with torch.no_grad(), torch.cuda.stream(side):
        for tag, f in fns.items():
            timer.warm(f, sets)
            hosts[tag] = timer.host_time(f, sets)
        rounds = {t: [] for t in fns}
        tags = list(fns)
        for r in range(a.rounds):
            order = tags[r % len(tags):] + tags[:r % len(tags)] if a.rotate_order else tags
            for tag in order:
                f = fns[tag]
                rounds[tag].append(timer.graph(f, sets, flush)[0] if a.graph else timer.events(f, sets, flush, a.spin_host_us if a.spin_host_us is not None else hosts[tag]))
    torch.cuda.synchronize()
    print(f"{torch.cuda.get_device_name(device)}, {a.id}, {k} sets, flush {flush}, "
          f"{'CUDA-graph replay' if a.graph else f'{a.reps} samples'} per round, "
          f"stream {'torch.cuda.Stream()' if a.side_stream else 'default (legacy)'}, "
          f"{'order rotated each round' if a.rotate_order else 'same order each round'}, "
          f"spin from {'host ' + str(a.spin_host_us) + ' µs for every path' if a.spin_host_us is not None else 'each path host time'}")
    print("| path | µs per round | median | host µs |\n|---|---|---:|---:|")
    for tag, v in rounds.items():
        print(f"| {tag} | {' '.join(f'{x:.2f}' for x in v)} | {statistics.median(v):.2f} | {hosts[tag]:.1f} |")
    del keep1, keep2


if __name__ == "__main__":
    main()
