// The host sampler on one row of a real vocabulary (Qwen2's 151,936 logits): the time a decode
// step spends choosing its token after the logits reach the host, for the parameter sets users
// send (greedy, plain temperature, nucleus, top-k, min-p, with and without logprobs), on a row
// shaped like a trained model's and on a nearly flat one (a random-weight model's); and the
// penalties' cost at a long context: applied from scratch (the host sampler's path) and the
// engine's per-step update of a sequence's counts with its penalty list (the backend's path).
//
//   build/bin/bench_sampler [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "engine/sequence.h"
#include "engine/step_picks.h"

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

// A context of n tokens drawn Zipf-like from the vocabulary (a few thousand distinct ones, as
// text), the last 256 of them output.
std::vector<int32_t> zipf_context(int64_t n) {
    std::mt19937_64 gen(9);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = static_cast<int32_t>(std::min<double>(kVocab - 1, std::pow(kVocab, u(gen)) - 1));
    return t;
}

SamplingParams penalised() {
    SamplingParams p;
    p.repetition_penalty = 1.1f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.3f;
    return p;
}

void penalties_from_scratch(benchmark::State& state) {
    const std::vector<int32_t> context = zipf_context(state.range(0));
    std::vector<float> row(model_like_logits());
    for (auto _ : state) {
        apply_penalties(row.data(), kVocab, penalised(), context, state.range(0) - 256);
        benchmark::DoNotOptimize(row.data());
    }
}

void penalty_counts_step(benchmark::State& state) {
    std::vector<int32_t> context = zipf_context(state.range(0));
    const int64_t n_prompt = state.range(0) - 256;
    PenaltyCounts counts;
    counts.update(context, n_prompt);
    std::vector<TokenPenalty> list;
    std::mt19937_64 gen(3);
    for (auto _ : state) {
        context.push_back(static_cast<int32_t>(gen() % 5000));
        counts.update(context, n_prompt);
        list.clear();
        counts.append_penalties(penalised(), 0, kVocab, &list);
        benchmark::DoNotOptimize(list.data());
    }
    state.counters["entries"] = static_cast<double>(list.size());
}

// B4(b)'s penalised decode step on one thread: 256 sequences of 512 random prompt tokens and a
// growing output of random ones (~1,000 distinct tokens each, as the benchmark's random prompts
// give), each adding one token, its counts brought up to date and its list appended to the step's.
void penalty_lists_256(benchmark::State& state) {
    constexpr int kSeqs = 256;
    std::mt19937_64 gen(11);
    std::vector<std::vector<int32_t>> tokens(kSeqs);
    std::vector<PenaltyCounts> counts(kSeqs);
    for (int s = 0; s < kSeqs; ++s) {
        for (int i = 0; i < 512 + 400; ++i) tokens[s].push_back(static_cast<int32_t>(gen() % kVocab));
        counts[s].update(tokens[s], 512);
    }
    SamplingParams p;
    p.repetition_penalty = 1.1f;
    std::vector<TokenPenalty> list;
    for (auto _ : state) {
        list.clear();
        for (int s = 0; s < kSeqs; ++s) {
            tokens[s].push_back(static_cast<int32_t>(gen() % kVocab));
            counts[s].update(tokens[s], 512);
            counts[s].append_penalties(p, s, kVocab, &list);
        }
        benchmark::DoNotOptimize(list.data());
    }
    state.counters["entries"] = static_cast<double>(list.size());
}

// The same step through the engine's build_picks (the lists gathered into the step's TokenPicks),
// on a pool of range(0) threads. 300 steps each (the contexts grow: the entries depend on the count).
void build_picks_256(benchmark::State& state) {
    constexpr int kSeqs = 256;
    std::mt19937_64 gen(11);
    std::vector<Sequence> seqs(kSeqs);
    SchedulerOutput plan;
    for (int s = 0; s < kSeqs; ++s) {
        Sequence& q = seqs[static_cast<size_t>(s)];
        for (int i = 0; i < 512 + 400; ++i) q.tokens.push_back(static_cast<int32_t>(gen() % kVocab));
        q.n_prompt = 512;
        q.params.temperature = 0.0f;
        q.params.repetition_penalty = 1.1f;
        plan.scheduled.push_back({&q, 1, true});
    }
    CpuBackendOptions bo;
    bo.n_threads = 1;
    CpuBackend backend(bo);
    ThreadPool pool(static_cast<int>(state.range(0)));
    const RowRunner rows = [&](int64_t n, const RowRange& fn) { pool.parallel_for(n, fn); };
    TokenPicks picks;
    for (auto _ : state) {
        for (Sequence& q : seqs) q.tokens.push_back(static_cast<int32_t>(gen() % kVocab)), ++q.n_computed;
        build_picks(plan, backend, kVocab, kSeqs, rows, &picks);
        benchmark::DoNotOptimize(picks.penalties.data());
    }
    state.counters["entries"] = static_cast<double>(picks.penalties.size());
}

BENCHMARK(penalty_lists_256)->Iterations(300)->Unit(benchmark::kMicrosecond);
BENCHMARK(build_picks_256)->Arg(1)->Arg(2)->Arg(16)->Iterations(300)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(penalties_from_scratch)->Arg(1024)->Arg(32768)->Unit(benchmark::kMicrosecond);
BENCHMARK(penalty_counts_step)->Arg(1024)->Arg(32768)->Unit(benchmark::kMicrosecond);
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
