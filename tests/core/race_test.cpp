// The race's float row helpers against double references, and race_row against the definition.
#include "core/race.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace mvllm {
namespace {

TEST(Race, ExpNonpositiveWithinTwoUlpOfExp) {
    double worst = 0;
    for (float x = -87.0f; x <= 0.0f; x += 0.0013f) {
        const double want = std::exp(static_cast<double>(x));
        worst = std::max(worst, std::fabs(exp_nonpositive(x) - want) / want);
    }
    EXPECT_LT(worst, 2.5e-7);  // 2 ulp of a float is 2.4e-7 relative at worst
    EXPECT_EQ(exp_nonpositive(0.0f), 1.0f);
    EXPECT_GT(exp_nonpositive(-std::numeric_limits<float>::infinity()), 0.0f);  // e^-87, by contract
    EXPECT_LT(exp_nonpositive(-std::numeric_limits<float>::infinity()), 2e-38f);
}

// Rows of odd lengths (the vector loops' tails) with -inf entries.
std::vector<float> row(int64_t n, uint64_t seed) {
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> d(0.0f, 4.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = d(gen);
    if (n > 10) x[3] = x[n - 2] = -std::numeric_limits<float>::infinity();
    return x;
}

TEST(Race, RowHelpersEqualDoubleReferences) {
    for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{1029}, int64_t{151936}}) {
        const std::vector<float> x = row(n, static_cast<uint64_t>(n));
        float max = -std::numeric_limits<float>::infinity();
        int32_t arg = 0;
        for (int64_t i = 0; i < n; ++i)
            if (x[i] > max) max = x[i], arg = static_cast<int32_t>(i);
        EXPECT_EQ(row_max(x.data(), n), max);
        EXPECT_EQ(row_argmax(x.data(), n), arg);
        const float inv_t = 1.0f / 0.7f, cut = max - 3.0f, tau = 0.01f;
        std::vector<float> w(x.size());
        double weights = 0, at_least = 0, below = 0, exp_below = 0;
        const double total = row_weights(x.data(), n, max, inv_t, w.data());
        for (int64_t i = 0; i < n; ++i) {
            const double want = std::exp((double(x[i]) - max) * inv_t);
            EXPECT_NEAR(w[i], want, 2e-5 * want + 1e-37) << i;  // the float argument's rounding
            weights += w[i];
            if (w[i] >= tau) at_least += w[i];
            if (x[i] < cut) below += w[i], exp_below += std::exp(double(x[i]) - max);
        }
        EXPECT_NEAR(total, weights, 1e-6 * weights);
        EXPECT_NEAR(sum_at_least(w.data(), n, tau), at_least, 1e-6 * at_least);
        EXPECT_NEAR(sum_where_below(x.data(), w.data(), n, cut), below, 1e-6 * below + 1e-30);
        EXPECT_NEAR(exp_sum_below(x.data(), n, max, cut), exp_below, 3e-7 * exp_below + 1e-30);
    }
}

// race_row is argmax over the kept tokens of w / -log(u), computed here for every token.
TEST(Race, RaceRowEqualsTheUnprunedRace) {
    const int64_t n = 20000;
    for (const float temperature : {0.3f, 1.0f, 3.0f}) {
        for (const float min_p : {0.0f, 0.02f}) {
            const std::vector<float> x = row(n, 7);
            const float max = row_max(x.data(), n);
            for (uint64_t key = 1; key <= 60; ++key) {
                const uint64_t k = mix64(key);
                Race want{k};
                for (int64_t t = 0; t < n; ++t) {
                    const double w = std::exp((double(x[t]) - max) / temperature);
                    if (w >= min_p) want.enter(static_cast<int32_t>(t), w);
                }
                ASSERT_EQ(race_row(x.data(), n, temperature, min_p, k), want.best)
                    << "temperature " << temperature << ", min_p " << min_p << ", key " << key;
            }
        }
    }
}

}  // namespace
}  // namespace mvllm
