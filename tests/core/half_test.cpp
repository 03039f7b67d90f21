// F16 and BF16 conversions: exhaustive over all 16-bit patterns, and round-to-nearest-even at every
// rounding boundary between neighbouring finite values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/half.h"

namespace mvllm {
namespace {

bool f16_is_nan(f16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0; }
bool bf16_is_nan(bf16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x007f) != 0; }

// The value of an F16 bit pattern from the IEEE definition, independent of half.h.
double f16_reference_value(uint16_t h) {
    const int sign = (h & 0x8000) ? -1 : 1;
    const int exp = (h >> 10) & 0x1f;
    const int mant = h & 0x3ff;
    if (exp == 0x1f) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
    if (exp == 0) return sign * std::ldexp(double(mant), -24);
    return sign * std::ldexp(double(1024 + mant), exp - 25);
}

TEST(HalfTest, F16ToF32MatchesDefinitionForAllPatterns) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = f16_to_f32(static_cast<f16_t>(h));
        const double ref = f16_reference_value(static_cast<uint16_t>(h));
        if (std::isnan(ref)) {
            ASSERT_TRUE(std::isnan(f)) << std::hex << h;
        } else {
            ASSERT_EQ(double(f), ref) << std::hex << h;
            ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
        }
    }
}

TEST(HalfTest, F16RoundTripsAllPatterns) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const f16_t back = f32_to_f16(f16_to_f32(static_cast<f16_t>(h)));
        if (f16_is_nan(static_cast<f16_t>(h))) {
            ASSERT_TRUE(f16_is_nan(back)) << std::hex << h << " -> " << back;
            ASSERT_EQ(back & 0x8000, h & 0x8000) << std::hex << h;
        } else {
            ASSERT_EQ(back, h) << std::hex << h;
        }
    }
}

TEST(HalfTest, BF16RoundTripsAllPatterns) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = bf16_to_f32(static_cast<bf16_t>(h));
        EXPECT_EQ(float_to_bits(f), h << 16);
        const bf16_t back = f32_to_bf16(f);
        if (bf16_is_nan(static_cast<bf16_t>(h))) {
            ASSERT_TRUE(bf16_is_nan(back)) << std::hex << h;
            ASSERT_EQ(back & 0x8000, h & 0x8000) << std::hex << h;
        } else {
            ASSERT_EQ(back, h) << std::hex << h;
        }
    }
}

// For each pair of neighbouring finite positive F16 values (including the subnormals and the pair
// straddling the smallest normal), the exact midpoint (representable in f32) must round to the one
// with an even mantissa, and the f32 values either side of it to the nearer one. Negated likewise.
TEST(HalfTest, F32ToF16RoundsToNearestEvenAtEveryBoundary) {
    for (uint32_t h = 0; h < 0x7bff; ++h) {
        const float lo = f16_to_f32(static_cast<f16_t>(h));
        const float hi = f16_to_f32(static_cast<f16_t>(h + 1));
        const float mid = (lo + hi) / 2;  // exact: 12 significant bits
        ASSERT_EQ(double(mid), (f16_reference_value(h) + f16_reference_value(h + 1)) / 2);
        const f16_t even = (h & 1) ? h + 1 : h;
        for (float sign : {1.0f, -1.0f}) {
            const f16_t s = sign < 0 ? 0x8000 : 0;
            ASSERT_EQ(f32_to_f16(sign * mid), s | even) << std::hex << h;
            ASSERT_EQ(f32_to_f16(sign * std::nextafter(mid, 0.0f)), s | h) << std::hex << h;
            ASSERT_EQ(f32_to_f16(sign * std::nextafter(mid, INFINITY)), s | (h + 1)) << std::hex << h;
            ASSERT_EQ(f32_to_f16(sign * lo), s | h) << std::hex << h;
        }
    }
}

TEST(HalfTest, F32ToF16Cases) {
    EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
    EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
    EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
    EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even (down)
    EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
    EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
    // subnormals: the smallest is 2^-24
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);                          // tie -> 0
    EXPECT_EQ(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
    EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -24)), 0x0002);                          // tie -> even
    EXPECT_EQ(f32_to_f16(std::ldexp(2.5f, -24)), 0x0002);                          // tie -> even
    EXPECT_EQ(f32_to_f16(std::ldexp(1023.0f, -24)), 0x03ff);                       // largest subnormal
    EXPECT_EQ(f32_to_f16(std::ldexp(1023.5f, -24)), 0x0400);                       // rounds up to normal
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);                          // smallest normal
    EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
    EXPECT_EQ(f32_to_f16(-std::ldexp(3.0f, -26)), 0x8001);                         // 0.75 ulp -> 1
    // overflow: 65504 is the largest finite; 65520 is the midpoint to 65536 and ties to inf
    EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
    EXPECT_EQ(f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
    EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
    EXPECT_EQ(f32_to_f16(-65520.0f), 0xfc00);
    EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
    EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::max()), 0x7c00);
    EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
    EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
    EXPECT_TRUE(f16_is_nan(f32_to_f16(std::numeric_limits<float>::quiet_NaN())));
    EXPECT_TRUE(f16_is_nan(f32_to_f16(bits_to_float(0x7f800001u))));  // NaN payload below f16 bits
    EXPECT_TRUE(f16_is_nan(f32_to_f16(bits_to_float(0xff800001u))));
}

TEST(HalfTest, F32ToBF16RoundsToNearestEvenAtEveryBoundary) {
    for (uint32_t h = 0; h < 0x7f7f; ++h) {
        const float lo = bf16_to_f32(static_cast<bf16_t>(h));
        const float mid = bits_to_float((h << 16) | 0x8000);  // halfway to the next pattern
        const bf16_t even = (h & 1) ? h + 1 : h;
        for (uint32_t s : {0u, 0x8000u}) {
            const float sg = s ? -1.0f : 1.0f;
            ASSERT_EQ(f32_to_bf16(sg * mid), s | even) << std::hex << h;
            ASSERT_EQ(f32_to_bf16(sg * std::nextafter(mid, 0.0f)), s | h) << std::hex << h;
            ASSERT_EQ(f32_to_bf16(sg * std::nextafter(mid, INFINITY)), s | (h + 1)) << std::hex << h;
            ASSERT_EQ(f32_to_bf16(sg * lo), s | h) << std::hex << h;
        }
    }
}

TEST(HalfTest, F32ToBF16Cases) {
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie -> even (down)
    EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even (up)
    EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
    EXPECT_EQ(f32_to_bf16(bits_to_float(0x00008000u)), 0x0000);  // subnormal tie -> even (zero)
    EXPECT_EQ(f32_to_bf16(bits_to_float(0x00018000u)), 0x0002);  // subnormal tie -> even (up)
    EXPECT_EQ(f32_to_bf16(bits_to_float(0x00008001u)), 0x0001);
    EXPECT_EQ(f32_to_bf16(bits_to_float(0x007fffffu)), 0x0080);  // largest subnormal -> min normal
    EXPECT_EQ(f32_to_bf16(bits_to_float(0x7f7f7fffu)), 0x7f7f);  // largest finite bf16
    EXPECT_EQ(f32_to_bf16(bits_to_float(0x7f7f8000u)), 0x7f80);  // tie above it -> inf
    EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
    EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::max()), 0xff80);
    EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
    EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
    // NaNs stay NaN even when the payload sits only in the discarded low bits
    EXPECT_TRUE(bf16_is_nan(f32_to_bf16(bits_to_float(0x7f800001u))));
    EXPECT_TRUE(bf16_is_nan(f32_to_bf16(bits_to_float(0xffffffffu))));
    EXPECT_TRUE(bf16_is_nan(f32_to_bf16(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace mvllm
