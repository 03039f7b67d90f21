// The host sampler on one row of a real vocabulary (Qwen2's 151,936 logits): the time a decode
// step spends choosing its token after the logits reach the host, for the parameter sets users
// send (greedy, plain temperature, nucleus, top-k, min-p, with and without logprobs), on a row
// shaped like a trained model's and on a nearly flat one (a random-weight model's).
//
//   build/bin/bench_sampler [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/sampler.h"

namespace mvllm {
namespace {

constexpr int64_t kVocab = 151936;

// Logits shaped like a language model's: a broad normal body and a few dozen tokens well above it.
const std::vector<float>& model_like_logits() {
    static const std::vector<float> logits = [] {
        std::vector<float> l(kVocab);
        std::mt19937_64 gen(5);
        std::normal_distribution<float> body(-2.0f, 2.5f);
        for (float& x : l) x = body(gen);
        std::uniform_int_distribution<int64_t> pick(0, kVocab - 1);
        std::uniform_real_distribution<float> head(8.0f, 16.0f);
        for (int i = 0; i < 40; ++i) l[pick(gen)] = head(gen);
        return l;
    }();
    return logits;
}

// A random-weight model's logits: nearly flat (the worst case for top_p, whose head is then most
// of the vocabulary).
const std::vector<float>& flat_logits() {
    static const std::vector<float> logits = [] {
        std::vector<float> l(kVocab);
        std::mt19937_64 gen(6);
        std::normal_distribution<float> body(0.0f, 0.5f);
        for (float& x : l) x = body(gen);
        return l;
    }();
    return logits;
}

void run_on(benchmark::State& state, const std::vector<float>& logits, const SamplingParams& params) {
    std::vector<float> row(logits.size());
    std::mt19937_64 rng(1);
    const std::vector<int32_t> context{1, 2, 3};
    TokenLogprob lp;
    for (auto _ : state) {
        std::copy(logits.begin(), logits.end(), row.begin());
        benchmark::DoNotOptimize(sample_token(row.data(), kVocab, params, context, 1, rng, &lp));
    }
    state.SetItemsProcessed(state.iterations());
}
void run(benchmark::State& state, const SamplingParams& params) { run_on(state, model_like_logits(), params); }
void run_flat(benchmark::State& state, const SamplingParams& params) { run_on(state, flat_logits(), params); }

SamplingParams with(float temperature, float top_p = 1.0f, int32_t top_k = 0, float min_p = 0.0f,
                    int32_t logprobs = -1) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_p = top_p;
    p.top_k = top_k;
    p.min_p = min_p;
    p.logprobs = logprobs;
    return p;
}

BENCHMARK_CAPTURE(run, greedy, with(0.0f))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(run, greedy_logprobs5, with(0.0f, 1.0f, 0, 0.0f, 5))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(run, temperature1, with(1.0f))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(run, temp07_top_p095, with(0.7f, 0.95f))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(run, temp08_top_k40, with(0.8f, 1.0f, 40))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(run, temp08_top_k40_top_p095_min_p005, with(0.8f, 0.95f, 40, 0.05f))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(run, temp1_min_p01, with(1.0f, 1.0f, 0, 0.1f))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(run, temp1_logprobs5, with(1.0f, 1.0f, 0, 0.0f, 5))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(run_flat, flat_temperature1, with(1.0f))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(run_flat, flat_temp07_top_p095, with(0.7f, 0.95f))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(run_flat, flat_temp1_min_p01, with(1.0f, 1.0f, 0, 0.1f))->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mvllm

BENCHMARK_MAIN();
