// The split merges of the tensor-core decode kernel (attention_mma.cuh, and the merge benchmark):
// how a row's context splits, each with an unnormalised partial o and a base-2 (max, sum) per
// query head, become its normalised output, and how that output is stored (with its QX, the
// GEMV's activation format, when asked).
//
//  * cluster_merge: the splits of one thread-block cluster (up to kMaxClusterSplits consecutive
//    splits) read each other's shared memory; the result is the output, or one part.
//  * merge_parts: the last CTA of a row's parts (splits, or clusters) merges them from global
//    memory: few parts in one pass, 16-64 in registers and shuffles (merge_parts_warp), more in
//    chunks through shared memory.
// Each merge's arithmetic and order depend only on the row's count of active parts, so in a
// batch-invariant plan (fixed split positions, no clusters) a row's bits do not depend on the
// batch around it.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/attention_timeline.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/qx.cuh"

namespace mvllm::cuda::mma_decode {

constexpr int kHeadTile = 16;  // query heads per CTA (the mma's M)
constexpr int kMergeChunk = 64;  // splits per round of the split merge (their (max, sum) in shared memory)
// From this many active splits on, the split merge stages their (max, sum) pairs in shared memory
// (7B geometry on the H200: 4K tokens, 32 splits, 10.5 -> 9.9 us; 32K 28.4 -> 27.7; 0.5B 32K
// 21.8 -> 18.6); with fewer (512 tokens: 4 splits) its extra barriers cost more than the serial
// walk (6.5 -> 7.9 us).
constexpr int kChunkedMergeMinSplits = 16;
// Consecutive splits form thread-block clusters of up to this many CTAs (the portable maximum)
// that merge through distributed shared memory before (or instead of) the global merge.
constexpr int kMaxClusterSplits = 8;

__device__ __forceinline__ float exp2_or_zero(float x, float m) { return m == -INFINITY ? 0.0f : exp2f(x - m); }

// ---- the output ------------------------------------------------------------------------------------

// out[i] = v, and with qx (the GEMV's activation format, gemv.cuh) its QX value: the warp's 32
// lanes store 32 consecutive values, one QX block (head_dim % 32 == 0).
__device__ __forceinline__ void store_out(void* out, DType out_type, const QxView& qx, int64_t i, float v) {
    store_any(out, out_type, i, v);
    if (qx.hi) write_qx_block(qx, i / 32, static_cast<int>(i % 32), round_to(out_type, v));
}

// out[i .. i + N - 1] = a / sum, and with qx their QX values: 32 / N aligned lanes store a block.
template <int N>
__device__ __forceinline__ void store_out_n(void* out, DType out_type, const QxView& qx, int64_t i,
                                            const float (&a)[N], float sum) {
    float v[N];
#pragma unroll
    for (int n = 0; n < N; ++n) {
        v[n] = a[n] / sum;
        store_any(out, out_type, i + n, v[n]);
        v[n] = round_to(out_type, v[n]);
    }
    if (qx.hi) write_qx_block_n<N>(qx, i / 32, static_cast<int>(i % 32) / N + (threadIdx.x & (32 - 32 / N)), v);
}
__device__ __forceinline__ void store_out4(void* out, DType out_type, const QxView& qx, int64_t i, float4 a,
                                           float sum) {
    const float v[4] = {a.x, a.y, a.z, a.w};
    store_out_n<4>(out, out_type, qx, i, v, sum);
}

// ---- the split merges ----------------------------------------------------------------------------

// One (head, dim) item of a part's unnormalised o, and with d == 0 the head's (max, sum), in the
// global partials [head_row][n_parts][HD] and [head_row][n_parts][2].
__device__ __forceinline__ void store_part(float* part_o, float* part_ml, int64_t head_row, int32_t n_parts,
                                           int32_t part, int hd, int d, float o, float mx, float sum) {
    part_o[(head_row * n_parts + part) * hd + d] = o;
    if (d == 0) {
        part_ml[(head_row * n_parts + part) * 2] = mx;
        part_ml[(head_row * n_parts + part) * 2 + 1] = sum;
    }
}

// Every CTA of a cluster (one per split of the part, rank = split % cluster size) holds its merged
// but unnormalised o [n_g][HD] in `o_cta` and the heads' (max, sum) in s_max / s_sum. After a
// cluster barrier the CTAs merge the part's active splits, each for a slice of the (head, dim)
// items, reading the others' shared memory; a second barrier keeps every CTA's shared memory alive
// until all have read it. The result (stored as the items are merged) is the output (`final`) or
// the part's entry in the global partials. The arithmetic and its order (split by split) are those
// of the few-part global merge.
// relaxed_exit: the second barrier's arrival is relaxed (it orders nothing: the remote values it
// guards were consumed by the stores already issued), so that a CTA does not wait for its stores
// to drain before the others may leave; otherwise a full cluster.sync (arrive.release), the
// earlier form, for A/B measurements. Timeline builds mark 11 (first barrier passed), 13 (its
// item's remote values back and merged) and 12 (the items stored) in thread 0.
// shared_fence: the first barrier publishes only shared memory (the values the others read are in
// this CTA's shared memory): a release fence restricted to shared::cta and a relaxed arrival, then
// an acquire fence restricted to shared::cluster after the wait, instead of cluster.sync's release
// arrival, which also orders the CTA's earlier global stores (the new token's K/V) at cluster scope.
// This is the default (MVLLM_ATTN_CLUSTER_FENCE=0 turns it off): on an H100 the first barrier went
// from 1.36 to 0.90 us in the 0.5B's step after 128 tokens, batch-1 decode +2.5-2.9 % there and
// +1.2 % after 4K, the 7B +1.3 % after 4K (bench/NOTES.md, fifty-second session). The arithmetic
// and its order are the same either way. The others' values load through generic pointers: loads
// through 32-bit shared::cluster addresses (mapa + ld.shared::cluster) compile to the same generic
// loads and measured the same (fifty-third session).
template <int HD>
__device__ __forceinline__ void cluster_merge(const float* o_cta, const float* s_max, const float* s_sum,
                                              int32_t n_g, int32_t n_active, int64_t head_row0, bool final,
                                              void* out, DType out_type, const QxView& qx, float* part_o,
                                              float* part_ml, int32_t n_parts, int32_t part, bool relaxed_exit,
                                              bool shared_fence, Timeline& tl) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    const int32_t size = static_cast<int32_t>(cluster.num_blocks());
    const int32_t n_mine = min(size, n_active - part * size);  // this part's active splits
    if (shared_fence) {
        asm volatile("fence.release.sync_restrict::shared::cta.cluster;\n" ::: "memory");
        asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
        asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
        asm volatile("fence.acquire.sync_restrict::shared::cluster.cluster;\n" ::: "memory");
    } else {
        cluster.sync();
    }
    tl.mark(11);
    const int32_t stride = size * static_cast<int32_t>(blockDim.x);
    for (int32_t idx = static_cast<int32_t>(cluster.block_rank() * blockDim.x + threadIdx.x); idx < n_g * HD;
         idx += stride) {
        const int head = idx / HD;
        float ms[kMaxClusterSplits], ls[kMaxClusterSplits], os[kMaxClusterSplits];
#pragma unroll
        for (int s = 0; s < kMaxClusterSplits; ++s) {
            const bool on = s < n_mine;
            ms[s] = on ? *cluster.map_shared_rank(s_max + head, s) : -INFINITY;
            ls[s] = on ? *cluster.map_shared_rank(s_sum + head, s) : 0.0f;
            os[s] = on ? *cluster.map_shared_rank(o_cta + idx, s) : 0.0f;
        }
        float mx = -INFINITY;
#pragma unroll
        for (int s = 0; s < kMaxClusterSplits; ++s) mx = fmaxf(mx, ms[s]);
        float sum = 0.0f, o = 0.0f;
#pragma unroll
        for (int s = 0; s < kMaxClusterSplits; ++s) {
            if (s >= n_mine) break;
            const float c = exp2_or_zero(ms[s], mx);
            sum += ls[s] * c;
            o += os[s] * c;
        }
        tl.mark_after(13, o + sum);  // the remote values are back (timeline builds)
        if (final) store_out(out, out_type, qx, (head_row0 + head) * HD + idx % HD, o / sum);
        else store_part(part_o, part_ml, head_row0 + head, n_parts, part, HD, idx % HD, o, mx, sum);
    }
    tl.mark(12);
    if (relaxed_exit) {
        // Every remote value loaded above fed a store issued above, so its load has returned.
        asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
        asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
    } else {
        cluster.sync();  // the loads above have returned: the other CTAs may leave
    }
#endif
}

// VW consecutive floats of the partials (2 or 4: one 8- or 16-byte load, through L2; Staged: from
// their copy in shared memory).
template <int VW, bool Staged = false>
__device__ __forceinline__ void load_part_vec(const float* p, float (&v)[VW]) {
    if constexpr (VW == 4) {
        const float4 x = Staged ? *reinterpret_cast<const float4*>(p) : __ldcg(reinterpret_cast<const float4*>(p));
        v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
    } else {
        const float2 x = Staged ? *reinterpret_cast<const float2*>(p) : __ldcg(reinterpret_cast<const float2*>(p));
        v[0] = x.x, v[1] = x.y;
    }
}

// The bytes of shared memory merge_parts_warp<.., Staged = true> needs for n_g heads' n_active parts.
__host__ __device__ constexpr size_t staged_merge_bytes(int32_t n_g, int32_t n_active, int hd) {
    return static_cast<size_t>(n_g) * n_active * (hd + 2) * sizeof(float);
}
// The dynamic shared memory of the running kernel, in bytes.
__device__ __forceinline__ uint32_t dynamic_smem_bytes() {
    uint32_t n;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
    return n;
}

// The split merge of kChunkedMergeMinSplits..kMergeChunk parts, in registers and shuffles: a warp
// per head, each lane VW = HD / 32 of its dims. The lanes also hold the head's parts' (max, sum)
// pairs, lane j the parts j, j + 32 (one L2 round trip for all of them). The head's maximum and its
// merged sum are shuffle trees over the warp, each part's weight exp2(m_s - max) reaches the lanes
// by a shuffle, and the o values load a group of kGroup parts at a time (the first group before the
// reductions). No barrier and no shared memory. On the H200 (bench/NOTES.md, twentieth session):
// 7B F16 at 32K 22.3 us per layer against 23.0 with the chunked path, 0.5B 12.2 against 13.8.
// Deeper loads (32 parts in flight, weights through shared memory) were slower: 23.3 us, the final
// merge 10.6 against 5.6. (Until the twenty-first session head_dim 64 took 16 lanes of 4 dims: half
// the loads in flight per head for the same registers.) kGroup: o loads in flight per lane.
// Staged: the CTA's threads first copy every active part's o and (max, sum) into shared memory
// (`stage`, staged_merge_bytes of it) with cp.async, all in flight at once, and the warps then read
// them there: one L2 round trip for the whole merge instead of one per group of kGroup parts. The
// arithmetic and its order are the same, so are the bits. Used for one head a CTA (the spread
// merge, kSpreadMerge): one CTA staging all 7 heads' 63 parts (113 KB) took the 0.5B's final merge
// after 32K from 5.1 to 6.2 us on the H100 (bench/NOTES.md, thirty-seventh session).
template <int HD, int W, int kGroup = 8, bool Staged = false>
__device__ __forceinline__ void merge_parts_warp(const float* part_o, const float* part_ml, int32_t n_parts,
                                                 int32_t n_active_parts, int32_t n_g, int64_t head_row0,
                                                 void* out, DType out_type, const QxView& qx, float* stage = nullptr) {
    constexpr int VW = HD / 32;            // dims per lane: 4 (head_dim 128) or 2 (64)
    constexpr int kPer = kMergeChunk / 32;  // (max, sum) pairs per lane
    static_assert((VW == 2 || VW == 4) && kPer == 2 && kMergeChunk % kGroup == 0, "a warp per head, two pairs a lane");
    const int lane = threadIdx.x & 31;
    float* stage_ml = Staged ? stage + static_cast<int64_t>(n_g) * n_active_parts * HD : nullptr;  // [n_g][n_active][2]
    if constexpr (Staged) {  // stage: o [n_g][n_active][HD], then the (max, sum) pairs
        const int per_head = n_active_parts * (HD / 4);
        for (int i = threadIdx.x; i < n_g * per_head; i += W * 32)
            cp_async16(stage + i * 4, part_o + (head_row0 + i / per_head) * n_parts * HD + (i % per_head) * 4, true);
        cp_async_commit();
        // The pairs are 8-byte aligned only (cp.async copies 8 bytes through L1, which may hold stale
        // lines): loads through L2, in flight beside the copies.
        for (int i = threadIdx.x; i < n_g * n_active_parts; i += W * 32)
            *reinterpret_cast<float2*>(stage_ml + i * 2) = __ldcg(reinterpret_cast<const float2*>(
                part_ml + ((head_row0 + i / n_active_parts) * n_parts + i % n_active_parts) * 2));
        cp_async_wait<0>();
        __syncthreads();
    }
    for (int head = threadIdx.x >> 5; head < n_g; head += W) {  // whole warps (shuffles)
        const int64_t head_row = head_row0 + head;
        const float2* ml = Staged ? reinterpret_cast<const float2*>(stage_ml + head * n_active_parts * 2)
                                  : reinterpret_cast<const float2*>(part_ml + head_row * n_parts * 2);
        const float* po = (Staged ? stage + head * n_active_parts * HD : part_o + head_row * n_parts * HD) + lane * VW;
        float2 p[kPer];
#pragma unroll
        for (int r = 0; r < kPer; ++r)
            p[r] = lane + r * 32 < n_active_parts ? (Staged ? ml[lane + r * 32] : __ldcg(ml + lane + r * 32))
                                                  : make_float2(-INFINITY, 0.0f);
        float v[kGroup][VW];
#pragma unroll
        for (int t = 0; t < kGroup; ++t) {
            if (t < n_active_parts) load_part_vec<VW, Staged>(po + t * HD, v[t]);
            else
#pragma unroll
                for (int e = 0; e < VW; ++e) v[t][e] = 0.0f;
        }
        float mx = -INFINITY;
#pragma unroll
        for (int r = 0; r < kPer; ++r) mx = fmaxf(mx, p[r].x);
#pragma unroll
        for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        float c[kPer], sum = 0.0f;
#pragma unroll
        for (int r = 0; r < kPer; ++r) {
            c[r] = exp2_or_zero(p[r].x, mx);
            sum += p[r].y * c[r];
        }
#pragma unroll
        for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        float a[VW] = {};
        // Not unrolled: unrolled, the compiler hoists every group's loads (255 registers).
#pragma unroll 1
        for (int g0 = 0; g0 < n_active_parts; g0 += kGroup) {  // the same for the whole warp
            if (g0 > 0) {
#pragma unroll
                for (int t = 0; t < kGroup; ++t) {
                    if (g0 + t < n_active_parts) load_part_vec<VW, Staged>(po + (g0 + t) * HD, v[t]);
                    else
#pragma unroll
                        for (int e = 0; e < VW; ++e) v[t][e] = 0.0f;
                }
            }
#pragma unroll
            for (int t = 0; t < kGroup; ++t) {
                const int s = g0 + t;  // part s's weight is c[s / 32] of lane s % 32
                const float w = __shfl_sync(0xffffffffu, s < 32 ? c[0] : c[1], s % 32);
#pragma unroll
                for (int e = 0; e < VW; ++e) a[e] += v[t][e] * w;
            }
        }
        store_out_n<VW>(out, out_type, qx, head_row * HD + lane * VW, a, sum);
    }
}

// merge_parts_warp as a call: at head_dim 64 the 8-warp F16 kernel holds 128 registers (two CTAs
// per SM) only if the merge's registers are allocated apart from the main loop's.
template <int HD, int W, int kGroup, bool Staged = false>
__device__ __noinline__ void merge_parts_warp_call(const float* part_o, const float* part_ml, int32_t n_parts,
                                                   int32_t n_active_parts, int32_t n_g, int64_t head_row0,
                                                   void* out, DType out_type, const QxView& qx, float* stage) {
    merge_parts_warp<HD, W, kGroup, Staged>(part_o, part_ml, n_parts, n_active_parts, n_g, head_row0, out, out_type,
                                            qx, stage);
}

// The last CTA of a row's active parts merges them (`part_o` [head_row][n_parts][HD], `part_ml`
// [head_row][n_parts][2]) into the output, for the n_g heads from head_row0 on; `smem` is free
// scratch of at least 2 * kHeadTile * kMergeChunk floats; s_max / s_sum are [kHeadTile].
// The path: kMergeChunked (the chunked path for 16-64 parts, A/B measurements only), kMergeGroup8
// (the warp merge with 8 o loads in flight above 16 parts, A/B only), else the default.
constexpr int kMergeWarp = 0, kMergeChunked = 1, kMergeGroup8 = 2;
template <int HD, int W>
__device__ __forceinline__ void merge_parts(const float* part_o, const float* part_ml, int32_t n_parts,
                                            int32_t n_active_parts, int32_t n_g, int64_t head_row0, float* smem,
                                            float* s_max, float* s_sum, void* out, DType out_type, const QxView& qx,
                                            int path) {
    // The warp merge in the kernels that take many splits: eight warps (four are for batches whose
    // rows fill the SMs), head_dim 64 or 128 (its registers would cost the smaller head dims, kept
    // for tests, and the four-warp head_dim 64 kernel a CTA per SM). Above 16 parts the o values
    // load 16 parts at a time: the merge alone (`bench attention --merge`, twenty-first session)
    // took 2.1 against 3.8 us for 63 parts at head_dim 64 and 2.2 against 2.5 for 33 at 128, but
    // 1.3 against 1.1 for 16 parts at 128.
    if constexpr (W == 8 && HD >= 64) {
        if (n_active_parts >= kChunkedMergeMinSplits && n_active_parts <= kMergeChunk && path != kMergeChunked) {
            const bool deep = n_active_parts > kChunkedMergeMinSplits && path != kMergeGroup8;
            if constexpr (HD == 64) {
                if (deep) merge_parts_warp_call<HD, W, 16>(part_o, part_ml, n_parts, n_active_parts, n_g, head_row0, out, out_type, qx, nullptr);
                else merge_parts_warp_call<HD, W, 8>(part_o, part_ml, n_parts, n_active_parts, n_g, head_row0, out, out_type, qx, nullptr);
            } else {
                if (deep) merge_parts_warp<HD, W, 16>(part_o, part_ml, n_parts, n_active_parts, n_g, head_row0, out, out_type, qx);
                else merge_parts_warp<HD, W, 8>(part_o, part_ml, n_parts, n_active_parts, n_g, head_row0, out, out_type, qx);
            }
            return;
        }
    }
    if (n_active_parts < kChunkedMergeMinSplits) {
        // Few splits: each thread merges them for its (head, 4 dims). All the splits' (max, sum)
        // pairs and o values are loaded at once (unrolled to the fixed bound, predicated on
        // n_active_parts), so the merge costs one L2 round trip, not one per split; the arithmetic is
        // then a walk over the splits in order.
        constexpr int kMax = kChunkedMergeMinSplits;
        for (int idx = threadIdx.x; idx < n_g * (HD / 4); idx += blockDim.x) {
            const int head = idx / (HD / 4), d4 = idx % (HD / 4);
            const int64_t head_row = head_row0 + head;
            const float2* ml = reinterpret_cast<const float2*>(part_ml + head_row * n_parts * 2);
            const float4* po = reinterpret_cast<const float4*>(part_o + head_row * n_parts * HD) + d4;
            float2 ms[kMax];
            float4 v[kMax];
#pragma unroll
            for (int s = 0; s < kMax; ++s) {
                ms[s] = s < n_active_parts ? __ldcg(ml + s) : make_float2(-INFINITY, 0.0f);
                v[s] = s < n_active_parts ? __ldcg(po + s * (HD / 4)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
            float mx = -INFINITY;
#pragma unroll
            for (int s = 0; s < kMax; ++s) mx = fmaxf(mx, ms[s].x);
            float sum = 0.0f;
            float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int s = 0; s < kMax; ++s) {
                if (s >= n_active_parts) break;
                const float c = exp2_or_zero(ms[s].x, mx);
                sum += ms[s].y * c;
                a.x += v[s].x * c;
                a.y += v[s].y * c;
                a.z += v[s].z * c;
                a.w += v[s].w * c;
            }
            store_out4(out, out_type, qx, head_row * HD + d4 * 4, a, sum);
        }
    } else {
        // The row's active splits, merged: per head the maximum of the splits' maxima, then each
        // split's weight exp2(m_s - max), the weighted sum of the splits' sums and of their o, all in
        // split order. The (max, sum) pairs pass through shared memory a chunk of splits at a time,
        // loaded by all threads at once; walked one split after another they cost an L2 round trip
        // per split. The shared memory of the pipeline is free again.
        constexpr int kItems = (kHeadTile * (HD / 4) + W * 32 - 1) / (W * 32);  // (head, 4 dims) per thread
        float* s_c = smem;  // [kHeadTile][kMergeChunk]: m_s, then the weights
        float* s_l = s_c + kHeadTile * kMergeChunk;  // [kHeadTile][kMergeChunk]: the splits' sums
        {
            float mx = -INFINITY;  // threads < n_g: the maximum of head threadIdx.x
            for (int c0 = 0; c0 < n_active_parts; c0 += kMergeChunk) {
                const int nc = min(kMergeChunk, n_active_parts - c0);
                for (int i = threadIdx.x; i < n_g * nc; i += blockDim.x) {
                    const int h = i / nc, j = i % nc;
                    s_c[h * kMergeChunk + j] = __ldcg(part_ml + ((head_row0 + h) * n_parts + c0 + j) * 2);
                }
                __syncthreads();
                if (threadIdx.x < n_g)
                    for (int j = 0; j < nc; ++j) mx = fmaxf(mx, s_c[threadIdx.x * kMergeChunk + j]);
                __syncthreads();
            }
            if (threadIdx.x < n_g) s_max[threadIdx.x] = mx;
        }
        __syncthreads();
        float sum = 0.0f;  // threads < n_g: the merged sum of head threadIdx.x
        float4 a[kItems];
#pragma unroll
        for (int k = 0; k < kItems; ++k) a[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int c0 = 0; c0 < n_active_parts; c0 += kMergeChunk) {
            const int nc = min(kMergeChunk, n_active_parts - c0);
            for (int i = threadIdx.x; i < n_g * nc; i += blockDim.x) {
                const int h = i / nc, j = i % nc;
                const float2 ml = __ldcg(reinterpret_cast<const float2*>(part_ml + ((head_row0 + h) * n_parts + c0 + j) * 2));
                s_c[h * kMergeChunk + j] = exp2_or_zero(ml.x, s_max[h]);
                s_l[h * kMergeChunk + j] = ml.y;
            }
            __syncthreads();
            if (threadIdx.x < n_g)
                for (int j = 0; j < nc; ++j) sum += s_l[threadIdx.x * kMergeChunk + j] * s_c[threadIdx.x * kMergeChunk + j];
#pragma unroll
            for (int k = 0; k < kItems; ++k) {
                const int idx = threadIdx.x + k * W * 32;
                if (idx >= n_g * (HD / 4)) break;
                const int head = idx / (HD / 4), d4 = idx % (HD / 4);
                const float4* src = reinterpret_cast<const float4*>(part_o + ((head_row0 + head) * n_parts + c0) * HD) + d4;
                const float* c = s_c + head * kMergeChunk;
#pragma unroll 8
                for (int j = 0; j < nc; ++j) {
                    const float4 v = __ldcg(src + j * (HD / 4));
                    a[k].x += v.x * c[j];
                    a[k].y += v.y * c[j];
                    a[k].z += v.z * c[j];
                    a[k].w += v.w * c[j];
                }
            }
            __syncthreads();
        }
        if (threadIdx.x < n_g) s_sum[threadIdx.x] = sum;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < kItems; ++k) {
            const int idx = threadIdx.x + k * W * 32;
            if (idx >= n_g * (HD / 4)) break;
            const int head = idx / (HD / 4), d4 = idx % (HD / 4);
            store_out4(out, out_type, qx, (head_row0 + head) * HD + d4 * 4, a[k], s_sum[head]);
        }
    }
}

}  // namespace mvllm::cuda::mma_decode
