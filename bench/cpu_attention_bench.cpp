// Decode attention on the CPU: time per layer of one single-token decode step over a paged KV
// cache, for the naive (repeat-KV), grouped-Q and fused variants, F32 and F16 caches, contexts
// 128..4096, in the Qwen2.5-0.5B head geometry (14 query heads, 2 KV heads, head_dim 64) or
// Qwen2.5-7B (28, 4, 128) with --model 7b.
//
// Each call attends one new token over `ctx` cached tokens of one layer. Calls cycle over enough
// layers (>= 256 MiB of K/V in all, at least 24) that every call reads its KV from DRAM, as a
// decode step does when the weights of the other layers have gone through the caches in between.
// GB/s is the unexpanded KV bytes one call must read (2 * n_kv_heads * ctx * head_dim * dtype
// size) divided by its time, next to the machine's read bandwidth measured by a plain streaming
// sum on the same threads.
//
// --hot runs every call on one layer instead, so the KV stays in the caches (compute-bound view).
//
//   bench_cpu_attention [--threads 2] [--model 0.5b|7b] [--min-time 0.3] [--contexts 128,4096]
//                       [--hot]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "core/half.h"
#include "kv/kv_cache.h"

namespace mvllm {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Options {
    int threads = 2;
    int n_heads = 14, n_kv_heads = 2, head_dim = 64;
    const char* model = "Qwen2.5-0.5B";
    double min_time = 0.3;
    bool hot = false;  // --hot: one layer, KV stays in the caches (compute-bound view)
    std::vector<int> contexts = {128, 256, 512, 1024, 2048, 4096};
};

// Read bandwidth of `threads` threads streaming over 512 MiB (each its own contiguous half).
double measure_read_gbps(ThreadPool& pool) {
    const size_t n = (size_t{512} << 20) / sizeof(uint64_t);
    std::vector<uint64_t> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = i;
    std::vector<uint64_t> sums(pool.size(), 0);
    double best = 0.0;
    for (int rep = 0; rep < 4; ++rep) {
        const auto t0 = Clock::now();
        pool.run([&](int ti, int nt) {
            const size_t begin = n * ti / nt, end = n * (ti + 1) / nt;
            uint64_t a = 0, b = 0, c = 0, d = 0;
            for (size_t i = begin; i + 4 <= end; i += 4) {
                a += data[i];
                b += data[i + 1];
                c += data[i + 2];
                d += data[i + 3];
            }
            sums[ti] += a + b + c + d;
        });
        const double s = seconds_since(t0);
        best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / s / 1e9);
    }
    if (std::accumulate(sums.begin(), sums.end(), uint64_t{0}) == 42) std::puts("");  // keep sums
    return best;
}

struct Row {
    double us_per_layer;
    double kv_bytes;
};

// One decode step (1 query token at position ctx - 1) per call, cycling over the layers.
Row bench_one(const Options& o, ThreadPool& pool, AttentionVariant variant, DType kv_dtype, int ctx) {
    const int block_size = 16;
    const int64_t blocks_per_seq = (ctx + block_size - 1) / block_size;
    const size_t elem = kv_dtype == DType::F32 ? 4 : 2;
    const double kv_bytes = 2.0 * o.n_kv_heads * ctx * o.head_dim * elem;  // K and V read
    const double layer_bytes = 2.0 * o.n_kv_heads * blocks_per_seq * block_size * o.head_dim * elem;
    const int n_layers = o.hot ? 1
                               : static_cast<int>(std::clamp(
                                     std::ceil(256.0 * (1 << 20) / layer_bytes), 24.0, 4096.0));

    KvCacheConfig cfg;
    cfg.n_layers = n_layers;
    cfg.n_kv_heads = o.n_kv_heads;
    cfg.head_dim = o.head_dim;
    cfg.block_size = block_size;
    cfg.n_blocks = blocks_per_seq + 1;
    cfg.dtype = kv_dtype;
    auto created = KvCache::create(cfg);
    if (!created.is_ok()) {
        std::fprintf(stderr, "%s\n", created.status().message().c_str());
        std::exit(1);
    }
    KvCache& cache = **created;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    {   // random K/V: fill one layer, copy it to the others
        const KvLayerView l0 = cache.layer(0);
        const size_t n = static_cast<size_t>(cfg.n_blocks) * block_size * o.n_kv_heads * o.head_dim;
        for (void* base : {l0.k, l0.v}) {
            for (size_t i = 0; i < n; ++i) {
                if (kv_dtype == DType::F32) static_cast<float*>(base)[i] = u(rng);
                else static_cast<uint16_t*>(base)[i] = f32_to_f16(u(rng));
            }
        }
        for (int l = 1; l < n_layers; ++l) {
            std::memcpy(cache.layer(l).k, l0.k, n * elem);
            std::memcpy(cache.layer(l).v, l0.v, n * elem);
        }
    }
    // A scattered block table, as after many requests come and go.
    std::vector<int32_t> table(cfg.n_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    table.resize(blocks_per_seq);
    Batch batch;
    batch.block_size = block_size;
    batch.add_sequence({1}, ctx - 1, table, true);

    std::vector<float> q(static_cast<size_t>(o.n_heads) * o.head_dim), out(q.size());
    for (float& x : q) x = u(rng);
    const TensorView qv{DType::F32, {o.head_dim, o.n_heads, 1, 1}, q.data()};
    const TensorView ov{DType::F32, {o.head_dim, o.n_heads, 1, 1}, out.data()};
    const float scale = 1.0f / std::sqrt(static_cast<float>(o.head_dim));
    AttentionScratch scratch;

    int layer = 0;
    auto call = [&] {
        attention(pool, variant, batch, cache.layer(layer), qv, ov, o.n_heads, scale, scratch);
        layer = (layer + 1) % n_layers;
    };
    for (int i = 0; i < std::min(n_layers, 20); ++i) call();  // warm-up (scratch, pool)
    int64_t calls = 0;
    const auto t0 = Clock::now();
    double elapsed = 0.0;
    do {
        for (int i = 0; i < 8; ++i) call();
        calls += 8;
        elapsed = seconds_since(t0);
    } while (elapsed < o.min_time || calls < 24);
    return Row{elapsed / static_cast<double>(calls) * 1e6, kv_bytes};
}

int main_impl(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> const char* {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--threads") {
            o.threads = std::max(1, std::atoi(next()));
        } else if (a == "--hot") {
            o.hot = true;
        } else if (a == "--min-time") {
            o.min_time = std::atof(next());
        } else if (a == "--model") {
            const std::string m = next();
            if (m == "7b") {
                o.n_heads = 28, o.n_kv_heads = 4, o.head_dim = 128, o.model = "Qwen2.5-7B";
            } else if (m != "0.5b") {
                std::fprintf(stderr, "--model 0.5b or 7b\n");
                return 2;
            }
        } else if (a == "--contexts") {
            o.contexts.clear();
            std::string list = next();
            for (size_t p = 0; p < list.size();) {
                const size_t e = std::min(list.find(',', p), list.size());
                o.contexts.push_back(std::atoi(list.substr(p, e - p).c_str()));
                p = e + 1;
            }
        } else {
            std::fprintf(stderr,
                         "usage: %s [--threads N] [--model 0.5b|7b] [--min-time S] [--hot] "
                         "[--contexts 128,256,...]\n",
                         argv[0]);
            return 2;
        }
    }
    ThreadPool pool(o.threads);
    const char* isa = std::getenv("MVLLM_CPU_ISA");
    std::printf("# decode attention per layer: %s geometry (%d q heads, %d KV heads, head_dim %d), "
                "%d threads, block 16, kernels %s%s\n",
                o.model, o.n_heads, o.n_kv_heads, o.head_dim, o.threads,
                isa != nullptr && std::strcmp(isa, "scalar") == 0 ? "scalar" : "best available",
                o.hot ? ", hot (one layer, KV in cache)" : ", cold (KV cycled over >= 256 MiB)");
    const double ceiling = measure_read_gbps(pool);
    std::printf("# read-bandwidth ceiling (%d threads, streaming sum over 512 MiB): %.1f GB/s\n",
                o.threads, ceiling);
    std::printf("%6s  %4s  %-8s %12s %10s %12s %9s %7s\n", "ctx", "kv", "variant", "us/layer",
                "vs naive", "KV KiB/layer", "KV GB/s", "%ceil");
    for (int ctx : o.contexts) {
        for (DType kv : {DType::F32, DType::F16}) {
            double naive_us = 0.0;
            for (AttentionVariant v :
                 {AttentionVariant::Naive, AttentionVariant::Grouped, AttentionVariant::Fused}) {
                const Row r = bench_one(o, pool, v, kv, ctx);
                if (v == AttentionVariant::Naive) naive_us = r.us_per_layer;
                const double gbps = r.kv_bytes / (r.us_per_layer * 1e-6) / 1e9;
                std::printf("%6d  %4s  %-8s %12.2f %9.2fx %12.0f %9.2f %6.1f%%\n", ctx,
                            type_name(kv), attention_variant_name(v), r.us_per_layer,
                            naive_us / r.us_per_layer, r.kv_bytes / 1024.0, gbps,
                            100.0 * gbps / ceiling);
                std::fflush(stdout);
            }
        }
    }
    return 0;
}

}  // namespace
}  // namespace mvllm

int main(int argc, char** argv) { return mvllm::main_impl(argc, argv); }
