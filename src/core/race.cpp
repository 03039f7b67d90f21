#include "core/race.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace mvllm {
namespace {

// Row kernels on 4-float vectors (GCC's vector extension: SSE2 on any x86-64, NEON on ARM), since
// the compiler does not vectorise these loops from scalar code (the clamp below becomes a branch).
// The exponentials of the whole-row passes run 8 values at a time (F8: two SSE operations each,
// or one AVX2 operation in the x86-64 clone, MVLLM_ROW_CLONES) and are added into the same 4-lane
// partial sums in the same order, so a row's sums have the same bits on every x86-64.
using F4 = float __attribute__((vector_size(16)));
using I4 = int32_t __attribute__((vector_size(16)));
#pragma GCC diagnostic ignored "-Wpsabi"  // F8 never crosses a call: every helper is inlined
using F8 = float __attribute__((vector_size(32)));
using I8 = int32_t __attribute__((vector_size(32)));
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MVLLM_ROW_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MVLLM_ROW_CLONES
#endif
#define MVLLM_INLINE inline __attribute__((always_inline))

MVLLM_INLINE F4 load4(const float* p) {
    F4 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

MVLLM_INLINE F8 load8(const float* p) {
    F8 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

MVLLM_INLINE F4 low4(F8 v) { return F4{v[0], v[1], v[2], v[3]}; }
MVLLM_INLINE F4 high4(F8 v) { return F4{v[4], v[5], v[6], v[7]}; }

// exp(x + x_lo) for x <= 0, x_lo a small correction (the rounding error of x, or 0): Cody-Waite
// reduction x = n ln2 + r, |r| <= ln2 / 2, and a degree-7 Taylor polynomial for e^r (truncation
// error 5e-9; with the rounding of the float steps, ~1-2 ulp in all for x >= -87). Smaller x give
// e^-87 ~ 1.6e-38, not a smaller value or 0. The scalar form runs the same operations as one lane.
template <typename V, typename IV>
MVLLM_INLINE V expv(V x, V x_lo = V{}) {
    x = x < -87.0f ? V{} - 87.0f : x;
    const IV i = __builtin_convertvector(0.5f - x * 1.44269504f, IV);  // n = -i = round(x / ln2)
    const V n = __builtin_convertvector(-i, V);
    const V r = ((x - n * 0.693145752f) - n * 1.42860677e-6f) + x_lo;  // ln2 in two parts
    V p = V{} + 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    return p * reinterpret_cast<V>((127 - i) << 23);
}
MVLLM_INLINE F4 exp4(F4 x, F4 x_lo = F4{}) { return expv<F4, I4>(x, x_lo); }
MVLLM_INLINE F8 exp8(F8 x) { return expv<F8, I8>(x); }

// exp(a - b), with the rounding error of the float subtraction carried into the polynomial
// (Knuth's two-sum), so that a large |a - b| does not cost accuracy.
template <typename V, typename IV>
MVLLM_INLINE V expv_of_difference(V a, float b) {
    a = a < b - 87.0f ? V{} + (b - 87.0f) : a;  // -inf and other underflows: finite, as expv
    const V d = a - b, a_back = d + b, b_back = a_back - d;
    return expv<V, IV>(d, (a - a_back) + (b_back - b));
}
MVLLM_INLINE F4 exp4_of_difference(F4 a, float b) { return expv_of_difference<F4, I4>(a, b); }

double lanes(F4 v) { return double(v[0]) + v[1] + v[2] + v[3]; }

// sum over i of f(i) (an F4 of values i..i+3), float partial sums per lane added in double every
// 1,024 values; the tail (n % 4 values) through tail(i).
template <typename F, typename T>
double row_sum(int64_t n, F f, T tail) {
    double sum = 0;
    int64_t i = 0;
    while (i + 4 <= n) {
        F4 part{};
        for (const int64_t end = std::min(n, i + 1024); i + 4 <= end; i += 4) part += f(i);
        sum += lanes(part);
    }
    for (; i < n; ++i) sum += tail(i);
    return sum;
}

// mix64(t) for t < n (a table per thread, grown to the largest vocabulary seen).
const uint64_t* token_hashes(int64_t n) {
    thread_local std::vector<uint64_t> table;
    for (int64_t t = static_cast<int64_t>(table.size()); t < n; ++t) table.push_back(mix64(static_cast<uint64_t>(t)));
    return table.data();
}

}  // namespace

float exp_nonpositive(float x) { return exp4(F4{} + x)[0]; }

float row_max(const float* x, int64_t n) {
    const float inf = std::numeric_limits<float>::infinity();
    F4 m4 = F4{} - inf;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const F4 v = load4(x + i);
        m4 = v > m4 ? v : m4;
    }
    float m = -inf;
    for (int j = 0; j < 4; ++j) m = m4[j] > m ? m4[j] : m;
    for (; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
}

int32_t row_argmax(const float* x, int64_t n) {
    const float m = row_max(x, n);
    for (int64_t i = 0; i < n; ++i)
        if (x[i] == m) return static_cast<int32_t>(i);
    return 0;
}

MVLLM_ROW_CLONES double row_weights(const float* x, int64_t n, float max, float inv_t, float* w) {
    double sum = 0;
    int64_t i = 0;
    while (i + 8 <= n) {
        F4 part0{}, part1{};  // two chains, so that the adds do not wait on each other
        for (const int64_t end = std::min(n, i + 1024); i + 8 <= end; i += 8) {
            const F8 e = exp8((load8(x + i) - max) * inv_t);
            if (w) std::memcpy(w + i, &e, sizeof e);
            part0 += low4(e);
            part1 += high4(e);
        }
        sum += lanes(part0 + part1);
    }
    for (; i < n; ++i) {
        const float e = exp_nonpositive((x[i] - max) * inv_t);
        if (w) w[i] = e;
        sum += e;
    }
    return sum;
}

double sum_at_least(const float* w, int64_t n, float tau) {
    return row_sum(
        n,
        [&](int64_t i) {
            const F4 v = load4(w + i);
            return v >= tau ? v : F4{};
        },
        [&](int64_t i) { return w[i] >= tau ? w[i] : 0.0f; });
}

double sum_where_below(const float* x, const float* w, int64_t n, float floor) {
    return row_sum(
        n, [&](int64_t i) { return load4(x + i) < floor ? load4(w + i) : F4{}; },
        [&](int64_t i) { return x[i] < floor ? w[i] : 0.0f; });
}

// row_sum's order (4-lane float partials, each 1,024 values added in double), 8 exponentials at a time.
MVLLM_ROW_CLONES double exp_sum_below(const float* x, int64_t n, float max, float cut) {
    double sum = 0;
    int64_t i = 0;
    while (i + 4 <= n) {
        F4 part{};
        const int64_t end = std::min(n, i + 1024);
        for (; i + 8 <= end; i += 8) {
            const F8 v = load8(x + i);
            const F8 e = v < cut ? expv_of_difference<F8, I8>(v, max) : F8{};
            part += low4(e);
            part += high4(e);
        }
        if (i + 4 <= end) {
            const F4 v = load4(x + i);
            part += v < cut ? exp4_of_difference(v, max) : F4{};
            i += 4;
        }
        sum += lanes(part);
    }
    for (; i < n; ++i) sum += x[i] < cut ? exp4_of_difference(F4{} + x[i], max)[0] : 0.0f;
    return sum;
}

void Race::enter(int32_t t, double w, double u) {
    const double score = w / -std::log(u);
    if (score > best_score) {
        best_score = score;
        best = t;
    }
}

// The race over a whole row without the exact arithmetic for the tokens that cannot win:
// E = -log(u) >= 1 - u, so when (1 - u) * best_score >= an upper bound of w, w / E <= best_score.
// The top token enters first, so the bound is tight from the start, and only a handful of tokens
// per draw get the exact double weight (and min_p's test on it) and the logarithm.
int32_t race_row(const float* logits, int64_t n, float temperature, float min_p, uint64_t key) {
    const float max = row_max(logits, n);
    if (!std::isfinite(max)) return row_argmax(logits, n);
    const double inv_t = 1.0 / temperature;
    auto exact = [&](int32_t t) { return std::exp((static_cast<double>(logits[t]) - max) * inv_t); };
    // Upper bounds of the weights: one vectorised pass over the row, or per token after min_p's
    // floor has dropped most of them.
    thread_local std::vector<float> bound;
    const float inv_t_f = static_cast<float>(inv_t);
    if (min_p <= 0.0f) {
        bound.resize(static_cast<size_t>(n));
        row_weights(logits, n, max, inv_t_f, bound.data());
    }
    const uint64_t* token_hash = token_hashes(n);
    const int32_t top = row_argmax(logits, n);
    // min_p's floor in logits, a little low (the exact test on w is below): the rest is skipped
    // before its hash.
    const float floor = min_p > 0.0f ? static_cast<float>(max + temperature * std::log(double(min_p)) -
                                                          1e-3 * (1.0 + std::fabs(max)))
                                     : -std::numeric_limits<float>::infinity();
    Race race{key};
    race.enter(top, 1.0);
    for (int64_t i = 0; i < n; ++i) {
        if (!(logits[i] >= floor)) continue;
        const double u = uniform_of(mix64(key ^ token_hash[i]));
        if (i == top) continue;
        const float w_bound = min_p <= 0.0f ? bound[i] : exp_nonpositive((logits[i] - max) * inv_t_f);
        race.offer(static_cast<int32_t>(i), u, w_bound, min_p, exact);
    }
    return race.best;
}

}  // namespace mvllm
