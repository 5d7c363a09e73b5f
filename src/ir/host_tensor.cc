// IEEE half <-> float conversion (round-to-nearest-even), random fill and poisoning for tests.
#include "ir/host_tensor.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace opfuse {

float HalfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400u)) { mant <<= 1; --exp; }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf (incl. rounding)
  if (a < 0x38800000u) {  // half subnormal (or zero): value = m * 2^-24, m rounded half-to-even
    float mag;
    std::memcpy(&mag, &a, 4);
    uint32_t m = static_cast<uint32_t>(std::nearbyint(mag * 16777216.0f));  // m == 1024 is the smallest normal
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  // round mantissa to 10 bits
  r -= (127 - 15) << 23;
  return static_cast<uint16_t>(sign | (r >> 13));
}

void FillRandom(HostTensor& t, std::mt19937_64& rng, double scale, int64_t int_hi) {
  std::uniform_real_distribution<double> uf(-scale, scale);
  std::uniform_int_distribution<int64_t> ui(0, std::max<int64_t>(int_hi - 1, 0));
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (IsFloat(t.dtype)) t.set(i, uf(rng));
    else if (t.dtype == DType::kBool) t.set(i, static_cast<double>(rng() & 1));
    else t.set(i, static_cast<double>(ui(rng)));
  }
}

void Poison(HostTensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (IsFloat(t.dtype)) t.set(i, std::numeric_limits<double>::quiet_NaN());
    else if (t.dtype == DType::kBool) t.data[i] = 0xAB;
    else t.set(i, -123456789.0);
  }
}

double RelativeError(const HostTensor& out, const HostTensor& ref) {
  if (out.shape != ref.shape) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double o = out.get(i), e = ref.get(i);
    if (o == e) {
      if (std::isfinite(e)) den += e * e;
      continue;
    }
    if (!std::isfinite(o) || !std::isfinite(e)) return std::numeric_limits<double>::infinity();
    num += (o - e) * (o - e);
    den += e * e;
  }
  if (num == 0) return 0;
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

}  // namespace opfuse
