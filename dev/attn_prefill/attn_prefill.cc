// attn_prefill: scratch probe (dev/, not part of the build) for the prefill attention kernel (issue 32:
// attention at torch SDPA's speed). Through the library's planner (PlanAttentionWith, with the
// tensor-core instance and the causal fold forced by AttentionPlanOptions::mma_instance / mma_fold) it
// runs every instance of the tensor-core kernel (128- and 64-row mma.sync blocks, and on a cc 9.0 device
// the Hopper wgmma kernel, AttentionPlanOptions::wgmma), folded and not, beside the launch ChooseMma
// picks for this device, at TinyLlama / Llama shapes from 256 to 8192 rows — so a
// change to the kernel or to the chooser is compared with the alternatives in one process. The
// structure experiments behind the kernel (double-buffered K/V with one barrier a tile, two 16-row
// tiles a warp, 128-key tiles, Q re-read from shared memory, 8 warps, register caps, folded causal
// grids) ran as template variants of the kernel in an earlier form of this probe; they are recorded in
// docs/BENCHMARKS.md ("Prefill attention: the kernel's structure").
//
// Check: every launch against an f64 CPU reference on small odd shapes (causal and not, T < S, T > S,
// GQA, poisoned output) and, at the timed shapes, against the chosen launch's output (max |diff|).
// Timing: TimeCaptured (dev/graph_time.h: one launch in a CUDA graph, best of 5 replays); TFLOP/s
// counts causal work as 4 * D * Hq * (visible keys summed over the rows).
//   bash dev/build_probe.sh attn_prefill && build/attn_prefill      (needs build/cuda built)
// Env: PROBE_SHAPE (substring of the timed shapes' names), PROBE_SKIPCHECK=1, PROBE_ONCE=1 (one launch
// each, no timing: for `ncu -k regex:AttnMma build/attn_prefill`).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../cuda_ck.h"
#include "../graph_time.h"
#include "cuda/device.h"
#include "kernels/attention.h"

using namespace opfuse;
using bf16 = __nv_bfloat16;

namespace {

struct AttnShape {
  const char* name;
  int T, S, Hq, Hkv, D;
  bool causal;
};

struct Bufs {
  bf16 *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  std::vector<bf16> hq, hk, hv;
  size_t out_elems = 0;
};

float Bf(bf16 x) { return __bfloat162float(x); }

Bufs Make(const AttnShape& s, std::mt19937& rng) {
  Bufs b;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto fill = [&](std::vector<bf16>& h, size_t n, bf16** d) {
    h.resize(n);
    for (auto& x : h) x = __float2bfloat16(u(rng));
    CK(cudaMalloc(d, n * 2));
    CK(cudaMemcpy(*d, h.data(), n * 2, cudaMemcpyHostToDevice));
  };
  fill(b.hq, size_t(s.T) * s.Hq * s.D, &b.q);
  fill(b.hk, size_t(s.S) * s.Hkv * s.D, &b.k);
  fill(b.hv, size_t(s.S) * s.Hkv * s.D, &b.v);
  b.out_elems = b.hq.size();
  CK(cudaMalloc(&b.o, b.out_elems * 2));
  return b;
}

void Free(Bufs& b) {
  for (bf16* p : {b.q, b.k, b.v, b.o}) CK(cudaFree(p));
}

// f64 reference (CpuAttention's semantics): causal row i sees keys j <= i + S - T; no key: zeros.
std::vector<float> Reference(const AttnShape& s, const Bufs& b) {
  const double scale = 1.0 / std::sqrt(double(s.D));
  std::vector<float> out(b.out_elems, 0.f);
  const int group = s.Hq / s.Hkv, off = s.S - s.T;
  std::vector<double> w(s.S);
  for (int h = 0; h < s.Hq; ++h)
    for (int i = 0; i < s.T; ++i) {
      const int kvh = h / group;
      double mx = -INFINITY;
      for (int j = 0; j < s.S; ++j) {
        if (s.causal && j > i + off) {
          w[j] = -INFINITY;
          continue;
        }
        double d = 0;
        for (int e = 0; e < s.D; ++e)
          d += double(Bf(b.hq[(size_t(i) * s.Hq + h) * s.D + e])) * Bf(b.hk[(size_t(j) * s.Hkv + kvh) * s.D + e]);
        w[j] = d * scale;
        mx = std::max(mx, w[j]);
      }
      if (mx == -INFINITY) continue;
      double l = 0;
      for (int j = 0; j < s.S; ++j) l += w[j] = w[j] == -INFINITY ? 0 : std::exp(w[j] - mx);
      for (int e = 0; e < s.D; ++e) {
        double a = 0;
        for (int j = 0; j < s.S; ++j)
          if (w[j] != 0) a += w[j] * Bf(b.hv[(size_t(j) * s.Hkv + kvh) * s.D + e]);
        out[(size_t(i) * s.Hq + h) * s.D + e] = float(a / l);
      }
    }
  return out;
}

// The launches of attention(q, k, v) with the instance / fold forced (-1: the planner's choice).
std::vector<cuda::KernelLaunch> Plan(const AttnShape& s, const Bufs& b, const target::DeviceInfo& dev, int instance, int fold,
                                     int wgmma, std::string* name) {
  Node n;
  n.op = OpKind::kAttention;
  n.attrs["causal"] = int64_t{s.causal ? 1 : 0};
  const std::vector<kernels::TensorRef> in = {{b.q, DType::kBF16, {s.T, s.Hq, s.D}},
                                              {b.k, DType::kBF16, {s.S, s.Hkv, s.D}},
                                              {b.v, DType::kBF16, {s.S, s.Hkv, s.D}}};
  const std::vector<kernels::TensorRef> out = {{b.o, DType::kBF16, {s.T, s.Hq, s.D}}};
  kernels::AttentionPlanOptions o;
  o.path = kernels::AttentionPath::kTensorCore;
  o.mma_instance = instance;
  o.mma_fold = fold;
  o.wgmma = wgmma;
  auto l = kernels::PlanAttentionWith(n, in, out, dev, o);
  if (!l.ok() || l->size() != 1) {
    std::fprintf(stderr, "plan failed: %s\n", l.ok() ? "not one launch" : l.status().ToString().c_str());
    std::exit(1);
  }
  *name = (*l)[0].name();
  return *l;
}

std::vector<float> RunOnce(const std::vector<cuda::KernelLaunch>& l, Bufs& b) {
  CK(cudaMemset(b.o, 0xFF, b.out_elems * 2));  // NaN poison
  for (const auto& k : l)
    if (!k.Launch(nullptr).ok()) std::exit(1);
  CK(cudaDeviceSynchronize());
  std::vector<bf16> h(b.out_elems);
  CK(cudaMemcpy(h.data(), b.o, h.size() * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = Bf(h[i]);
  return f;
}

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - b[i]);
    if (!(d <= m)) m = std::isnan(d) ? INFINITY : d;
  }
  return m;
}

double Flops(const AttnShape& s) {
  double keys = 0;
  for (int i = 0; i < s.T; ++i) keys += s.causal ? std::clamp(i + s.S - s.T + 1, 0, s.S) : s.S;
  return 4.0 * s.D * s.Hq * keys;
}

}  // namespace

int main() {
  auto dev = cuda::QueryDevice();
  if (!dev.ok()) {
    std::fprintf(stderr, "%s\n", dev.status().ToString().c_str());
    return 1;
  }
  std::printf("device: %s\n", dev->ToString().c_str());
  const char* only = std::getenv("PROBE_SHAPE");
  const bool skip_check = std::getenv("PROBE_SKIPCHECK") != nullptr, once = std::getenv("PROBE_ONCE") != nullptr;
  // (mma.sync instance, fold, wgmma): the planner's choice first, then on a cc 9.0 device the Hopper
  // kernel folded and not, then every mma.sync instance folded and not.
  struct Forced {
    int instance, fold, wgmma;
  };
  std::vector<Forced> forced = {{-1, -1, -1}};
  if (dev->major == 9 && dev->minor == 0) forced.insert(forced.end(), {{-1, 1, 1}, {-1, 0, 1}});
  forced.insert(forced.end(), {{0, 1, 0}, {0, 0, 0}, {1, 1, 0}, {1, 0, 0}});
  std::mt19937 rng(20261128);
  int fails = 0;
  const AttnShape small[] = {{"causal 300 gqa", 300, 300, 4, 2, 64, true},  {"T<S 77/300", 77, 300, 4, 1, 64, true},
                         {"full 130/211", 130, 211, 2, 2, 64, false},   {"T>S 200/50", 200, 50, 2, 1, 64, true},
                         {"causal 333 d128", 333, 333, 4, 2, 128, true}, {"full 200 d128", 200, 200, 2, 1, 128, false}};
  for (const AttnShape& s : small) {
    if (skip_check) break;
    Bufs b = Make(s, rng);
    const std::vector<float> ref = Reference(s, b);
    for (const Forced& f : forced) {
      std::string name;
      const double d = MaxDiff(RunOnce(Plan(s, b, *dev, f.instance, f.fold, f.wgmma, &name), b), ref);
      if (!(d <= 2e-2)) {
        ++fails;
        std::printf("FAIL check %-20s %-36s max|diff| %.3g\n", s.name, name.c_str(), d);
      }
    }
    Free(b);
  }
  std::printf("checks: %d failures\n", fails);
  const AttnShape big[] = {{"tinyllama causal 256", 256, 256, 32, 4, 64, true},
                       {"tinyllama causal 512", 512, 512, 32, 4, 64, true},
                       {"tinyllama causal 1024", 1024, 1024, 32, 4, 64, true},
                       {"tinyllama causal 2048", 2048, 2048, 32, 4, 64, true},
                       {"tinyllama causal 4096", 4096, 4096, 32, 4, 64, true},
                       {"tinyllama causal 8192", 8192, 8192, 32, 4, 64, true},
                       {"h12 causal 3000 d64", 3000, 3000, 12, 4, 64, true},
                       {"full 2048 d64", 2048, 2048, 32, 4, 64, false},
                       {"llama7b causal 1024 d128", 1024, 1024, 32, 32, 128, true},
                       {"llama7b causal 2048 d128", 2048, 2048, 32, 32, 128, true},
                       {"llama3-8b causal 4096 d128", 4096, 4096, 32, 8, 128, true}};
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  std::printf("\n%-28s %-36s %10s %8s %8s %10s\n", "shape", "launch (first: the planner's)", "us", "TFLOP/s", "x chosen",
              "max|d|");
  for (const AttnShape& s : big) {
    if (only && !std::strstr(s.name, only)) continue;
    Bufs b = Make(s, rng);
    std::vector<float> chosen_out;
    double chosen_us = 0;
    for (const Forced& f : forced) {
      std::string name;
      const auto l = Plan(s, b, *dev, f.instance, f.fold, f.wgmma, &name);
      const std::vector<float> out = RunOnce(l, b);
      if (chosen_out.empty()) chosen_out = out;
      const double d = MaxDiff(out, chosen_out);
      if (!(d <= 2e-2)) ++fails;
      if (once) continue;
      const double us = TimeCaptured(st, [&] {
        for (const auto& k : l)
          if (!k.Launch(st).ok()) std::exit(1);
      });
      if (&f == &forced[0]) chosen_us = us;
      std::printf("%-28s %-36s %10.1f %8.1f %8.3f %10.3g\n", s.name, name.c_str(), us, Flops(s) / us / 1e6,
                  chosen_us / us, d);
    }
    Free(b);
  }
  std::printf("total failures: %d\n", fails);
  return fails ? 1 : 0;
}
