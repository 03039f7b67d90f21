// CPU matmul micro-benchmarks: GB/s of weight bytes for decode GEMVs (n_tokens = 1) and tokens/s
// for prefill (n_tokens = 128), against a read-bandwidth ceiling measured the same way.
//
// The weights are cycled through enough copies (>= 256 MiB in all) that every call reads them
// from DRAM, as a decode step does for a model larger than the last-level cache.
//
//   bench_cpu_matmul --benchmark_filter='Gemv'      # decode shapes, 1 and 2 threads
//   MVLLM_CPU_ISA=scalar bench_cpu_matmul ...       # cap the kernels' ISA
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/types.h"

namespace mvllm {
namespace {

constexpr size_t kColdBytes = size_t{256} << 20;

// n_copies x [n_out][n_in] weights of `type`: random bytes with small finite block scales.
struct WeightSet {
    DType type;
    int64_t n_in, n_out;
    size_t bytes_per_copy;
    std::vector<std::unique_ptr<uint8_t[]>> copies;

    WeightSet(DType t, int64_t in, int64_t out, size_t min_total) : type(t), n_in(in), n_out(out) {
        bytes_per_copy = row_size(t, in) * out;
        const size_t n_copies = std::max<size_t>(1, (min_total + bytes_per_copy - 1) / bytes_per_copy);
        std::mt19937 rng(42);
        auto first = std::make_unique<uint8_t[]>(bytes_per_copy);
        for (size_t i = 0; i < bytes_per_copy; ++i) first[i] = static_cast<uint8_t>(rng());
        const TypeTraits& tt = type_traits(t);
        if (t == DType::Q4_0 || t == DType::Q8_0 || t == DType::Q4_K || t == DType::Q5_K) {
            const f16_t d = f32_to_f16(0.01f);
            for (size_t b = 0; b < bytes_per_copy / tt.type_size; ++b) {
                std::memcpy(&first[b * tt.type_size], &d, 2);
                if (t == DType::Q4_K || t == DType::Q5_K) std::memcpy(&first[b * tt.type_size + 2], &d, 2);
            }
        }
        for (size_t c = 1; c < n_copies; ++c) {
            auto copy = std::make_unique<uint8_t[]>(bytes_per_copy);
            std::memcpy(copy.get(), first.get(), bytes_per_copy);
            copies.push_back(std::move(copy));
        }
        copies.push_back(std::move(first));
    }
    TensorView view(size_t i) const {
        return TensorView{type, {n_in, n_out, 1, 1}, copies[i % copies.size()].get()};
    }
};

// args: n_in, n_out, n_threads, n_tokens, hot (0: cycle through 256 MiB of weight copies)
void run_matmul(benchmark::State& state, DType type) {
    const int64_t n_in = state.range(0), n_out = state.range(1), n_tokens = state.range(3);
    const int n_threads = static_cast<int>(state.range(2));
    const bool hot = state.range(4) != 0;  // weights stay in cache: the kernels' compute rate
    const WeightSet weights(type, n_in, n_out, n_tokens == 1 && !hot ? kColdBytes : 0);
    std::vector<float> x(n_in * n_tokens), y(n_out * n_tokens);
    std::mt19937 rng(1);
    std::normal_distribution<float> dist;
    for (auto& v : x) v = dist(rng);
    const TensorView xv{DType::F32, {n_in, n_tokens, 1, 1}, x.data()};
    const TensorView yv{DType::F32, {n_out, n_tokens, 1, 1}, y.data()};
    ThreadPool pool(n_threads);
    MatmulScratch scratch;
    size_t i = 0;
    for (auto _ : state) {
        matmul(pool, weights.view(i++), xv, yv, scratch);
        benchmark::DoNotOptimize(y.data());
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * weights.bytes_per_copy));
    state.counters["tok/s"] = benchmark::Counter(static_cast<double>(state.iterations() * n_tokens),
                                                 benchmark::Counter::kIsRate);
    state.SetLabel(std::string(type_name(type)) + " " + cpu_isa_name(cpu_isa()));
}

void BM_Gemv_Q4_0(benchmark::State& state) { run_matmul(state, DType::Q4_0); }
void BM_GemvHot_Q4_0(benchmark::State& state) { run_matmul(state, DType::Q4_0); }
void BM_Gemv_Q8_0(benchmark::State& state) { run_matmul(state, DType::Q8_0); }
void BM_Prefill_Q4_0(benchmark::State& state) { run_matmul(state, DType::Q4_0); }

// The ceiling: summing 256 MiB of bytes with AVX2 loads, split over the pool's threads.
void BM_ReadBandwidth(benchmark::State& state) {
    const int n_threads = static_cast<int>(state.range(0));
    const size_t n = kColdBytes;
    std::unique_ptr<uint8_t[]> data(new uint8_t[n]);
    std::memset(data.get(), 1, n);
    ThreadPool pool(n_threads);
    std::vector<int64_t> sums(n_threads * 8);
    for (auto _ : state) {
        pool.parallel_for(static_cast<int64_t>(n / 64), [&](int64_t b, int64_t e) {
            __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
            for (int64_t i = b; i < e; ++i) {
                const auto* p = reinterpret_cast<const __m256i*>(data.get() + i * 64);
                acc0 = _mm256_add_epi32(acc0, _mm256_loadu_si256(p));
                acc1 = _mm256_add_epi32(acc1, _mm256_loadu_si256(p + 1));
            }
            benchmark::DoNotOptimize(acc0);
            benchmark::DoNotOptimize(acc1);
        });
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}

// Qwen2.5-0.5B projections: 896 -> 4864 (gate/up), 4864 -> 896 (down), 896 -> 151936 (lm head).
void gemv_args(benchmark::internal::Benchmark* b) {
    for (int threads : {1, 2})
        for (auto shape : {std::pair<int, int>{896, 4864}, {4864, 896}, {896, 151936}, {896, 896}})
            b->Args({shape.first, shape.second, threads, 1, 0});
}
void prefill_args(benchmark::internal::Benchmark* b) {
    for (int threads : {1, 2})
        for (auto shape : {std::pair<int, int>{896, 4864}, {4864, 896}, {896, 896}})
            b->Args({shape.first, shape.second, threads, 128, 0});
}

BENCHMARK(BM_ReadBandwidth)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_Gemv_Q4_0)->Apply(gemv_args)->ArgNames({"n_in", "n_out", "threads", "tokens", "hot"})->UseRealTime();
BENCHMARK(BM_GemvHot_Q4_0)->Args({896, 896, 1, 1, 1})->ArgNames({"n_in", "n_out", "threads", "tokens", "hot"})->UseRealTime();
BENCHMARK(BM_Gemv_Q8_0)->Args({896, 4864, 2, 1, 0})->Args({896, 151936, 2, 1, 0})->ArgNames({"n_in", "n_out", "threads", "tokens", "hot"})->UseRealTime();
BENCHMARK(BM_Prefill_Q4_0)->Apply(prefill_args)->ArgNames({"n_in", "n_out", "threads", "tokens", "hot"})->UseRealTime();

}  // namespace
}  // namespace mvllm

BENCHMARK_MAIN();
