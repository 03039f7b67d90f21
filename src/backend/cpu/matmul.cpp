// CPU matmul: the per-type kernel table, activation conversion, the thread split and the
// double-precision reference.
//
// Work split: the n_out weight rows go out in chunks (multiples of 16 rows) through an atomic
// counter. Inside a chunk the tokens are walked in tiles of kMaxTokenTile: for each tile every row
// of the chunk is dotted with all the tile's tokens at once (one weight-block unpack per tile), so
// a chunk of weights stays in L1/L2 while the activations stream by, and each weight byte comes
// from memory once per call.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/vec_dot.h"
#include "core/quant.h"
#include "core/status.h"

namespace mvllm {
namespace {

// clang-format off
const VecDotTraits kVecDotTable[] = {
    // weight      act          dot: scalar           avx2             avx512
    //                          act quantiser: scalar, avx2, avx512
    //                          batch-invariant dot (nullptr: dot itself is)
    {DType::F32,  DType::F32,  {scalar::dot_f32,  avx2::dot_f32,  nullptr},
                               {scalar::quantize_f32, scalar::quantize_f32, nullptr}, {}},
    {DType::F16,  DType::F32,  {scalar::dot_f16,  avx2::dot_f16,  nullptr},
                               {scalar::quantize_f32, scalar::quantize_f32, nullptr}, {}},
    {DType::BF16, DType::F32,  {scalar::dot_bf16, avx2::dot_bf16, nullptr},
                               {scalar::quantize_f32, scalar::quantize_f32, nullptr}, {}},
    {DType::Q8_0, DType::Q8_0, {scalar::dot_q8_0, avx2::dot_q8_0, avx512::dot_q8_0},
                               {scalar::quantize_act_q8_0, avx2::quantize_act_q8_0, nullptr},
                               {nullptr, avx2::dot_q8_0_fixed_order, nullptr}},
    {DType::Q4_0, DType::Q8_0, {scalar::dot_q4_0, avx2::dot_q4_0, avx512::dot_q4_0},
                               {scalar::quantize_act_q8_0, avx2::quantize_act_q8_0, nullptr},
                               {nullptr, avx2::dot_q4_0_fixed_order, nullptr}},
    {DType::Q4_K, DType::Q8_K, {scalar::dot_q4_K, avx2::dot_q4_K, avx512::dot_q4_K},
                               {quantize_row_q8_K, avx2::quantize_q8_K, nullptr}, {}},
    {DType::Q5_K, DType::Q8_K, {scalar::dot_q5_K, avx2::dot_q5_K, nullptr},
                               {quantize_row_q8_K, avx2::quantize_q8_K, nullptr}, {}},
    {DType::Q6_K, DType::Q8_K, {scalar::dot_q6_K, avx2::dot_q6_K, avx512::dot_q6_K},
                               {quantize_row_q8_K, avx2::quantize_q8_K, nullptr}, {}},
};
// clang-format on

constexpr size_t kAlign = 64;
// From this many tokens on, Q4_0 weights are repacked into 8-row panels per call (the repack
// costs about as much as two tokens of panel GEMM).
constexpr int64_t kPanelMinTokens = 4;
// MVLLM_MATMUL_PANELS=0 turns the panel GEMM off (A/B comparisons).
bool panels_enabled() {
    static const bool on = [] {
        const char* e = std::getenv("MVLLM_MATMUL_PANELS");
        return e == nullptr || std::strcmp(e, "0") != 0;
    }();
    return on;
}
inline size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Rows per work chunk: about 4 chunks per thread for load balance, a multiple of 16 rows. With
// several tokens the chunk is also capped at ~64 KiB of weights, so that it stays in L2 while
// every token tile passes over it.
int64_t rows_per_chunk(int64_t n_out, int n_threads, int64_t n_tokens, size_t row_bytes) {
    const int64_t target = (n_out + 4 * n_threads - 1) / (4 * n_threads);
    int64_t rows = std::max<int64_t>(16, (target + 15) / 16 * 16);
    if (n_tokens > 1) rows = std::min<int64_t>(rows, std::max<int64_t>(16, (65536 / row_bytes) / 16 * 16));
    return rows;
}

}  // namespace

const VecDotTraits& vec_dot_traits(DType weight) {
    for (const auto& t : kVecDotTable)
        if (t.weight == weight) return t;
    MVLLM_CHECK(false) << "matmul: no CPU kernels for weight type " << type_name(weight);
    return kVecDotTable[0];
}

VecDotFn vec_dot_fn(const VecDotTraits& t, CpuIsa isa, bool fixed_order) {
    for (int i = static_cast<int>(isa); i >= 0; --i)
        if (t.dot[i]) return fixed_order && t.dot_fixed_order[i] ? t.dot_fixed_order[i] : t.dot[i];
    return nullptr;
}

ActQuantizeFn act_quantize_fn(const VecDotTraits& t, CpuIsa isa) {
    for (int i = static_cast<int>(isa); i >= 0; --i)
        if (t.quantize[i]) return t.quantize[i];
    return nullptr;
}

void matmul(ThreadPool& pool, const TensorView& w, const TensorView& x, const TensorView& out,
            MatmulScratch& scratch, CpuIsa isa, bool batch_invariant) {
    const int64_t n_in = w.ne[0], n_out = w.ne[1], n_tokens = x.ne[1];
    MVLLM_CHECK(w.ne[2] == 1 && w.ne[3] == 1) << "matmul: weight must be 2-D";
    MVLLM_CHECK(x.ne[0] == n_in && x.ne[2] == 1 && x.ne[3] == 1) << "matmul: x " << shape_string(x.ne)
                                                                 << " vs w " << shape_string(w.ne);
    MVLLM_CHECK(x.type == DType::F32 || x.type == DType::F16) << "matmul: x must be f32 or f16";
    MVLLM_CHECK(out.type == DType::F32 && out.ne[0] == n_out && out.ne[1] == n_tokens)
        << "matmul: out " << shape_string(out.ne);
    if (n_out == 0 || n_tokens == 0) return;
    if (isa == CpuIsa::Avx512 && cpu_isa() != CpuIsa::Avx512) isa = cpu_isa();
    if (isa == CpuIsa::Avx2 && cpu_isa() == CpuIsa::Scalar) isa = CpuIsa::Scalar;

    const VecDotTraits& traits = vec_dot_traits(w.type);
    const VecDotFn dot = vec_dot_fn(traits, isa, batch_invariant);
    const ActQuantizeFn quantize = act_quantize_fn(traits, isa);

    // ---- activations: [n_tokens] rows of traits.act, act_row_bytes apart ----
    const bool x_is_f32 = x.type == DType::F32;
    const bool act_is_x = traits.act == DType::F32 && x_is_f32;  // f32 weights read x in place
    const size_t act_stride = act_is_x ? n_in * sizeof(float) : align_up(act_row_bytes(traits.act, n_in));
    const size_t f32_row_bytes = align_up(n_in * sizeof(float));
    const size_t act_bytes = act_is_x ? 0 : act_stride * n_tokens;
    const size_t f32_bytes = x_is_f32 ? 0 : f32_row_bytes * n_tokens;  // [n_tokens][n_in] f32 copy
    // Q4_0 on AVX2: prefill repacks each thread's chunk of rows into interleaved 8-row panels; a
    // decode transposes 8 rows in registers (gemv_q4_0_x8). Batch-invariant: the panel GEMM from
    // 2 tokens on, and a decode whose every output matches it bit for bit (its leftover rows
    // through a one-panel GEMM), so a token's result never depends on the batch size.
    const bool q4_simd = w.type == DType::Q4_0 && isa != CpuIsa::Scalar && panels_enabled();
    const bool panel_gemm = q4_simd && n_tokens >= (batch_invariant ? 2 : kPanelMinTokens);
    const bool gemv_x8 = q4_simd && n_tokens == 1;
    // VNNI where the CPU has it (same panels, same bits).
    const auto gemm_q4_x8 = isa == CpuIsa::Avx512 ? avx512::gemm_q4_0_x8 : avx2::gemm_q4_0_x8;
    const auto gemv_q4_x8 = isa == CpuIsa::Avx512 ? avx512::gemv_q4_0_x8 : avx2::gemv_q4_0_x8;
    const int64_t chunk = rows_per_chunk(n_out, pool.size(), n_tokens, w.row_bytes());
    const int64_t n_blocks = n_in / QK4_0;
    const size_t panel_bytes = q4_simd ? align_up(n_blocks * kQ4PanelBlockBytes) : 0;
    const size_t panels_per_thread =
        panel_gemm ? (chunk + 7) / 8 * panel_bytes : (gemv_x8 && batch_invariant ? panel_bytes : 0);
    const size_t need = act_bytes + f32_bytes + panels_per_thread * pool.size() + kAlign;
    if (scratch.buffer.size() < need) scratch.buffer.resize(need);
    uint8_t* base = scratch.buffer.data();
    base += (kAlign - reinterpret_cast<uintptr_t>(base) % kAlign) % kAlign;
    uint8_t* act = act_is_x ? static_cast<uint8_t*>(x.data) : base;
    uint8_t* x_f32 = base + act_bytes;
    uint8_t* panels = x_f32 + f32_bytes;

    auto convert_tokens = [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const float* src = static_cast<const float*>(x.row(t));
            if (!x_is_f32) {
                float* tmp = reinterpret_cast<float*>(x_f32 + t * f32_row_bytes);
                const auto* h = static_cast<const uint16_t*>(x.row(t));
                if (isa == CpuIsa::Scalar)
                    for (int64_t i = 0; i < n_in; ++i) tmp[i] = f16_to_f32(h[i]);
                else
                    avx2::convert_f16_to_f32(h, tmp, n_in);
                src = tmp;
            }
            quantize(src, act + t * act_stride, n_in);
        }
    };
    if (!act_is_x) {
        if (n_tokens == 1 || pool.size() == 1) convert_tokens(0, n_tokens);
        else pool.parallel_for(n_tokens, convert_tokens);
    }

    // ---- rows: chunks through an atomic counter; tokens in tiles of kMaxTokenTile ----
    const int64_t n_chunks = (n_out + chunk - 1) / chunk;
    float* y = static_cast<float*>(out.data);
    std::atomic<int64_t> next_chunk{0};
    if (panel_gemm) {
        // Repack the chunk once, then every token tile runs over all its panels (the tile's
        // activations stay in L1, the chunk's panels in L2).
        pool.run_dynamic([&](int ti, int) {
            uint8_t* my_panels = panels + ti * panels_per_thread;
            for (int64_t c = next_chunk.fetch_add(1, std::memory_order_relaxed); c < n_chunks;
                 c = next_chunk.fetch_add(1, std::memory_order_relaxed)) {
                const int64_t r0 = c * chunk, r1 = std::min(n_out, r0 + chunk);
                const int64_t n_panels = (r1 - r0 + 7) / 8;
                for (int64_t pi = 0; pi < n_panels; ++pi) {
                    const int rows = static_cast<int>(std::min<int64_t>(8, r1 - r0 - 8 * pi));
                    avx2::repack_q4_0_x8(w.row(r0 + 8 * pi), w.row_bytes(), rows, n_blocks, my_panels + pi * panel_bytes);
                }
                for (int64_t t0 = 0; t0 < n_tokens; t0 += kMaxTokenTile) {
                    const int n_x = static_cast<int>(std::min<int64_t>(kMaxTokenTile, n_tokens - t0));
                    for (int64_t pi = 0; pi < n_panels; ++pi) {
                        const int rows = static_cast<int>(std::min<int64_t>(8, r1 - r0 - 8 * pi));
                        gemm_q4_x8(n_blocks, my_panels + pi * panel_bytes, act + t0 * act_stride, act_stride, n_x,
                                   y + t0 * n_out + r0 + 8 * pi, n_out, rows);
                    }
                }
            }
        });
        return;
    }
    const size_t w_row_bytes = w.row_bytes();
    const auto* w_data = static_cast<const uint8_t*>(w.data);
    if (gemv_x8) {
        // Decode: 8 rows at a time through the in-register transpose; the last n_out % 8 rows
        // through the row kernel (batch-invariant: through a panel, as a prefill would).
        pool.run_dynamic([&](int ti, int) {
            for (int64_t c = next_chunk.fetch_add(1, std::memory_order_relaxed); c < n_chunks;
                 c = next_chunk.fetch_add(1, std::memory_order_relaxed)) {
                const int64_t r0 = c * chunk, r1 = std::min(n_out, r0 + chunk);
                int64_t r = r0;
                for (; r + 8 <= r1; r += 8)
                    gemv_q4_x8(n_blocks, w_data + r * w_row_bytes, w_row_bytes, act, y + r, batch_invariant);
                if (r < r1 && batch_invariant) {
                    uint8_t* my_panel = panels + ti * panels_per_thread;
                    const int rows = static_cast<int>(r1 - r);
                    avx2::repack_q4_0_x8(w_data + r * w_row_bytes, w_row_bytes, rows, n_blocks, my_panel);
                    gemm_q4_x8(n_blocks, my_panel, act, act_stride, 1, y + r, n_out, rows);
                    r = r1;
                }
                for (; r < r1; ++r) dot(n_in, w_data + r * w_row_bytes, act, act_stride, 1, y + r);
            }
        });
        return;
    }
    pool.run_dynamic([&](int, int) {
        float tile_out[kMaxTokenTile];
        for (int64_t c = next_chunk.fetch_add(1, std::memory_order_relaxed); c < n_chunks;
             c = next_chunk.fetch_add(1, std::memory_order_relaxed)) {
            const int64_t r0 = c * chunk, r1 = std::min(n_out, r0 + chunk);
            for (int64_t t0 = 0; t0 < n_tokens; t0 += kMaxTokenTile) {
                const int n_x = static_cast<int>(std::min<int64_t>(kMaxTokenTile, n_tokens - t0));
                const uint8_t* xt = act + t0 * act_stride;
                for (int64_t r = r0; r < r1; ++r) {
                    dot(n_in, w_data + r * w_row_bytes, xt, act_stride, n_x, tile_out);
                    for (int j = 0; j < n_x; ++j) y[(t0 + j) * n_out + r] = tile_out[j];
                }
            }
        }
    });
}

void matmul_reference(const TensorView& w, const TensorView& x, const TensorView& out) {
    const int64_t n_in = w.ne[0], n_out = w.ne[1], n_tokens = x.ne[1];
    MVLLM_CHECK(x.ne[0] == n_in && out.ne[0] == n_out && out.ne[1] == n_tokens && out.type == DType::F32)
        << "matmul_reference: shapes";
    std::vector<float> xf(n_in * n_tokens);  // [n_tokens][n_in] f32
    for (int64_t t = 0; t < n_tokens; ++t) dequantize_row(x.type, x.row(t), xf.data() + t * n_in, n_in);
    std::vector<float> wf(n_in);  // [n_in] f32, one dequantised weight row
    float* y = static_cast<float*>(out.data);
    for (int64_t r = 0; r < n_out; ++r) {
        dequantize_row(w.type, w.row(r), wf.data(), n_in);
        for (int64_t t = 0; t < n_tokens; ++t) {
            double sum = 0.0;
            const float* xr = xf.data() + t * n_in;
            for (int64_t i = 0; i < n_in; ++i) sum += static_cast<double>(wf[i]) * xr[i];
            y[t * n_out + r] = static_cast<float>(sum);
        }
    }
}

}  // namespace mvllm
