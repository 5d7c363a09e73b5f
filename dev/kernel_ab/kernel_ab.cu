// kernel_ab: scratch probe (dev/, not part of the build): several cubin kernels over the same
// bf16 row tensors, timed in ONE process, interleaved in rounds, under opfuse's bench rule (a 100 µs
// __nanosleep spin, then start event, one launch, end event; median of 300 samples; the tensors
// rotate over --sets sets). Questions it answers (session 9, issue 4): is opfuse's JIT kernel for a
// 512-row norm slower than torch.compile's Triton kernel in place, and does the way the cubin is
// loaded and launched (driver module + cuLaunchKernel as Triton does, cudaLibrary + cudaLaunchKernel
// as opfuse's JIT launcher does, or that with the PDL attribute) move the start after the spin?
//
// Usage: kernel_ab [--rows R] [--cols C] [--sets N (default: bench ops' rule)] [--rounds K] [--flush] SPEC...
//   SPEC  label=CUBIN:FUNCTION:GRID:BLOCK:SMEM:LOAD:ARGS
//   LOAD  module | library | pdl (library + cudaLaunchKernelExC with programmatic stream serialization)
//   ARGS  comma list, each one kernel parameter: x r (bf16 R x C inputs, rotated), w (bf16 C, shared),
//         y h (bf16 R x C outputs, rotated), i / I / N (int32 R / C / R x C), l / L (int64 R / C),
//         n (null pointer)
// e.g. triton=tri.cubin:triton_red_fused__fused_rms_norm_0:512:512:64:module:x,w,y,i,I,n,n
//      jit=ours.cubin:fz_rms_norm_bf16_h4096_x512_v8_decode:512:256:0:library:x,w,y
// --graph N: one CUDA-graph replay of N launches (cycling the sets) per sample, µs per launch (bench ops'
// decode rule), median of 75 replays. --flush: a 2 x L2 memset before each sample's spin. --spin clock: PyTorch's clock64 spin (torch.cuda._sleep)
// instead of opfuse's __nanosleep loop. --stream legacy|blocking: time on the NULL stream (PyTorch's default) or a
// created blocking stream instead of a non-blocking one (bench ops'). --pool: buffers carved from 20 MiB segments at 512-byte
// alignment (PyTorch's caching allocator) instead of one cudaMalloc each. --fill random: signed pseudo-random bf16 inputs (default: constant memset). Prints one markdown table (µs per round, median).
// Session 13 (issue 4: why the peer's process runs the same 134 MB cubin ~1.1 µs faster), placement and rhythm:
//   --outs N     the outputs (y, h) cycle over N slots independently of the input sets (PyTorch's peer keeps
//                call i's output until call i + 1 has allocated its own: two output blocks alternate);
//   --chunk GAP  only the buffers the kernels name, carved in order x r y h per set then per output slot from
//                ONE cudaMalloc, GAP bytes after each (0: adjacent, as a caching allocator carves them);
//   --spin-us U  the spin before each sample (default 100 µs);
//   --pre-alloc MB  hold MB of device memory allocated before the buffers (where they land physically);
//   --vmm G      each buffer reserved as one VA range and backed by G-MiB physical chunks (cuMemCreate /
//                cuMemMap, as PyTorch's expandable segments), instead of cudaMalloc;
//   --ext x=ADDR,y=ADDR,...  use these device pointers (decimal) for set 0 / output slot 0 instead of allocating
//                (kab_in_torch.py passes PyTorch's tensors; the given inputs are not filled);
//   --carveout P  cudaFuncAttributePreferredSharedMemoryCarveout = P (% of the unified L1 / shared memory
//                as shared) on every kernel (default: not set, the driver's choice);
//   --idle-us U  wait for each sample's end event, then U µs more on the host with the GPU idle, before the
//                next sample's spin is enqueued (default: all samples enqueued at once, the GPU never idle).
// Session 14 (the same question, answered: lines tagged L2::evict_last survive a memset flush):
//   --flush-kind memset|deep  the flush before each sample (implies --flush): bench ops' memset, or a deep flush
//                (read 2 x L2 with an evict_last policy, then demote it to evict_normal) that also evicts tagged lines;
//   --reset-persisting  before each sample, synchronise the stream and call cudaCtxResetPersistingL2Cache.
// Build: nvcc -O2 -std=c++20 -gencode arch=compute_90,code=sm_90 -cudart static dev/kernel_ab/kernel_ab.cu -o build/kernel_ab
//   (as a library for kab_in_torch.py: add -DKAB_LIB -shared -Xcompiler -fPIC -o build/kab/libkab.so)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "../probe_common.cuh"

// Signed pseudo-random bf16 in about [-2, 2) (a hash of the index and a seed): --fill random.
__global__ void FillRandom(unsigned short* p, long long n, unsigned seed) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed * 2246822519u;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
    const float f = (static_cast<float>(h & 0xffffff) / 16777216.0f - 0.5f) * 4.0f;
    p[i] = static_cast<unsigned short>(__float_as_uint(f) >> 16);
  }
}

struct Spec {
  std::string label, cubin, function, load, args;
  unsigned grid = 0, block = 0, smem = 0;
  CUfunction fn = nullptr;      // module
  cudaKernel_t kern = nullptr;  // library / pdl
  std::vector<char> bin;
};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string p; std::getline(ss, p, sep);) out.push_back(p);
  return out;
}

#ifdef KAB_LIB  // built as a shared library: kab_main(argc, argv) from a Python process (dev/kernel_ab/kab_in_torch.py)
extern "C" int kab_main(int argc, char** argv) {
#else
int main(int argc, char** argv) {
#endif
  long long rows = 512, cols = 4096;
  int sets = 0, rounds = 3;  // sets 0: opfuse's rule, ceil(2 L2 / rotated bytes of the first kernel) <= 32
  bool flush = false;
  std::string flush_kind = "memset";  // --flush-kind memset | deep (session 14)
  bool reset_persisting = false;      // --reset-persisting (session 14)
  std::string spin = "sleep", fill = "const";
  int graph_calls = 0;  // --graph N: time one CUDA-graph replay of N launches over the sets, per launch
  bool pool = false;
  int outs = 0;             // --outs N: output slots (0: one per input set)
  long long chunk_gap = -1;  // --chunk GAP: one allocation, GAP bytes after each buffer (-1: off)
  int spin_us = 100;
  int idle_us = -1;  // --idle-us U: sync each sample, then leave the GPU idle U µs
  long long pre_alloc_mb = 0;
  int vmm_mb = 0;
  std::string ext;
  int carveout = -1;
  std::string stream_kind = "nonblocking";  // --stream nonblocking | blocking | legacy (the NULL stream, as PyTorch's default)
  std::vector<Spec> specs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::string(argv[++i]);
    };
    if (a == "--rows") rows = std::stoll(next());
    else if (a == "--cols") cols = std::stoll(next());
    else if (a == "--sets") sets = std::stoi(next());
    else if (a == "--rounds") rounds = std::stoi(next());
    else if (a == "--flush") flush = true;
    else if (a == "--flush-kind") flush_kind = next(), flush = true;
    else if (a == "--reset-persisting") reset_persisting = true;
    else if (a == "--graph") graph_calls = std::atoi(next().c_str());
    else if (a == "--spin") spin = next();
    else if (a == "--fill") fill = next();
    else if (a == "--pool") pool = true;
    else if (a == "--stream") stream_kind = next();
    else if (a == "--outs") outs = std::stoi(next());
    else if (a == "--chunk") chunk_gap = std::stoll(next());
    else if (a == "--spin-us") spin_us = std::stoi(next());
    else if (a == "--idle-us") idle_us = std::stoi(next());
    else if (a == "--pre-alloc") pre_alloc_mb = std::stoll(next());
    else if (a == "--vmm") vmm_mb = std::stoi(next());
    else if (a == "--ext") ext = next();
    else if (a == "--carveout") carveout = std::stoi(next());
    else {
      const auto eq = a.find('=');
      const auto f = Split(eq == std::string::npos ? "" : a.substr(eq + 1), ':');
      if (f.size() != 7) {
        std::fprintf(stderr, "bad spec '%s' (label=CUBIN:FUNCTION:GRID:BLOCK:SMEM:LOAD:ARGS)\n", a.c_str());
        return 2;
      }
      Spec s;
      s.label = a.substr(0, eq), s.cubin = f[0], s.function = f[1], s.grid = std::stoul(f[2]), s.block = std::stoul(f[3]);
      s.smem = std::stoul(f[4]), s.load = f[5], s.args = f[6];
      specs.push_back(s);
    }
  }
  if (specs.empty()) {
    std::fprintf(stderr, "no kernels given (see the header of dev/kernel_ab/kernel_ab.cu)\n");
    return 2;
  }
  CK(cudaFree(nullptr));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  auto mod_load = Entry<decltype(&cuModuleLoadData)>("cuModuleLoadData");
  auto mod_get = Entry<decltype(&cuModuleGetFunction)>("cuModuleGetFunction");
  auto launch = Entry<decltype(&cuLaunchKernel)>("cuLaunchKernel");
  for (auto& s : specs) {
    std::ifstream in(s.cubin, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot open %s\n", s.cubin.c_str());
      return 2;
    }
    s.bin.assign(std::istreambuf_iterator<char>(in), {});
    if (s.load == "module") {
      CUmodule m = nullptr;
      if (mod_load(&m, s.bin.data()) != CUDA_SUCCESS || mod_get(&s.fn, m, s.function.c_str()) != CUDA_SUCCESS) {
        std::fprintf(stderr, "cannot load %s from %s\n", s.function.c_str(), s.cubin.c_str());
        return 2;
      }
    } else if (s.load == "library" || s.load == "pdl") {
      cudaLibrary_t lib = nullptr;
      CK(cudaLibraryLoadData(&lib, s.bin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
      CK(cudaLibraryGetKernel(&s.kern, lib, s.function.c_str()));
    } else {
      std::fprintf(stderr, "bad load '%s' (module, library or pdl)\n", s.load.c_str());
      return 2;
    }
  }
  if (carveout >= 0) {
    auto set_attr = Entry<decltype(&cuFuncSetAttribute)>("cuFuncSetAttribute");
    for (auto& s : specs) {
      if (s.load == "module") {
        if (set_attr(s.fn, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, carveout) != CUDA_SUCCESS) return 1;
      } else {
        CK(cudaFuncSetAttribute(reinterpret_cast<const void*>(s.kern), cudaFuncAttributePreferredSharedMemoryCarveout, carveout));
      }
    }
    std::printf("carveout preference %d%% on every kernel\n", carveout);
  }
  if (sets <= 0) {  // bench ops' rule (src/bench/cuda/op_runner.cc): the rotated bytes of one call
    long long rotated = 0;
    for (const auto& a : Split(specs[0].args, ','))
      if (a == "x" || a == "r" || a == "y" || a == "h") rotated += rows * cols * 2;
    const long long target = 2LL * prop.l2CacheSize;
    sets = static_cast<int>(std::clamp<long long>((target + rotated - 1) / std::max(rotated, 1LL), 1, 32));
  }
  // Buffers: per set x, r (inputs), per output slot y, h (rows x cols bf16), one w; inputs filled with small bf16 values.
  const size_t mat = static_cast<size_t>(rows * cols) * 2;
  if (outs <= 0) outs = sets;
  struct Set {
    void *x = nullptr, *r = nullptr, *y = nullptr, *h = nullptr;
  };
  std::vector<Set> bufs(sets), obufs(outs);
  auto used = [&](const char* name) {
    if (chunk_gap < 0) return true;
    for (const auto& s : specs)
      for (const auto& a : Split(s.args, ','))
        if (a == name) return true;
    return false;
  };
  if (pre_alloc_mb > 0) {
    void* hold = nullptr;
    CK(cudaMalloc(&hold, static_cast<size_t>(pre_alloc_mb) << 20));
    std::printf("holding %lld MiB allocated before the buffers\n", pre_alloc_mb);
  }
  auto vmm_alloc = [&](void** p, size_t bytes) {
    static auto reserve = Entry<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
    static auto create = Entry<decltype(&cuMemCreate)>("cuMemCreate");
    static auto map = Entry<decltype(&cuMemMap)>("cuMemMap");
    static auto access = Entry<decltype(&cuMemSetAccess)>("cuMemSetAccess");
    const size_t g = static_cast<size_t>(vmm_mb) << 20, total = (bytes + g - 1) / g * g;
    CUdeviceptr va = 0;
    if (reserve(&va, total, 0, 0, 0) != CUDA_SUCCESS) std::exit((std::fprintf(stderr, "cuMemAddressReserve failed\n"), 1));
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED, prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE, prop.location.id = 0;
    for (size_t off = 0; off < total; off += g) {
      CUmemGenericAllocationHandle h;
      if (create(&h, g, &prop, 0) != CUDA_SUCCESS || map(va + off, g, 0, h, 0) != CUDA_SUCCESS)
        std::exit((std::fprintf(stderr, "cuMemCreate / cuMemMap failed\n"), 1));
    }
    CUmemAccessDesc d{};
    d.location = prop.location, d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (access(va, total, &d, 1) != CUDA_SUCCESS) std::exit((std::fprintf(stderr, "cuMemSetAccess failed\n"), 1));
    *p = reinterpret_cast<void*>(va);
  };
  char* chunk = nullptr;
  size_t chunk_used = 0;
  const size_t chunk_step = (mat + static_cast<size_t>(std::max(chunk_gap, 0LL)) + 511) / 512 * 512;
  if (chunk_gap >= 0) {
    size_t n = 0;
    for (const char* nm : {"x", "r"}) n += used(nm) ? sets : 0;
    for (const char* nm : {"y", "h"}) n += used(nm) ? outs : 0;
    CK(cudaMalloc(reinterpret_cast<void**>(&chunk), n * chunk_step + 512));
    std::printf("one allocation of %zu buffers, %zu bytes apart\n", n, chunk_step);
  }
  auto alloc = [&](void** p, const char* name) {
    if (!used(name)) return;
    if (chunk) {
      *p = chunk + chunk_used;
      chunk_used += chunk_step;
    } else if (pool) {  // carved one after another from 20 MiB segments at 512-byte alignment, as PyTorch's allocator does
      static char* seg = nullptr;
      static size_t at = 0, cap = 0;
      const size_t need = (mat + 511) / 512 * 512;
      if (!seg || at + need > cap) {
        cap = std::max<size_t>(20u << 20, need);
        CK(cudaMalloc(reinterpret_cast<void**>(&seg), cap));
        at = 0;
      }
      *p = seg + at;
      at += need;
    } else if (vmm_mb > 0) {
      vmm_alloc(p, mat);
    } else {
      CK(cudaMalloc(p, mat));
    }
  };
  auto ext_ptr = [&](const char* name) -> void* {
    for (const auto& kv : Split(ext, ','))
      if (kv.size() > 2 && kv.substr(0, kv.find('=')) == name) return reinterpret_cast<void*>(std::stoull(kv.substr(kv.find('=') + 1)));
    return nullptr;
  };
  for (auto& b : bufs) {
    if (&b == &bufs[0] && !ext.empty() && (b.x = ext_ptr("x"))) {
      b.r = ext_ptr("r");
      std::printf("set 0 inputs: external (x %p, r %p)\n", b.x, b.r);
      continue;
    }
    alloc(&b.x, "x"), alloc(&b.r, "r");
    if (fill == "random") {
      static unsigned seed = 1;
      if (b.x) FillRandom<<<1024, 256>>>(static_cast<unsigned short*>(b.x), rows * cols, seed++);
      if (b.r) FillRandom<<<1024, 256>>>(static_cast<unsigned short*>(b.r), rows * cols, seed++);
    } else {
      if (b.x) CK(cudaMemset(b.x, 0x3c, mat));
      if (b.r) CK(cudaMemset(b.r, 0x3b, mat));
    }
  }
  for (auto& b : obufs) {
    if (&b == &obufs[0] && !ext.empty() && (b.y = ext_ptr("y"))) {
      b.h = ext_ptr("h");
      std::printf("output slot 0: external (y %p)\n", b.y);
      continue;
    }
    alloc(&b.y, "y"), alloc(&b.h, "h");
  }
  CK(cudaDeviceSynchronize());
  void* w = nullptr;
  CK(cudaMalloc(&w, cols * 2));
  CK(cudaMemset(w, 0x3f, cols * 2));
  void* flush_buf = nullptr;
  const size_t flush_bytes = 2 * static_cast<size_t>(prop.l2CacheSize);
  if (flush) CK(cudaMalloc(&flush_buf, flush_bytes));
  cudaStream_t st = nullptr;
  if (stream_kind == "nonblocking") CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  else if (stream_kind == "blocking") CK(cudaStreamCreate(&st));
  else if (stream_kind != "legacy") {
    std::fprintf(stderr, "--stream %s: nonblocking, blocking or legacy\n", stream_kind.c_str());
    return 2;
  }
  int ri = static_cast<int>(rows), ci = static_cast<int>(cols), numel = static_cast<int>(rows * cols);
  void* null = nullptr;

  auto launch_one = [&](Spec& s, int i) {
    Set& b = bufs[i % sets];
    Set& o = obufs[i % outs];
    std::vector<void*> args;
    for (const auto& a : Split(s.args, ',')) {
      if (a == "x") args.push_back(&b.x);
      else if (a == "r") args.push_back(&b.r);
      else if (a == "y") args.push_back(&o.y);
      else if (a == "h") args.push_back(&o.h);
      else if (a == "w") args.push_back(&w);
      else if (a == "i") args.push_back(&ri);
      else if (a == "I") args.push_back(&ci);
      else if (a == "l") args.push_back(&rows);
      else if (a == "L") args.push_back(&cols);
      else if (a == "N") args.push_back(&numel);
      else if (a == "n") args.push_back(&null);
      else {
        std::fprintf(stderr, "bad argument '%s' in %s\n", a.c_str(), s.label.c_str());
        std::exit(2);
      }
    }
    if (s.load == "module") {
      if (launch(s.fn, s.grid, 1, 1, s.block, 1, 1, s.smem, reinterpret_cast<CUstream>(st), args.data(), nullptr) != CUDA_SUCCESS) {
        std::fprintf(stderr, "launch of %s failed\n", s.label.c_str());
        std::exit(1);
      }
    } else if (s.load == "library") {
      CK(cudaLaunchKernel(s.kern, dim3(s.grid), dim3(s.block), args.data(), s.smem, st));
    } else {
      cudaLaunchAttribute at[1];
      at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      at[0].val.programmaticStreamSerializationAllowed = 1;
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(s.grid), cfg.blockDim = dim3(s.block), cfg.dynamicSmemBytes = s.smem, cfg.stream = st;
      cfg.attrs = at, cfg.numAttrs = 1;
      CK(cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(s.kern), args.data()));
    }
  };

  constexpr int kSamples = 300;
  std::vector<cudaEvent_t> ev(2 * kSamples);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  auto median_us = [&](Spec& s) {
    for (int i = 0; i < 10; ++i) launch_one(s, i);
    CK(cudaStreamSynchronize(st));
    if (graph_calls > 0) {  // bench ops' decode rule: one replay of graph_calls launches, µs per launch
      cudaGraph_t g;
      cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < graph_calls; ++i) launch_one(s, i);
      CK(cudaStreamEndCapture(st, &g));
      CK(cudaGraphInstantiate(&ge, g, 0));
      CK(cudaGraphLaunch(ge, st));
      CK(cudaStreamSynchronize(st));
      std::vector<float> ms;
      for (int i = 0; i < kSamples / 4; ++i) {
        if (flush) CK(cudaMemsetAsync(flush_buf, i & 0x7f, flush_bytes, st));
        SpinSleep<<<1, 1, 0, st>>>(spin_us * 1000ULL);
        CK(cudaEventRecord(ev[0], st));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(ev[1], st));
        CK(cudaStreamSynchronize(st));
        float t;
        CK(cudaEventElapsedTime(&t, ev[0], ev[1]));
        ms.push_back(t / graph_calls);
      }
      CK(cudaGraphExecDestroy(ge));
      CK(cudaGraphDestroy(g));
      std::sort(ms.begin(), ms.end());
      return ms[ms.size() / 2] * 1e3;
    }
    for (int i = 0; i < kSamples; ++i) {
      if (reset_persisting) {  // the stream idle, then every L2 line tagged persisting / evict_last back to normal
        CK(cudaStreamSynchronize(st));
        CK(cudaCtxResetPersistingL2Cache());
      }
      if (flush && flush_kind == "deep")
        DeepFlush<<<prop.multiProcessorCount * 8, 256, 0, st>>>(static_cast<const int4*>(flush_buf), flush_bytes / 16,
                                                                static_cast<int*>(flush_buf) + flush_bytes / 4 - 1);
      else if (flush) CK(cudaMemsetAsync(flush_buf, i & 0x7f, flush_bytes, st));
      if (spin == "clock") SpinClock<<<1, 1, 0, st>>>(spin_us * (long long)clock_khz / 1000);  // ~spin_us at the boost clock
      else SpinSleep<<<1, 1, 0, st>>>(spin_us * 1000ULL);
      CK(cudaEventRecord(ev[2 * i], st));
      launch_one(s, i);
      CK(cudaEventRecord(ev[2 * i + 1], st));
      if (idle_us >= 0) {
        CK(cudaEventSynchronize(ev[2 * i + 1]));
        const auto t0 = std::chrono::steady_clock::now();
        while (std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() < idle_us) {
        }
      }
    }
    CK(cudaStreamSynchronize(st));
    std::vector<float> ms;
    for (int i = 0; i < kSamples; ++i) {
      float t;
      CK(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2] * 1e3;
  };
  std::vector<std::vector<double>> us(specs.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t k = 0; k < specs.size(); ++k) us[k].push_back(median_us(specs[k]));
  if (vmm_mb > 0) std::printf("buffers: VMM, %d MiB physical chunks\n", vmm_mb);
  std::printf("%s, %lld x %lld, %s inputs%s, %d set(s), %d output slot(s)%s%s, %d us %s spin, %d rounds (each the median of %d samples)%s%s\n\n", prop.name, rows, cols, fill.c_str(), pool ? " (pooled)" : "", sets, outs,
              chunk_gap >= 0 ? (", one allocation, gap " + std::to_string(chunk_gap)).c_str() : "",
              flush ? (flush_kind == "deep" ? ", 2 x L2 deep flush (read evict_last, demote) before each" : ", 2 x L2 memset before each") : "", spin_us, spin == "clock" ? "clock64" : "__nanosleep", rounds,
              graph_calls ? kSamples / 4 : kSamples, graph_calls ? (", CUDA-graph replays of " + std::to_string(graph_calls) + " launches, µs per launch").c_str() : "",
              idle_us >= 0 ? (", each sample waited for, then the GPU idle " + std::to_string(idle_us) + " us").c_str() : "");
  if (reset_persisting) std::printf("cudaCtxResetPersistingL2Cache before each sample (stream synchronised first)\n\n");
  std::printf("| kernel | load | grid x block | µs per round | median µs |\n|---|---|---|---|---:|\n");
  for (size_t k = 0; k < specs.size(); ++k) {
    std::string per;
    for (double v : us[k]) per += (per.empty() ? "" : " ") + std::to_string(v).substr(0, 5);
    auto sorted = us[k];
    std::sort(sorted.begin(), sorted.end());
    std::printf("| %s | %s | %u x %u | %s | %.2f |\n", specs[k].label.c_str(), specs[k].load.c_str(), specs[k].grid, specs[k].block,
                per.c_str(), sorted[sorted.size() / 2]);
  }
  std::fflush(stdout);
  return 0;
}
