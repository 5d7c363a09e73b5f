// f16 / bf16 <-> f32 conversions (src/ir/host_tensor.h): the CPU reference stores 16-bit
// floats through these, so they are tested exhaustively — every one of the 65536 bit patterns
// round trips, every midpoint between neighbours rounds to the even one (ties-to-even), values
// just off a midpoint round to the nearer, and subnormals, overflow, infinities and NaN behave.
#include <cmath>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

#include "ir/host_tensor.h"

namespace opfuse {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
bool HalfIsNan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu); }
bool BF16IsNan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu); }

TEST(Half, KnownValues) {
  EXPECT_EQ(HalfToFloat(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);                  // largest finite
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(HalfToFloat(0x03ff), 1023 * std::ldexp(1.0f, -24));  // largest subnormal
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
}

TEST(Half, AllPatternsRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    const uint16_t back = FloatToHalf(f);
    if (HalfIsNan(static_cast<uint16_t>(h))) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_TRUE(HalfIsNan(back)) << std::hex << h;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << "NaN sign, " << std::hex << h;
    } else {
      ASSERT_EQ(back, h) << std::hex << h << " -> " << f;
    }
  }
}

// Every midpoint between neighbouring finite halves (subnormals included, and 65504..inf) goes to
// the one with an even mantissa; the next float either side goes to the nearer neighbour.
TEST(Half, RoundsToNearestTiesToEven) {
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // positive finite, with its successor (0x7c00 = inf)
    const float lo = HalfToFloat(static_cast<uint16_t>(h));
    const float hi = h + 1 == 0x7c00 ? 65536.0f : HalfToFloat(static_cast<uint16_t>(h + 1));
    const float mid = lo + (hi - lo) / 2;  // exact: halves have 11 significant bits
    ASSERT_GT(mid, lo);
    ASSERT_LT(mid, hi);
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
    ASSERT_EQ(FloatToHalf(mid), even) << std::hex << h;
    ASSERT_EQ(FloatToHalf(-mid), even | 0x8000) << std::hex << h;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, 1e9f)), h + 1) << std::hex << h;
  }
}

TEST(Half, SubnormalsUnderflowOverflow) {
  const float tiny = std::ldexp(1.0f, -24);
  EXPECT_EQ(FloatToHalf(tiny / 2), 0x0000);                             // tie between 0 and 2^-24 -> 0 (even)
  EXPECT_EQ(FloatToHalf(std::nextafter(tiny / 2, 1.0f)), 0x0001);
  EXPECT_EQ(FloatToHalf(tiny / 4), 0x0000);
  EXPECT_EQ(FloatToHalf(-tiny / 4), 0x8000);                            // keeps the sign
  EXPECT_EQ(FloatToHalf(tiny * 1.5f), 0x0002);                          // tie 1.5 -> 2 (even)
  EXPECT_EQ(FloatToHalf(tiny * 2.5f), 0x0002);                          // tie 2.5 -> 2 (even)
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14) - tiny / 2), 0x0400);     // largest subnormal + half ulp -> normal
  EXPECT_EQ(FloatToHalf(65519.996f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);                             // tie 65504 / 65536 -> inf (even)
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-1e6f), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_TRUE(HalfIsNan(FloatToHalf(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(HalfIsNan(FloatToHalf(FromBits(0x7f800001u))));           // signalling NaN stays NaN
  EXPECT_TRUE(HalfIsNan(FloatToHalf(FromBits(0xffc00000u))));
}

TEST(BF16, AllPatternsRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = BF16ToFloat(static_cast<uint16_t>(h));
    ASSERT_EQ(Bits(f), h << 16);  // bf16 is the top half of an f32
    const uint16_t back = FloatToBF16(f);
    if (BF16IsNan(static_cast<uint16_t>(h))) {
      ASSERT_TRUE(BF16IsNan(back)) << std::hex << h;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << std::hex << h;
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(BF16, RoundsToNearestTiesToEven) {
  for (uint32_t h = 0; h < 0x7f80; ++h) {  // positive finite (subnormals too), successor may be inf
    const uint32_t mid_bits = (h << 16) | 0x8000u;  // exactly halfway to h + 1
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
    ASSERT_EQ(FloatToBF16(FromBits(mid_bits)), even) << std::hex << h;
    ASSERT_EQ(FloatToBF16(FromBits(mid_bits | 0x80000000u)), even | 0x8000) << std::hex << h;
    ASSERT_EQ(FloatToBF16(FromBits(mid_bits - 1)), h) << std::hex << h;
    ASSERT_EQ(FloatToBF16(FromBits(mid_bits + 1)), h + 1) << std::hex << h;
  }
  EXPECT_EQ(FloatToBF16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_EQ(FloatToBF16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBF16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_TRUE(BF16IsNan(FloatToBF16(FromBits(0x7f800001u))));  // low-bit NaN must not become inf
  EXPECT_TRUE(BF16IsNan(FloatToBF16(FromBits(0xff800001u))));
  EXPECT_EQ(FloatToBF16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBF16(-0.0f), 0x8000);
}

TEST(HostTensor, HalfStorageThroughGetSet) {
  HostTensor h(DType::kF16, {3});
  h.set(0, 1.0 / 3.0);
  h.set(1, 70000.0);
  h.set(2, -1e-8);
  EXPECT_EQ(h.get(0), HalfToFloat(FloatToHalf(static_cast<float>(1.0 / 3.0))));
  EXPECT_TRUE(std::isinf(h.get(1)));
  EXPECT_EQ(h.get(2), 0.0);
  EXPECT_TRUE(std::signbit(h.get(2)));
  HostTensor b(DType::kBF16, {2});
  b.set(0, 3.140625);
  b.set(1, std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(b.get(0), 3.140625);
  EXPECT_TRUE(std::isnan(b.get(1)));
}

}  // namespace
}  // namespace opfuse
