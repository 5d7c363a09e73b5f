// gemv_chain: scratch measurement (dev/, not part of the build) of a decode step's matmuls as the
// engine runs them back to back: per layer the q/k/v, o, gate+up and down projections of TinyLlama-1.1B
// (2560x2048, 2048x2048, 11264x2048, 2048x5632 bf16), 22 layers with their own weights (0.97 GB: L2
// never holds them), one CUDA graph with the PDL attribute on every GEMV, as the decode graph has them.
// Question it answers (issue 32 item 2): how far is the chain from the weight-read floor, and does
// capping the persistent GEMV's blocks per SM (GemvTuning::blocks_per_sm) let the next GEMV's blocks
// become resident during the previous one's tail, so that its pre-wait weight loads overlap it?
//
// Answer (H200, docs/BENCHMARKS.md "Where a decode step's time goes"): the chain runs at 1.58x the
// floor at one row and capping the blocks per SM only lowers the bytes in flight (2 a SM: 2.2x);
// each GEMV alone loses as much as it does in the chain, i.e. the kernel boundaries overlap already
// and the loss is inside each kernel (ramp, tail, bytes in flight). A variant that had every warp
// prefetch the next launch's first weights into L2 (cp.async.bulk.prefetch) at its end was no faster
// with 2 MB and slower with 8-46 MB (it competes with the current stream), and was not kept.
//
// Method: the graph replayed 1 + 5 times, the fastest replay / layers = µs per layer; the floor is the
// layer's weight bytes over a same-size device-to-device copy timed the same way in the same run
// (read + write bytes of the copy counted, as `opfuse bench ops` does). Each variant's last outputs
// are checked against the default variant's (they must agree exactly: same kernel, same order).
//
// Build: bash dev/gemv_chain/build.sh   (needs build/cuda built; writes build/gemv_chain)
// Run:   build/gemv_chain               (prints one table)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../cuda_ck.h"
#include "../graph_time.h"
#include "cuda/device.h"
#include "kernels/gemv.h"

using namespace opfuse;

int main() {
  auto dev = cuda::QueryDevice();
  if (!dev.ok()) {
    std::fprintf(stderr, "%s\n", dev.status().message().c_str());
    return 1;
  }
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  struct Mat {
    const char* what;
    int64_t n, k;
  };
  const Mat mats[] = {{"qkv", 2560, 2048}, {"o", 2048, 2048}, {"gate+up", 11264, 2048}, {"down", 2048, 5632}};
  constexpr int kLayers = 22;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  int64_t layer_bytes = 0;
  for (const Mat& m : mats) layer_bytes += m.n * m.k * 2;
  // weights: one allocation per (layer, matrix); activations and outputs per matrix (64 rows)
  std::vector<void*> w(kLayers * 4), act(4), out(4), ref(4);
  for (int l = 0; l < kLayers; ++l)
    for (int j = 0; j < 4; ++j) {
      const int64_t bytes = mats[j].n * mats[j].k * 2;
      std::vector<__nv_bfloat16> h(static_cast<size_t>(mats[j].n * mats[j].k));
      if (l < 2)
        for (auto& v : h) v = __float2bfloat16(nd(rng) / std::sqrt(float(mats[j].k)));
      CK(cudaMalloc(&w[l * 4 + j], bytes));
      if (l < 2) CK(cudaMemcpy(w[l * 4 + j], h.data(), bytes, cudaMemcpyHostToDevice));
      else CK(cudaMemcpy(w[l * 4 + j], w[(l % 2) * 4 + j], bytes, cudaMemcpyDeviceToDevice));
    }
  for (int j = 0; j < 4; ++j) {
    std::vector<__nv_bfloat16> h(static_cast<size_t>(64 * mats[j].k));
    for (auto& v : h) v = __float2bfloat16(nd(rng));
    CK(cudaMalloc(&act[j], 64 * mats[j].k * 2));
    CK(cudaMemcpy(act[j], h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&out[j], 64 * mats[j].n * 2));
    CK(cudaMalloc(&ref[j], 64 * mats[j].n * 2));
  }
  // the floor: a device-to-device copy of the 22 layers' weight bytes (half read, half written)
  const int64_t copy_bytes = layer_bytes * kLayers / 2;
  const double copy_gbs = CopyGbs(s, copy_bytes);
  std::printf("device %s, %d SMs; copy %.0f GB/s (%lld MB moved); per layer %lld MB of weights, floor %.2f us\n",
              dev->name.c_str(), dev->sm_count, copy_gbs, (long long)(2 * copy_bytes >> 20), (long long)(layer_bytes >> 20),
              layer_bytes / copy_gbs / 1e3);
  std::printf("| rows | form | blocks/SM cap | us / layer | x floor | GB/s | outputs |\n|---:|---|---:|---:|---:|---:|---|\n");
  bool failed = false;
  for (int64_t m : {1, 2, 8}) {
    struct Variant {
      int tc, bps;
    };
    std::vector<Variant> vars;
    if (m <= 2)
      for (int bps : {-1, 0, 1, 2, 3}) vars.push_back({0, bps});
    vars.push_back({1, -1});
    bool have_ref = false;
    for (const Variant& v : vars) {
      std::vector<cuda::KernelLaunch> ls;
      bool ok = true;
      for (int l = 0; l < kLayers && ok; ++l)
        for (int j = 0; j < 4 && ok; ++j) {
          kernels::GemvArgs ga;
          ga.dtype = DType::kBF16;
          ga.m = m;
          ga.k = mats[j].k;
          ga.a = act[j];
          ga.segments.push_back({w[l * 4 + j], nullptr, out[j], mats[j].n});
          ga.tuning.tensor_cores = v.tc;
          ga.tuning.blocks_per_sm = v.bps;
          auto p = kernels::PlanGemv(ga, *dev);
          ok = p.ok();
          if (ok) ls.push_back(std::move(*p));
        }
      if (!ok) continue;
      const double us = TimeCaptured(s, [&] {
        for (auto& l : ls) (void)l.Launch(s);
      }) / kLayers;
      CK(cudaStreamSynchronize(s));
      std::string check = "reference";
      if (!have_ref || v.tc == 1) {
        for (int j = 0; j < 4; ++j) CK(cudaMemcpy(ref[j], out[j], m * mats[j].n * 2, cudaMemcpyDeviceToDevice));
        have_ref = true;
        if (v.tc == 1) check = "reference (tensor cores)";
      } else {
        bool same = true;
        for (int j = 0; j < 4; ++j) {
          std::vector<char> a(static_cast<size_t>(m * mats[j].n * 2)), b(a.size());
          CK(cudaMemcpy(a.data(), out[j], a.size(), cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(b.data(), ref[j], b.size(), cudaMemcpyDeviceToHost));
          same &= std::memcmp(a.data(), b.data(), a.size()) == 0;
        }
        check = same ? "identical" : "**DIFFER**";
        failed |= !same;
      }
      const double floor_us = layer_bytes / copy_gbs / 1e3;
      const std::string form = v.tc ? "tensor cores" : "CUDA cores";
      std::printf("| %lld | %s | %s | %.2f | %.2f | %.0f | %s |\n", (long long)m, form.c_str(),
                  v.bps < 0 ? "occupancy" : v.bps == 0 ? "none (a block per 4 columns)" : std::to_string(v.bps).c_str(), us, us / floor_us, layer_bytes / us / 1e3,
                  check.c_str());
    }
  }
  std::printf("%s\n", failed ? "outputs DIFFER between variants" : "outputs identical across blocks-per-SM variants");
  return failed ? 1 : 0;
}
