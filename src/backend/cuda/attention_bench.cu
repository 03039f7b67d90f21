// B1 on CUDA (BENCHMARKS.md), behind `mvllm bench attention`: isolated decode attention per layer,
// naive / grouped / fused, over a paged F32, F16 or BF16 KV cache with scattered blocks, for the
// Qwen2.5-0.5B and -7B head geometries, contexts 128..32768, batch 1 and 16. Method: a separate KV
// buffer per layer (above 256 MB a layer, two buffers alternate, each far larger than L2), all
// layers of the model captured in one CUDA graph and launched back to back (each layer's set-up
// overlaps the previous layer's run); `--cold-l2` reads twice the L2's size before each timed
// replay, outside the timing, so that no layer's cache can stay in L2 between replays (on the H200
// it moved the F16 figures by 1.5 % at most: at 512 tokens they already come from HBM),
// 20 warm-up replays, median of 50 timed replays divided by the layer count (slow baselines:
// fewer, down to 2 + 5, to keep each variant near a second). Prints µs/layer,
// achieved GB/s (KV bytes read / time) and the floor (KV bytes / device-to-device copy bandwidth
// measured in the same run). Before timing, each variant's output is checked against the fused
// kernel's (the unit tests check all three against a float64 reference).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/attention_bench.h"

namespace mvllm::cuda {

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            std::exit(1);                                                                          \
        }                                                                                          \
    } while (0)

namespace {

struct Geometry {
    const char* name;
    int32_t n_layers, n_heads, n_kv_heads, head_dim;
};

// Fills n values with a deterministic pseudo-random pattern in [-1, 1).
__global__ void fill_kernel(void* p, DType t, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        const float v = (h & 0xffff) / 32768.0f - 1.0f;
        if (t == DType::F32) static_cast<float*>(p)[i] = v;
        else if (t == DType::F16) static_cast<__half*>(p)[i] = __float2half(v);
        else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);
    }
}

// Reads n 16-byte words (--cold-l2: clean lines that push the caches out of L2, where a write
// would leave dirty lines whose write-back would share the timed replay's bandwidth). The words
// are zero; the store never happens but keeps the loads.
__global__ void evict_kernel(const uint4* p, size_t n, unsigned* sink) {
    unsigned acc = 0;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const uint4 v = p[i];
        acc |= v.x | v.y | v.z | v.w;
    }
    if (acc == 0xFFFFFFFFu) *sink = acc;
}

double measure_copy_bandwidth() {
    const size_t bytes = size_t(2) << 30;
    void *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemset(a, 1, bytes));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> ms;
    for (int i = 0; i < 12; ++i) {
        cudaEventRecord(e0);
        CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float t;
        cudaEventElapsedTime(&t, e0, e1);
        if (i >= 2) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    cudaFree(a);
    cudaFree(b);
    return 2.0 * bytes / (ms[ms.size() / 2] * 1e-3);  // read + write
}

struct Result {
    double us_per_layer = 0, gbps = 0, max_rel_vs_fused = 0;
};

const char* dtype_name(DType t) { return t == DType::F32 ? "f32" : t == DType::F16 ? "f16" : "bf16"; }

}  // namespace

int run_attention_bench(const AttentionBenchOptions& opt) {
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, 0));
    const double copy_bw = measure_copy_bandwidth();
    std::printf("device %s, %d SMs, copy bandwidth %.0f GB/s (read + write)\n", prop.name, prop.multiProcessorCount,
                copy_bw / 1e9);
    std::printf("decode kernel CTAs resident in clusters of 1/2/4/8 (F16, 8 warps): head_dim 128: %d/%d/%d/%d, 64: %d/%d/%d/%d\n",
                decode_cluster_slots_f16(128, 8, 1), decode_cluster_slots_f16(128, 8, 2),
                decode_cluster_slots_f16(128, 8, 4), decode_cluster_slots_f16(128, 8, 8),
                decode_cluster_slots_f16(64, 8, 1), decode_cluster_slots_f16(64, 8, 2),
                decode_cluster_slots_f16(64, 8, 4), decode_cluster_slots_f16(64, 8, 8));
    FILE* json = opt.json_out.empty() ? nullptr : std::fopen(opt.json_out.c_str(), "w");
    if (!opt.json_out.empty() && !json) {
        std::fprintf(stderr, "error: cannot write %s\n", opt.json_out.c_str());
        return 1;
    }
    if (json)
        std::fprintf(json, "{\"device\": \"%s\", \"copy_gbps\": %.1f, \"cold_l2\": %s, \"rows\": [\n", prop.name,
                     copy_bw / 1e9, opt.cold_l2 ? "true" : "false");

    const Geometry geos[] = {{"qwen2.5-7b", 28, 28, 4, 128}, {"qwen2.5-0.5b", 24, 14, 2, 64}};
    struct RowSpec {
        int geo;
        DType dtype;
        int32_t ctx, batch;
    };
    // BENCHMARKS.md B1: both geometries, contexts 128..32768, F32 / F16 (and BF16), batch 1 and 16
    // (16 up to 4K, like the torch anchor).
    std::vector<RowSpec> rows;
    const int32_t contexts[] = {128, 256, 512, 1024, 2048, 4096, 16384, 32768};
    for (int32_t batch : opt.batches)
        for (DType dt : {DType::F16, DType::F32, DType::BF16})
            for (int geo : {0, 1})
                for (int32_t ctx : contexts) {
                    if (batch > 1 && (ctx > 4096 || dt == DType::BF16)) continue;
                    if (opt.quick && opt.contexts.empty() && !(ctx == 4096 || ctx == 32768)) continue;
                    if (!opt.contexts.empty() &&
                        std::find(opt.contexts.begin(), opt.contexts.end(), ctx) == opt.contexts.end())
                        continue;
                    rows.push_back({geo, dt, ctx, batch});
                }
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    // --cold-l2: a buffer twice the L2's size, read before each replay (evict_kernel).
    void* evict = nullptr;
    const size_t evict_bytes = 2 * static_cast<size_t>(std::max(prop.l2CacheSize, 1 << 20));
    if (opt.cold_l2) {
        CK(cudaMalloc(&evict, evict_bytes + 16));
        CK(cudaMemset(evict, 0, evict_bytes + 16));
    }
    bool first_row = true;
    std::printf("%-13s %-4s %6s %5s | %10s %10s %10s | %8s %8s %8s | %7s | %s\n", "geometry", "kv", "ctx", "batch",
                "naive us", "grouped us", "fused us", "naiveGB/s", "grpGB/s", "fusedGB/s", "floor", "fused % of copy bw");
    for (const RowSpec& rs : rows) {
        const Geometry& g = geos[rs.geo];
        const int32_t bs = 16;
        const int32_t blocks_per_seq = (rs.ctx + bs - 1) / bs;
        const int64_t n_blocks = static_cast<int64_t>(blocks_per_seq) * rs.batch;
        const size_t elem = rs.dtype == DType::F32 ? 4 : 2;
        // Distinct buffers per layer, or two alternating ones when a layer alone dwarfs the L2.
        const size_t layer_bytes_est = 2 * static_cast<size_t>(n_blocks) * g.n_kv_heads * bs * g.head_dim * elem;
        const int n_buffers = layer_bytes_est > (size_t(256) << 20) ? 2 : g.n_layers;
        const size_t half_bytes = static_cast<size_t>(n_blocks) * g.n_kv_heads * bs * g.head_dim * elem;
        const int n_layers = g.n_layers;
        // One K and one V buffer per layer.
        std::vector<void*> kbuf(n_buffers), vbuf(n_buffers);
        for (int l = 0; l < n_buffers; ++l) {
            CK(cudaMalloc(&kbuf[l], half_bytes));
            CK(cudaMalloc(&vbuf[l], half_bytes));
            fill_kernel<<<1024, 256, 0, stream>>>(kbuf[l], rs.dtype, half_bytes / elem, 17u * l + 1);
            fill_kernel<<<1024, 256, 0, stream>>>(vbuf[l], rs.dtype, half_bytes / elem, 17u * l + 2);
        }
        // Scattered block tables: a shuffled permutation of all blocks.
        std::vector<int32_t> tables(n_blocks);
        std::iota(tables.begin(), tables.end(), 0);
        std::shuffle(tables.begin(), tables.end(), std::mt19937(42));
        std::vector<int32_t> positions(rs.batch, rs.ctx - 1), row_seq(rs.batch), seq_block(rs.batch),
            seq_tok(rs.batch), seq_n(rs.batch, 1), seq_ctx(rs.batch, rs.ctx);
        std::vector<int64_t> slots(rs.batch), ctx_off(rs.batch);
        for (int s = 0; s < rs.batch; ++s) {
            row_seq[s] = s;
            seq_block[s] = s * blocks_per_seq;
            seq_tok[s] = s;
            ctx_off[s] = static_cast<int64_t>(s) * rs.ctx;
            slots[s] = static_cast<int64_t>(tables[s * blocks_per_seq + (rs.ctx - 1) / bs]) * bs + (rs.ctx - 1) % bs;
        }
        auto up = [&](const void* src, size_t bytes) {
            void* d;
            CK(cudaMalloc(&d, std::max<size_t>(bytes, 4)));
            CK(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice));
            CK(cudaDeviceSynchronize());  // a pageable copy may return before it lands
            return d;
        };
        DeviceBatch db;
        db.n_tokens = rs.batch;
        db.n_seqs = rs.batch;
        db.block_size = bs;
        db.max_context = rs.ctx;
        db.max_seq_tokens = 1;
        db.positions = static_cast<const int32_t*>(up(positions.data(), rs.batch * 4));
        db.row_seq = static_cast<const int32_t*>(up(row_seq.data(), rs.batch * 4));
        db.block_tables = static_cast<const int32_t*>(up(tables.data(), n_blocks * 4));
        db.seq_block_begin = static_cast<const int32_t*>(up(seq_block.data(), rs.batch * 4));
        db.seq_token_begin = static_cast<const int32_t*>(up(seq_tok.data(), rs.batch * 4));
        db.seq_n_tokens = static_cast<const int32_t*>(up(seq_n.data(), rs.batch * 4));
        db.seq_context_len = static_cast<const int32_t*>(up(seq_ctx.data(), rs.batch * 4));
        db.slot_mapping = static_cast<const int64_t*>(up(slots.data(), rs.batch * 8));
        const int64_t* d_ctx_off = static_cast<const int64_t*>(up(ctx_off.data(), rs.batch * 8));
        const int64_t q_width = static_cast<int64_t>(g.n_heads) * g.head_dim;
        std::vector<float> qh(q_width * rs.batch);
        std::mt19937 rng(7);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (float& x : qh) x = nd(rng);
        TensorView q;
        q.type = DType::F32;
        q.ne = {q_width, rs.batch, 1, 1};
        q.data = up(qh.data(), qh.size() * 4);
        TensorView out = q;
        CK(cudaMalloc(&out.data, qh.size() * 4));
        const float scale = 1.0f / std::sqrt(static_cast<float>(g.head_dim));
        const double kv_bytes = 2.0 * rs.batch * rs.ctx * g.n_kv_heads * g.head_dim * elem;

        Result res[3];
        std::vector<float> fused_out(qh.size()), var_out(qh.size());
        const CudaAttention order[3] = {CudaAttention::Fused, CudaAttention::Grouped, CudaAttention::Naive};
        for (CudaAttention variant : order) {
            const int vi = variant == CudaAttention::Naive ? 0 : variant == CudaAttention::Grouped ? 1 : 2;
            // The three-kernel baselines take seconds a replay past 64K context tokens in a batch.
            if (variant != CudaAttention::Fused && (opt.quick || static_cast<int64_t>(rs.batch) * rs.ctx > 65536)) {
                res[vi].us_per_layer = res[vi].gbps = res[vi].max_rel_vs_fused = NAN;
                continue;
            }
            AttentionScratch scratch;
            auto layer = [&](int l) {
                DeviceKvLayer kv;
                kv.k = kbuf[l % n_buffers];
                kv.v = vbuf[l % n_buffers];
                kv.dtype = static_cast<uint32_t>(rs.dtype);
                kv.n_kv_heads = g.n_kv_heads;
                kv.head_dim = g.head_dim;
                kv.block_size = bs;
                kv.n_rows = n_blocks * g.n_kv_heads * bs;
                launch_attention(variant, db, d_ctx_off, static_cast<int64_t>(rs.batch) * rs.ctx, kv, q, out,
                                 g.n_heads, scale, scratch, prop.multiProcessorCount, stream, false, nullptr,
                                 nullptr, AttentionNext::Attention);  // the layers run back to back
            };
            layer(0);  // sizes the scratch outside the capture; output checked below
            CK(cudaStreamSynchronize(stream));
            CK(cudaMemcpy(var_out.data(), out.data, var_out.size() * 4, cudaMemcpyDeviceToHost));
            if (variant == CudaAttention::Fused) fused_out = var_out;
            double err = 0, ref = 0;
            for (size_t i = 0; i < var_out.size(); ++i) {
                err = std::max(err, static_cast<double>(std::abs(var_out[i] - fused_out[i])));
                ref = std::max(ref, static_cast<double>(std::abs(fused_out[i])));
            }
            res[vi].max_rel_vs_fused = std::isfinite(err) ? err / ref : INFINITY;
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            for (int l = 0; l < n_layers; ++l) layer(l);
            CK(cudaStreamEndCapture(stream, &graph));
            CK(cudaGraphInstantiate(&exec, graph, 0));
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0);
            cudaEventCreate(&e1);
            // 20 warm-up + 50 timed replays, fewer (at least 2 + 5) where a replay is slow, so that
            // a variant takes about a second.
            float first_ms = 0;
            cudaEventRecord(e0, stream);
            CK(cudaGraphLaunch(exec, stream));
            cudaEventRecord(e1, stream);
            CK(cudaEventSynchronize(e1));
            cudaEventElapsedTime(&first_ms, e0, e1);
            const int timed = std::clamp(static_cast<int>(700.0f / std::max(first_ms, 1e-3f)), 5, 50);
            const int warm = std::clamp(timed * 2 / 5, 2, 20);
            std::vector<float> ms;
            for (int i = 0; i < warm + timed; ++i) {
                if (evict)
                    evict_kernel<<<4 * prop.multiProcessorCount, 512, 0, stream>>>(
                        static_cast<const uint4*>(evict), evict_bytes / 16,
                        reinterpret_cast<unsigned*>(static_cast<uint8_t*>(evict) + evict_bytes));
                cudaEventRecord(e0, stream);
                CK(cudaGraphLaunch(exec, stream));
                cudaEventRecord(e1, stream);
                CK(cudaEventSynchronize(e1));
                float t;
                cudaEventElapsedTime(&t, e0, e1);
                if (i >= warm) ms.push_back(t);
            }
            std::sort(ms.begin(), ms.end());
            // MVLLM_ATTN_TIMELINE_OUT=prefix (builds with MVLLM_ATTN_TIMELINE): one more replay with
            // the kernel's timeline recorded, written to prefix_<geometry>_<kv>_<ctx>_<batch>.csv.
            if (const char* tl = std::getenv("MVLLM_ATTN_TIMELINE_OUT"); tl && variant == CudaAttention::Fused) {
                attention_timeline_reset();
                CK(cudaGraphLaunch(exec, stream));
                CK(cudaStreamSynchronize(stream));
                const std::string path = std::string(tl) + "_" + g.name + "_" + dtype_name(rs.dtype) + "_" +
                                         std::to_string(rs.ctx) + "_" + std::to_string(rs.batch) + ".csv";
                attention_timeline_dump(path.c_str());
            }
            res[vi].us_per_layer = ms[ms.size() / 2] * 1e3 / n_layers;
            res[vi].gbps = kv_bytes / (res[vi].us_per_layer * 1e-6) / 1e9;
            cudaGraphExecDestroy(exec);
            cudaGraphDestroy(graph);
            cudaEventDestroy(e0);
            cudaEventDestroy(e1);
        }
        const double floor_us = kv_bytes / copy_bw * 1e6;
        std::printf("%-13s %-4s %6d %5d | %10.2f %10.2f %10.2f | %8.0f %8.0f %8.0f | %7.2f | %5.1f%%  (err vs fused: naive %.1e grouped %.1e)\n",
                    g.name, dtype_name(rs.dtype), rs.ctx, rs.batch, res[0].us_per_layer,
                    res[1].us_per_layer, res[2].us_per_layer, res[0].gbps, res[1].gbps, res[2].gbps, floor_us,
                    100.0 * floor_us / res[2].us_per_layer, res[0].max_rel_vs_fused, res[1].max_rel_vs_fused);
        std::fflush(stdout);
        if (json) {
            auto num = [](double v, const char* fmt) {
                char buf[32];
                if (!std::isfinite(v)) return std::string("null");
                std::snprintf(buf, sizeof buf, fmt, v);
                return std::string(buf);
            };
            std::fprintf(json,
                         "%s{\"geometry\": \"%s\", \"kv\": \"%s\", \"ctx\": %d, \"batch\": %d, \"layers\": %d, "
                         "\"naive_us\": %s, \"grouped_us\": %s, \"fused_us\": %s, \"fused_gbps\": %s, "
                         "\"floor_us\": %s, \"err_naive\": %s, \"err_grouped\": %s}\n",
                         first_row ? "" : ",", g.name, dtype_name(rs.dtype), rs.ctx, rs.batch, n_layers,
                         num(res[0].us_per_layer, "%.3f").c_str(), num(res[1].us_per_layer, "%.3f").c_str(),
                         num(res[2].us_per_layer, "%.3f").c_str(), num(res[2].gbps, "%.1f").c_str(),
                         num(floor_us, "%.3f").c_str(), num(res[0].max_rel_vs_fused, "%.2e").c_str(),
                         num(res[1].max_rel_vs_fused, "%.2e").c_str());
        }
        first_row = false;
        for (int l = 0; l < n_buffers; ++l) {
            cudaFree(kbuf[l]);
            cudaFree(vbuf[l]);
        }
        for (const void* p : {(const void*)db.positions, (const void*)db.row_seq, (const void*)db.block_tables,
                              (const void*)db.seq_block_begin, (const void*)db.seq_token_begin,
                              (const void*)db.seq_n_tokens, (const void*)db.seq_context_len,
                              (const void*)db.slot_mapping, (const void*)d_ctx_off, (const void*)q.data,
                              (const void*)out.data})
            cudaFree(const_cast<void*>(p));
    }
    if (evict) cudaFree(evict);
    if (json) {
        std::fprintf(json, "]}\n");
        std::fclose(json);
    }
    return 0;
}

}  // namespace mvllm::cuda
