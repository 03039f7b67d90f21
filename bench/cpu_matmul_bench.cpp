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

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
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

// Deterministic mode for instruction counts (valgrind --tool=callgrind) and repeatable timings:
//   bench_cpu_matmul --model decode|prefill [threads] [repeats] [layers]
// runs the Q4_0 matmuls of a Qwen2.5-0.5B forward pass (24 layers of q, k, v, o, gate, up, down;
// decode adds the 151936-row LM head; prefill is one 128-token call per matrix, no LM head) on one
// set of weights and prints the wall and CPU seconds per pass and the implied tok/s.
namespace {
int run_model_mode(int argc, char** argv) {
    using namespace mvllm;
    const bool decode = argc > 2 && std::string(argv[2]) == "decode";
    const int n_threads = argc > 3 ? std::atoi(argv[3]) : 1;
    const int repeats = argc > 4 ? std::atoi(argv[4]) : 1;
    const int layers = argc > 5 ? std::atoi(argv[5]) : 24;  // fewer for callgrind
    const int64_t n_tokens = decode ? 1 : 128;
    struct Shape { int64_t n_in, n_out; int per_pass; };
    std::vector<Shape> shapes = {{896, 896, 2 * layers}, {896, 128, 2 * layers}, {896, 4864, 2 * layers},
                                 {4864, 896, layers}};
    if (decode) shapes.push_back({896, 151936, 1});
    std::vector<std::unique_ptr<WeightSet>> weights;
    for (const Shape& s : shapes) weights.push_back(std::make_unique<WeightSet>(DType::Q4_0, s.n_in, s.n_out, 0));
    std::vector<float> x(4864 * n_tokens), y(151936 * n_tokens);
    std::mt19937 rng(1);
    std::normal_distribution<float> dist;
    for (auto& v : x) v = dist(rng);
    ThreadPool pool(n_threads);
    MatmulScratch scratch;
    auto pass = [&] {
        for (size_t i = 0; i < shapes.size(); ++i) {
            const TensorView xv{DType::F32, {shapes[i].n_in, n_tokens, 1, 1}, x.data()};
            const TensorView yv{DType::F32, {shapes[i].n_out, n_tokens, 1, 1}, y.data()};
            for (int k = 0; k < shapes[i].per_pass; ++k) matmul(pool, weights[i]->view(0), xv, yv, scratch);
        }
    };
    if (repeats > 0) pass();  // warm-up: scratch sizes, page faults (repeats 0: one pass only)
    std::vector<double> wall, cpu;
    for (int r = 0; r < std::max(1, repeats); ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        const std::clock_t c0 = std::clock();
        pass();
        cpu.push_back(static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
        wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(wall.begin(), wall.end());
    std::sort(cpu.begin(), cpu.end());
    const double w = wall[wall.size() / 2], c = cpu[cpu.size() / 2];
    std::printf("%s threads=%d: median of %d passes: wall %.2f ms (%.1f tok/s), cpu %.2f ms (%.1f tok/s per cpu-s)\n",
                decode ? "decode" : "prefill128", n_threads, repeats, 1e3 * w, n_tokens / w, 1e3 * c, n_tokens / c);
    return 0;
}
}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && std::string(argv[1]) == "--model") return run_model_mode(argc, argv);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
