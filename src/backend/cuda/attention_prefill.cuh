// Causal flash attention for prefill chunks over the paged cache, on tensor cores (F16 / BF16 KV;
// included by attention.cu only). The decode kernel (attention_mma.cuh) gives every query row its
// own CTAs, so a chunk of n new tokens reads its sequence's K/V n times; here the query rows of a
// sequence share each K/V tile instead.
//
// Rows: the (query token, query head) pairs of one sequence and one KV head, token-major
// (row = token * group + head), so a 64-row tile holds ~64 / group consecutive tokens with all the
// query heads of their group: grouped-query attention without repeating the KV head. One CTA of 4
// warps per (row tile, KV head, sequence), each warp 16 rows (the mma's M); the CTA walks K/V in
// 64-token tiles from position 0 to its last row's position, staged by cp.async (two stages):
//     S = Q K^T (mma m16n8k16), causal mask per row (key j <= the row's position),
//     online softmax in base 2 on the accumulators, O += P V (P straight from S's registers).
// A warp skips the tiles past all of its rows' positions. A chunk continuing a cached prefix
// attends to the prefix and to itself in the same walk. The same precision as the decode kernel:
// Q and P rounded to the KV type (BF16 as a high and a low part), F32 accumulation.
#pragma once

#include "backend/cuda/attention_mma.cuh"

namespace mvllm::cuda::mma_prefill {

using mma_decode::exp2_or_zero;
using mma_decode::Pack;
using mma_decode::pack_lo;
using mma_decode::tile_offset;

constexpr int kWarps = 4;
constexpr int kWarpRows = 16;               // rows per warp (the mma's M)
constexpr int kRows = kWarps * kWarpRows;   // rows per CTA
constexpr int kKv = 64;                     // context tokens per K/V tile
constexpr int kStages = 2;

template <int HD, typename KT>
constexpr size_t shared_bytes() {
    return static_cast<size_t>(kStages) * 2 * kKv * HD * sizeof(KT);
}

// The fewest query tokens of one sequence that fill a row tile: shorter sequences (decode rows,
// speculative verification) stay with the decode kernel, whose context splits keep SMs busy.
constexpr int32_t min_query_tokens(int32_t group) { return (kRows + group - 1) / group; }

// Starts the copy of context tokens [t0, t0 + kKv) of (table, kv_head) into a K and a V tile (all
// threads of the CTA); tokens at or past t_end are zero-filled (masked, and 0 * V stays finite).
template <int HD, typename KT>
__device__ __forceinline__ void load_kv_tile(KT* sk, KT* sv, const KT* kc, const KT* vc,
                                             const mma_decode::PagedRows& rows, int32_t t0, int32_t t_end) {
    constexpr int kChunks = HD / 8;
    constexpr int kThreads = kWarps * 32;
    static_assert((kKv * kChunks) % kThreads == 0, "tile shape");
#pragma unroll
    for (int j = 0; j < kKv * kChunks / kThreads; ++j) {
        const int i = static_cast<int>(threadIdx.x) + kThreads * j;
        const int row = i / kChunks, chunk = i % kChunks;
        const int32_t t = t0 + row;
        const bool valid = t < t_end;
        int64_t off = 0;
        if (valid) off = rows.row(t) * HD + chunk * 8;  // a shift, not a division, for power-of-two blocks
        const int s = tile_offset<HD>(row, chunk);
        cp_async16(sk + s, kc + off, valid);
        cp_async16(sv + s, vc + off, valid);
    }
}

// Reads: q [n_tokens][n_heads][HD] f32 (RoPE applied), the paged K/V of each sequence with at least
// min_tokens query rows (the K/V of the chunk itself already stored). Writes: out rows of those
// sequences, normalised. Launch: grid (ceil(max_seq_tokens * group / kRows), n_kv,
// n_multi_row_seqs), kWarps * 32 threads, shared_bytes<HD, KT>() of dynamic shared memory; z walks
// the batch's list of multi-row sequences, so the decode rows of a mixed batch cost no CTAs here.
// Tiles are taken last first (the longest K/V walks start first).
template <int HD, typename KT>
__global__ void __launch_bounds__(kWarps * 32)
    prefill_kernel(DeviceBatch batch, const KT* kc, const KT* vc, int32_t n_kv, const float* q, int32_t n_heads,
                   float scale_log2, int32_t min_tokens, void* out, DType out_type) {
    pdl_begin();
    static_assert(HD % 16 == 0, "head_dim must be a multiple of 16");
    constexpr int kK = HD / 16;   // k-steps of Q K^T
    constexpr int kN = HD / 8;    // n-tiles of P V
    constexpr int kS = kKv / 8;   // n-tiles of S
    extern __shared__ __align__(16) uint8_t smem[];

    const int32_t seq = batch.multi_row_seqs[blockIdx.z], kv_head = blockIdx.y;
    const int32_t n_q = batch.seq_n_tokens[seq];
    if (n_q < min_tokens) return;
    const int32_t group = n_heads / n_kv;
    const int32_t n_rows = n_q * group;
    const int32_t tile = static_cast<int32_t>(gridDim.x - 1 - blockIdx.x);
    if (tile * kRows >= n_rows) return;
    const int32_t first = batch.seq_token_begin[seq];
    const int32_t* table = batch.block_tables + batch.seq_block_begin[seq];
    const int32_t* positions = batch.positions + first;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t4 = lane & 3;  // mma fragment coordinates
    // This thread's two rows (g and g + 8 of the warp's 16): position and q/out row (-1: padding).
    int32_t pos[2];
    int64_t head_row[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int32_t r = tile * kRows + warp * kWarpRows + g + 8 * h;
        pos[h] = -1;
        head_row[h] = -1;
        if (r < n_rows) {
            pos[h] = positions[r / group];
            head_row[h] = static_cast<int64_t>(first + r / group) * n_heads + kv_head * group + r % group;
        }
    }
    int32_t warp_max = max(pos[0], pos[1]), warp_min = min(pos[0], pos[1]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        warp_max = max(warp_max, __shfl_xor_sync(0xffffffffu, warp_max, o));
        warp_min = min(warp_min, __shfl_xor_sync(0xffffffffu, warp_min, o));
    }
    const int32_t kv_end = positions[(min((tile + 1) * kRows, n_rows) - 1) / group] + 1;

    // Q as A fragments (scaled to base 2); padding rows are zero.
    uint32_t qa[kK][4], qa_lo[Pack<KT>::kSplit ? kK : 1][4];
#pragma unroll
    for (int kk = 0; kk < kK; ++kk) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int64_t hr = head_row[r & 1];
            const int d = kk * 16 + t4 * 2 + (r >> 1) * 8;
            const float x0 = hr >= 0 ? q[hr * HD + d] * scale_log2 : 0.0f;
            const float x1 = hr >= 0 ? q[hr * HD + d + 1] * scale_log2 : 0.0f;
            float rest[2];
            qa[kk][r] = Pack<KT>::hi(x0, x1, rest);
            if constexpr (Pack<KT>::kSplit) qa_lo[kk][r] = pack_lo<KT>(rest);
        }
    }

    float o[kN][4];
#pragma unroll
    for (int n = 0; n < kN; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    auto stage = [&](int32_t i) { return reinterpret_cast<KT*>(smem) + (i % kStages) * 2 * kKv * HD; };
    const int32_t n_tiles = (kv_end + kKv - 1) / kKv;
    const mma_decode::PagedRows rows(table, batch.block_size, n_kv, kv_head);
    load_kv_tile<HD>(stage(0), stage(0) + kKv * HD, kc, vc, rows, 0, kv_end);
    cp_async_commit();
    for (int32_t i = 0; i < n_tiles; ++i) {
        if (i + 1 < n_tiles)
            load_kv_tile<HD>(stage(i + 1), stage(i + 1) + kKv * HD, kc, vc, rows, (i + 1) * kKv, kv_end);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const int32_t j0 = i * kKv;
        if (j0 <= warp_max) {  // warp-uniform: some row of the warp sees this tile
            const KT* sk = stage(i);
            const KT* sv = sk + kKv * HD;
            const int mi = lane >> 3;
            // S = Q K^T: s[nt] covers tokens j0 + nt * 8 + (2 t4, 2 t4 + 1) for rows g, g + 8.
            float s[kS][4];
#pragma unroll
            for (int nt = 0; nt < kS; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < kK; ++kk) {
#pragma unroll
                for (int np = 0; np < kS / 2; ++np) {
                    uint32_t b[4];
                    ldmatrix_x4(b, sk + tile_offset<HD>(np * 16 + (mi >> 1) * 8 + (lane & 7), 2 * kk + (mi & 1)));
                    mma<KT>(s[2 * np], qa[kk], b[0], b[1]);
                    mma<KT>(s[2 * np + 1], qa[kk], b[2], b[3]);
                    if constexpr (Pack<KT>::kSplit) {
                        mma<KT>(s[2 * np], qa_lo[kk], b[0], b[1]);
                        mma<KT>(s[2 * np + 1], qa_lo[kk], b[2], b[3]);
                    }
                }
            }
            if (j0 + kKv - 1 > warp_min) {  // causal mask (and the zero-filled tail)
#pragma unroll
                for (int nt = 0; nt < kS; ++nt)
#pragma unroll
                    for (int c = 0; c < 4; ++c)
                        if (j0 + nt * 8 + t4 * 2 + (c & 1) > pos[c >> 1]) s[nt][c] = -INFINITY;
            }
            // Online softmax; the four threads of a quad share a row.
            float corr[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float mx = -INFINITY;
#pragma unroll
                for (int nt = 0; nt < kS; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float m_new = fmaxf(m[h], mx);
                corr[h] = exp2_or_zero(m[h], m_new);
                m[h] = m_new;
                float sum = 0.0f;
#pragma unroll
                for (int nt = 0; nt < kS; ++nt) {
                    s[nt][2 * h] = exp2_or_zero(s[nt][2 * h], m_new);
                    s[nt][2 * h + 1] = exp2_or_zero(s[nt][2 * h + 1], m_new);
                    sum += s[nt][2 * h] + s[nt][2 * h + 1];
                }
                l[h] = l[h] * corr[h] + sum;
            }
#pragma unroll
            for (int n = 0; n < kN; ++n) {
                o[n][0] *= corr[0];
                o[n][1] *= corr[0];
                o[n][2] *= corr[1];
                o[n][3] *= corr[1];
            }
            // O += P V, 16 tokens per k-step; P's A fragment comes from two S n-tiles.
#pragma unroll
            for (int kt = 0; kt < kKv / 16; ++kt) {
                uint32_t pa[4], pa_lo[4];
                float rest[4][2];
                pa[0] = Pack<KT>::hi(s[2 * kt][0], s[2 * kt][1], rest[0]);
                pa[1] = Pack<KT>::hi(s[2 * kt][2], s[2 * kt][3], rest[1]);
                pa[2] = Pack<KT>::hi(s[2 * kt + 1][0], s[2 * kt + 1][1], rest[2]);
                pa[3] = Pack<KT>::hi(s[2 * kt + 1][2], s[2 * kt + 1][3], rest[3]);
                if constexpr (Pack<KT>::kSplit) {
#pragma unroll
                    for (int r = 0; r < 4; ++r) pa_lo[r] = pack_lo<KT>(rest[r]);
                }
#pragma unroll
                for (int n = 0; n < kN; n += 2) {
                    uint32_t b[4];
                    ldmatrix_x4_trans(b, sv + tile_offset<HD>(kt * 16 + (mi & 1) * 8 + (lane & 7), n + (mi >> 1)));
                    mma<KT>(o[n], pa, b[0], b[1]);
                    mma<KT>(o[n + 1], pa, b[2], b[3]);
                    if constexpr (Pack<KT>::kSplit) {
                        mma<KT>(o[n], pa_lo, b[0], b[1]);
                        mma<KT>(o[n + 1], pa_lo, b[2], b[3]);
                    }
                }
            }
        }
        __syncthreads();  // every warp is done with this stage before it is refilled
    }
    cp_async_wait<0>();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        if (head_row[h] < 0) continue;
        const float inv = 1.0f / l[h];
#pragma unroll
        for (int n = 0; n < kN; ++n) {
            const int64_t at = head_row[h] * HD + n * 8 + t4 * 2;
            store_any(out, out_type, at, o[n][2 * h] * inv);
            store_any(out, out_type, at + 1, o[n][2 * h + 1] * inv);
        }
    }
}

}  // namespace mvllm::cuda::mma_prefill
