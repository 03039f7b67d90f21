// The fused paged flash-decoding kernel on tensor cores, for F16 and BF16 KV caches (included by
// attention.cu only). One CTA per (query row, KV head, tile of up to 16 query heads, context split);
// its warps stream disjoint 16-token tiles of K and V from the paged cache into shared memory with
// cp.async (a per-warp pipeline of kStages tiles), so the KV head is read once for all the query
// heads of its group, and each warp computes
//     S = Q K^T   (mma m16n8k16: A = the 16 query heads x 16 dims, B = K^T from ldmatrix),
//     online softmax of S in base 2 in the accumulator registers,
//     O += P V    (A = P straight from S's accumulator layout, B = V from ldmatrix.trans).
// Warps merge through shared memory; with several splits the last CTA of a (row, head tile) to
// finish merges the splits' partial (o, max, sum) itself, so a step needs a single launch.
//
// Precision: K and V are used exactly as stored. Q and P are rounded to the KV type for the
// tensor cores; for BF16 (8-bit mantissa) each is split into a high and a low BF16 part and both
// are multiplied, which keeps them to ~16 bits (F16 keeps 11 bits with a single part).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <type_traits>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/attention_merge.cuh"
#include "backend/cuda/attention_timeline.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kv_tensor_maps.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/rope.cuh"

namespace mvllm::cuda::mma_decode {

constexpr int kWarps = 8;     // warps per CTA by default (the kernel's W; 4 also built)
constexpr int kTile = 16;    // context tokens per warp step
constexpr int kStages = 3;   // tiles in flight per warp

// Tma: the tiles arrive by tensor copies, whose 128-byte swizzle wants the pipeline aligned to
// 1024 bytes (the slack is what aligning the dynamic shared memory's start may skip).
constexpr size_t kTmaAlign = 1024;
template <int HD, typename KT, int W = kWarps, bool Tma = false>
constexpr size_t shared_bytes() {
    const size_t pipeline = static_cast<size_t>(W) * kStages * 2 * kTile * HD * sizeof(KT) + (Tma ? kTmaAlign : 0);
    // The warps' partial o and (max, sum), then the CTA's merged o for the cluster merge.
    const size_t merge = (static_cast<size_t>(W) * kHeadTile * (HD + 2) + kHeadTile * HD) * sizeof(float);
    return pipeline > merge ? pipeline : merge;
}
static_assert(kKvMapRows == kTile, "a tensor-copy box is one tile of tokens (kv_tensor_maps.h)");
static_assert(2 * kHeadTile * kMergeChunk * sizeof(float) <= shared_bytes<16, __half, 4>(),
              "the split merge's chunk fits the smallest kernel's shared memory");

// Two floats as a packed pair of the KV type; `lo` receives what the rounding lost (BF16 only).
template <typename KT>
struct Pack;
template <>
struct Pack<__half> {
    static constexpr bool kSplit = false;
    static __device__ __forceinline__ uint32_t hi(float a, float b, float (&rest)[2]) {
        const __half2 h = __floats2half2_rn(a, b);
        rest[0] = rest[1] = 0.0f;
        return *reinterpret_cast<const uint32_t*>(&h);
    }
};
template <>
struct Pack<__nv_bfloat16> {
    static constexpr bool kSplit = true;
    static __device__ __forceinline__ uint32_t hi(float a, float b, float (&rest)[2]) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        const float2 back = __bfloat1622float2(h);
        rest[0] = a - back.x;
        rest[1] = b - back.y;
        return *reinterpret_cast<const uint32_t*>(&h);
    }
};
template <typename KT>
__device__ __forceinline__ uint32_t pack_lo(const float (&rest)[2]) {
    float unused[2];
    return Pack<KT>::hi(rest[0], rest[1], unused);
}

// ---- shared-memory tiles ----------------------------------------------------------------------------

// A tile is [kTile tokens][HD] of the KV type; its 16-byte chunks are XOR-swizzled by row so that
// the eight rows an ldmatrix reads fall in different banks.
// With Tma the tile is the copy engine's layout instead: [HD / 64][kTile rows][64 values], each
// 128-byte row's 16-byte chunks swizzled by row % 8 (for HD = 64 the same as above).
template <int HD, bool Tma = false>
__device__ __forceinline__ int tile_offset(int row, int chunk) {
    if constexpr (Tma) {
        static_assert(tma_head_dim(HD), "tensor-copy tiles");
        return (chunk >> 3) * (kTile * 64) + row * 64 + (((chunk & 7) ^ (row & 7)) << 3);
    } else {
        constexpr int kChunks = HD / 8;
        constexpr int kMask = (kChunks < 8 ? kChunks : 8) - 1;
        return row * HD + ((chunk ^ (row & kMask)) << 3);
    }
}

// Where the tokens of one (sequence, KV head) sit in the paged cache, fixed for a CTA: token t is
// row ((table[t / block_size] * n_kv + kv_head) * block_size + t % block_size) of head_dim values.
// The block index is a shift when block_size is a power of two, and a tile of kTile tokens
// (starting at a multiple of kTile) lies in one block when block_size is a multiple of kTile: one
// table lookup per tile instead of one per token (the common case: 16-token blocks).
struct PagedRows {
    const int32_t* table;
    int32_t block_size, shift;  // shift: log2(block_size), or -1
    int32_t n_kv, kv_head;
    bool tile_in_block;

    __device__ PagedRows(const int32_t* table_, int32_t block_size_, int32_t n_kv_, int32_t kv_head_)
        : table(table_), block_size(block_size_), n_kv(n_kv_), kv_head(kv_head_) {
        shift = (block_size & (block_size - 1)) == 0 ? __ffs(block_size) - 1 : -1;
        tile_in_block = block_size % kTile == 0;
    }
    __device__ __forceinline__ int64_t row(int32_t t) const {
        const int32_t b = shift >= 0 ? t >> shift : t / block_size;
        return (static_cast<int64_t>(table[b]) * n_kv + kv_head) * block_size + (t - b * block_size);
    }
};

// Starts the copy of tokens [t0, t0 + kTile) (t0 < t_end, a multiple of kTile) into a K and a V
// tile; tokens at or past t_end are zero-filled (their scores are masked; zero V keeps 0 * V finite).
template <int HD, typename KT>
__device__ __forceinline__ void load_tile(KT* sk, KT* sv, const KT* kc, const KT* vc, const PagedRows& rows,
                                          int32_t t0, int32_t t_end, int lane) {
    constexpr int kChunks = HD / 8;
    constexpr int kPerLane = kTile * kChunks / 32;
    static_assert(kPerLane >= 1 && (kTile * kChunks) % 32 == 0, "tile shape");
    const int64_t row0 = rows.tile_in_block ? rows.row(t0) : 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
        const int i = lane + 32 * j;
        const int row = i / kChunks, chunk = i % kChunks;
        const int32_t t = t0 + row;
        const bool valid = t < t_end;
        int64_t off = 0;
        if (valid) off = (rows.tile_in_block ? row0 + row : rows.row(t)) * HD + chunk * 8;
        const int s = tile_offset<HD>(row, chunk);
        cp_async16(sk + s, kc + off, valid);
        cp_async16(sv + s, vc + off, valid);
    }
}

// Tma: lane 0 starts the tensor copies of tokens [t0, t0 + kTile) (one block's rows: the caller
// checked rows.tile_in_block) into a K and a V tile, completing on bar. Rows past the context are
// copied as the cache holds them: their K scores are masked, and the caller zeroes their V.
template <int HD, typename KT>
__device__ __forceinline__ void load_tile_tma(KT* sk, KT* sv, const KvTensorMaps& maps, const PagedRows& rows,
                                              int32_t t0, uint64_t* bar, int lane) {
    if (lane != 0) return;
    const int32_t row0 = static_cast<int32_t>(rows.row(t0));
    mbar_arrive_expect_tx(bar, 2 * kTile * HD * sizeof(KT));
#pragma unroll
    for (int h = 0; h < HD / 64; ++h) {
        tma_load_2d(sk + h * kTile * 64, &maps.k, h * 64, row0, bar);
        tma_load_2d(sv + h * kTile * 64, &maps.v, h * 64, row0, bar);
    }
}

// Tma: zeroes the V rows of a tile from `first` on (tokens past the context), so that their zero
// probabilities multiply zeros, whatever the cache held there.
template <int HD, typename KT>
__device__ __forceinline__ void zero_v_rows(KT* sv, int first, int lane) {
    constexpr int kChunks = HD / 8;
    for (int i = first * kChunks + lane; i < kTile * kChunks; i += 32)
        *reinterpret_cast<uint4*>(sv + tile_offset<HD, true>(i / kChunks, i % kChunks)) = make_uint4(0, 0, 0, 0);
}

// The L2 lines of load_tile's K and V tiles (one prefetch per 128-byte line).
template <int HD, typename KT>
__device__ __forceinline__ void prefetch_tile(const KT* kc, const KT* vc, const PagedRows& rows, int32_t t0,
                                              int32_t t_end, int lane) {
    constexpr int kChunks = HD / 8;                       // 16-byte chunks per token row
    constexpr int kLine = 128 / (8 * sizeof(KT));         // chunks per 128-byte line
    if (t0 >= t_end) return;
    const int64_t row0 = rows.tile_in_block ? rows.row(t0) : 0;
    for (int i = lane; i < kTile * kChunks; i += 32) {
        const int row = i / kChunks, chunk = i % kChunks;
        const int32_t t = t0 + row;
        if (t >= t_end || chunk % kLine != 0) continue;
        const int64_t off = (rows.tile_in_block ? row0 + row : rows.row(t)) * HD + chunk * 8;
        prefetch_l2(kc + off);
        prefetch_l2(vc + off);
    }
}

// ---- RoPE and the new token's K/V folded in (RawQkv) -----------------------------------------------

// Dims (i, i + 1) and (i + half, i + half + 1) (i even) of one query head of a token, RoPE'd from
// the raw fused QKV row (rope.cuh's pairs: row 2i holds dim i, row 2i + 1 dim i + half), bias added
// first: rope_kv_store_kernel's arithmetic, so the same bits as the q it would have written. One
// float4 of the row, of the bias and of rot: the row's (cos, sin) per pair. Returns
// {dim i, dim i + 1, dim i + half, dim i + half + 1}.
__device__ __forceinline__ float4 raw_q_quad(const float* head_row, const float* head_bias, const float2* rot, int i) {
    float4 x = *reinterpret_cast<const float4*>(head_row + 2 * i);
    if (head_bias) {
        const float4 b = *reinterpret_cast<const float4*>(head_bias + 2 * i);
        x.x = x.x + b.x, x.y = x.y + b.y, x.z = x.z + b.z, x.w = x.w + b.w;
    }
    const float4 cs = *reinterpret_cast<const float4*>(rot + i);
    const float2 r0 = rope_rotate(x.x, x.y, make_float2(cs.x, cs.y)), r1 = rope_rotate(x.z, x.w, make_float2(cs.z, cs.w));
    return make_float4(r0.x, r1.x, r0.y, r1.y);
}

// The new token's K and V of one KV head, spread over a warp: lane l holds K dims (i, i + half) for
// pairs i = l + 32 j, and V dims l + 32 j. load() only issues the loads (bias added; the rotations
// too), so that their round trip overlaps Q's; rotate() applies RoPE to K when the tile is due
// (rope_kv_store_kernel's arithmetic); patch() and store() write them rounded to KT, as the cache
// holds them.
template <int HD, typename KT>
struct NewKv {
    static constexpr int kHalf = HD / 2;
    static constexpr int kPairs = (kHalf + 31) / 32, kValues = (HD + 31) / 32;
    float k[kPairs][2], v[kValues];
    float2 cs[kPairs];

    // raw_k / raw_v: the head's K and V rows of the fused QKV row; bias_k / bias_v the same of the
    // bias (null: none); rot: the row's (cos, sin) per pair.
    __device__ __forceinline__ void load(const float* raw_k, const float* raw_v, const float* bias_k,
                                         const float* bias_v, const float2* rot, int lane) {
#pragma unroll
        for (int j = 0; j < kPairs; ++j) {
            const int i = lane + 32 * j;
            if (i >= kHalf) break;
            cs[j] = rot[i];
            k[j][0] = bias_k ? raw_k[2 * i] + bias_k[2 * i] : raw_k[2 * i];
            k[j][1] = bias_k ? raw_k[2 * i + 1] + bias_k[2 * i + 1] : raw_k[2 * i + 1];
        }
#pragma unroll
        for (int j = 0; j < kValues; ++j) {
            const int d = lane + 32 * j;
            if (d >= HD) break;
            v[j] = bias_v ? raw_v[d] + bias_v[d] : raw_v[d];
        }
    }
    __device__ __forceinline__ void rotate(int lane) {
#pragma unroll
        for (int j = 0; j < kPairs; ++j) {
            const int i = lane + 32 * j;
            if (i >= kHalf) break;
            const float2 r = rope_rotate(k[j][0], k[j][1], cs[j]);
            k[j][0] = r.x;
            k[j][1] = r.y;
        }
    }
    // Writes them into row `row` of a K and a V tile (the stale cache row a copy brought in).
    template <bool Tma>
    __device__ __forceinline__ void patch(KT* sk, KT* sv, int row, int lane) const {
        auto at = [&](int d) { return tile_offset<HD, Tma>(row, d / 8) + d % 8; };
#pragma unroll
        for (int j = 0; j < kPairs; ++j) {
            const int i = lane + 32 * j;
            if (i >= kHalf) break;
            store_f(sk, at(i), k[j][0]);
            store_f(sk, at(i + kHalf), k[j][1]);
        }
#pragma unroll
        for (int j = 0; j < kValues; ++j) {
            const int d = lane + 32 * j;
            if (d >= HD) break;
            store_f(sv, at(d), v[j]);
        }
    }
    // Writes them into the cache row (head_dim values) of K and V.
    __device__ __forceinline__ void store(KT* kc_row, KT* vc_row, int lane) const {
#pragma unroll
        for (int j = 0; j < kPairs; ++j) {
            const int i = lane + 32 * j;
            if (i >= kHalf) break;
            store_f(kc_row, i, k[j][0]);
            store_f(kc_row, i + kHalf, k[j][1]);
        }
#pragma unroll
        for (int j = 0; j < kValues; ++j) {
            const int d = lane + 32 * j;
            if (d >= HD) break;
            store_f(vc_row, d, v[j]);
        }
    }
};

// ---- the kernel -----------------------------------------------------------------------------------

// Reads: q [n_tokens][n_heads][HD] f32 (RoPE applied; with raw.qk instead the raw fused QKV rows,
// RoPE'd here, and the new token's K/V, which this kernel also stores), the paged K/V of the row's sequence in
// [split * split_tokens, min(+split_tokens, positions[row] + 1)). Writes: out (normalised) — directly
// when n_splits == 1, else merged by parts: with cluster > 1 the CTAs of a cluster (`cluster`
// consecutive splits) merge through their shared memory (cluster_merge), which gives the output when
// the cluster holds every split; otherwise each part (a split, or a cluster's merge) goes to part_o /
// part_ml (unnormalised o and base-2 (max, sum)) and the last CTA to count itself in the split
// counter of the (row, head tile) merges the parts and resets the counter to 0. With `rows`, CTA x
// takes batch row rows[x] (the short sequences' rows when the prefill kernel takes the chunks), else
// row x. Launch: grid (rows ? their count : n_tokens, n_kv_heads * n_head_tiles, n_splits), clusters
// of (1, 1, cluster) CTAs (n_splits a multiple of cluster <= kMaxClusterSplits), W * 32 threads,
// shared_bytes<HD, KT, W, Tma>() of dynamic shared memory. Tma: the K/V tiles come by tensor copies
// (maps; block_size a multiple of kTile), else by cp.async (kc, vc). flags: kEarlyTiles (start
// the first tiles' copies before the PDL wait), kChunkedMerge (the chunked split merge for 16-64
// parts, for A/B measurements; otherwise merge_parts_warp; kMergeGroup8Flag: its 8-part groups above
// 16 parts, A/B only), kScFence (the split count's earlier fences, A/B only), kRowSplits (each row spreads its own
// context over the n_splits splits, whole tiles, at least one per warp and at most split_tokens;
// otherwise splits of split_tokens at fixed positions, as batch invariance needs). A graph is
// recorded with the plan of its context bucket (up to twice the context): with fixed splits a
// row in the bucket's lower half leaves half of them idle.
// kTriggerAfterQ / kTriggerAfterTiles / kTriggerAfterMerge: the CTA lets the next kernel launch
// only once its Q fragments are built / its tiles are done / its warps are merged, instead of on
// entry, so that the later kernels' early weight loads do not compete with this kernel's first
// loads after the wait. The host picks one (decode_trigger_mode: after Q up to kGemvMaxColumns
// rows, after the merge for split-merge plans of one CTA an SM that a matmul follows); kTriggerAfterTiles and
// kTriggerAtExit (no trigger: the next kernel launches as the CTAs exit) are for measurements.
// kClusterFullExit: the cluster merge leaves through a full cluster.sync instead of a relaxed
// arrival (cluster_merge; the earlier form, for A/B measurements).
// kClusterSharedFence: cluster_merge's shared_fence.
// kPrefetchQ: before the PDL wait, warp 0 asks L2 for the lines Q's loads after the wait read and
// the previous kernel does not write (raw: the Q heads' bias and the row's rotations, and in the
// CTA holding the new token its K/V bias; else q itself), so that they are not HBM misses queued
// behind the early tile loads (an L2 prefetch returns no data, so it cannot be stale).
// kSpreadMerge: a split merge of 16-64 parts is shared by the row's last n_g CTAs to count
// themselves in, a head each, its parts staged in shared memory (merge_parts_warp's Staged form);
// the host sets it only where the launch's CTAs fit one wave, as the merging CTAs wait there for
// the others to count in, and (spread_merge) where the kernel keeps two CTAs an SM.
constexpr int kEarlyTiles = 1, kChunkedMerge = 2, kRowSplits = 4, kScFence = 8, kMergeGroup8Flag = 16,
              kTriggerAfterQ = 32, kTriggerAfterTiles = 64, kTriggerAfterMerge = 128, kSpreadMerge = 256,
              kPrefetchQ = 512, kTriggerAtExit = 1024, kClusterFullExit = 2048, kClusterSharedFence = 4096;
// Q is read once per CTA, each thread a float4 of each input in turn, into shared memory, and every
// warp builds its fragments from there: eight warps each loading every fragment value themselves
// (8 head rows a load instruction) took 2.5-3 us after the wait where its lines were in L2 (bench/
// NOTES.md, thirty-ninth session).
constexpr int kQPad = 8;  // floats after each head's row in shared memory: conflict-free fragment reads

// The decode kernel's CTAs an SM that the compiler must leave registers for: two for the 8-warp
// F16 kernel at head_dim <= 64 (the 0.5B's: 128 registers, its shared memory fits two; the split
// plans and the spread-merge rule count on its 264 slots), else 8 / W (one at 8 warps).
template <int HD, typename KT, int W>
constexpr int kMinCtasPerSm = (HD <= 64 && W == 8 && std::is_same_v<KT, __half>) ? 2 : 8 / W;

// atomicAdd with acquire-release semantics at GPU scope.
__device__ __forceinline__ int32_t atomic_add_acq_rel(int32_t* p, int32_t v) {
    int32_t old;
    asm volatile("atom.add.acq_rel.gpu.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}
// A load with acquire semantics at GPU scope.
__device__ __forceinline__ int32_t load_acquire(const int32_t* p) {
    int32_t v;
    asm volatile("ld.acquire.gpu.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
template <int HD, typename KT, int W, bool Tma>
__global__ void __launch_bounds__(W * 32, kMinCtasPerSm<HD, KT, W>)
    decode_kernel(DeviceBatch batch, const KT* kc, const KT* vc, int32_t n_kv,
                  const float* q, int32_t n_heads, float scale_log2, int32_t split_tokens,
                  int32_t n_splits, void* out, DType out_type, float* part_o, float* part_ml, int32_t* counters,
                  const int32_t* rows, int flags, int cluster, QxView qx, const __grid_constant__ KvTensorMaps maps,
                  RawQkv raw) {
    if (!(flags & (kTriggerAfterQ | kTriggerAfterTiles | kTriggerAfterMerge | kTriggerAtExit))) pdl_trigger();
    Timeline tl;
    tl.mark(0);
    static_assert(HD % 16 == 0, "head_dim must be a multiple of 16");
    constexpr int kK = HD / 16;   // k-steps of Q K^T
    constexpr int kN = HD / 8;    // n-tiles of P V
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ int s_slice;
    __shared__ __align__(16) float s_q[kHeadTile * (HD + kQPad)];  // the CTA's heads of Q

    const int32_t row = rows ? rows[blockIdx.x] : static_cast<int32_t>(blockIdx.x);
    const int32_t group = n_heads / n_kv;
    const int32_t n_tiles = (group + kHeadTile - 1) / kHeadTile;
    const int32_t kv_head = blockIdx.y / n_tiles;
    const int32_t head0 = kv_head * group + (blockIdx.y % n_tiles) * kHeadTile;
    const int32_t n_g = min(kHeadTile, group - (static_cast<int32_t>(blockIdx.y) % n_tiles) * kHeadTile);
    const int32_t ctx = batch.positions[row] + 1;
    if (flags & kRowSplits)
        split_tokens = min(split_tokens, max(W * kTile, (ctx + n_splits * kTile - 1) / (n_splits * kTile) * kTile));
    const int32_t t_begin = blockIdx.z * split_tokens;
    // A split past the row's context has nothing to do, unless its cluster holds an active split:
    // then it takes part in the cluster's barriers (its n_my is 0; the merge reads active splits only).
    if (t_begin >= ctx && (cluster == 1 || static_cast<int32_t>(blockIdx.z) / cluster * cluster * split_tokens >= ctx))
        return;
    const int32_t t_end = min(t_begin + split_tokens, ctx);
    const int32_t n_active = (ctx + split_tokens - 1) / split_tokens;
    const int32_t seq = batch.row_seq[row];
    const PagedRows paged(batch.block_tables + batch.seq_block_begin[seq], batch.block_size, n_kv, kv_head);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t4 = lane & 3;  // mma fragment coordinates
    uint8_t* pipe_base = smem;
    if constexpr (Tma)
        pipe_base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem) + kTmaAlign - 1) & ~(kTmaAlign - 1));
    KT* pipe = reinterpret_cast<KT*>(pipe_base) + static_cast<size_t>(warp) * kStages * 2 * kTile * HD;
    // Tma: one barrier per stage of this warp; the tile i uses stage i % kStages, whose use number
    // i / kStages is the phase to wait for.
    __shared__ uint64_t stage_bar[Tma ? W * kStages : 1];
    uint64_t* bar = stage_bar + (Tma ? warp * kStages : 0);
    if constexpr (Tma) {
        if (lane == 0)
#pragma unroll
            for (int s = 0; s < kStages; ++s) mbar_init(bar + s, 1);
        mbar_init_fence();
        __syncwarp();
    }
    const int32_t n_my = t_end > t_begin + warp * kTile ? (t_end - t_begin - warp * kTile + W * kTile - 1) /
                                                              (W * kTile)
                                                        : 0;
    auto tile_start = [&](int32_t i) { return t_begin + (i * W + warp) * kTile; };
    auto stage_k = [&](int32_t i) { return pipe + (i % kStages) * 2 * kTile * HD; };
    auto issue = [&](int32_t i) {  // starts tile i's copies
        if constexpr (Tma)
            load_tile_tma<HD>(stage_k(i), stage_k(i) + kTile * HD, maps, paged, tile_start(i), bar + i % kStages, lane);
        else
            load_tile<HD>(stage_k(i), stage_k(i) + kTile * HD, kc, vc, paged, tile_start(i), t_end, lane);
    };
    // Everything above read only the step's metadata. The K/V of tokens cached before this step
    // is no kernel's output: the warp's first tiles that lie wholly before the step's first new
    // token start their copies while the previous kernel (which writes q and the new tokens' K/V)
    // drains; the rest follow the wait. (MVLLM_EARLY_LOADS=0: L2 prefetches only.)
    // raw: q and the new token's K/V come RoPE'd from the raw QKV row, with the row's rotations
    // (raw.rot, an earlier kernel's output: read after the wait, beside q).
    const bool fold = raw.qk != nullptr;
    const float2* rot = fold ? raw.rot + static_cast<int64_t>(row) * (HD / 2) : nullptr;
    tl.mark(1);
    if ((flags & kPrefetchQ) && warp == 0) {
        const size_t q_bytes = static_cast<size_t>(n_g) * HD * sizeof(float);
        if (!fold) {
            prefetch_l2_range(q + (static_cast<int64_t>(row) * n_heads + head0) * HD, q_bytes, lane);
        } else {
            prefetch_l2_range(rot, HD / 2 * sizeof(float2), lane);
            if (raw.bias) {
                prefetch_l2_range(raw.bias + static_cast<int64_t>(head0) * HD, q_bytes, lane);
                if (t_end == ctx) {  // the new token's K/V bias
                    prefetch_l2_range(raw.bias + static_cast<int64_t>(n_heads + kv_head) * HD, HD * sizeof(float), lane);
                    prefetch_l2_range(raw.bias + static_cast<int64_t>(n_heads + n_kv + kv_head) * HD,
                                      HD * sizeof(float), lane);
                }
            }
        }
    }
    int32_t n_pre = 0;
    if (flags & kEarlyTiles) {
        // raw: the new token's row is patched in shared memory after its tile lands (the cache row
        // is stale until this kernel writes it), so every tile may start before the wait.
        const int32_t first_new = fold ? ctx : batch.seq_context_len[seq] - batch.seq_n_tokens[seq];
        for (; n_pre < kStages - 1 && n_pre < n_my && tile_start(n_pre) + kTile <= first_new; ++n_pre) {
            issue(n_pre);
            cp_async_commit();
        }
    } else {
#pragma unroll
        for (int s = 0; s < kStages - 1; ++s)
            prefetch_tile<HD>(kc, vc, paged, t_begin + (s * W + warp) * kTile, t_end, lane);
    }
    tl.mark(2);
    pdl_wait();
    tl.mark(3);
    // The first tiles not loaded before the wait (those holding the step's new tokens) start
    // before Q is read, so that their round trip and Q's overlap.
    for (int32_t s = n_pre; s < kStages - 1; ++s) {
        if (s < n_my) issue(s);
        cp_async_commit();
    }
    tl.mark(9);

    // raw: the warp whose tile holds the new token (the last of the context) takes its K/V from the
    // raw row (the loads start beside Q's) and, when that tile has landed, patches it in; the CTA of
    // the KV head's first head tile also stores it in the cache for later steps.
    const int32_t last = ctx - 1, new_tile = (last - t_begin) / kTile;
    const bool new_here = fold && t_begin <= last && t_end == ctx && new_tile % W == warp;
    NewKv<HD, KT> new_kv;
    if (new_here) {
        const int64_t k_off = static_cast<int64_t>(n_heads + kv_head) * HD, v_off = k_off + static_cast<int64_t>(n_kv) * HD;
        new_kv.load(raw.qk + row * raw.qk_width + k_off, raw.v + row * raw.v_width + static_cast<int64_t>(kv_head) * HD,
                    raw.bias ? raw.bias + k_off : nullptr,
                    raw.bias ? raw.bias + v_off : nullptr, rot, lane);
    }

    // Q as A fragments (rows = query heads, scaled to base 2); heads past n_g are zero.
    uint32_t qa[kK][4], qa_lo[Pack<KT>::kSplit ? kK : 1][4];
    float q_first = 0.0f;  // the first Q value loaded (the timeline's mark 10)
    {
        const float* q0 = fold ? raw.qk + row * raw.qk_width + static_cast<int64_t>(head0) * HD
                               : q + (static_cast<int64_t>(row) * n_heads + head0) * HD;
        const float* b0 = fold && raw.bias ? raw.bias + static_cast<int64_t>(head0) * HD : nullptr;
        // The CTA reads its n_g heads once, a float4 of each input a thread (coalesced; with the
        // fused row it adds the bias and applies RoPE here: raw_q_quad's pairs 2c and 2c + 1, dims
        // 2c, 2c + 1 and the same + HD / 2), into s_q; each warp builds its fragments from there.
        constexpr int kQuads = HD / 4;  // float4s a head
        for (int idx = threadIdx.x; idx < n_g * kQuads; idx += W * 32) {
            const int h = idx / kQuads, c = idx % kQuads;
            float* row_q = s_q + h * (HD + kQPad);
            if (fold) {
                const float* b = b0 ? b0 + h * HD : nullptr;
                const float4 r = raw_q_quad(q0 + h * HD, b, rot, 2 * c);
                *reinterpret_cast<float2*>(row_q + 2 * c) = make_float2(r.x, r.y);
                *reinterpret_cast<float2*>(row_q + 2 * c + HD / 2) = make_float2(r.z, r.w);
            } else {
                *reinterpret_cast<float4*>(row_q + 4 * c) = *reinterpret_cast<const float4*>(q0 + h * HD + 4 * c);
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kK; ++kk) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int h = g + (r & 1) * 8;
                const int d = kk * 16 + t4 * 2 + (r >> 1) * 8;
                const float2 xy = h < n_g ? *reinterpret_cast<const float2*>(s_q + h * (HD + kQPad) + d)
                                          : make_float2(0.0f, 0.0f);
                if (kk == 0 && r == 0) q_first = xy.x;
                const float x0 = xy.x * scale_log2, x1 = xy.y * scale_log2;
                float rest[2];
                qa[kk][r] = Pack<KT>::hi(x0, x1, rest);
                if constexpr (Pack<KT>::kSplit) qa_lo[kk][r] = pack_lo<KT>(rest);
            }
        }
    }

    tl.mark_after(10, q_first);
    tl.mark_after(4, __uint_as_float(qa[kK - 1][3]));
    if (flags & kTriggerAfterQ) pdl_trigger_after(__uint_as_float(qa[0][0]));
    float o[kN][4];
#pragma unroll
    for (int n = 0; n < kN; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8

    for (int32_t i = 0; i < n_my; ++i) {
        if constexpr (Tma) mbar_wait(bar + i % kStages, static_cast<uint32_t>(i / kStages) & 1);
        else cp_async_wait<kStages - 2>();
        __syncwarp();
        {
            const int32_t next = i + kStages - 1;
            if (next < n_my) issue(next);
            cp_async_commit();
        }
        KT* sk = stage_k(i);
        KT* sv = stage_k(i) + kTile * HD;
        const int32_t t0 = tile_start(i);
        if (new_here && i == new_tile / W) {
            new_kv.rotate(lane);
            new_kv.template patch<Tma>(sk, sv, last - t0, lane);
            if (blockIdx.y % n_tiles == 0) {
                const int64_t cache_row = paged.row(last) * HD;
                new_kv.store(const_cast<KT*>(kc) + cache_row, const_cast<KT*>(vc) + cache_row, lane);
            }
            __syncwarp();
        }
        if constexpr (Tma) {
            if (t0 + kTile > t_end) {
                zero_v_rows<HD>(sv, t_end - t0, lane);
                __syncwarp();
            }
        }

        // S = Q K^T: s[nt] covers tokens t0 + nt * 8 + (2 * t4, 2 * t4 + 1) for rows g, g + 8.
        float s[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
        for (int kk = 0; kk < kK; ++kk) {
            const int mi = lane >> 3;
            const int r = (mi >> 1) * 8 + (lane & 7);
            uint32_t b[4];
            ldmatrix_x4(b, sk + tile_offset<HD, Tma>(r, 2 * kk + (mi & 1)));
            mma<KT>(s[0], qa[kk], b[0], b[1]);
            mma<KT>(s[1], qa[kk], b[2], b[3]);
            if constexpr (Pack<KT>::kSplit) {
                mma<KT>(s[0], qa_lo[kk], b[0], b[1]);
                mma<KT>(s[1], qa_lo[kk], b[2], b[3]);
            }
        }
        // Mask tokens past the split's end.
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c)
                if (t0 + nt * 8 + t4 * 2 + (c & 1) >= t_end) s[nt][c] = -INFINITY;
        // Online softmax, one row pair per thread; the four threads of a quad share a row.
        float corr[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = fmaxf(fmaxf(s[0][2 * h], s[0][2 * h + 1]), fmaxf(s[1][2 * h], s[1][2 * h + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m[h], mx);
            corr[h] = exp2_or_zero(m[h], m_new);
            m[h] = m_new;
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                s[nt][2 * h] = exp2_or_zero(s[nt][2 * h], m_new);
                s[nt][2 * h + 1] = exp2_or_zero(s[nt][2 * h + 1], m_new);
            }
            l[h] = l[h] * corr[h] + s[0][2 * h] + s[0][2 * h + 1] + s[1][2 * h] + s[1][2 * h + 1];
        }
#pragma unroll
        for (int n = 0; n < kN; ++n) {
            o[n][0] *= corr[0];
            o[n][1] *= corr[0];
            o[n][2] *= corr[1];
            o[n][3] *= corr[1];
        }
        // P as an A fragment: rows g / g + 8, tokens 2 t4 (+1) and 8 + 2 t4 (+1).
        uint32_t pa[4], pa_lo[4];
        {
            float rest[4][2];
            pa[0] = Pack<KT>::hi(s[0][0], s[0][1], rest[0]);
            pa[1] = Pack<KT>::hi(s[0][2], s[0][3], rest[1]);
            pa[2] = Pack<KT>::hi(s[1][0], s[1][1], rest[2]);
            pa[3] = Pack<KT>::hi(s[1][2], s[1][3], rest[3]);
            if constexpr (Pack<KT>::kSplit) {
#pragma unroll
                for (int r = 0; r < 4; ++r) pa_lo[r] = pack_lo<KT>(rest[r]);
            }
        }
        // O += P V over pairs of 8-dim n-tiles.
#pragma unroll
        for (int n = 0; n < kN; n += 2) {
            const int mi = lane >> 3;
            const int r = (mi & 1) * 8 + (lane & 7);
            uint32_t b[4];
            ldmatrix_x4_trans(b, sv + tile_offset<HD, Tma>(r, n + (mi >> 1)));
            mma<KT>(o[n], pa, b[0], b[1]);
            mma<KT>(o[n + 1], pa, b[2], b[3]);
            if constexpr (Pack<KT>::kSplit) {
                mma<KT>(o[n], pa_lo, b[0], b[1]);
                mma<KT>(o[n + 1], pa_lo, b[2], b[3]);
            }
        }
        __syncwarp();  // every lane is done with this stage before it is refilled
    }
    cp_async_wait<0>();
    tl.mark(5);
    if (flags & kTriggerAfterTiles) pdl_trigger_after(l[0] + o[0][0]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }

    // Merge the warps through shared memory (reusing the pipeline): [warp][head][HD + 2].
    __syncthreads();
    float* mrg = reinterpret_cast<float*>(smem);
    constexpr int kRow = HD + 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int head = g + h * 8;
        if (head >= n_g) continue;
        float* dst = mrg + (warp * kHeadTile + head) * kRow;
#pragma unroll
        for (int n = 0; n < kN; ++n) *reinterpret_cast<float2*>(dst + n * 8 + t4 * 2) = make_float2(o[n][2 * h], o[n][2 * h + 1]);
        if (t4 == 0) {
            dst[HD] = m[h];
            dst[HD + 1] = l[h];
        }
    }
    __syncthreads();
    // Per head: the common maximum, each warp's weight exp2(m_w - max) and the merged sum, once.
    __shared__ float s_weight[kHeadTile][W], s_max[kHeadTile], s_sum[kHeadTile];
    if (threadIdx.x < n_g) {
        const int head = threadIdx.x;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < W; ++w) mx = fmaxf(mx, mrg[(w * kHeadTile + head) * kRow + HD]);
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < W; ++w) {
            const float* src = mrg + (w * kHeadTile + head) * kRow;
            const float c = exp2_or_zero(src[HD], mx);
            s_weight[head][w] = c;
            sum += src[HD + 1] * c;
        }
        s_max[head] = mx;
        s_sum[head] = sum;
    }
    __syncthreads();
    if (flags & kTriggerAfterMerge) pdl_trigger_after(s_sum[0]);
    // The splits merge as "parts": each split, or (cluster > 1) each cluster of `cluster`
    // consecutive splits, merged first through the cluster's shared memory.
    const int32_t n_parts = n_splits / cluster;
    const int32_t part = static_cast<int32_t>(blockIdx.z) / cluster;
    const int32_t n_active_parts = (n_active + cluster - 1) / cluster;
    const int64_t head_row0 = static_cast<int64_t>(row) * n_heads + head0;
    float* o_cta = mrg + W * kHeadTile * kRow;  // [n_g][HD]: this CTA's merged o, for the cluster merge
    for (int idx = threadIdx.x; idx < n_g * HD; idx += blockDim.x) {
        const int head = idx / HD, d = idx % HD;
        float a = 0.0f;
#pragma unroll
        for (int w = 0; w < W; ++w) a += mrg[(w * kHeadTile + head) * kRow + d] * s_weight[head][w];
        if (n_splits == 1) store_out(out, out_type, qx, (head_row0 + head) * HD + d, a / s_sum[head]);
        else if (cluster > 1) o_cta[idx] = a;
        else store_part(part_o, part_ml, head_row0 + head, n_parts, part, HD, d, a, s_max[head], s_sum[head]);
    }
    tl.mark(6);
    if (n_splits == 1) {
        tl.flush(kc);
        return;
    }
    if (cluster > 1) {
        cluster_merge<HD>(o_cta, s_max, s_sum, n_g, n_active, head_row0, n_parts == 1, out, out_type, qx, part_o,
                          part_ml, n_parts, part, (flags & kClusterFullExit) == 0, (flags & kClusterSharedFence) != 0, tl);
        if (n_parts == 1) {
            tl.mark(7);
            tl.mark(8);
            tl.flush(kc);
            return;
        }
    }

    // The last CTA of the row's active parts to get here merges them all. Thread 0 counts the CTA in
    // with one acquire-release atomic after a barrier: its release publishes the CTA's partials (the
    // barrier orders them before it) and, in the last CTA, its acquire makes every other CTA's
    // visible to the loads after the second barrier. (kScFence: every thread's __threadfence before
    // a relaxed atomic and again after it, the earlier form, for A/B measurements.)
    // kSpreadMerge (16-64 parts, a head's parts fitting the shared memory): the last n_g CTAs to
    // count in merge a head each, once the count is full (an acquire load each; every CTA of the
    // launch is resident, so the wait ends); the last of them to count out resets the counter.
    const bool sc_fence = (flags & kScFence) != 0;
    if (sc_fence) __threadfence();
    __syncthreads();
    int32_t* counter = counters + static_cast<int64_t>(row) * gridDim.y + blockIdx.y;
    const int32_t n_counted = n_active_parts * cluster;
    const bool spread = W == 8 && HD >= 64 && (flags & kSpreadMerge) && n_g > 1 &&
                        n_active_parts >= kChunkedMergeMinSplits && n_active_parts <= kMergeChunk &&
                        staged_merge_bytes(1, n_active_parts, HD) <= dynamic_smem_bytes();
    const int32_t n_mergers = spread ? n_g : 1;
    if (threadIdx.x == 0) {
        const int32_t ticket = sc_fence ? atomicAdd(counter, 1) : atomic_add_acq_rel(counter, 1);
        s_slice = ticket - (n_counted - n_mergers);  // < 0: not a merging CTA
        if (spread && s_slice >= 0)
            while (load_acquire(counter) < n_counted) {
            }
    }
    __syncthreads();
    tl.mark(7);
    if (s_slice < 0) {
        tl.flush(kc);
        return;
    }
    if (sc_fence) __threadfence();
    if constexpr (W == 8 && HD >= 64) {
        if (spread) {
            merge_parts_warp_call<HD, W, 16, true>(part_o, part_ml, n_parts, n_active_parts, 1, head_row0 + s_slice,
                                                   out, out_type, qx, reinterpret_cast<float*>(smem));
            if (threadIdx.x == 0 && atomicAdd(counter, 1) == n_counted + n_mergers - 1) *counter = 0;
            tl.mark(8);
            tl.flush(kc);
            return;
        }
    }
    merge_parts<HD, W>(part_o, part_ml, n_parts, n_active_parts, n_g, head_row0, reinterpret_cast<float*>(smem), s_max,
                       s_sum, out, out_type, qx,
                       flags & kChunkedMerge ? kMergeChunked : flags & kMergeGroup8Flag ? kMergeGroup8 : kMergeWarp);
    if (threadIdx.x == 0) *counter = 0;  // ready for the next launch
    tl.mark(8);
    tl.flush(kc);
}

}  // namespace mvllm::cuda::mma_decode
