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
// Registers a thread of the fused kernel may use (four CTAs an SM take 128: all 65,536). At
// head_dim <= 64, 120: four CTAs then leave room for a split-merge CTA (32 registers a thread),
// which at 128 keeps one CTA of the next layer from becoming resident early (under PDL) on every
// SM that holds one. On the H100 (bench/NOTES.md, forty-first session) 120 took the 0.5B geometry's
// F32 rows at 2K / 4K from 6.7 / 7.7 to 6.1 / 6.7 µs, but the 7B's (head_dim 128) at 1K / 4K from
// 7.2 / 11.6 to 8.1 / 12.0, so head_dim 128 keeps 128.
template <int HD>
constexpr int kFusedMaxRegs = HD <= 64 ? 120 : 128;
constexpr int kVec = 4;           // head dims per lane: one 16-byte load (this kernel serves F32 KV only)
constexpr int kTileRows = 4;      // row steps per tile: one online-softmax update per tile
// Pipe: each lane copies its K/V values of the tiles kFusedStages - 1 ahead into shared memory
// (cp.async) while it computes the current one; every lane reads back only what it copied.
constexpr int kFusedStages = 3;
constexpr int kStageFloats = kTileRows * 2 * 32 * kVec;  // a warp's stage: per row, K then V, 32 lanes

// exp2(a - b) that is 0 when a is -inf (an empty partial state, a masked score).
__device__ __forceinline__ float rescale(float a, float b) { return a == -INFINITY ? 0.0f : exp2f(a - b); }

// The lanes of a token (L consecutive lanes) each hold partial dot products of their dims, s[j]
// that of query head j ^ head_base<G, L>(dl). Afterwards s[0..NV) hold the full sums of heads
// head_base(dl) + v, NV = max(1, G / L): while a lane holds more than one value it keeps the first
// half and adds its partner's second half, which (the order being j ^ head_base, and the partners
// differing in that level's head bit) holds the same heads (a reduce-scatter: G - 1 shuffles for
// G heads instead of G log2 L, and no selects); then plain butterflies.
template <int G, int L, int N = G, int O = L / 2>
__device__ __forceinline__ void reduce_scatter(float (&s)[G]) {
    if constexpr (O >= 1) {
        if constexpr (N > 1) {
#pragma unroll
            for (int i = 0; i < N / 2; ++i) s[i] += __shfl_xor_sync(0xffffffffu, s[i + N / 2], O);
            reduce_scatter<G, L, N / 2, O / 2>(s);
        } else {
            s[0] += __shfl_xor_sync(0xffffffffu, s[0], O);
            reduce_scatter<G, L, 1, O / 2>(s);
        }
    }
}
// The first query head whose score lane dl holds after reduce_scatter<G, L>, and the lane (of a
// token's L) that holds head g's.
template <int G, int L>
__device__ __forceinline__ int head_base(int dl) {
    int base = 0;
#pragma unroll
    for (int o = L / 2, n = G; o >= 1 && n > 1; o >>= 1, n /= 2) base += (dl & o) ? n / 2 : 0;
    return base;
}
template <int G, int L>
__host__ __device__ constexpr int head_owner(int g) {
    int dl = 0;
    for (int o = L / 2, n = G; o >= 1 && n > 1; o >>= 1, n /= 2) {
        if (g >= n / 2) dl += o, g -= n / 2;
    }
    return dl;
}

// Reads: q (one row, the CTA's query heads), the row's K/V blocks in [split * split_tokens,
// min(+split_tokens, positions[row] + 1)). Writes: out (n_splits == 1, normalised) or the split's
// unnormalised partial o and its (max, sum) in base 2 (n_splits > 1).
// Launch: grid (n_tokens, n_kv_heads * n_head_tiles, n_splits), 128 threads, FusedShape::kSmemBytes
// of dynamic shared memory. A token's HD / 4 lanes (L) each hold 4 of its dims, so a row step covers
// 32 / L tokens (TPW); a warp takes tiles of kTileRows row steps (its tiles interleave with the
// other warps'). Per tile: scores of the G query heads (partial dots, then reduce_scatter: each lane
// ends up with the scores of NV heads), one online-softmax update per held head over the tile
// (lanes of the same token slot share it through shared memory), then P V into the lane's dims of
// all G heads. The TPW token slots and the warps merge at the end.
template <int HD, int G>
struct FusedShape {
    static constexpr int L = HD / kVec, TPW = 32 / L, NV = G > L ? G / L : 1, T = kTileRows * TPW;
    static constexpr int kPFloats = kFusedWarps * TPW * (kTileRows + 1) * G;  // p, then corr, per token slot
    static constexpr int kPipeFloats = kFusedWarps * kFusedStages * kStageFloats;
    static constexpr int kAccFloats = kFusedWarps * G * HD;
    static constexpr size_t kSmemBytes =
        (static_cast<size_t>(kPipeFloats > kAccFloats ? kPipeFloats : kAccFloats) + kPFloats) * sizeof(float);
};

template <int HD, int G, bool Pipe>
__global__ void __maxnreg__(kFusedMaxRegs<HD>)
    fused_attention_kernel(DeviceBatch batch, KvSource cache, const float* q, int32_t n_heads, float scale_log2,
                           int32_t split_tokens, int32_t n_splits, void* out, DType out_type, float* part_o,
                           float* part_ml, bool early_tiles) {
    pdl_trigger();
    using S = FusedShape<HD, G>;
    constexpr int L = S::L, TPW = S::TPW, NV = S::NV, T = S::T;
    static_assert(HD % kVec == 0 && 32 % L == 0 && G % NV == 0, "head_dim");
    __shared__ float s_m[kFusedWarps][G], s_l[kFusedWarps][G];
    // Dynamic: the warps' stages [warp][stage][row][K, V][32 lanes][kVec] (Pipe; after a barrier the
    // warps' partial o [warp][G][HD] for their merge), then [warp][slot][row: p, then corr][G].
    extern __shared__ __align__(16) float s_dyn[];
    float (*s_acc)[G][HD] = reinterpret_cast<float (*)[G][HD]>(s_dyn);

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
    const int hb = head_base<G, L>(dl);
    // One writer per held head: of the lanes that end with the same scores (they differ only in the
    // butterfly levels' bits), the one whose bits are 0.
    const bool writer = dl == head_owner<G, L>(hb);
    float* const s_pc = s_dyn + (S::kPipeFloats > S::kAccFloats ? S::kPipeFloats : S::kAccFloats) +
                        (warp * TPW + sub) * (kTileRows + 1) * G;

    const int32_t seq = batch.row_seq[row];
    const int32_t ctx = batch.positions[row] + 1;
    const int32_t t_begin = split * split_tokens;
    const int32_t t_end = min(t_begin + split_tokens, ctx);
    const int32_t* const table = batch.block_tables + batch.seq_block_begin[seq];
    const uint32_t bs = static_cast<uint32_t>(cache.block_size);
    // Block sizes are powers of two in practice (16): then a shift and a mask locate a token.
    const bool bs_pow2 = (bs & (bs - 1)) == 0;
    const int bs_shift = __ffs(bs) - 1;

    float m[NV], l[NV], acc[G][kVec];
#pragma unroll
    for (int v = 0; v < NV; ++v) m[v] = -INFINITY, l[v] = 0.0f;
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[g][i] = 0.0f;

    // The lane's dims of this KV head in block 0; a token is block * block_stride + in * HD on.
    const int64_t lane0 = static_cast<int64_t>(kv_head) * bs * HD + dl * kVec;
    const float* const kc = static_cast<const float*>(cache.k) + lane0;
    const float* const vc = static_cast<const float*>(cache.v) + lane0;
    const int32_t block_stride = n_kv * static_cast<int32_t>(bs) * HD;  // < 2^31: checked at launch
    // Tile `it` of this warp: tokens tile_base(it) + r * TPW + sub, r < kTileRows.
    auto tile_base = [&](int32_t it) { return t_begin + (it * kFusedWarps + warp) * T; };
    // A tile's rows as (block id, token within the block), -1 past the split: the block ids are
    // loaded a tile before they are needed.
    struct Rows { int32_t block[kTileRows], in[kTileRows]; };
    auto locate = [&](int32_t it, Rows& rows) {
        const int32_t t0 = tile_base(it) + sub;
#pragma unroll
        for (int r = 0; r < kTileRows; ++r) {
            const uint32_t t = static_cast<uint32_t>(t0 + r * TPW);
            const uint32_t b = bs_pow2 ? t >> bs_shift : t / bs;
            const bool in = t0 + r * TPW < t_end;
            rows.in[r] = in ? static_cast<int32_t>(t - b * bs) : -1;
            rows.block[r] = in ? table[b] : 0;
        }
    };
    auto offset = [&](const Rows& rows, int r) {
        return static_cast<int64_t>(rows.block[r]) * block_stride + rows.in[r] * HD;
    };
    // The lane's slot of stage i (of kFusedStages).
    float* const my_stages = s_dyn + warp * kFusedStages * kStageFloats + lane * kVec;
    auto stage = [&](int i) { return my_stages + i * kStageFloats; };
    // Starts the copies of a tile into stage i; rows past the split are zero-filled (their V is
    // multiplied by p = 0, so a NaN left in shared memory would poison the sums).
    auto issue = [&](int i, const Rows& rows) {
        float* st = stage(i);
#pragma unroll
        for (int r = 0; r < kTileRows; ++r) {
            const bool in = rows.in[r] >= 0;
            const int64_t off = in ? offset(rows, r) : 0;
            cp_async16(st + r * 2 * 32 * kVec, kc + off, in);
            cp_async16(st + (r * 2 + 1) * 32 * kVec, vc + off, in);
        }
    };
    Rows next;  // Pipe: the rows of the next tile to issue
    int n_pre = 0;
    if constexpr (Pipe) {
        // early_tiles: the first tiles whose tokens were all cached before this step (no kernel of
        // the step writes them; the block table is the step's metadata) start before the wait.
        const int32_t first_new = batch.seq_context_len[seq] - batch.seq_n_tokens[seq];
        for (; early_tiles && n_pre < kFusedStages - 1 && tile_base(n_pre) + T <= first_new; ++n_pre) {
            locate(n_pre, next);
            issue(n_pre, next);
            cp_async_commit();
        }
    }
    pdl_wait();
    if constexpr (Pipe) {
        for (int i = n_pre; i < kFusedStages - 1; ++i) {
            locate(i, next);
            issue(i, next);
            cp_async_commit();
        }
        locate(kFusedStages - 1, next);
    }
    // Q after the first copies are on their way (its loads' round trip then overlaps theirs).
    // qv[j]: head j ^ hb (reduce_scatter's order).
    float qv[G][kVec];
#pragma unroll
    for (int j = 0; j < G; ++j) {
        const int g = j ^ hb;
        const float4 x = g < n_g ? *reinterpret_cast<const float4*>(
                                       q + (static_cast<int64_t>(row) * n_heads + head0 + g) * HD + dl * kVec)
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        qv[j][0] = x.x * scale_log2, qv[j][1] = x.y * scale_log2, qv[j][2] = x.z * scale_log2,
        qv[j][3] = x.w * scale_log2;
    }
    for (int32_t it = 0, st = 0; tile_base(it) < t_end; ++it, st = st == kFusedStages - 1 ? 0 : st + 1) {
        Rows cur;
        if constexpr (Pipe) {
            cp_async_wait<kFusedStages - 2>();  // this tile's copies (the lane's own) have landed
            issue(st == 0 ? kFusedStages - 1 : st - 1, next);  // tile it + kFusedStages - 1
            cp_async_commit();
            locate(it + kFusedStages, next);
        } else {
            locate(it, cur);
        }
        auto load_row = [&](int r, int kv) {  // the lane's K (kv 0) or V (1) values of row r
            if constexpr (Pipe) return *reinterpret_cast<const float4*>(stage(st) + (r * 2 + kv) * 32 * kVec);
            else return cur.in[r] >= 0 ? *reinterpret_cast<const float4*>((kv ? vc : kc) + offset(cur, r))
                                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        };
        // Scores of the tile's rows for the lane's held heads (-inf: past the split or no head).
        float sc[kTileRows][NV];
#pragma unroll
        for (int r = 0; r < kTileRows; ++r) {
            const float4 k = load_row(r, 0);
            float s[G];
#pragma unroll
            for (int g = 0; g < G; ++g)
                s[g] = fmaf(qv[g][3], k.w, fmaf(qv[g][2], k.z, fmaf(qv[g][1], k.y, __fmul_rn(qv[g][0], k.x))));
            reduce_scatter<G, L>(s);
            const bool valid = tile_base(it) + r * TPW + sub < t_end;
#pragma unroll
            for (int v = 0; v < NV; ++v) sc[r][v] = valid && hb + v < n_g ? s[v] : -INFINITY;
        }
        // One online-softmax update per held head over the tile's rows of this token slot.
        float p[kTileRows][NV], corr[NV];
#pragma unroll
        for (int v = 0; v < NV; ++v) {
            float mt = sc[0][v];
#pragma unroll
            for (int r = 1; r < kTileRows; ++r) mt = fmaxf(mt, sc[r][v]);
            const float m_new = fmaxf(m[v], mt);
            corr[v] = rescale(m[v], m_new);
            float ps = 0.0f;
#pragma unroll
            for (int r = 0; r < kTileRows; ++r) ps += p[r][v] = rescale(sc[r][v], m_new);
            l[v] = fmaf(l[v], corr[v], ps);
            m[v] = m_new;
        }
        // Share p and corr with the slot's other lanes (which hold other heads' values).
        __syncwarp();  // the previous tile's reads are done
        if (writer) {
#pragma unroll
            for (int v = 0; v < NV; ++v) {
#pragma unroll
                for (int r = 0; r < kTileRows; ++r) s_pc[r * G + hb + v] = p[r][v];
                s_pc[kTileRows * G + hb + v] = corr[v];
            }
        }
        __syncwarp();
        float c[G];
#pragma unroll
        for (int g = 0; g < G; g += 4) *reinterpret_cast<float4*>(&c[g]) = *reinterpret_cast<const float4*>(s_pc + kTileRows * G + g);
#pragma unroll
        for (int g = 0; g < G; ++g)
#pragma unroll
            for (int i = 0; i < kVec; ++i) acc[g][i] = __fmul_rn(acc[g][i], c[g]);
#pragma unroll
        for (int r = 0; r < kTileRows; ++r) {
            const float4 vv = load_row(r, 1);
            float pr[G];
#pragma unroll
            for (int g = 0; g < G; g += 4) *reinterpret_cast<float4*>(&pr[g]) = *reinterpret_cast<const float4*>(s_pc + r * G + g);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                acc[g][0] = fmaf(pr[g], vv.x, acc[g][0]);
                acc[g][1] = fmaf(pr[g], vv.y, acc[g][1]);
                acc[g][2] = fmaf(pr[g], vv.z, acc[g][2]);
                acc[g][3] = fmaf(pr[g], vv.w, acc[g][3]);
            }
        }
    }
    // Every lane takes the (max, sum) of all G heads of its token slot from their holders.
    float mg[G], lg[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const int src = sub * L + head_owner<G, L>(g - g % NV);
        mg[g] = __shfl_sync(0xffffffffu, m[g % NV], src);
        lg[g] = __shfl_sync(0xffffffffu, l[g % NV], src);
    }
    // Merge the token slots of the warp (lanes with the same dims).
#pragma unroll
    for (int o = L; o < 32; o <<= 1) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const float mo = __shfl_xor_sync(0xffffffffu, mg[g], o);
            const float lo = __shfl_xor_sync(0xffffffffu, lg[g], o);
            const float m_new = fmaxf(mg[g], mo);
            const float c1 = rescale(mg[g], m_new), c2 = rescale(mo, m_new);
            lg[g] = fmaf(lg[g], c1, __fmul_rn(lo, c2));
#pragma unroll
            for (int i = 0; i < kVec; ++i) {
                const float ao = __shfl_xor_sync(0xffffffffu, acc[g][i], o);
                acc[g][i] = fmaf(acc[g][i], c1, __fmul_rn(ao, c2));
            }
            mg[g] = m_new;
        }
    }
    if constexpr (Pipe) cp_async_wait<0>();  // no copy may land in s_dyn once it holds the partial o
    __syncthreads();
    if (sub == 0) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
            if (dl == 0) {
                s_m[warp][g] = mg[g];
                s_l[warp][g] = lg[g];
            }
            *reinterpret_cast<float4*>(&s_acc[warp][g][dl * kVec]) = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
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
            sum = fmaf(s_l[w][g], c, sum);
            a = fmaf(s_acc[w][g][d], c, a);
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
// Grid (n_tokens, n_heads), kMergeThreads threads: groups of HD / 4 threads, 4 dims each; group j
// takes splits j, j + kGroups, ... Each thread first loads its first kMergeBatch parts and the
// (max, sum) pairs it reduces, all before the CTA's max is known (one round trip for up to
// kGroups * kMergeBatch splits: 64 at head_dim 128), then scales and adds them in split order;
// the groups' sums add in group order and the sum of sums is a fixed tree, so the result depends
// only on n_splits. (A serial walk of 64 splits per thread took 17 µs of the 7B's 4K row under
// ncu, eight loads in flight 7 µs; bench/NOTES.md, fortieth session.)
// kMergeBatch = 0: no parts loaded ahead, eight in flight (the same bits). The parts ahead pay from
// kMergeAheadMinSplits splits on (H100, sixth call of the fortieth session: 0.5B F32 at 16K, 256
// splits, 15.2 -> 12.9 µs; with 64 splits or fewer they cost up to 1 µs: 7B at 4K 11.55 -> 12.28).
// The likely cost is the footprint, not the loads: at 126 registers a thread a merge CTA takes an
// attention CTA's share of an SM, so fewer of the next layer's CTAs are resident early (staging
// the parts in 32 KB of shared memory instead lost the same way; forty-first session).
// MVLLM_ATTN_F32_MERGE_BATCH=0|1 never / always loads them ahead, for measurements.
constexpr int kMergeThreads = 128;
constexpr int32_t kMergeAheadMinSplits = 128;
template <int HD, int kMergeBatch = 16>
__global__ void __launch_bounds__(kMergeThreads)
    merge_splits_kernel(const float* part_o, const float* part_ml, int32_t n_splits, void* out, DType out_type) {
    pdl_begin();
    constexpr int kLanes = HD / kVec, kGroups = kMergeThreads / kLanes;
    static_assert(kMergeThreads % kLanes == 0, "head_dim");
    __shared__ float scratch[32];
    __shared__ __align__(16) float s_part[kGroups][HD];
    const int64_t head_row = static_cast<int64_t>(blockIdx.x) * gridDim.y + blockIdx.y;
    const int tid = threadIdx.x, grp = tid / kLanes, dl = tid % kLanes;
    const float2* ml = reinterpret_cast<const float2*>(part_ml + head_row * n_splits * 2);
    const float* po = part_o + head_row * n_splits * HD + dl * kVec;
    auto part = [&](int s) { return *reinterpret_cast<const float4*>(po + static_cast<int64_t>(s) * HD); };
    float4 first[kMergeBatch > 0 ? kMergeBatch : 1];
    float first_m[kMergeBatch > 0 ? kMergeBatch : 1];
#pragma unroll
    for (int i = 0; i < kMergeBatch; ++i) {
        const int s = grp + i * kGroups;
        first[i] = s < n_splits ? part(s) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        first_m[i] = s < n_splits ? ml[s].x : -INFINITY;
    }
    float mx = -INFINITY;
    for (int s = tid; s < n_splits; s += kMergeThreads) mx = fmaxf(mx, ml[s].x);
    mx = block_max(mx, scratch);
    float lc = 0.0f;
    for (int s = tid; s < n_splits; s += kMergeThreads) {
        const float2 x = ml[s];
        lc = fmaf(x.y, rescale(x.x, mx), lc);
    }
    const float sum = block_sum(lc, scratch);
    float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    auto add = [&](float4 p, float m) {
        const float c = rescale(m, mx);
        a.x = fmaf(p.x, c, a.x), a.y = fmaf(p.y, c, a.y), a.z = fmaf(p.z, c, a.z), a.w = fmaf(p.w, c, a.w);
    };
#pragma unroll
    for (int i = 0; i < kMergeBatch; ++i) add(first[i], first_m[i]);
#pragma unroll 8
    for (int s = grp + kMergeBatch * kGroups; s < n_splits; s += kGroups) add(part(s), ml[s].x);
    *reinterpret_cast<float4*>(&s_part[grp][dl * kVec]) = a;
    __syncthreads();
    for (int d = tid; d < HD; d += kMergeThreads) {
        float t = 0.0f;
#pragma unroll
        for (int j = 0; j < kGroups; ++j) t += s_part[j][d];
        store_any(out, out_type, head_row * HD + d, t / sum);
    }
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

template <int HD, int G>
void fused_launch(const DeviceBatch& batch, const DeviceKvLayer& kv, const TensorView& q, const TensorView& out,
                  int32_t n_heads, float scale, AttentionScratch& scratch, int32_t n_sms, cudaStream_t stream,
                  bool batch_invariant) {
    const int32_t group = n_heads / kv.n_kv_heads;
    const int32_t n_tiles = (group + G - 1) / G;
    const FusedSplit split = fused_split(batch.n_tokens, kv.n_kv_heads, n_tiles, batch.max_context, n_sms, batch_invariant,
                                         kFusedWarps * FusedShape<HD, G>::T);
    float* part_o = nullptr;
    float* part_ml = nullptr;
    if (split.n_splits > 1) split_partials(scratch, batch.n_tokens, n_heads, split.n_splits, HD, &part_o, &part_ml);
    const KvSource src{kv.k, kv.v, kv.n_kv_heads, HD, true, kv.block_size, batch.block_tables,
                       batch.seq_block_begin, nullptr};
    const dim3 grid(batch.n_tokens, kv.n_kv_heads * n_tiles, split.n_splits);
    MVLLM_CHECK(static_cast<int64_t>(kv.n_kv_heads) * kv.block_size * HD < (int64_t{1} << 31))
        << "fused attention: a KV block of " << kv.block_size << " tokens is too large";
    // The copy pipeline unless MVLLM_ATTN_F32_PIPE=0 or force_f32_pipeline(0) (A/B: the same bits).
    static const bool pipe_env = env_int("MVLLM_ATTN_F32_PIPE", 1) != 0;
    const int forced = g_forced_f32_pipeline.load();
    const bool pipe = forced >= 0 ? forced != 0 : pipe_env;
    auto* const kernel = pipe ? fused_attention_kernel<HD, G, true> : fused_attention_kernel<HD, G, false>;
    constexpr size_t kSmem = FusedShape<HD, G>::kSmemBytes;
    // Over the default 48 KB: opt in, once per instantiation; all of L1 as shared memory, so that
    // four CTAs fit an SM.
    static const bool sized = [] {
        for (auto* k : {fused_attention_kernel<HD, G, true>, fused_attention_kernel<HD, G, false>}) {
            MVLLM_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
            MVLLM_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout,
                                                  cudaSharedmemCarveoutMaxShared));
        }
        return true;
    }();
    (void)sized;
    launch_pdl(kernel, grid, kFusedWarps * 32, kSmem, stream,
        batch, src, static_cast<const float*>(q.data), n_heads, scale * kLog2e, split.split_tokens,
        split.n_splits, out.data, out.type, part_o, part_ml, (early_loads() & kEarlyAttention) != 0);
    MVLLM_CUDA_LAUNCH_CHECK();
    if (split.n_splits > 1) {
        static const int ahead_env = env_int("MVLLM_ATTN_F32_MERGE_BATCH", -1);
        const bool ahead = ahead_env >= 0 ? ahead_env != 0 : split.n_splits >= kMergeAheadMinSplits;
        launch_pdl(ahead ? merge_splits_kernel<HD, 16> : merge_splits_kernel<HD, 0>, dim3(batch.n_tokens, n_heads),
                   kMergeThreads, 0, stream, part_o, part_ml, split.n_splits, out.data, out.type);
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
        if (small_group) fused_launch<HD, 4>(batch, kv, q, out, n_heads, scale, scratch, n_sms, stream, batch_invariant);
        else fused_launch<HD, 8>(batch, kv, q, out, n_heads, scale, scratch, n_sms, stream, batch_invariant);
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
