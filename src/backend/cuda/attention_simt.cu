// The attention kernels on the CUDA cores (attention.cuh): naive and grouped, three operations
// over the paged cache of any KV type (naive first repeats K/V to every query head), and the fused
// flash-decoding kernel of an F32 cache with its split merge. The tensor-core kernels of F16/BF16
// caches are attention.cu's.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/env.h"
#include "backend/cuda/mma_ptx.cuh"

namespace mvllm::cuda {
namespace {

// ---- K/V sources: the paged cache, or naive's dense repeated copy --------------------------------

// Element offset of (sequence, context token j, head) in a K/V source.
//   paged: [n_blocks][n_src_heads][block_size][head_dim] through the sequence's block table;
//   dense: [sum of context][n_src_heads][head_dim] starting at the sequence's context offset.
struct KvSource {
    const void* k;
    const void* v;
    int32_t n_src_heads;
    int32_t head_dim;
    bool paged;
    int32_t block_size;
    const int32_t* block_tables;
    const int32_t* seq_block_begin;
    const int64_t* seq_ctx_offset;

    __device__ __forceinline__ int64_t offset(int32_t seq, int64_t j, int32_t head) const {
        if (paged) {
            const int64_t block = block_tables[seq_block_begin[seq] + j / block_size];
            return ((block * n_src_heads + head) * block_size + j % block_size) * head_dim;
        }
        return ((seq_ctx_offset[seq] + j) * n_src_heads + head) * head_dim;
    }
};

// ---- naive: repeat K/V to the query-head count ------------------------------------------------

// Reads the paged K/V of sequence blockIdx.y, token blockIdx.x; writes the dense repeated rows
// [n_heads][head_dim] for that token. Grid (max_context, n_seqs), 256 threads.
template <typename KT>
__global__ void repeat_kv_kernel(DeviceBatch batch, KvSource cache, const int64_t* seq_ctx_offset, int32_t n_heads,
                                 KT* rep_k, KT* rep_v) {
    pdl_begin();
    const int32_t seq = blockIdx.y;
    const int64_t j = blockIdx.x;
    if (j >= batch.seq_context_len[seq]) return;
    const int32_t group = n_heads / cache.n_src_heads;
    const int32_t width = n_heads * cache.head_dim;
    const int64_t dst = (seq_ctx_offset[seq] + j) * width;
    const KT* k = static_cast<const KT*>(cache.k);
    const KT* v = static_cast<const KT*>(cache.v);
    for (int32_t i = threadIdx.x; i < width; i += blockDim.x) {
        const int32_t h = i / cache.head_dim, d = i % cache.head_dim;
        const int64_t src = cache.offset(seq, j, h / group) + d;
        rep_k[dst + i] = k[src];
        rep_v[dst + i] = v[src];
    }
}

// ---- three-kernel attention (naive and grouped) -------------------------------------------------

// Reads q rows and K; writes scores[row][head][j] = scale * q . k_j for j <= positions[row].
// One CTA of 64 threads per (64 context tokens, query row, source head); a thread owns one
// token and dots its K row (read once, 16 bytes a load) with the `group` query heads of that
// source head.
// Grid (n_tokens, ceil(max_context / 64), n_src_heads) (rows in x: a step may have > 65535).
template <typename KT>
__global__ void scores_kernel(DeviceBatch batch, KvSource src, const float* q, int32_t n_heads, float scale,
                              float* scores, int32_t max_context) {
    pdl_begin();
    extern __shared__ float q_shared[];  // [group][head_dim]
    const int32_t row = blockIdx.x, src_head = blockIdx.z;
    const int32_t group = n_heads / src.n_src_heads;
    const int32_t hd = src.head_dim;
    const float* qr = q + (static_cast<int64_t>(row) * n_heads + src_head * group) * hd;
    for (int32_t i = threadIdx.x; i < group * hd; i += blockDim.x) q_shared[i] = qr[i] * scale;
    __syncthreads();
    const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
    if (j > batch.positions[row]) return;
    const int32_t seq = batch.row_seq[row];
    const KT* k = static_cast<const KT*>(src.k) + src.offset(seq, j, src_head);
    float acc[kMaxGroupThreeOps];
#pragma unroll
    for (int g = 0; g < kMaxGroupThreeOps; ++g) acc[g] = 0.0f;
    // The row 16 bytes a load (head_dim is a multiple of 8; rows are 16-byte aligned), summed in
    // the order of d as before.
    constexpr int kPerLoad = 16 / sizeof(KT);
    for (int32_t d0 = 0; d0 < hd; d0 += kPerLoad) {
        const uint4 raw = *reinterpret_cast<const uint4*>(k + d0);
        const KT* vals = reinterpret_cast<const KT*>(&raw);
#pragma unroll
        for (int i = 0; i < kPerLoad; ++i) {
            const float kv = load_f(vals, i);
#pragma unroll
            for (int g = 0; g < kMaxGroupThreeOps; ++g)
                if (g < group) acc[g] += q_shared[g * hd + d0 + i] * kv;
        }
    }
#pragma unroll
    for (int g = 0; g < kMaxGroupThreeOps; ++g)
        if (g < group) scores[(static_cast<int64_t>(row) * n_heads + src_head * group + g) * max_context + j] = acc[g];
}

// In place: scores[row][head][0..positions[row]] -> softmax. One CTA (256 threads) per (row, head).
// Grid (n_tokens, n_heads).
__global__ void softmax_kernel(DeviceBatch batch, float* scores, int32_t n_heads, int32_t max_context) {
    pdl_begin();
    __shared__ float scratch[32];
    const int32_t row = blockIdx.x;
    float* s = scores + (static_cast<int64_t>(row) * n_heads + blockIdx.y) * max_context;
    const int32_t n = batch.positions[row] + 1;
    float mx = -INFINITY;
    for (int32_t j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, s[j]);
    mx = block_max(mx, scratch);
    float sum = 0.0f;
    for (int32_t j = threadIdx.x; j < n; j += blockDim.x) {
        const float e = __expf(s[j] - mx);
        s[j] = e;
        sum += e;
    }
    sum = block_sum(sum, scratch);
    const float inv = 1.0f / sum;
    for (int32_t j = threadIdx.x; j < n; j += blockDim.x) s[j] *= inv;
}

// Reads P (softmaxed scores) and V; out[row][head][d] = sum_j P[j] v_j[d] for the `group` query
// heads of a source head. One CTA (head_dim threads, one output dim each) per (row, source head,
// chunk of chunk_tokens context tokens); V rows read once per CTA. With one chunk per row
// (gridDim.z == 1) it writes out, else each chunk's sums to partial[row][head][chunk][d], which
// pv_reduce_kernel adds in chunk order. Grid (n_tokens, n_src_heads, n_chunks).
template <typename KT>
__global__ void pv_kernel(DeviceBatch batch, KvSource src, const float* probs, int32_t n_heads, void* out,
                          DType out_type, int32_t max_context, int32_t chunk_tokens, float* partial) {
    pdl_begin();
    const int32_t row = blockIdx.x, src_head = blockIdx.y, chunk = blockIdx.z, d = threadIdx.x;
    const int32_t group = n_heads / src.n_src_heads;
    if (d >= src.head_dim) return;
    const int32_t seq = batch.row_seq[row];
    const int32_t n = batch.positions[row] + 1;
    const int32_t j_end = min(n, (chunk + 1) * chunk_tokens);
    const float* p = probs + (static_cast<int64_t>(row) * n_heads + src_head * group) * max_context;
    const KT* v = static_cast<const KT*>(src.v);
    float acc[kMaxGroupThreeOps];
#pragma unroll
    for (int g = 0; g < kMaxGroupThreeOps; ++g) acc[g] = 0.0f;
#pragma unroll 8
    for (int32_t j = chunk * chunk_tokens; j < j_end; ++j) {
        const float vv = load_f(v, src.offset(seq, j, src_head) + d);
#pragma unroll
        for (int g = 0; g < kMaxGroupThreeOps; ++g)
            if (g < group) acc[g] += p[static_cast<int64_t>(g) * max_context + j] * vv;
    }
#pragma unroll
    for (int g = 0; g < kMaxGroupThreeOps; ++g) {
        if (g >= group) continue;
        const int64_t head_row = static_cast<int64_t>(row) * n_heads + src_head * group + g;
        if (gridDim.z == 1)
            store_any(out, out_type, head_row * src.head_dim + d, acc[g]);
        else
            partial[(head_row * gridDim.z + chunk) * src.head_dim + d] = acc[g];  // 0 past the row's context
    }
}

// out[row][head][d] = the sum of pv_kernel's chunk partials, in chunk order. Grid (n_tokens,
// n_heads), head_dim threads.
__global__ void pv_reduce_kernel(const float* partial, int32_t n_chunks, int32_t head_dim, void* out, DType out_type) {
    pdl_begin();
    const int64_t head_row = static_cast<int64_t>(blockIdx.x) * gridDim.y + blockIdx.y;
    const int d = threadIdx.x;
    if (d >= head_dim) return;
    float a = 0.0f;
    for (int32_t c = 0; c < n_chunks; ++c) a += partial[(head_row * n_chunks + c) * head_dim + d];
    store_any(out, out_type, head_row * head_dim + d, a);
}

// ---- fused paged flash-decoding ----------------------------------------------------------------

constexpr int kFusedWarps = 4;
constexpr int kVec = 8;  // head dims per lane: two 16-byte loads (this kernel serves F32 KV only)
// Pipe: each lane copies its K/V values of the next kFusedStages - 1 steps into shared memory
// (cp.async) while it computes the current one, instead of loading a step's values when it
// starts it; every lane reads back only what it copied. A step is 32 x kVec floats of K and of V
// per warp at any head_dim (TPW tokens of HD).
constexpr int kFusedStages = 4;
constexpr int kStepFloats = 32 * kVec;

__device__ __forceinline__ void load8(const float* p, float (&o)[kVec]) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w; o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
}

// exp2(a - b) that is 0 when a is -inf (an empty partial state).
__device__ __forceinline__ float rescale(float a, float b) { return a == -INFINITY ? 0.0f : exp2f(a - b); }

// Reads: q (one row, the CTA's query heads), the row's K/V blocks in [split * split_tokens,
// min(+split_tokens, positions[row] + 1)). Writes: out (n_splits == 1, normalised) or the split's
// unnormalised partial o and its (max, sum) in base 2 (n_splits > 1).
// Launch: grid (n_tokens, n_kv_heads * n_head_tiles, n_splits), 128 threads. Each warp takes
// 32 / (HD / 8) context tokens per step (HD / 8 lanes per token, 8 dims per lane); a lane keeps
// the online-softmax state of its tokens for all G query heads; warps and lanes merge at the end.
template <int HD, typename KT, int G, bool Pipe>
__global__ void __launch_bounds__(kFusedWarps * 32)
    fused_attention_kernel(DeviceBatch batch, KvSource cache, const float* q, int32_t n_heads, float scale_log2,
                           int32_t split_tokens, int32_t n_splits, void* out, DType out_type, float* part_o,
                           float* part_ml) {
    pdl_begin();
    constexpr int L = HD / kVec;      // lanes per token
    constexpr int TPW = 32 / L;       // tokens per warp step
    static_assert(HD % kVec == 0 && 32 % L == 0, "head_dim");
    __shared__ float s_m[kFusedWarps][G], s_l[kFusedWarps][G];
    // Pipe: the warps' stages [warp][stage][K, V][kStepFloats], then (after a barrier) the warps'
    // partial o [warp][G][HD] for their merge.
    constexpr int kPipeFloats = Pipe ? kFusedWarps * kFusedStages * 2 * kStepFloats : 0;
    constexpr int kAccFloats = kFusedWarps * G * HD;
    __shared__ __align__(16) float s_buf[kPipeFloats > kAccFloats ? kPipeFloats : kAccFloats];
    float (*s_acc)[G][HD] = reinterpret_cast<float (*)[G][HD]>(s_buf);

    const int32_t row = blockIdx.x;
    const int32_t n_kv = cache.n_src_heads;
    const int32_t group = n_heads / n_kv;
    const int32_t n_tiles = (group + G - 1) / G;
    const int32_t kv_head = blockIdx.y / n_tiles, tile = blockIdx.y % n_tiles;
    const int32_t head0 = kv_head * group + tile * G;
    const int32_t n_g = min(G, group - tile * G);
    const int32_t split = blockIdx.z;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = lane / L, dl = lane % L;

    const int32_t seq = batch.row_seq[row];
    const int32_t ctx = batch.positions[row] + 1;
    const int32_t t_begin = split * split_tokens;
    const int32_t t_end = min(t_begin + split_tokens, ctx);

    float qv[G][kVec];
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int i = 0; i < kVec; ++i)
            qv[g][i] = g < n_g ? q[(static_cast<int64_t>(row) * n_heads + head0 + g) * HD + dl * kVec + i] * scale_log2
                               : 0.0f;
    }
    float m[G], l[G], acc[G][kVec];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[g][i] = 0.0f;
    }
    const KT* kc = static_cast<const KT*>(cache.k);
    const KT* vc = static_cast<const KT*>(cache.v);
    constexpr int32_t kStride = kFusedWarps * TPW;  // tokens between a warp's steps
    // Pipe: the lane's slot of step i's stage (K, then V kStepFloats later).
    float* const my_stage = s_buf + (warp * kFusedStages * 2) * kStepFloats + lane * kVec;
    auto stage = [&](int32_t i) { return my_stage + (i % kFusedStages) * 2 * kStepFloats; };
    auto issue = [&](int32_t i) {  // starts step i's copies (none past the split)
        const int32_t t = t_begin + warp * TPW + i * kStride + sub;
        if (t < t_end) {
            const int64_t off = cache.offset(seq, t, kv_head) + dl * kVec;
            float* st = stage(i);
            cp_async16(st, kc + off, true);
            cp_async16(st + 4, kc + off + 4, true);
            cp_async16(st + kStepFloats, vc + off, true);
            cp_async16(st + kStepFloats + 4, vc + off + 4, true);
        }
    };
    if constexpr (Pipe) {
#pragma unroll
        for (int i = 0; i < kFusedStages - 1; ++i) {
            issue(i);
            cp_async_commit();
        }
    }
    for (int32_t base = t_begin + warp * TPW, step = 0; base < t_end; base += kStride, ++step) {
        const int32_t t = base + sub;
        const bool valid = t < t_end;
        float kx[kVec], vx[kVec];
        if constexpr (Pipe) {
            cp_async_wait<kFusedStages - 2>();  // this step's copies (the lane's own) have landed
            issue(step + kFusedStages - 1);
            cp_async_commit();
        }
        if (valid) {
            if constexpr (Pipe) {
                load8(stage(step), kx);
                load8(stage(step) + kStepFloats, vx);
            } else {
                const int64_t off = cache.offset(seq, t, kv_head) + dl * kVec;
                load8(kc + off, kx);
                load8(vc + off, vx);
            }
        } else {
#pragma unroll
            for (int i = 0; i < kVec; ++i) kx[i] = vx[i] = 0.0f;
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
            float s = 0.0f;
#pragma unroll
            for (int i = 0; i < kVec; ++i) s += qv[g][i] * kx[i];
#pragma unroll
            for (int o = L / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (valid && g < n_g) {
                const float m_new = fmaxf(m[g], s);
                const float corr = rescale(m[g], m_new);
                const float p = exp2f(s - m_new);
                l[g] = l[g] * corr + p;
#pragma unroll
                for (int i = 0; i < kVec; ++i) acc[g][i] = acc[g][i] * corr + p * vx[i];
                m[g] = m_new;
            }
        }
    }
    // Merge the token subgroups of the warp (lanes with the same dims).
#pragma unroll
    for (int o = L; o < 32; o <<= 1) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const float mo = __shfl_xor_sync(0xffffffffu, m[g], o);
            const float lo = __shfl_xor_sync(0xffffffffu, l[g], o);
            const float m_new = fmaxf(m[g], mo);
            const float c1 = rescale(m[g], m_new), c2 = rescale(mo, m_new);
            l[g] = l[g] * c1 + lo * c2;
#pragma unroll
            for (int i = 0; i < kVec; ++i) {
                const float ao = __shfl_xor_sync(0xffffffffu, acc[g][i], o);
                acc[g][i] = acc[g][i] * c1 + ao * c2;
            }
            m[g] = m_new;
        }
    }
    if constexpr (Pipe) {
        cp_async_wait<0>();  // no copy may land in s_buf once it holds the partial o
        __syncthreads();
    }
    if (sub == 0) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
            if (dl == 0) {
                s_m[warp][g] = m[g];
                s_l[warp][g] = l[g];
            }
#pragma unroll
            for (int i = 0; i < kVec; ++i) s_acc[warp][g][dl * kVec + i] = acc[g][i];
        }
    }
    __syncthreads();
    // Merge the warps: one thread per (query head, dim).
    for (int idx = threadIdx.x; idx < n_g * HD; idx += blockDim.x) {
        const int g = idx / HD, d = idx % HD;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < kFusedWarps; ++w) mx = fmaxf(mx, s_m[w][g]);
        float sum = 0.0f, a = 0.0f;
#pragma unroll
        for (int w = 0; w < kFusedWarps; ++w) {
            const float c = rescale(s_m[w][g], mx);
            sum += s_l[w][g] * c;
            a += s_acc[w][g][d] * c;
        }
        const int64_t head_row = static_cast<int64_t>(row) * n_heads + head0 + g;
        if (n_splits == 1) {
            store_any(out, out_type, head_row * HD + d, a / sum);
        } else {
            part_o[(head_row * n_splits + split) * HD + d] = a;
            if (d == 0) {
                part_ml[(head_row * n_splits + split) * 2] = mx;
                part_ml[(head_row * n_splits + split) * 2 + 1] = sum;
            }
        }
    }
}

// Reads the n_splits partial (o, max, sum) of one (row, head); writes the normalised output.
// Grid (n_tokens, n_heads), head_dim threads.
__global__ void merge_splits_kernel(const float* part_o, const float* part_ml, int32_t n_splits, int32_t head_dim,
                                    void* out, DType out_type) {
    pdl_begin();
    const int64_t head_row = static_cast<int64_t>(blockIdx.x) * gridDim.y + blockIdx.y;
    const int d = threadIdx.x;
    if (d >= head_dim) return;
    const float* ml = part_ml + head_row * n_splits * 2;
    float mx = -INFINITY;
    for (int s = 0; s < n_splits; ++s) mx = fmaxf(mx, ml[2 * s]);
    float sum = 0.0f, a = 0.0f;
    for (int s = 0; s < n_splits; ++s) {
        const float c = rescale(ml[2 * s], mx);
        sum += ml[2 * s + 1] * c;
        a += part_o[(head_row * n_splits + s) * head_dim + d] * c;
    }
    store_any(out, out_type, head_row * head_dim + d, a / sum);
}

template <typename KT>
void three_kernels(CudaAttention variant, const DeviceBatch& batch, const int64_t* seq_ctx_offset,
                   int64_t total_context, const DeviceKvLayer& kv, const TensorView& q, const TensorView& out,
                   int32_t n_heads, float scale, AttentionScratch& scratch, int32_t n_sms, cudaStream_t stream) {
    const int32_t hd = kv.head_dim;
    const int32_t max_ctx = batch.max_context;
    KvSource src{kv.k, kv.v, kv.n_kv_heads, hd, true, kv.block_size, batch.block_tables, batch.seq_block_begin,
                 seq_ctx_offset};
    if (variant == CudaAttention::Naive) {
        const size_t half = static_cast<size_t>(total_context) * n_heads * hd * sizeof(KT);
        grow_attention_scratch(&scratch.repeated, &scratch.repeated_bytes, 2 * half, "repeated K/V");
        KT* rep_k = static_cast<KT*>(scratch.repeated);
        KT* rep_v = reinterpret_cast<KT*>(static_cast<uint8_t*>(scratch.repeated) + half);
        launch_pdl(repeat_kv_kernel<KT>, dim3(max_ctx, batch.n_seqs), 256, 0, stream, batch, src, seq_ctx_offset, n_heads,
                                                                              rep_k, rep_v);
        MVLLM_CUDA_LAUNCH_CHECK();
        src = KvSource{rep_k, rep_v, n_heads, hd, false, kv.block_size, batch.block_tables, batch.seq_block_begin,
                       seq_ctx_offset};
    }
    grow_attention_scratch(&scratch.scores, &scratch.scores_bytes,
           static_cast<size_t>(batch.n_tokens) * n_heads * max_ctx * sizeof(float), "scores");
    float* scores = static_cast<float*>(scratch.scores);
    const int32_t group = n_heads / src.n_src_heads;
    const size_t shared = static_cast<size_t>(group) * hd * sizeof(float);
    launch_pdl(scores_kernel<KT>, dim3(batch.n_tokens, static_cast<unsigned>(ceil_div(max_ctx, 64)), src.n_src_heads), 64,
               shared, stream, batch, src, static_cast<const float*>(q.data), n_heads, scale, scores, max_ctx);
    MVLLM_CUDA_LAUNCH_CHECK();
    launch_pdl(softmax_kernel, dim3(batch.n_tokens, n_heads), 256, 0, stream, batch, scores, n_heads, max_ctx);
    MVLLM_CUDA_LAUNCH_CHECK();
    // PV in context chunks where the (row, source head) pairs alone leave the GPU idle (decode:
    // the 7B geometry has four; one CTA each over 4K tokens took 2.3-3.0 ms a layer): about two
    // CTAs an SM, chunks of at least kPvMinChunk tokens, their sums added by pv_reduce_kernel.
    constexpr int64_t kPvMinChunk = 64;
    const int64_t pairs = static_cast<int64_t>(batch.n_tokens) * src.n_src_heads;
    const int64_t want = std::clamp<int64_t>(ceil_div(2LL * n_sms, pairs), 1, ceil_div(max_ctx, kPvMinChunk));
    const int32_t chunk_tokens = static_cast<int32_t>(ceil_div(ceil_div(max_ctx, want), kPvMinChunk) * kPvMinChunk);
    const int32_t n_chunks = static_cast<int32_t>(ceil_div(max_ctx, chunk_tokens));
    const unsigned dim_threads = static_cast<unsigned>(ceil_div(hd, 32) * 32);
    float* partial = nullptr;
    if (n_chunks > 1) {
        grow_attention_scratch(&scratch.partial, &scratch.partial_bytes,
                               static_cast<size_t>(batch.n_tokens) * n_heads * n_chunks * hd * sizeof(float), "PV chunks");
        partial = static_cast<float*>(scratch.partial);
    }
    launch_pdl(pv_kernel<KT>, dim3(batch.n_tokens, src.n_src_heads, n_chunks), dim_threads, 0, stream, batch, src, scores,
               n_heads, out.data, out.type, max_ctx, chunk_tokens, partial);
    MVLLM_CUDA_LAUNCH_CHECK();
    if (n_chunks > 1) {
        launch_pdl(pv_reduce_kernel, dim3(batch.n_tokens, n_heads), dim_threads, 0, stream, partial, n_chunks, hd,
                   out.data, out.type);
        MVLLM_CUDA_LAUNCH_CHECK();
    }
}
std::atomic<int> g_forced_f32_pipeline{-1};  // force_f32_pipeline

template <int HD, typename KT, int G>
void fused_launch(const DeviceBatch& batch, const DeviceKvLayer& kv, const TensorView& q, const TensorView& out,
                  int32_t n_heads, float scale, AttentionScratch& scratch, int32_t n_sms, cudaStream_t stream,
                  bool batch_invariant) {
    const int32_t group = n_heads / kv.n_kv_heads;
    const int32_t n_tiles = (group + G - 1) / G;
    const FusedSplit split = fused_split(batch.n_tokens, kv.n_kv_heads, n_tiles, batch.max_context, n_sms, batch_invariant);
    float* part_o = nullptr;
    float* part_ml = nullptr;
    if (split.n_splits > 1) split_partials(scratch, batch.n_tokens, n_heads, split.n_splits, HD, &part_o, &part_ml);
    const KvSource src{kv.k, kv.v, kv.n_kv_heads, HD, true, kv.block_size, batch.block_tables,
                       batch.seq_block_begin, nullptr};
    const dim3 grid(batch.n_tokens, kv.n_kv_heads * n_tiles, split.n_splits);
    // The copy pipeline unless MVLLM_ATTN_F32_PIPE=0 or force_f32_pipeline(0) (A/B: the same bits).
    static const bool pipe_env = env_int("MVLLM_ATTN_F32_PIPE", 1) != 0;
    const int forced = g_forced_f32_pipeline.load();
    const bool pipe = forced >= 0 ? forced != 0 : pipe_env;
    auto* const kernel = pipe ? fused_attention_kernel<HD, KT, G, true> : fused_attention_kernel<HD, KT, G, false>;
    launch_pdl(kernel, grid, kFusedWarps * 32, 0, stream,
        batch, src, static_cast<const float*>(q.data), n_heads, scale * kLog2e, split.split_tokens,
        split.n_splits, out.data, out.type, part_o, part_ml);
    MVLLM_CUDA_LAUNCH_CHECK();
    if (split.n_splits > 1) {
        launch_pdl(merge_splits_kernel, dim3(batch.n_tokens, n_heads), static_cast<unsigned>(ceil_div(HD, 32) * 32), 0, stream, part_o, part_ml, split.n_splits, HD, out.data, out.type);
        MVLLM_CUDA_LAUNCH_CHECK();
    }
}

}  // namespace

void force_f32_pipeline(int mode) { g_forced_f32_pipeline.store(mode); }

void grow_attention_scratch(void** ptr, size_t* have, size_t need, const char* what) {
    grow_device_buffer(ptr, have, need, (std::string("attention ") + what + " scratch").c_str());
}

void split_partials(AttentionScratch& scratch, int32_t n_rows, int32_t n_heads, int32_t n_splits, int32_t head_dim,
                    float** part_o, float** part_ml) {
    const size_t n_o = static_cast<size_t>(n_rows) * n_heads * n_splits * head_dim;
    const size_t n_ml = static_cast<size_t>(n_rows) * n_heads * n_splits * 2;
    grow_attention_scratch(&scratch.partial, &scratch.partial_bytes, (n_o + n_ml) * sizeof(float), "split partials");
    *part_o = static_cast<float*>(scratch.partial);
    *part_ml = *part_o + n_o;
}

void launch_three_ops(CudaAttention variant, const DeviceBatch& batch, const int64_t* seq_ctx_offset,
                      int64_t total_context, const DeviceKvLayer& kv, const TensorView& q, const TensorView& out,
                      int32_t n_heads, float scale, AttentionScratch& scratch, int32_t n_sms,
                      cudaStream_t stream) {
    switch (static_cast<DType>(kv.dtype)) {
        case DType::F32: return three_kernels<float>(variant, batch, seq_ctx_offset, total_context, kv, q, out, n_heads, scale, scratch, n_sms, stream);
        case DType::F16: return three_kernels<__half>(variant, batch, seq_ctx_offset, total_context, kv, q, out, n_heads, scale, scratch, n_sms, stream);
        case DType::BF16: return three_kernels<__nv_bfloat16>(variant, batch, seq_ctx_offset, total_context, kv, q, out, n_heads, scale, scratch, n_sms, stream);
        default: MVLLM_CHECK(false) << "attention: KV dtype " << type_name(static_cast<DType>(kv.dtype));
    }
}

void launch_fused_f32(const DeviceBatch& batch, const DeviceKvLayer& kv, const TensorView& q, const TensorView& out,
                      int32_t n_heads, float scale, AttentionScratch& scratch, int32_t n_sms, cudaStream_t stream,
                      bool batch_invariant) {
    const bool small_group = n_heads / kv.n_kv_heads <= 4;  // the group's query heads held per CTA: 4 or 8
    auto go = [&]<int HD>() {
        if (small_group) fused_launch<HD, float, 4>(batch, kv, q, out, n_heads, scale, scratch, n_sms, stream, batch_invariant);
        else fused_launch<HD, float, 8>(batch, kv, q, out, n_heads, scale, scratch, n_sms, stream, batch_invariant);
    };
    switch (kv.head_dim) {
        case 16: return go.template operator()<16>();
        case 32: return go.template operator()<32>();
        case 64: return go.template operator()<64>();
        case 128: return go.template operator()<128>();
        default: MVLLM_CHECK(false) << "fused attention: head_dim " << kv.head_dim;
    }
}

}  // namespace mvllm::cuda
