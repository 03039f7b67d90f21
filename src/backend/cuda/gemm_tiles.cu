#include "backend/cuda/gemm_tiles.cuh"

#include <algorithm>
#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/mma_ptx.cuh"

namespace mvllm::cuda {
namespace {

constexpr int kStep = 128;          // values of K per pipeline stage (4 quantisation blocks)
constexpr int kBlocksPerStep = kStep / 32;
constexpr int kStride = kStep + 8;  // halfs per staged token row: 272 B, so ldmatrix rows hit distinct banks
constexpr int kStages = 3;          // pipeline depth: two stages in flight while one is multiplied

// Two weights as the F16 pair {lo, hi} = d * {q0, q1}: the integers are placed in the mantissa
// of 1024 (0x6400) and the offset subtracted exactly, then one rounded multiply by d.
__device__ __forceinline__ uint32_t scale_pair(uint32_t magic_bits, __half2 offset, __half2 d) {
    const __half2 q = __hsub2(*reinterpret_cast<const __half2*>(&magic_bits), offset);
    const __half2 v = __hmul2(q, d);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// 16 bits of a staged block body starting at byte `byte` (even).
__device__ __forceinline__ uint32_t body16(const uint8_t* body, int byte) {
    const uint32_t w = *reinterpret_cast<const uint32_t*>(body + (byte & ~3));
    return (byte & 2) ? w >> 16 : w & 0xFFFF;
}

// One row's quantisation blocks as staged in shared memory, and the A-fragment registers of the
// row for one block: r[s][0] = values {2 tig, 2 tig + 1} and r[s][1] = values {2 tig + 8, 2 tig + 9}
// of k-step s (values 16 s .. 16 s + 15 of the block).
template <DType T>
struct Blocks;

template <>
struct Blocks<DType::Q4_0> {  // value k: low nibble of byte k; value 16 + k: its high nibble
    static constexpr int kBody = 16;
    static __device__ __forceinline__ void fragment(const uint8_t* body, uint16_t d_bits, int tig, uint32_t (&r)[2][2]) {
        const __half2 d = __half2half2(__ushort_as_half(d_bits));
        const __half2 offset = __float2half2_rn(1032.0f);  // 1024 + 8
        const uint32_t v[2] = {body16(body, 2 * tig), body16(body, 2 * tig + 8)};
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            r[0][j] = scale_pair(0x64006400u | (v[j] & 0xFu) | ((v[j] & 0xF00u) << 8), offset, d);
            r[1][j] = scale_pair(0x64006400u | ((v[j] >> 4) & 0xFu) | ((v[j] & 0xF000u) << 4), offset, d);
        }
    }
};

template <>
struct Blocks<DType::Q8_0> {  // value k: signed byte k
    static constexpr int kBody = 32;
    static __device__ __forceinline__ void fragment(const uint8_t* body, uint16_t d_bits, int tig, uint32_t (&r)[2][2]) {
        const __half2 d = __half2half2(__ushort_as_half(d_bits));
        const __half2 offset = __float2half2_rn(1152.0f);  // 1024 + 128: q ^ 0x80 = q + 128
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const uint32_t u = body16(body, 16 * s + 8 * j + 2 * tig) ^ 0x8080u;
                r[s][j] = scale_pair(0x64006400u | (u & 0xFFu) | ((u & 0xFF00u) << 8), offset, d);
            }
    }
};

// The CTA tile: kWarps warps, each owning kMTiles m16 tiles of W rows (16 kMTiles consecutive
// rows) and every one of the CTA's kNTiles n8 tiles of tokens. A warp reuses each token fragment
// it loads for all its m tiles, so shared-memory reads per MMA fall as kMTiles grows.
template <int MTiles, int Warps, int NTiles>
struct Tile {
    static constexpr int kMTiles = MTiles, kWarps = Warps, kNTiles = NTiles;
    static constexpr int kRows = 16 * MTiles * Warps;
    static constexpr int kTokens = 8 * NTiles;
    static constexpr int kThreads = 32 * Warps;
};

// Shared memory of one pipeline stage: the token tile, the weight bodies and their scales.
template <DType T, class Sh>
struct Stage {
    static constexpr int kWStride = kBlocksPerStep * Blocks<T>::kBody + 16;  // bytes per staged row (+16: banks)
    __half x[Sh::kTokens][kStride];
    uint8_t w[Sh::kRows][kWStride];
    uint16_t d[Sh::kRows][kBlocksPerStep];
};

// 8 bytes global -> shared (the four scales of a row's stage); bytes past src_bytes are zero.
__device__ __forceinline__ void cp_async8(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}

// Reads: W rows blockIdx.x * kRows .. + kRows, x rows blockIdx.y * kTokens .. + kTokens, over the
// chunks of K slice blockIdx.z (chunks_per_slice each). Writes: out (one slice: the epilogue with
// bias and accumulate) or partial[blockIdx.z] (several). Launch: kThreads threads,
// kStages * sizeof(Stage) bytes of dynamic shared memory. cp.async keeps kStages - 1 chunks in
// flight while the warps multiply the current one; blocks past the end of a row are staged as
// zeros (scale 0, x 0), so they add nothing.
template <DType T, class Sh>
__global__ void __launch_bounds__(Sh::kThreads)
    gemm_tiles_kernel(QuantMatrix w, const __half* x, int64_t n_in, int64_t n_out, int n_tokens,
                      int64_t chunks_per_slice, const float* bias, float* out, int accumulate, float* partial) {
    using B = Blocks<T>;
    using St = Stage<T, Sh>;
    constexpr int MT = Sh::kMTiles, NT = Sh::kNTiles;
    extern __shared__ __align__(16) uint8_t shared_raw[];
    St* st = reinterpret_cast<St*>(shared_raw);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const int64_t cta_row0 = static_cast<int64_t>(blockIdx.x) * Sh::kRows;
    const int t0 = blockIdx.y * Sh::kTokens;
    const int64_t n_blocks = n_in / 32;
    const int64_t c_begin = blockIdx.z * chunks_per_slice;
    const int64_t c_end = min(c_begin + chunks_per_slice, (n_in + kStep - 1) / kStep);
    const bool scales_aligned = w.blocks_per_row % kBlocksPerStep == 0;  // 8-byte cp.async of a row's 4 scales

    auto stage = [&](int64_t c, int buf) {
        St& s = st[buf];
        for (int p = threadIdx.x; p < Sh::kTokens * (kStep / 8); p += Sh::kThreads) {
            const int tok = p / (kStep / 8), piece = p % (kStep / 8);
            const int64_t k = c * kStep + piece * 8;
            const bool valid = t0 + tok < n_tokens && k < n_in;
            cp_async16(&s.x[tok][piece * 8], valid ? x + static_cast<int64_t>(t0 + tok) * n_in + k : x, valid);
        }
        constexpr int kPieces = kBlocksPerStep * B::kBody / 16;  // 16-byte pieces of a row's chunk
        for (int p = threadIdx.x; p < Sh::kRows * kPieces; p += Sh::kThreads) {
            const int r = p / kPieces, piece = p % kPieces;
            const int64_t blk = c * kBlocksPerStep + piece * 16 / B::kBody;
            const bool valid = blk < n_blocks;
            const int64_t row = min(cta_row0 + r, n_out - 1);
            const uint8_t* src = w.body + (row * w.blocks_per_row + c * kBlocksPerStep) * B::kBody + piece * 16;
            cp_async16(&s.w[r][piece * 16], valid ? src : w.body, valid);
        }
        const int64_t blk0 = c * kBlocksPerStep;
        const int n_valid = static_cast<int>(min(static_cast<int64_t>(kBlocksPerStep), n_blocks - blk0));
        for (int r = threadIdx.x; r < Sh::kRows; r += Sh::kThreads) {
            const int64_t row = min(cta_row0 + r, n_out - 1);
            const uint16_t* src = reinterpret_cast<const uint16_t*>(w.scales) + row * w.blocks_per_row + blk0;
            if (scales_aligned) {
                cp_async8(&s.d[r][0], src, 2 * n_valid);
            } else {  // rows of other lengths: plain loads, visible after the barrier that precedes their use
#pragma unroll
                for (int j = 0; j < kBlocksPerStep; ++j) s.d[r][j] = j < n_valid ? __ldg(src + j) : 0;
            }
        }
    };

    float acc[MT][NT][4] = {};
    // Prologue: chunks c_begin .. c_begin + kStages - 2. Every step commits one group (maybe
    // empty), so "all but the newest kStages - 2 groups done" means the current chunk has landed.
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) {
        if (c_begin + i < c_end) stage(c_begin + i, i);
        cp_async_commit();
    }
    for (int64_t c = c_begin; c < c_end; ++c) {
        const int buf = static_cast<int>((c - c_begin) % kStages);
        cp_async_wait<kStages - 2>();
        __syncthreads();  // chunk c is visible to all; every warp is done with chunk c - 1's buffer
        if (c + kStages - 1 < c_end) stage(c + kStages - 1, static_cast<int>((c - c_begin + kStages - 1) % kStages));
        cp_async_commit();
        const St& s = st[buf];
#pragma unroll
        for (int b = 0; b < kBlocksPerStep; ++b) {
            uint32_t a[MT][2][4];  // per m tile: the A fragments of k 0-15 and 16-31 of the block
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                uint32_t lo[2][2], hi[2][2];  // rows g and g + 8 of the m tile
                const int r0 = (warp * MT + mt) * 16 + g;
                B::fragment(&s.w[r0][b * B::kBody], s.d[r0][b], tig, lo);
                B::fragment(&s.w[r0 + 8][b * B::kBody], s.d[r0 + 8][b], tig, hi);
#pragma unroll
                for (int ks = 0; ks < 2; ++ks) {
                    a[mt][ks][0] = lo[ks][0];
                    a[mt][ks][1] = hi[ks][0];
                    a[mt][ks][2] = lo[ks][1];
                    a[mt][ks][3] = hi[ks][1];
                }
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                uint32_t bf[4];  // k 0-7, 8-15, 16-23, 24-31 of the block for tokens nt * 8 .. + 7
                ldmatrix_x4(bf, &s.x[nt * 8 + (lane & 7)][b * 32 + (lane >> 3) * 8]);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma<__half>(acc[mt][nt], a[mt][0], bf[0], bf[1]);
                    mma<__half>(acc[mt][nt], a[mt][1], bf[2], bf[3]);
                }
            }
        }
    }
    cp_async_wait<0>();  // no copy may still target shared memory when the CTA exits

    // acc[mt][nt][e]: row (warp MT + mt) 16 + g (+ 8 for e >= 2), token t0 + nt 8 + 2 tig + (e & 1).
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int64_t o = cta_row0 + (warp * MT + mt) * 16 + g + (e >= 2 ? 8 : 0);
                const int t = t0 + nt * 8 + 2 * tig + (e & 1);
                if (o >= n_out || t >= n_tokens) continue;
                if (partial) {
                    partial[(static_cast<int64_t>(blockIdx.z) * n_tokens + t) * n_out + o] = acc[mt][nt][e];
                } else {
                    float* dst = out + static_cast<int64_t>(t) * n_out + o;
                    const float v = acc[mt][nt][e] + (bias ? bias[o] : 0.0f);
                    *dst = accumulate ? *dst + v : v;
                }
            }
}

// out[i] (= or +=) sum_s partial[s][i] (s in order) + bias. Launch: one thread per element.
__global__ void sum_slices_kernel(const float* partial, int n_slices, int64_t n, int64_t n_out, const float* bias,
                                  float* out, int accumulate) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    float v = 0.0f;
    for (int s = 0; s < n_slices; ++s) v += partial[s * n + i];
    if (bias) v += bias[i % n_out];
    out[i] = accumulate ? out[i] + v : v;
}

// The instantiated tile shapes, in the order of gemm_tiles_variants().
using TileA = Tile<1, 8, 8>;  // 128 rows x 64 tokens, one m tile per warp (the first version's shape)
using TileB = Tile<2, 8, 8>;  // 256 x 64
using TileC = Tile<4, 4, 8>;  // 256 x 64, four m tiles per warp
using TileD = Tile<2, 4, 8>;  // 128 x 64
using TileE = Tile<4, 4, 4>;  // 256 x 32
using TileF = Tile<4, 4, 2>;  // 256 x 16
constexpr int kVariants = 6;

template <class Sh>
GemmTilesVariant variant_of() {
    return {Sh::kMTiles, Sh::kWarps, Sh::kNTiles};
}

// Calls f.template operator()<T, Sh>() for the type and the variant at `index`.
template <class F>
void dispatch(DType t, int index, F&& f) {
    auto with_type = [&]<DType T>() {
        switch (index) {
            case 0: f.template operator()<T, TileA>(); break;
            case 1: f.template operator()<T, TileB>(); break;
            case 2: f.template operator()<T, TileC>(); break;
            case 3: f.template operator()<T, TileD>(); break;
            case 4: f.template operator()<T, TileE>(); break;
            default: f.template operator()<T, TileF>(); break;
        }
    };
    if (t == DType::Q4_0) with_type.template operator()<DType::Q4_0>();
    else with_type.template operator()<DType::Q8_0>();
}

int variant_index(const GemmTilesVariant& v) {
    const GemmTilesVariant all[kVariants] = {variant_of<TileA>(), variant_of<TileB>(), variant_of<TileC>(),
                                             variant_of<TileD>(), variant_of<TileE>(), variant_of<TileF>()};
    for (int i = 0; i < kVariants; ++i)
        if (all[i].m_tiles == v.m_tiles && all[i].warps == v.warps && all[i].n_tiles == v.n_tiles) return i;
    MVLLM_CHECK(false) << "gemm_tiles: no variant " << gemm_tiles_variant_name(v);
    return 0;
}

// Sets the kernel's shared-memory limit once and returns how many CTAs fit on one SM.
template <DType T, class Sh>
int ctas_per_sm() {
    static const int n = [] {
        constexpr int kShared = kStages * sizeof(Stage<T, Sh>);
        MVLLM_CUDA_CHECK(cudaFuncSetAttribute(gemm_tiles_kernel<T, Sh>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              kShared));
        int ctas = 0;
        MVLLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, gemm_tiles_kernel<T, Sh>, Sh::kThreads,
                                                                       kShared));
        return std::max(ctas, 1);
    }();
    return n;
}

struct Plan {
    int variant = 0;
    int64_t slices = 1, chunks_per_slice = 1;
    dim3 grid;
};

// K slices: the fewest waves of CTAs times chunks per CTA (the critical path, in chunk steps),
// with the split-K partials (written and read once more) kept below half the weight bytes.
Plan plan(DType t, const GemmTilesVariant& v, int64_t n_in, int64_t n_out, int64_t n_tokens, int32_t n_sms) {
    Plan p;
    p.variant = variant_index(v);
    const int64_t rows = 16LL * v.m_tiles * v.warps, tokens = 8LL * v.n_tiles;
    int occupancy = 1;
    dispatch(t, p.variant, [&]<DType T, class Sh>() { occupancy = ctas_per_sm<T, Sh>(); });
    const int64_t tiles = ceil_div(n_out, rows) * ceil_div(n_tokens, tokens);
    const int64_t slots = static_cast<int64_t>(occupancy) * std::max(n_sms, 1);
    const int64_t chunks = ceil_div(n_in, kStep);
    const double weight_bytes = static_cast<double>(n_out) * n_in * (t == DType::Q4_0 ? 0.5625 : 1.0625);
    int64_t best_cost = INT64_MAX;
    for (int64_t s = 1; s <= std::min<int64_t>(16, chunks); ++s) {
        const int64_t per = ceil_div(chunks, s), used = ceil_div(chunks, per);
        if (used > 1 && 8.0 * used * n_tokens * n_out > 0.5 * weight_bytes) break;
        const int64_t cost = ceil_div(tiles * used, slots) * per;
        if (cost < best_cost) {
            best_cost = cost;
            p.slices = used;
            p.chunks_per_slice = per;
        }
    }
    p.grid = dim3(static_cast<unsigned>(ceil_div(n_out, rows)), static_cast<unsigned>(ceil_div(n_tokens, tokens)),
                  static_cast<unsigned>(p.slices));
    return p;
}

}  // namespace

bool gemm_tiles_supported(DType t) { return t == DType::Q4_0 || t == DType::Q8_0; }

std::vector<GemmTilesVariant> gemm_tiles_variants() {
    return {variant_of<TileA>(), variant_of<TileB>(), variant_of<TileC>(),
            variant_of<TileD>(), variant_of<TileE>(), variant_of<TileF>()};
}

std::string gemm_tiles_variant_name(const GemmTilesVariant& v) {
    return std::to_string(16 * v.m_tiles * v.warps) + "x" + std::to_string(8 * v.n_tiles) + "/" +
           std::to_string(v.warps) + "w" + std::to_string(v.m_tiles) + "m";
}

namespace {
std::atomic<int> forced_variant{-1};
}

void force_gemm_tiles_variant(const GemmTilesVariant* v) { forced_variant.store(v ? variant_index(*v) : -1); }

GemmTilesVariant gemm_tiles_default_variant(int64_t n_tokens) {
    if (const int f = forced_variant.load(); f >= 0) return gemm_tiles_variants()[f];
    if (n_tokens <= 16) return variant_of<TileF>();
    if (n_tokens <= 32) return variant_of<TileE>();
    return variant_of<TileB>();
}

size_t gemm_tiles_scratch_bytes(DType t, int64_t n_in, int64_t n_out, int64_t n_tokens, int32_t n_sms,
                                const GemmTilesVariant* variant) {
    if (!gemm_tiles_supported(t) || n_tokens == 0) return 0;
    const Plan p = plan(t, variant ? *variant : gemm_tiles_default_variant(n_tokens), n_in, n_out, n_tokens, n_sms);
    return p.slices > 1 ? static_cast<size_t>(p.slices * n_tokens * n_out) * sizeof(float) : 0;
}

void launch_gemm_tiles(const TensorView& w, const TensorView& x, const float* bias, float* out, bool accumulate,
                       void* scratch, int32_t n_sms, cudaStream_t stream, const GemmTilesVariant* variant) {
    const int64_t n_in = w.ne[0], n_out = w.ne[1], n_tokens = x.ne[1];
    MVLLM_CHECK(gemm_tiles_supported(w.type) && x.type == DType::F16 && x.ne[0] == n_in && n_in % 32 == 0)
        << "gemm_tiles: " << type_name(w.type) << " x " << type_name(x.type);
    if (n_tokens == 0) return;
    const Plan p = plan(w.type, variant ? *variant : gemm_tiles_default_variant(n_tokens), n_in, n_out, n_tokens, n_sms);
    float* partial = p.slices > 1 ? static_cast<float*>(scratch) : nullptr;
    MVLLM_CHECK(p.slices == 1 || partial) << "gemm_tiles: split-K scratch missing";
    const auto* xp = static_cast<const __half*>(x.data);
    const int acc = accumulate ? 1 : 0;
    dispatch(w.type, p.variant, [&]<DType T, class Sh>() {
        (void)ctas_per_sm<T, Sh>();  // sets the shared-memory limit
        gemm_tiles_kernel<T, Sh><<<p.grid, Sh::kThreads, kStages * sizeof(Stage<T, Sh>), stream>>>(
            quant_matrix<T>(w.data, n_in, n_out), xp, n_in, n_out, static_cast<int>(n_tokens), p.chunks_per_slice,
            bias, out, acc, partial);
    });
    MVLLM_CUDA_LAUNCH_CHECK();
    if (partial) {
        const int64_t n = n_tokens * n_out;
        sum_slices_kernel<<<static_cast<unsigned>(ceil_div(n, 256)), 256, 0, stream>>>(
            partial, static_cast<int>(p.slices), n, n_out, bias, out, acc);
        MVLLM_CUDA_LAUNCH_CHECK();
    }
}

}  // namespace mvllm::cuda
