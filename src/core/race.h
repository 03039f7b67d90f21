// The draw of a sampled token, shared by the engine's sampler and the backends that pick tokens
// themselves: an exponential race (the Gumbel-max trick). Token t gets its own uniform u_t from
// (key, t), hence its own Exp(1) variable E_t = -log u_t, and the draw is argmax_t w_t / E_t over
// the tokens kept, w_t = exp((l_t - max) / T); that picks t with probability w_t / sum w exactly.
// Unlike walking a cumulative sum, the choice only changes when the two best scores are within
// rounding of each other, so float noise in the logits (another batch shape, another kernel, the
// GPU instead of the CPU) almost never changes a seeded request's text.
//
// Also the float row helpers the sampler's fast paths use (4-float vectors: the compiler does not
// vectorise these loops from scalar code).
#pragma once

#include <cstdint>

// mix64, uniform_of and race_uniform also compile for the device (the CUDA backend's draw).
#if defined(__CUDACC__)
#define MVLLM_HOST_DEVICE __host__ __device__
#else
#define MVLLM_HOST_DEVICE
#endif

namespace mvllm {

// How a row's token is picked: the argmax when temperature is 0 (or top_k is 1), otherwise the
// race over the tokens top_k, then top_p, then min_p keep (core/draw.h: draw_row; race_row when
// neither top_k nor top_p truncates).
struct TokenDraw {
    float temperature = 0.0f;
    float min_p = 0.0f;  // keep the tokens with w >= min_p (the top token's weight is 1)
    uint64_t key = 0;    // one fresh random value per draw (the request's seeded generator)
    int32_t top_k = 0;   // keep the k first tokens by (logit descending, id ascending); 0: all
    float top_p = 1.0f;  // then the shortest such head holding top_p of their mass; 1: all
};

// SplitMix64's finaliser: a counter-based generator, one independent 64-bit value per input.
MVLLM_HOST_DEVICE constexpr uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
// A uniform in (0, 1) from the top 53 bits of h (never 0 or 1).
MVLLM_HOST_DEVICE constexpr double uniform_of(uint64_t h) { return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53; }
// Token t's uniform for a draw keyed by key.
MVLLM_HOST_DEVICE constexpr double race_uniform(uint64_t key, int32_t t) {
    return uniform_of(mix64(key ^ mix64(static_cast<uint64_t>(t))));
}

// How far below exp() of the same logits a row_weights weight can be: its own error and that of the
// float argument (x - max) * inv_t, for arguments >= -87.
constexpr double kWeightSlack = 1.0 + 1e-4;

// The race of (token, weight) pairs entered one by one: the winner is argmax w / -log(u).
// Weights need not be normalised (scaling them all changes no comparison).
struct Race {
    uint64_t key;
    int32_t best = -1;
    double best_score = -1;
    void enter(int32_t t, double w, double u);
    void enter(int32_t t, double w) { enter(t, w, race_uniform(key, t)); }
    // Enters token t (uniform u) unless it provably cannot win or min_p drops it: -log u >= 1 - u,
    // so (1 - u) * best_score >= w_bound, an upper bound of its weight, rules it out before its
    // exact weight (weight(t), double) and the logarithm are computed. The pruned races use it.
    template <typename Weight>
    void offer(int32_t t, double u, double w_bound, double min_p, Weight weight) {
        if ((1.0 - u) * best_score >= w_bound * kWeightSlack) return;
        if (const double w = weight(t); w >= min_p) enter(t, w, u);
    }
};

// The draw of one row of logits [n] (temperature > 0): the race over every token whose weight is
// at least min_p (all when min_p is 0). Only the few tokens that could still win get the exact
// double arithmetic (see race.cpp). A row whose max is not finite gives its argmax.
int32_t race_row(const float* logits, int64_t n, float temperature, float min_p, uint64_t key);

// ---- float row helpers ---------------------------------------------------------------------------
// exp(x) for x <= 0 to ~1-2 ulp; x < -87 gives e^-87 (~1.6e-38), not a smaller value or 0.
float exp_nonpositive(float x);
// The largest value (NaN ignored; -inf when there is none).
float row_max(const float* x, int64_t n);
// The first index of row_max (0 when every value is NaN).
int32_t row_argmax(const float* x, int64_t n);
// sum_i w_i with w_i = exp((x_i - max) * inv_t) (exp_nonpositive), written to w when not null.
double row_weights(const float* x, int64_t n, float max, float inv_t, float* w);
// The sum of w_i over the w_i >= tau.
double sum_at_least(const float* w, int64_t n, float tau);
// The sum of w_i over the i with x_i < floor.
double sum_where_below(const float* x, const float* w, int64_t n, float floor);
// The sum of exp(x_i - max) over the x_i < cut, each to ~1-2 ulp (the float rounding of x_i - max
// carried into the polynomial).
double exp_sum_below(const float* x, int64_t n, float max, float cut);

}  // namespace mvllm
