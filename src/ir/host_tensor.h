// HostTensor: a dense, row-major tensor in host memory — the CPU backend's storage and the
// currency of the numerics tests. f16/bf16 are stored as their 16-bit patterns and read/written
// through f32 (round-to-nearest-even on store), which is the CPU reference's compute type.
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "opfuse/graph.h"

namespace opfuse {

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
inline float BF16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t FloatToBF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  HostTensor() = default;
  HostTensor(DType t, std::vector<int64_t> s) : dtype(t), shape(std::move(s)) {
    data.resize(static_cast<size_t>(numel()) * DTypeSize(dtype));
  }
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  int64_t rows() const { return shape.empty() ? 1 : numel() / std::max<int64_t>(shape.back(), 1); }
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }

  // Element access through double (exact for every stored type but i64 beyond 2^53).
  double get(int64_t i) const {
    const uint8_t* p = data.data() + i * DTypeSize(dtype);
    switch (dtype) {
      case DType::kF32: { float f; std::memcpy(&f, p, 4); return f; }
      case DType::kF16: { uint16_t h; std::memcpy(&h, p, 2); return HalfToFloat(h); }
      case DType::kBF16: { uint16_t h; std::memcpy(&h, p, 2); return BF16ToFloat(h); }
      case DType::kI32: { int32_t v; std::memcpy(&v, p, 4); return v; }
      case DType::kI64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
      case DType::kBool: return *p ? 1.0 : 0.0;
    }
    return 0;
  }
  void set(int64_t i, double x) {
    uint8_t* p = data.data() + i * DTypeSize(dtype);
    switch (dtype) {
      case DType::kF32: { float f = static_cast<float>(x); std::memcpy(p, &f, 4); break; }
      case DType::kF16: { uint16_t h = FloatToHalf(static_cast<float>(x)); std::memcpy(p, &h, 2); break; }
      case DType::kBF16: { uint16_t h = FloatToBF16(static_cast<float>(x)); std::memcpy(p, &h, 2); break; }
      case DType::kI32: { int32_t v = SaturateInt<int32_t>(x); std::memcpy(p, &v, 4); break; }
      case DType::kI64: { int64_t v = SaturateInt<int64_t>(x); std::memcpy(p, &v, 8); break; }
      case DType::kBool: *p = (x != 0.0); break;
    }
  }
  int64_t get_int(int64_t i) const {
    const uint8_t* p = data.data() + i * DTypeSize(dtype);
    if (dtype == DType::kI64) { int64_t v; std::memcpy(&v, p, 8); return v; }
    if (dtype == DType::kI32) { int32_t v; std::memcpy(&v, p, 4); return v; }
    return static_cast<int64_t>(get(i));
  }
  std::vector<float> to_f32() const {
    std::vector<float> out(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) out[i] = static_cast<float>(get(i));
    return out;
  }
  void from_f32(const std::vector<float>& v) {
    for (int64_t i = 0; i < numel(); ++i) set(i, v[i]);
  }

 private:
  template <typename I>
  static I SaturateInt(double x) {
    if (x != x) return 0;
    if (x >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
    if (x <= static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
    return static_cast<I>(x);
  }
};

// Fresh signed random values: floats uniform in [-scale, scale]; ints in [0, int_hi); bools random.
void FillRandom(HostTensor& t, std::mt19937_64& rng, double scale = 1.0, int64_t int_hi = 16);
// NaN for floats, a sentinel for ints: outputs are poisoned before a run so unwritten elements show.
void Poison(HostTensor& t);

// ||out - ref|| / ||ref|| over all elements (shapes must match; +inf otherwise). Elements equal in
// both (equal infinities included) count as exact; a NaN or an infinity on one side only gives
// +inf, so unwritten (NaN-poisoned) outputs can never pass.
double RelativeError(const HostTensor& out, const HostTensor& ref);

}  // namespace opfuse
