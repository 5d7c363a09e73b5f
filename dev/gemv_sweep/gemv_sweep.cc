// gemv_sweep: scratch measurement (dev/, not part of the build) of a plain decode matmul
// y[m, n] = a[m, k] · W[n, k]ᵀ on the GEMV's two forms (CUDA cores up to kGemvCudaCoreMaxRows rows,
// tensor cores, src/kernels/gemv_mma.cu) beside cuBLASLt, over model widths and odd ones at 1..64
// rows. Question it answers: from how many rows does each form win, i.e. what kDecodeGemvMaxRows and
// kGemvTensorCoreMinRows (gemv_args.h) should be.
//
// Method: enough copies of W (and a) that one pass over them exceeds 256 MiB (L2 never holds the
// weights), the launches of one pass captured in a CUDA graph (the GEMV with its PDL attribute, as
// the decode graph runs it), 1 warm-up then 5 replays, the fastest replay / copies = µs per matmul;
// GB/s = weight bytes / that. Validation: each form's output against cuBLASLt's on the same inputs
// (max |diff| / max |ref|, bf16 bound 3e-2) — a row fails loudly.
//
// Build: bash dev/gemv_sweep/build.sh   (needs build/cuda built; writes build/gemv_sweep)
// Run:   build/gemv_sweep [out.json]    (prints one table)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../cuda_ck.h"
#include "../graph_time.h"
#include "cuda/device.h"
#include "kernels/gemv.h"
#include "runtime/cuda/cublaslt_matmul.h"

using namespace opfuse;


namespace {

// µs per launch of `copies` launches (one per copy of the weights), captured in one graph.
template <class F>
double TimeGraph(cudaStream_t s, int copies, F&& launch) {
  return TimeCaptured(s, [&] {
           for (int i = 0; i < copies; ++i) launch(i);
         }) /
         copies;
}

std::vector<float> Fetch(const void* p, int64_t n) {
  std::vector<__nv_bfloat16> h(static_cast<size_t>(n));
  CK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

double RelErr(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num = std::max(num, std::fabs(double(got[i]) - ref[i]));
    den = std::max(den, std::fabs(double(ref[i])));
  }
  return den > 0 ? num / den : INFINITY;
}

std::string fmt_us(double us) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", us);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  auto dev = cuda::QueryDevice();
  if (!dev.ok()) {
    std::fprintf(stderr, "%s\n", dev.status().message().c_str());
    return 1;
  }
  auto eng = cuda::MatmulEngine::ForCurrentDevice();
  if (!eng.ok()) return 1;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  struct Shape {
    const char* what;
    int64_t n, k;
  };
  const Shape shapes[] = {{"tinyllama qkv", 2560, 2048}, {"tinyllama o", 2048, 2048},     {"tinyllama gate+up", 11264, 2048},
                          {"tinyllama down", 2048, 5632}, {"llama3-8b qkv", 6144, 4096},  {"llama3-8b o", 4096, 4096},
                          {"llama3-8b down", 4096, 14336}, {"tinyllama head", 32000, 2048}, {"odd", 3000, 1000},
                          {"odd", 1000, 264}};
  const int64_t rows[] = {1, 2, 4, 8, 16, 32};
  std::mt19937 rng(12345);
  std::normal_distribution<float> nd(0.f, 1.f);
  FILE* js = argc > 1 ? std::fopen(argv[1], "w") : nullptr;
  if (js) std::fprintf(js, "{\"device\": \"%s\", \"rows\": [\n", dev->name.c_str());
  std::printf("device %s, %d SMs\n", dev->name.c_str(), dev->sm_count);
  std::printf("| shape | n | k | m | CUDA cores us | tensor cores us | TC at 2 / 4 / 8 / 16 warps a block | cuBLASLt us | TC GB/s | LT GB/s | TC/LT | max rel err TC, CC |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|\n");
  bool first = true, failed = false;
  for (const Shape& sh : shapes) {
    const int64_t wbytes = sh.n * sh.k * 2;
    const int copies = static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / wbytes + 1, 2, 64));
    std::vector<void*> w(copies), a(copies), y(copies), yl(copies);
    std::vector<__nv_bfloat16> hw(static_cast<size_t>(sh.n * sh.k)), ha(static_cast<size_t>(64 * sh.k));
    for (auto& v : hw) v = __float2bfloat16(nd(rng) / std::sqrt(float(sh.k)));
    for (auto& v : ha) v = __float2bfloat16(nd(rng));
    for (int i = 0; i < copies; ++i) {
      CK(cudaMalloc(&w[i], wbytes));
      CK(cudaMalloc(&a[i], 64 * sh.k * 2));
      CK(cudaMalloc(&y[i], 64 * sh.n * 2));
      CK(cudaMalloc(&yl[i], 64 * sh.n * 2));
      CK(cudaMemcpy(w[i], hw.data(), wbytes, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(a[i], ha.data(), 64 * sh.k * 2, cudaMemcpyHostToDevice));
    }
    for (int64_t m : rows) {
      auto gemv_args = [&](int i, int tc) {
        kernels::GemvArgs ga;
        ga.dtype = DType::kBF16;
        ga.m = m;
        ga.k = sh.k;
        ga.a = a[i];
        ga.segments.push_back({w[i], nullptr, y[i], sh.n});
        ga.tuning.tensor_cores = tc;
        return ga;
      };
      auto lt = [&](int i) {
        cuda::MatmulArgs ma;
        ma.type = cuda::MatmulType::kBF16;
        ma.m = m, ma.n = sh.n, ma.k = sh.k;
        ma.a = a[i], ma.b = w[i], ma.c = yl[i], ma.transpose_b = true;
        auto st = (*eng)->Matmul(ma, s);
        if (!st.ok()) std::fprintf(stderr, "cublaslt: %s\n", st.message().c_str());
      };
      auto form = [&](int tc, double* us, double* err, int warps = 0) {
        *us = NAN, *err = NAN;
        if (!kernels::GemvSupported(gemv_args(0, tc)).ok()) return;
        std::vector<cuda::KernelLaunch> ls;
        for (int i = 0; i < copies; ++i) {
          kernels::GemvArgs ga = gemv_args(i, tc);
          ga.tuning.mma_warps = warps;
          auto l = kernels::PlanGemv(ga, *dev);
          if (!l.ok()) return;
          ls.push_back(std::move(*l));
        }
        *us = TimeGraph(s, copies, [&](int i) { (void)ls[i].Launch(s); });
        CK(cudaStreamSynchronize(s));
        *err = RelErr(Fetch(y[0], m * sh.n), Fetch(yl[0], m * sh.n));
      };
      const double lt_us = TimeGraph(s, copies, lt);
      CK(cudaStreamSynchronize(s));
      double cc_us, cc_err, tc_us, tc_err;
      form(0, &cc_us, &cc_err);
      form(1, &tc_us, &tc_err);
      // the tensor-core form at fixed warps per block (GemvTuning::mma_warps), beside the rule's
      std::string wcols;
      for (int wv : {2, 4, 8, 16}) {
        double wus, werr;
        form(1, &wus, &werr, wv);
        wcols += fmt_us(wus) + (wv < 16 ? " / " : "");
        tc_err = std::max(tc_err, werr);
      }
      const bool bad = !(tc_err <= 3e-2) || (!std::isnan(cc_err) && !(cc_err <= 3e-2));
      failed |= bad;
      std::printf("| %s | %lld | %lld | %lld | %.2f | %.2f | %s | %.2f | %.0f | %.0f | %.2f | %.1e, %.1e%s |\n", sh.what,
                  (long long)sh.n, (long long)sh.k, (long long)m, cc_us, tc_us, wcols.c_str(), lt_us, wbytes / tc_us / 1e3,
                  wbytes / lt_us / 1e3, tc_us / lt_us, tc_err, cc_err, bad ? " **FAIL**" : "");
      if (js)
        std::fprintf(js, "%s{\"shape\": \"%s\", \"n\": %lld, \"k\": %lld, \"m\": %lld, \"cuda_cores_us\": %.3f, \"tensor_cores_us\": %.3f, "
                         "\"cublaslt_us\": %.3f, \"tc_err\": %.2e}\n",
                     first ? "" : ",", sh.what, (long long)sh.n, (long long)sh.k, (long long)m, std::isnan(cc_us) ? -1.0 : cc_us,
                     tc_us, lt_us, tc_err);
      first = false;
    }
    for (int i = 0; i < copies; ++i) {
      CK(cudaFree(w[i]));
      CK(cudaFree(a[i]));
      CK(cudaFree(y[i]));
      CK(cudaFree(yl[i]));
    }
  }
  if (js) {
    std::fprintf(js, "]}\n");
    std::fclose(js);
  }
  std::printf("%s\n", failed ? "validation FAILED" : "validation ok (every form within 3e-2 of cuBLASLt)");
  return failed ? 1 : 0;
}
