#include "backend/cuda/gemm_tiles.cuh"

#include <algorithm>
#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/mma_ptx.cuh"

namespace mvllm::cuda {
namespace {

constexpr int kChunkK = 128;                // values of K per pipeline stage
constexpr int kChunkBlocks = kChunkK / 32;  // Q4_0 blocks per row and stage
constexpr int kXStride = kChunkK + 16;      // halfs per staged token row: 288 B, so the 8-byte token
                                            // fragment reads of 4 rows (a half warp) hit distinct banks
constexpr int kStages = 4;                  // pipeline depth: three chunks in flight while one is multiplied
constexpr int kMTiles = 2;                  // m16 tiles (32 rows of W) per warp

// The four F16 pairs of a permuted word u = [b0, b1, b2, b3] of Q4_0 nibbles: r[0][0] = the low
// nibbles of b0 and b2, r[0][1] = those of b1 and b3, r[1][*] = the high nibbles. Each integer
// is masked into the mantissa of 1024 (0x6400): a low nibble as 1024 + q, from which 1032 is
// subtracted exactly; a high nibble in place as 1024 + 16 q, which one fused multiply-add by
// 1/16 and -72 turns into q - 8, also exactly. One rounded multiply by d then gives d * (q - 8),
// the value of the F16 weight copy.
__device__ __forceinline__ void nibble_pairs(uint32_t u, uint16_t d_bits, uint32_t (&r)[2][2]) {
    const __half2 d = __half2half2(__ushort_as_half(d_bits));
    const __half2 offset = __float2half2_rn(1032.0f), sixteenth = __float2half2_rn(0.0625f),
                  offset_hi = __float2half2_rn(-72.0f);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const uint32_t w = u >> (8 * j);
        const uint32_t lo = (w & 0x000F000Fu) | 0x64006400u, hi = (w & 0x00F000F0u) | 0x64006400u;
        const __half2 vl = __hmul2(__hsub2(*reinterpret_cast<const __half2*>(&lo), offset), d);
        const __half2 vh = __hmul2(__hfma2(*reinterpret_cast<const __half2*>(&hi), sixteenth, offset_hi), d);
        r[0][j] = *reinterpret_cast<const uint32_t*>(&vl);
        r[1][j] = *reinterpret_cast<const uint32_t*>(&vh);
    }
}

// The A-fragment registers of one row of one Q4_0 block, for the two k16 steps of the block.
// body: the block's 16 bytes (byte j: value j in the low nibble, value j + 16 in the high one);
// lane quad index q = lane % 4 needs values {2q, 2q+1, 2q+8, 2q+9} (step 0) and the same + 16
// (step 1), i.e. bytes 2q, 2q+1, 2q+8, 2q+9: two selects and one byte permute put them in the
// order [2q, 2q+8, 2q+1, 2q+9] for nibble_pairs. r[s][0]: values {2q, 2q+1} of step s; r[s][1]:
// {2q+8, 2q+9}. The wgmma path uses it: there the tokens are read in K's own order.
__device__ __forceinline__ void q4_0_fragment(const uint4& body, uint16_t d_bits, int quad, uint32_t (&r)[2][2]) {
    const uint32_t lo = (quad & 2) ? body.y : body.x;  // bytes 4 (q / 2) .. + 3
    const uint32_t hi = (quad & 2) ? body.w : body.z;  // the same + 8
    const uint32_t u = __byte_perm(lo, hi, (quad & 1) ? 0x7362 : 0x5140);
    nibble_pairs(u, d_bits, r);
}

// The same for the mma.sync path, with the block's 32 values of K taken in another order. A dot
// product does not depend on the order of K, as long as the tokens follow the same order, so
// logical k {2q, 2q+1 | 2q+8, 2q+9} of step 0 are the block's values {4q, 4q+1 | 4q+2, 4q+3}, and
// step 1 the same + 16: the low and high nibbles of the block's bytes 4q .. 4q+3. A lane then
// needs one 32-bit word of the body (no selects), one byte permute to [4q, 4q+2, 4q+1, 4q+3], and
// the token fragment is one 8-byte read of 4 consecutive values (token_fragments). The masks, the
// offset and the scaling are q4_0_fragment's, so the values are those of the F16 copy.
__device__ __forceinline__ void q4_0_fragment_kperm(uint32_t word, uint16_t d_bits, uint32_t (&r)[2][2]) {
    const uint32_t u = __byte_perm(word, 0, 0x3120);
    nibble_pairs(u, d_bits, r);
}

// c += a * b for one m16n8k16 tile (F16 in, F32 accumulators). Not volatile, unlike mma_ptx.cuh's:
// the compiler may interleave independent MMAs with the dequantisation and the loads.
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- wgmma (sm_90a): a warpgroup's m64n64k16 with A from registers, B from shared memory ----
// Built only for sm_90a (the arch-specific Hopper target, CMAKE_CUDA_ARCHITECTURES=90a): there
// the wgmma tile shapes exist; other builds have only the mma.sync ones (gemm_tiles_variants()).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MVLLM_WGMMA 1
#endif
// Writes 1 when the code the device runs has the wgmma instructions (an sm_90a build).
__global__ void wgmma_probe_kernel(int* out) {
#ifdef MVLLM_WGMMA
    *out = 1;
#else
    *out = 0;
#endif
}

// The B descriptor of a K-major tile without swizzle: core matrices of 8 rows (tokens) x 16 bytes
// (8 values of K), 128 contiguous bytes each; lbo: bytes between the two core matrices of a k16
// step along K; sbo: bytes between successive groups of 8 tokens.
__device__ __forceinline__ uint64_t wgmma_desc(const void* p, uint32_t lbo, uint32_t sbo) {
    return static_cast<uint64_t>((smem_addr(p) & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
           (static_cast<uint64_t>(sbo >> 4) << 32);
}
__device__ __forceinline__ void wgmma_fence() {
#ifdef MVLLM_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifdef MVLLM_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#ifdef MVLLM_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Shared-memory writes of the generic proxy (cp.async) made visible to wgmma's reads.
__device__ __forceinline__ void fence_proxy_async() {
#ifdef MVLLM_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// d (this warp's 16 rows x 64 tokens of the warpgroup's 64 x 64 tile, the mma.sync C layout per
// n8 tile) += A (this warp's 16 rows x 16 of K, the mma.sync A layout) * B (16 x 64 at desc).
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {
#ifdef MVLLM_WGMMA
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
#else
    (void)d, (void)a, (void)desc;
#endif
}

// The CTA tile: RowWarps x KWarps warps. Warp (rw, kw) owns kMTiles m16 tiles of W rows (rows
// 32 rw .. 32 rw + 31 of the CTA's) and, of every chunk, the blocks b with b % KWarps == kw; all
// warps take all NTiles n8 tiles of tokens, so each token fragment read from shared memory feeds
// 2 kMTiles MMAs. The KWarps partial sums of a row meet in shared memory at the end.
// Wgmma: the warps multiply as warpgroups (wgmma m64n64k16, tokens straight from shared memory,
// no ldmatrix) instead of one mma.sync per m16n8 tile; KWarps 1 and 64 tokens only.
template <int RowWarps, int KWarps, int NTiles, int MinCtas, bool Wgmma = false>
struct Tile {
    static constexpr int kRowWarps = RowWarps, kKWarps = KWarps, kNTiles = NTiles, kMinCtas = MinCtas;
    static constexpr bool kWgmma = Wgmma;
    static_assert(!Wgmma || (KWarps == 1 && NTiles == 8 && RowWarps % 4 == 0), "wgmma tile shape");
    static constexpr int kWarps = RowWarps * KWarps;
    static constexpr int kRows = 16 * kMTiles * RowWarps;
    static constexpr int kTokens = 8 * NTiles;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kAccPerLane = kMTiles * NTiles * 4;
};

// Shared memory of one pipeline stage: the token tile, the weight bodies and their scales.
template <class Sh>
struct Stage {
    __half x[Sh::kTokens][kXStride];
    uint8_t w[Sh::kRows][kChunkBlocks * 16];
    uint16_t d[Sh::kRows][kChunkBlocks];
};

// Where block b of a staged row lies: the 16-byte pieces of a row are XOR-swizzled by (row / 2) % 4,
// so that the 32-bit reads of 8 consecutive rows (one per lane group of the A fragments) fall in
// distinct banks (rows are 64 bytes, 16 banks).
__device__ __forceinline__ int w_piece(int row, int b) { return (b ^ ((row >> 1) & 3)) * 16; }

// The A fragments of block b of a stage for the MT m16 tiles of row warp rw: a[mt][ks] holds rows
// g and g + 8 of m tile mt (rows (rw MT + mt) 16 + g of the CTA) for k 0-15 (ks 0) and 16-31 of
// the block, in the mma.sync A order (also wgmma's per-warp A order). KPerm: the block's K order of
// q4_0_fragment_kperm (the tokens must be read by token_fragments), else K's own order.
template <int MT, bool KPerm, class St>
__device__ __forceinline__ void a_fragments(const St& s, int rw, int b, int g, int quad, uint32_t (&a)[MT][2][4]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int r0 = (rw * MT + mt) * 16 + g;
        uint32_t lo[2][2], hi[2][2];  // rows g and g + 8 of the m tile
        if constexpr (KPerm) {
            q4_0_fragment_kperm(*reinterpret_cast<const uint32_t*>(&s.w[r0][w_piece(r0, b) + 4 * quad]), s.d[r0][b], lo);
            q4_0_fragment_kperm(*reinterpret_cast<const uint32_t*>(&s.w[r0 + 8][w_piece(r0 + 8, b) + 4 * quad]),
                                s.d[r0 + 8][b], hi);
        } else {
            q4_0_fragment(*reinterpret_cast<const uint4*>(&s.w[r0][w_piece(r0, b)]), s.d[r0][b], quad, lo);
            q4_0_fragment(*reinterpret_cast<const uint4*>(&s.w[r0 + 8][w_piece(r0 + 8, b)]), s.d[r0 + 8][b], quad, hi);
        }
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
            a[mt][ks][0] = lo[ks][0];
            a[mt][ks][1] = hi[ks][0];
            a[mt][ks][2] = lo[ks][1];
            a[mt][ks][3] = hi[ks][1];
        }
    }
}

// The token fragments of block b of a stage for n8 tile n, in the K order of q4_0_fragment_kperm:
// f[ks] = {b0, b1} of step ks, i.e. tokens 8 n + g, values 16 ks + 4 quad .. + 3 of the block.
template <class St>
__device__ __forceinline__ void token_fragments(const St& s, int n, int b, int g, int quad, uint2 (&f)[2]) {
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) f[ks] = *reinterpret_cast<const uint2*>(&s.x[n * 8 + g][b * 32 + ks * 16 + 4 * quad]);
}

// 8 bytes global -> shared (the four scales of a row's chunk); bytes past src_bytes are zero.
__device__ __forceinline__ void cp_async8(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}

// W is two matrices stacked (rows below n_out1 from w, the rest from w2: gate and up as one
// product); a single matrix is w with n_out1 = n_out. Reads: W rows blockIdx.x * kRows .. + kRows, x rows blockIdx.y * kTokens .. + kTokens, over the
// chunks of K slice blockIdx.z (chunks_per_slice each). Writes: out (the epilogue: bias, and the
// old value when accumulating) from the slice that finishes a tile last. With several slices,
// every CTA writes its partial tile to `partial`, counts itself in counters[tile], and the last
// one sums the slices in slice order (the result does not depend on which CTA came last) and
// resets the counter for the next launch. Launch: kThreads threads, kStages * sizeof(Stage)
// bytes of dynamic shared memory, counters zero. Blocks past the end of a row are staged as zeros
// (scale 0, x 0), so they add nothing; rows past n_out repeat the last row and are not written.
template <class Sh>
__global__ void __launch_bounds__(Sh::kThreads, Sh::kMinCtas)
    gemm_tiles_kernel(QuantMatrix w, QuantMatrix w2, int64_t n_out1, const __half* x, int64_t n_in, int64_t n_out, int n_tokens,
                      int64_t chunks_per_slice, const float* bias, float* out, int accumulate, float* partial,
                      unsigned* counters) {
    using St = Stage<Sh>;
    constexpr int MT = kMTiles, NT = Sh::kNTiles, KW = Sh::kKWarps;
    static_assert(kChunkBlocks % KW == 0, "a chunk's blocks are dealt evenly to the K warps");
    static_assert(kStages * sizeof(St) >= sizeof(float) * (KW - 1) * Sh::kRowWarps * 32 * Sh::kAccPerLane,
                  "the K-warp reduction fits in the stages");
    extern __shared__ __align__(16) uint8_t shared_raw[];
    St* st = reinterpret_cast<St*>(shared_raw);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, quad = lane & 3;
    const int rw = warp / KW, kw = warp % KW;
    const int64_t cta_row0 = static_cast<int64_t>(blockIdx.x) * Sh::kRows;
    const int t0 = blockIdx.y * Sh::kTokens;
    const int n_blocks = static_cast<int>(n_in / 32);
    const int c_begin = static_cast<int>(blockIdx.z * chunks_per_slice);
    const int c_end = static_cast<int>(min(static_cast<int64_t>(c_begin) + chunks_per_slice, (n_in + kChunkK - 1) / kChunkK));
    const bool scales_aligned = w.blocks_per_row % kChunkBlocks == 0;  // 8-byte cp.async of a row's 4 scales

    // What this thread copies, fixed for the CTA (item j of a kind is p = threadIdx.x + j kThreads):
    // weight item p = block p % 4 of row p / 4 (a pointer at chunk c_begin, null past n_out); the
    // scales of row threadIdx.x; token item p = piece p % 16 of token p / 16 (an offset into x at
    // chunk c_begin, -1 past n_tokens). Each chunk adds a constant, so staging a chunk is a few
    // additions per copy.
    constexpr int kWItems = Sh::kRows * kChunkBlocks / Sh::kThreads;
    constexpr int kXItems = Sh::kTokens * (kChunkK / 8) / Sh::kThreads;
    static_assert(kWItems >= 1 && kXItems >= 1 && Sh::kThreads % 16 == 0, "staging items per thread");
    const int my_b = threadIdx.x % kChunkBlocks, my_piece = threadIdx.x % (kChunkK / 8);
    auto row_body = [&](int64_t row) -> const uint8_t* {
        if (row >= n_out) return nullptr;
        return row < n_out1 ? w.body + row * w.blocks_per_row * 16 : w2.body + (row - n_out1) * w.blocks_per_row * 16;
    };
    const uint8_t* wsrc[kWItems];
#pragma unroll
    for (int j = 0; j < kWItems; ++j) {
        const uint8_t* body = row_body(cta_row0 + (threadIdx.x + j * Sh::kThreads) / kChunkBlocks);
        wsrc[j] = body ? body + (static_cast<int64_t>(c_begin) * kChunkBlocks + my_b) * 16 : nullptr;
    }
    const uint16_t* ssrc = nullptr;
    if (threadIdx.x < Sh::kRows && cta_row0 + threadIdx.x < n_out) {
        const int64_t row = cta_row0 + threadIdx.x;
        ssrc = (row < n_out1 ? reinterpret_cast<const uint16_t*>(w.scales) + row * w.blocks_per_row
                             : reinterpret_cast<const uint16_t*>(w2.scales) + (row - n_out1) * w.blocks_per_row) +
               static_cast<int64_t>(c_begin) * kChunkBlocks;
    }
    int xoff[kXItems];
#pragma unroll
    for (int j = 0; j < kXItems; ++j) {
        const int tok = t0 + (threadIdx.x + j * Sh::kThreads) / (kChunkK / 8);
        xoff[j] = tok < n_tokens ? static_cast<int>(tok * n_in + static_cast<int64_t>(c_begin) * kChunkK + my_piece * 8) : -1;
    }

    // The weights and scales of chunk c (no kernel of a step writes them: staged before pdl_wait).
    auto stage_weights = [&](int c, int buf) {
        St& s = st[buf];
        const int dc = c - c_begin;
        const bool whole = (c + 1) * kChunkBlocks <= n_blocks;  // only a row's last chunk may be partial
#pragma unroll
        for (int j = 0; j < kWItems; ++j) {
            const bool valid = wsrc[j] && (whole || c * kChunkBlocks + my_b < n_blocks);
            const int row = (threadIdx.x + j * Sh::kThreads) / kChunkBlocks;
            cp_async16(&s.w[row][w_piece(row, my_b)],
                       valid ? wsrc[j] + dc * (kChunkBlocks * 16) : w.body, valid);
        }
        if (threadIdx.x < Sh::kRows) {
            const int n_valid = ssrc ? min(kChunkBlocks, n_blocks - c * kChunkBlocks) : 0;
            if (scales_aligned) {
                cp_async8(&s.d[threadIdx.x][0], n_valid ? ssrc + dc * kChunkBlocks : reinterpret_cast<const uint16_t*>(w.scales),
                          2 * n_valid);
            } else {  // rows of other lengths: plain loads, visible after the barrier that precedes their use
#pragma unroll
                for (int j = 0; j < kChunkBlocks; ++j) s.d[threadIdx.x][j] = j < n_valid ? __ldg(ssrc + dc * kChunkBlocks + j) : 0;
            }
        }
    };
    auto stage_tokens = [&](int c, int buf) {
        St& s = st[buf];
        const int dk = (c - c_begin) * kChunkK;
        const bool whole = (c + 1) * static_cast<int64_t>(kChunkK) <= n_in;
#pragma unroll
        for (int j = 0; j < kXItems; ++j) {
            const bool valid = xoff[j] >= 0 && (whole || c * static_cast<int64_t>(kChunkK) + my_piece * 8 < n_in);
            const int tok = (threadIdx.x + j * Sh::kThreads) / (kChunkK / 8);
            // wgmma: core matrices [piece][token / 8] of 8 tokens x 16 bytes (wgmma_desc).
            __half* dst = Sh::kWgmma ? &s.x[0][0] + ((my_piece * (Sh::kTokens / 8) + tok / 8) * 8 + tok % 8) * 8
                                     : &s.x[tok][my_piece * 8];
            cp_async16(dst, valid ? x + xoff[j] + dk : x, valid);
        }
    };

    // Prologue: chunks c_begin .. c_begin + kStages - 2, one commit group each (the weights of all
    // of them join the first group). Every main-loop step commits one group (maybe empty), so
    // "all but the newest kStages - 2 groups done" means the current chunk has landed.
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i)
        if (c_begin + i < c_end) stage_weights(c_begin + i, i);
    pdl_begin();
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) {
        if (c_begin + i < c_end) stage_tokens(c_begin + i, i);
        cp_async_commit();
    }

    float acc[MT][NT][4] = {};
    for (int c = c_begin; c < c_end; ++c) {
        const int buf = (c - c_begin) % kStages;
        cp_async_wait<kStages - 2>();
        if constexpr (Sh::kWgmma) fence_proxy_async();
        __syncthreads();  // chunk c is visible to all; every warp is done with chunk c - 1's buffer
        if (c + kStages - 1 < c_end) {
            const int next = (c - c_begin + kStages - 1) % kStages;
            stage_weights(c + kStages - 1, next);
            stage_tokens(c + kStages - 1, next);
        }
        cp_async_commit();
        const St& s = st[buf];
        if constexpr (Sh::kWgmma) {
            // Warp w of a warpgroup holds rows 16 w .. of each of its m tiles' 64-row product
            // (rows rw 32 + mt 16 + g of the CTA: any assignment works, A and D rows go together).
            constexpr uint32_t kLbo = (Sh::kTokens / 8) * 128, kSbo = 128;  // bytes: k8 step, token-group step
#pragma unroll
            for (int b = 0; b < kChunkBlocks; ++b) {
                uint32_t a[MT][2][4];
                a_fragments<MT, false>(s, rw, b, g, quad, a);
                wgmma_fence();
#pragma unroll
                for (int ks = 0; ks < 2; ++ks) {
                    const uint64_t desc = wgmma_desc(&s.x[0][0] + (b * 4 + ks * 2) * (Sh::kTokens / 8) * 64, kLbo, kSbo);
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) wgmma_m64n64k16(*reinterpret_cast<float(*)[32]>(&acc[mt][0][0]), a[mt][ks], desc);
                }
                wgmma_commit();
            }
            wgmma_wait<0>();  // this chunk's buffer may be refilled once every warpgroup is past here
        } else {
#pragma unroll
            for (int i = 0; i < kChunkBlocks / KW; ++i) {
                const int b = i * KW + kw;
                uint32_t a[MT][2][4];
                a_fragments<MT, true>(s, rw, b, g, quad, a);
                // Token fragments in groups of kGroup n tiles; within a group the MMAs go step by step, so
                // the two that share an accumulator are 2 kGroup MMAs apart (mma.sync's latency is ~4 issues).
                constexpr int kGroup = NT < 4 ? NT : 4;
#pragma unroll
                for (int n0 = 0; n0 < NT; n0 += kGroup) {
                    uint2 bf[kGroup][2];
#pragma unroll
                    for (int j = 0; j < kGroup; ++j) token_fragments(s, n0 + j, b, g, quad, bf[j]);
#pragma unroll
                    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                            for (int j = 0; j < kGroup; ++j)
                                mma_f16(acc[mt][n0 + j], a[mt][ks], bf[j][ks].x, bf[j][ks].y);
                }
            }
        }
    }
    cp_async_wait<0>();  // no copy may still target shared memory when the stages are reused
    float* flat = &acc[0][0][0];

    // The KWarps partial sums of each row tile, in warp order: warps kw > 0 leave theirs in shared
    // memory (over the stages, no longer needed), warp kw = 0 adds them.
    if constexpr (KW > 1) {
        __syncthreads();
        float4* red = reinterpret_cast<float4*>(shared_raw);
        constexpr int kVec = Sh::kAccPerLane / 4;
        if (kw > 0) {
            float4* dst = red + ((static_cast<size_t>(kw - 1) * Sh::kRowWarps + rw) * 32 + lane) * kVec;
#pragma unroll
            for (int i = 0; i < kVec; ++i) dst[i] = make_float4(flat[4 * i], flat[4 * i + 1], flat[4 * i + 2], flat[4 * i + 3]);
        }
        __syncthreads();
        if (kw > 0) return;
#pragma unroll
        for (int k = 1; k < KW; ++k) {
            const float4* src = red + ((static_cast<size_t>(k - 1) * Sh::kRowWarps + rw) * 32 + lane) * kVec;
#pragma unroll
            for (int i = 0; i < kVec; ++i) {
                const float4 v = src[i];
                flat[4 * i] += v.x;
                flat[4 * i + 1] += v.y;
                flat[4 * i + 2] += v.z;
                flat[4 * i + 3] += v.w;
            }
        }
    }

    // Several K slices: every slice leaves its tile in `partial`; the last to arrive sums them.
    if (gridDim.z > 1) {
        constexpr int kVec = Sh::kAccPerLane / 4;
        const unsigned tile = blockIdx.x + gridDim.x * blockIdx.y;
        const size_t tile_floats = static_cast<size_t>(Sh::kRowWarps) * 32 * Sh::kAccPerLane;
        auto slot = [&](unsigned z) {
            return reinterpret_cast<float4*>(partial + (static_cast<size_t>(z) * gridDim.x * gridDim.y + tile) * tile_floats) +
                   (static_cast<size_t>(rw) * 32 + lane) * kVec;
        };
        float4* mine = slot(blockIdx.z);
#pragma unroll
        for (int i = 0; i < kVec; ++i) mine[i] = make_float4(flat[4 * i], flat[4 * i + 1], flat[4 * i + 2], flat[4 * i + 3]);
        __threadfence();
        __shared__ unsigned arrived;
        constexpr int kEpilogueThreads = Sh::kRowWarps * 32;  // the warps still running (kw == 0)
        asm volatile("bar.sync 1, %0;" ::"n"(kEpilogueThreads));
        if (threadIdx.x == 0) arrived = atomicAdd(&counters[tile], 1u);
        asm volatile("bar.sync 1, %0;" ::"n"(kEpilogueThreads));
        if (arrived != gridDim.z - 1) return;
        __threadfence();
#pragma unroll
        for (int i = 0; i < Sh::kAccPerLane; ++i) flat[i] = 0.0f;
        for (unsigned z = 0; z < gridDim.z; ++z) {  // slice order, this CTA's own tile read back too
            const float4* src = slot(z);
#pragma unroll
            for (int i = 0; i < kVec; ++i) {
                const float4 v = __ldcg(src + i);
                flat[4 * i] += v.x;
                flat[4 * i + 1] += v.y;
                flat[4 * i + 2] += v.z;
                flat[4 * i + 3] += v.w;
            }
        }
        if (threadIdx.x == 0) counters[tile] = 0;  // ready for the next launch (stream order)
    }

    // acc[mt][nt][e]: row (rw MT + mt) 16 + g (+ 8 for e >= 2), token t0 + nt 8 + 2 quad + (e & 1).
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int64_t o = cta_row0 + (rw * MT + mt) * 16 + g + (e >= 2 ? 8 : 0);
                const int t = t0 + nt * 8 + 2 * quad + (e & 1);
                if (o >= n_out || t >= n_tokens) continue;
                float* dst = out + static_cast<int64_t>(t) * n_out + o;
                const float v = acc[mt][nt][e] + (bias ? bias[o] : 0.0f);
                *dst = accumulate ? *dst + v : v;
            }
}

// The instantiated tile shapes, in the order of gemm_tiles_variants().
using TileA = Tile<4, 2, 8, 2>;  // 128 rows x 64 tokens, 8 warps, a chunk's blocks split over 2 warps; 2 CTAs per SM
using TileB = Tile<8, 1, 8, 1>;  // 256 x 64, 8 warps of up to 255 registers; 1 CTA per SM
using TileC = Tile<2, 4, 8, 2>;  // 64 x 64, 8 warps (4 per row tile)
using TileD = Tile<4, 2, 4, 2>;  // 128 x 32
using TileE = Tile<4, 2, 2, 2>;  // 128 x 16
using TileW = Tile<8, 1, 8, 1, true>;  // 256 x 64, 2 warpgroups multiplying by wgmma (sm_90a builds)
constexpr int kVariants = 6;

template <class Sh>
GemmTilesVariant variant_of() {
    return {Sh::kRowWarps, Sh::kKWarps, Sh::kNTiles, Sh::kWgmma};
}

// Calls f.template operator()<Sh>() for the variant at `index`.
template <class F>
void dispatch(int index, F&& f) {
    switch (index) {
        case 0: f.template operator()<TileA>(); break;
        case 1: f.template operator()<TileB>(); break;
        case 2: f.template operator()<TileC>(); break;
        case 3: f.template operator()<TileD>(); break;
        case 4: f.template operator()<TileE>(); break;
        default: f.template operator()<TileW>(); break;
    }
}

int variant_index(const GemmTilesVariant& v) {
    const GemmTilesVariant all[kVariants] = {variant_of<TileA>(), variant_of<TileB>(), variant_of<TileC>(),
                                             variant_of<TileD>(), variant_of<TileE>(), variant_of<TileW>()};
    for (int i = 0; i < kVariants; ++i)
        if (all[i].row_warps == v.row_warps && all[i].k_warps == v.k_warps && all[i].n_tiles == v.n_tiles &&
            all[i].wgmma == v.wgmma)
            return i;
    MVLLM_CHECK(false) << "gemm_tiles: no variant " << gemm_tiles_variant_name(v);
    return 0;
}

template <class Sh>
constexpr size_t shared_bytes() {
    return kStages * sizeof(Stage<Sh>);
}

// Sets the kernel's shared-memory limit once and returns how many CTAs fit on one SM.
template <class Sh>
int ctas_per_sm() {
    static const int n = [] {
        MVLLM_CUDA_CHECK(cudaFuncSetAttribute(gemm_tiles_kernel<Sh>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(shared_bytes<Sh>())));
        int ctas = 0;
        MVLLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, gemm_tiles_kernel<Sh>, Sh::kThreads,
                                                                       shared_bytes<Sh>()));
        return std::max(ctas, 1);
    }();
    return n;
}

struct Plan {
    int variant = 0;
    int64_t rows = 0, tokens = 0;
    int64_t slices = 1, chunks_per_slice = 1;
    dim3 grid;
    size_t counter_bytes = 0, partial_bytes = 0;
};

// K slices: the fewest waves of CTAs times chunks per CTA plus one for the pipeline's fill (the
// critical path, in chunks), plus half a chunk per slice for the last CTA's sum; ties go to fewer
// slices. Only grids of at most
// kMaxSplitTiles tiles are split (more tiles fill the SMs anyway), so the counters have a fixed
// place at the start of the scratch, apart from the partial tiles of any shape.
constexpr int64_t kMaxSplitTiles = 4096;
constexpr size_t kCounterBytes = kMaxSplitTiles * sizeof(unsigned);

Plan plan(const GemmTilesVariant& v, int64_t n_in, int64_t n_out, int64_t n_tokens, int32_t n_sms) {
    Plan p;
    p.variant = variant_index(v);
    p.rows = 32LL * v.row_warps;
    p.tokens = 8LL * v.n_tiles;
    int occupancy = 1;
    dispatch(p.variant, [&]<class Sh>() { occupancy = ctas_per_sm<Sh>(); });
    const int64_t tiles = ceil_div(n_out, p.rows) * ceil_div(n_tokens, p.tokens);
    const int64_t slots = static_cast<int64_t>(occupancy) * std::max(n_sms, 1);
    const int64_t chunks = ceil_div(n_in, kChunkK);
    const int64_t max_slices = tiles <= kMaxSplitTiles ? std::min<int64_t>(16, chunks) : 1;
    double best_cost = 1e30;
    for (int64_t s = 1; s <= max_slices; ++s) {
        const int64_t per = ceil_div(chunks, s), used = ceil_div(chunks, per);
        const double cost =
            static_cast<double>(ceil_div(tiles * used, slots) * (per + 1)) + 0.5 * static_cast<double>(used - 1);
        if (cost < best_cost - 1e-9) {
            best_cost = cost;
            p.slices = used;
            p.chunks_per_slice = per;
        }
    }
    p.grid = dim3(static_cast<unsigned>(ceil_div(n_out, p.rows)), static_cast<unsigned>(ceil_div(n_tokens, p.tokens)),
                  static_cast<unsigned>(p.slices));
    if (p.slices > 1) {
        p.counter_bytes = kCounterBytes;
        p.partial_bytes = static_cast<size_t>(p.slices * tiles * p.rows * p.tokens) * sizeof(float);
    }
    return p;
}

}  // namespace

bool gemm_tiles_supported(DType t) { return t == DType::Q4_0; }

bool gemm_tiles_have_wgmma() {
    static const bool has = [] {
        int* d = nullptr;
        int h = 0;
        if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) return cudaGetLastError(), false;
        wgmma_probe_kernel<<<1, 1>>>(d);
        const bool ok = cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
        cudaFree(d);
        cudaGetLastError();
        return ok && h == 1;
    }();
    return has;
}

std::vector<GemmTilesVariant> gemm_tiles_variants() {
    std::vector<GemmTilesVariant> v = {variant_of<TileA>(), variant_of<TileB>(), variant_of<TileC>(), variant_of<TileD>(),
                                       variant_of<TileE>()};
    if (gemm_tiles_have_wgmma()) v.push_back(variant_of<TileW>());
    return v;
}

std::string gemm_tiles_variant_name(const GemmTilesVariant& v) {
    return std::to_string(32 * v.row_warps) + "x" + std::to_string(8 * v.n_tiles) + "/" +
           std::to_string(v.row_warps * v.k_warps) + "w" + std::to_string(v.k_warps) + "k" + (v.wgmma ? "-wgmma" : "");
}

namespace {
std::atomic<int> forced_variant{-1};
}

void force_gemm_tiles_variant(const GemmTilesVariant* v) { forced_variant.store(v ? variant_index(*v) : -1); }

GemmTilesVariant gemm_tiles_default_variant(int64_t n_tokens) {
    if (const int f = forced_variant.load(); f >= 0) return gemm_tiles_variants()[f];
    if (n_tokens <= 16) return variant_of<TileE>();
    if (n_tokens <= 32) return variant_of<TileD>();
    return variant_of<TileA>();
}

size_t gemm_tiles_scratch_bytes(DType t, int64_t n_in, int64_t n_out, int64_t n_tokens, int32_t n_sms,
                                const GemmTilesVariant* variant) {
    if (!gemm_tiles_supported(t) || n_tokens == 0) return 0;
    const Plan p = plan(variant ? *variant : gemm_tiles_default_variant(n_tokens), n_in, n_out, n_tokens, n_sms);
    return p.counter_bytes + p.partial_bytes;
}

void launch_gemm_tiles(const TensorView& w, const TensorView& x, const float* bias, float* out, bool accumulate,
                       void* scratch, int32_t n_sms, cudaStream_t stream, const GemmTilesVariant* variant,
                       const TensorView* w2) {
    const int64_t n_in = w.ne[0], n_out1 = w.ne[1], n_out = n_out1 + (w2 ? w2->ne[1] : 0), n_tokens = x.ne[1];
    MVLLM_CHECK(gemm_tiles_supported(w.type) && x.type == DType::F16 && x.ne[0] == n_in && n_in % 32 == 0)
        << "gemm_tiles: " << type_name(w.type) << " x " << type_name(x.type);
    MVLLM_CHECK(!w2 || (w2->type == w.type && w2->ne[0] == n_in)) << "gemm_tiles: the stacked matrices differ";
    MVLLM_CHECK(n_tokens * n_in < (int64_t{1} << 31)) << "gemm_tiles: " << n_tokens << " x " << n_in << " inputs";
    if (n_tokens == 0) return;
    const Plan p = plan(variant ? *variant : gemm_tiles_default_variant(n_tokens), n_in, n_out, n_tokens, n_sms);
    MVLLM_CHECK(p.slices == 1 || scratch) << "gemm_tiles: split-K scratch missing";
    auto* counters = p.slices > 1 ? static_cast<unsigned*>(scratch) : nullptr;
    auto* partial = p.slices > 1 ? reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + p.counter_bytes) : nullptr;
    const auto* xp = static_cast<const __half*>(x.data);
    const int acc = accumulate ? 1 : 0;
    dispatch(p.variant, [&]<class Sh>() {
        (void)ctas_per_sm<Sh>();  // sets the shared-memory limit
        launch_pdl(gemm_tiles_kernel<Sh>, p.grid, Sh::kThreads, shared_bytes<Sh>(), stream,
                   quant_matrix<DType::Q4_0>(w.data, n_in, n_out1),
                   w2 ? quant_matrix<DType::Q4_0>(w2->data, n_in, w2->ne[1]) : QuantMatrix{}, n_out1, xp, n_in, n_out,
                   static_cast<int>(n_tokens),
                   p.chunks_per_slice, bias, out, acc, partial, counters);
    });
    MVLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace mvllm::cuda
