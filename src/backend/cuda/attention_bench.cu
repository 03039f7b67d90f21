// B1 on CUDA (BENCHMARKS.md): isolated decode attention per layer, naive / grouped / fused, over a
// paged F16 or F32 KV cache with scattered blocks, for the Qwen2.5-0.5B and -7B head geometries.
// Method: a separate KV buffer per layer (the cache comes from HBM, not L2), all layers of the
// model captured in one CUDA graph, 20 warm-up replays, median of 50 timed replays divided by
// the layer count. Prints µs/layer, achieved GB/s (KV bytes read / time) and the floor (KV bytes
// / device-to-device copy bandwidth measured in the same run). Before timing, each variant's
// output is checked against the fused kernel's (the unit tests check all three against a
// float64 reference). Usage: bench_cuda_attention [out.json] [--quick]
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/attention.cuh"

using namespace mvllm;
using namespace mvllm::cuda;

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
        else static_cast<__half*>(p)[i] = __float2half(v);
    }
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

}  // namespace

int main(int argc, char** argv) {
    const char* json_path = nullptr;
    bool quick = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--quick") == 0) quick = true;
        else json_path = argv[i];
    }
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, 0));
    const double copy_bw = measure_copy_bandwidth();
    std::printf("device %s, %d SMs, copy bandwidth %.0f GB/s (read + write)\n", prop.name, prop.multiProcessorCount,
                copy_bw / 1e9);
    FILE* json = json_path ? std::fopen(json_path, "w") : nullptr;
    if (json) std::fprintf(json, "{\"device\": \"%s\", \"copy_gbps\": %.1f, \"rows\": [\n", prop.name, copy_bw / 1e9);

    const Geometry geos[] = {{"qwen2.5-7b", 28, 28, 4, 128}, {"qwen2.5-0.5b", 24, 14, 2, 64}};
    struct RowSpec {
        int geo;
        DType dtype;
        int32_t ctx, batch;
    };
    std::vector<RowSpec> rows = {
        {0, DType::F16, 512, 1},  {0, DType::F16, 4096, 1}, {0, DType::F16, 32768, 1}, {0, DType::F16, 4096, 16},
        {0, DType::F32, 4096, 1}, {1, DType::F16, 512, 1},  {1, DType::F16, 4096, 1},  {1, DType::F16, 32768, 1},
        {1, DType::F16, 4096, 16}, {1, DType::F32, 4096, 1},
    };
    if (quick) rows.resize(2);
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    bool first_row = true;
    std::printf("%-13s %-4s %6s %5s | %10s %10s %10s | %8s %8s %8s | %7s | %s\n", "geometry", "kv", "ctx", "batch",
                "naive us", "grouped us", "fused us", "naiveGB/s", "grpGB/s", "fusedGB/s", "floor", "fused % of copy bw");
    for (const RowSpec& rs : rows) {
        const Geometry& g = geos[rs.geo];
        const int32_t bs = 16;
        const int32_t blocks_per_seq = (rs.ctx + bs - 1) / bs;
        const int64_t n_blocks = static_cast<int64_t>(blocks_per_seq) * rs.batch;
        const size_t elem = rs.dtype == DType::F32 ? 4 : 2;
        const size_t half_bytes = static_cast<size_t>(n_blocks) * g.n_kv_heads * bs * g.head_dim * elem;
        const int n_layers = g.n_layers;
        // One K and one V buffer per layer.
        std::vector<void*> kbuf(n_layers), vbuf(n_layers);
        for (int l = 0; l < n_layers; ++l) {
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
            AttentionScratch scratch;
            auto layer = [&](int l) {
                DeviceKvLayer kv;
                kv.k = kbuf[l];
                kv.v = vbuf[l];
                kv.dtype = static_cast<uint32_t>(rs.dtype);
                kv.n_kv_heads = g.n_kv_heads;
                kv.head_dim = g.head_dim;
                kv.block_size = bs;
                launch_attention(variant, db, d_ctx_off, static_cast<int64_t>(rs.batch) * rs.ctx, kv, q, out,
                                 g.n_heads, scale, scratch, prop.multiProcessorCount, stream);
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
            const bool slow = variant == CudaAttention::Naive && kv_bytes > 1e8;
            const int warm = slow ? 3 : 20, timed = slow ? 10 : 50;
            std::vector<float> ms;
            for (int i = 0; i < warm + timed; ++i) {
                cudaEventRecord(e0, stream);
                CK(cudaGraphLaunch(exec, stream));
                cudaEventRecord(e1, stream);
                CK(cudaEventSynchronize(e1));
                float t;
                cudaEventElapsedTime(&t, e0, e1);
                if (i >= warm) ms.push_back(t);
            }
            std::sort(ms.begin(), ms.end());
            res[vi].us_per_layer = ms[ms.size() / 2] * 1e3 / n_layers;
            res[vi].gbps = kv_bytes / (res[vi].us_per_layer * 1e-6) / 1e9;
            cudaGraphExecDestroy(exec);
            cudaGraphDestroy(graph);
            cudaEventDestroy(e0);
            cudaEventDestroy(e1);
        }
        const double floor_us = kv_bytes / copy_bw * 1e6;
        std::printf("%-13s %-4s %6d %5d | %10.2f %10.2f %10.2f | %8.0f %8.0f %8.0f | %7.2f | %5.1f%%  (err vs fused: naive %.1e grouped %.1e)\n",
                    g.name, rs.dtype == DType::F32 ? "f32" : "f16", rs.ctx, rs.batch, res[0].us_per_layer,
                    res[1].us_per_layer, res[2].us_per_layer, res[0].gbps, res[1].gbps, res[2].gbps, floor_us,
                    100.0 * floor_us / res[2].us_per_layer, res[0].max_rel_vs_fused, res[1].max_rel_vs_fused);
        std::fflush(stdout);
        if (json)
            std::fprintf(json,
                         "%s{\"geometry\": \"%s\", \"kv\": \"%s\", \"ctx\": %d, \"batch\": %d, \"layers\": %d, "
                         "\"naive_us\": %.3f, \"grouped_us\": %.3f, \"fused_us\": %.3f, \"fused_gbps\": %.1f, "
                         "\"floor_us\": %.3f, \"err_naive\": %.2e, \"err_grouped\": %.2e}\n",
                         first_row ? "" : ",", g.name, rs.dtype == DType::F32 ? "f32" : "f16", rs.ctx, rs.batch,
                         n_layers, res[0].us_per_layer, res[1].us_per_layer, res[2].us_per_layer, res[2].gbps, floor_us,
                         res[0].max_rel_vs_fused, res[1].max_rel_vs_fused);
        first_row = false;
        for (int l = 0; l < n_layers; ++l) {
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
    if (json) {
        std::fprintf(json, "]}\n");
        std::fclose(json);
    }
    return 0;
}
