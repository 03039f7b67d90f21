// Quantise -> dequantise round trips: error bounds on Gaussian rows, degenerate rows, and the exact
// rules of the simple quantisers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "core/quant.h"
#include "core/types.h"

namespace mvllm {
namespace {

std::vector<float> gaussian_row(int64_t n, uint32_t seed, float sigma = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> x(n);
    for (auto& v : x) v = dist(rng);
    return x;
}

std::vector<float> round_trip(DType type, const std::vector<float>& x) {
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> q(row_size(type, n));
    quantize_row(type, x.data(), q.data(), n);
    std::vector<float> y(n);
    dequantize_row(type, q.data(), y.data(), n);
    return y;
}

// RMS of (y - x) over RMS of x.
double relative_rms_error(const std::vector<float>& x, const std::vector<float>& y) {
    double err = 0, ref = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        err += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
        ref += double(x[i]) * x[i];
    }
    return std::sqrt(err / ref);
}

struct Bound {
    DType type;
    double max_rel_rms;
};

// Relative RMS errors measured on N(0, 1) rows (sizes 256..8192, three seeds each; the worst case
// is printed by the test), and the bounds: ~15-20% above the worst measurement, so a regression of
// the quantiser shows but seed noise does not. A uniform quantiser with step s has RMS error
// s / sqrt(12); the measurements follow that:
//   q8_0  0.0056  step = max/127 with max of 32 Gaussians ~2.1 sigma (+ f16 rounding of d). 0.0065
//   q4_0  0.090   step = max/8 ~0.26 sigma, and the side opposite the extreme is clamped.   0.105
//   q4_K  0.076   16 levels over each 32-value sub-block's fitted range (~4 sigma), 6-bit
//                 scale and min against the super-block d / dmin.                         0.090
//   q5_K  0.038   as q4_K with 32 levels: the error halves.                                0.045
//   q6_K  0.018   64 levels per 16 values, int8 sub-block scales.                          0.021
//   q8_K  0.0082  step = max/127 with max of 256 Gaussians (~2.9 sigma): worse than q8_0. 0.0095
constexpr Bound kBounds[] = {
    {DType::Q8_0, 0.0065}, {DType::Q4_0, 0.105}, {DType::Q4_K, 0.090},
    {DType::Q5_K, 0.045},  {DType::Q6_K, 0.021}, {DType::Q8_K, 0.0095},
};

TEST(QuantRoundTripTest, GaussianRowsWithinBounds) {
    for (const Bound& bound : kBounds) {
        double worst = 0;
        for (int64_t n : {256, 512, 1024, 4096, 8192}) {
            for (uint32_t seed : {1u, 2u, 3u}) {
                const std::vector<float> x = gaussian_row(n, seed * 7919 + static_cast<uint32_t>(n));
                const double e = relative_rms_error(x, round_trip(bound.type, x));
                worst = std::max(worst, e);
                EXPECT_LT(e, bound.max_rel_rms) << type_name(bound.type) << " n=" << n << " seed=" << seed;
            }
        }
        std::printf("  %-5s worst relative RMS error %.5f (bound %.4f)\n", type_name(bound.type), worst,
                    bound.max_rel_rms);
    }
}

TEST(QuantRoundTripTest, ScaleInvariant) {
    // Tiny and large magnitudes (within f16 range of the scales) behave like unit ones.
    for (const Bound& bound : kBounds) {
        for (float sigma : {1e-3f, 30.0f}) {
            const std::vector<float> x = gaussian_row(1024, 42, sigma);
            EXPECT_LT(relative_rms_error(x, round_trip(bound.type, x)), bound.max_rel_rms)
                << type_name(bound.type) << " sigma=" << sigma;
        }
    }
}

TEST(QuantRoundTripTest, SmallBlockTypesShortRows) {
    for (DType type : {DType::Q8_0, DType::Q4_0}) {
        for (int64_t n : {32, 64, 96}) {
            const std::vector<float> x = gaussian_row(n, 9);
            const double bound = type == DType::Q8_0 ? 0.008 : 0.15;  // few blocks: more variance
            EXPECT_LT(relative_rms_error(x, round_trip(type, x)), bound) << type_name(type) << " " << n;
        }
    }
}

TEST(QuantRoundTripTest, ZeroRowsStayZero) {
    for (const Bound& bound : kBounds) {
        const std::vector<float> x(512, 0.0f);
        const std::vector<float> y = round_trip(bound.type, x);
        for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_EQ(y[i], 0.0f) << type_name(bound.type) << " " << i;
        }
    }
}

TEST(QuantRoundTripTest, ConstantRowsAreFiniteAndClose) {
    for (const Bound& bound : kBounds) {
        for (float c : {1.0f, -1.0f, 0.37f, -1234.5f, 0.1f, 20000.0f}) {
            const std::vector<float> x(512, c);
            const std::vector<float> y = round_trip(bound.type, x);
            for (size_t i = 0; i < y.size(); ++i) {
                ASSERT_TRUE(std::isfinite(y[i])) << type_name(bound.type) << " c=" << c;
                // A constant is representable up to the f16 rounding of the scale (and, for the
                // K-quants, of the 6/8-bit sub-block scale against the super-block one).
                ASSERT_NEAR(y[i], c, std::fabs(c) * 0.02f) << type_name(bound.type) << " c=" << c;
            }
        }
    }
}

TEST(QuantRoundTripTest, TinyRowsStayFiniteAndBounded) {
    // Below the f16 range of the block scales precision is lost (values may flush to zero), but
    // nothing may become NaN / inf or grow beyond the row's range.
    for (const Bound& bound : kBounds) {
        for (float c : {1e-5f, -1e-7f, 1e-30f, -1e-40f}) {
            std::vector<float> x = gaussian_row(512, 3, std::fabs(c));
            x[0] = c;
            float amax = 0.0f;
            for (float v : x) amax = std::max(amax, std::fabs(v));
            const std::vector<float> y = round_trip(bound.type, x);
            for (size_t i = 0; i < y.size(); ++i) {
                ASSERT_TRUE(std::isfinite(y[i])) << type_name(bound.type) << " c=" << c;
                ASSERT_LE(std::fabs(y[i]), 2.0f * amax) << type_name(bound.type) << " c=" << c << " i=" << i;
            }
        }
    }
}

TEST(QuantRoundTripTest, MixedMagnitudeBlocks) {
    // One super-block of large values next to one of tiny ones, and sub-blocks of very different
    // scale inside a super-block: nothing becomes NaN, and the large values stay accurate.
    std::vector<float> x = gaussian_row(1024, 5);
    for (int i = 256; i < 512; ++i) x[i] *= 1e-4f;
    for (int i = 512; i < 544; ++i) x[i] *= 100.0f;
    for (const Bound& bound : kBounds) {
        const std::vector<float> y = round_trip(bound.type, x);
        for (float v : y) ASSERT_TRUE(std::isfinite(v)) << type_name(bound.type);
        const std::vector<float> xa(x.begin(), x.begin() + 256), ya(y.begin(), y.begin() + 256);
        EXPECT_LT(relative_rms_error(xa, ya), bound.max_rel_rms) << type_name(bound.type);
    }
}

TEST(QuantizeRulesTest, Q8_0ScaleIsMaxOver127) {
    std::vector<float> x = gaussian_row(32, 11);
    x[5] = -3.0f;  // the largest magnitude
    BlockQ8_0 b;
    quantize_row_q8_0(x.data(), &b, 32);
    EXPECT_EQ(b.d, f32_to_f16(3.0f / 127.0f));
    EXPECT_EQ(b.qs[5], -127);
    const float id = 127.0f / 3.0f;
    for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(b.qs[j] - x[j] * id), 0.5f + 1e-4f) << j;
}

TEST(QuantizeRulesTest, Q4_0ExtremeMapsToLevelZero) {
    std::vector<float> x = gaussian_row(32, 12);
    for (float& v : x) v = std::fmin(std::fabs(v), 2.0f);
    x[9] = 4.0f;  // positive extreme: d = -0.5, level (4 / -0.5) + 8 = 0
    BlockQ4_0 b;
    quantize_row_q4_0(x.data(), &b, 32);
    EXPECT_EQ(f16_to_f32(b.d), -0.5f);
    EXPECT_EQ(b.qs[9] & 0xF, 0);
    float y[32];
    dequantize_row_q4_0(&b, y, 32);
    EXPECT_EQ(y[9], 4.0f);
    for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(y[j] - x[j]), 0.25f + 1e-6f) << j;
}

TEST(QuantizeRulesTest, Q8_KBsumsAreBlockSums) {
    const std::vector<float> x = gaussian_row(512, 13);
    BlockQ8_K b[2];
    quantize_row_q8_K(x.data(), b, 512);
    for (const BlockQ8_K& blk : b) {
        float amax = 0;
        for (int j = 0; j < 256; ++j) amax = std::max(amax, std::fabs(float(blk.qs[j])));
        EXPECT_EQ(amax, 127.0f);
        for (int k = 0; k < 16; ++k) {
            int sum = 0;
            for (int j = 0; j < 16; ++j) sum += blk.qs[16 * k + j];
            EXPECT_EQ(blk.bsums[k], sum) << k;
        }
    }
}

TEST(QuantizeRulesTest, KQuantsReproduceTheirOwnOutput) {
    // Values already on a K-quant grid survive a second round trip nearly unchanged.
    for (DType type : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
        const std::vector<float> y1 = round_trip(type, gaussian_row(1024, 21));
        const std::vector<float> y2 = round_trip(type, y1);
        EXPECT_LT(relative_rms_error(y1, y2), 0.02) << type_name(type);
    }
}

}  // namespace
}  // namespace mvllm
