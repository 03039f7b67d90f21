// CPU matmul parity: every (weight type x shape x n_tokens x x dtype x ISA) against the double
// precision reference on dequantised weights, and every SIMD kernel against the scalar kernel of
// the same type on identical inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/vec_dot.h"
#include "core/quant.h"
#include "core/types.h"

namespace mvllm {
namespace {

const DType kWeightTypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                              DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};

std::vector<CpuIsa> available_isas() {
    std::vector<CpuIsa> isas = {CpuIsa::Scalar};
    if (cpu_isa() != CpuIsa::Scalar) isas.push_back(CpuIsa::Avx2);
    if (cpu_isa() == CpuIsa::Avx512) isas.push_back(CpuIsa::Avx512);
    return isas;
}

std::vector<float> random_floats(int64_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (auto& f : v) f = dist(rng);
    return v;
}

// A [rows][n] matrix of `type` quantised from random floats (the core reference quantiser).
std::vector<uint8_t> make_matrix(DType type, int64_t n, int64_t rows, uint32_t seed) {
    const std::vector<float> f = random_floats(n * rows, seed, 0.5f);
    std::vector<uint8_t> out(row_size(type, n) * rows);
    for (int64_t r = 0; r < rows; ++r) quantize_row(type, f.data() + r * n, out.data() + r * row_size(type, n), n);
    return out;
}

// Worst-case error of the activation format `act` for the x row: each value is off by at most
// ~0.5 of its block's step (amax / 127), plus the f16 rounding of a Q8_0 scale (2^-11 * 127
// steps, i.e. +0.062 step). Returns per-value bounds; all zero for f32 activations.
std::vector<double> activation_error_bound(DType act, const float* x, int64_t n) {
    std::vector<double> e(n, 0.0);
    if (act == DType::F32) return e;
    const int64_t block = act == DType::Q8_0 ? QK8_0 : QK_K;
    const double steps = act == DType::Q8_0 ? 0.5 + 127.0 / 2048.0 + 1e-3 : 0.5 + 1e-3;
    for (int64_t b = 0; b < n; b += block) {
        double amax = 0.0;
        for (int64_t i = b; i < b + block; ++i) amax = std::max(amax, (double)std::fabs(x[i]));
        for (int64_t i = b; i < b + block; ++i) e[i] = steps * amax / 127.0;
    }
    return e;
}

struct Case {
    DType type;
    int64_t n_in, n_out, n_tokens;
    DType x_type;
    CpuIsa isa;
};

std::string case_name(const Case& c) {
    return std::string(type_name(c.type)) + " " + std::to_string(c.n_in) + "x" + std::to_string(c.n_out) +
           " tokens=" + std::to_string(c.n_tokens) + " x=" + type_name(c.x_type) + " isa=" + cpu_isa_name(c.isa);
}

// matmul vs matmul_reference. Tolerance per output: sum_i |w_i| * e_i (the activation
// quantisation bound above, exact worst case) + 2e-6 * sum_i |w_i x_i| (f32 accumulation in a
// different order over up to 4864 terms: ~n * 2^-24 relative worst case would be 3e-4; blocked
// sums keep the real error orders of magnitude lower, 2e-6 is still > 30x what we observe).
void run_case(const Case& c, ThreadPool& pool) {
    SCOPED_TRACE(case_name(c));
    const std::vector<uint8_t> w_data = make_matrix(c.type, c.n_in, c.n_out, 1234u + c.n_in + c.n_out);
    const std::vector<float> xf = random_floats(c.n_in * c.n_tokens, 99u + c.n_tokens);
    std::vector<uint8_t> x_data(row_size(c.x_type, c.n_in) * c.n_tokens);
    for (int64_t t = 0; t < c.n_tokens; ++t)
        quantize_row(c.x_type, xf.data() + t * c.n_in, x_data.data() + t * row_size(c.x_type, c.n_in), c.n_in);
    std::vector<float> x_back(c.n_in * c.n_tokens);  // x as the kernels see it (after f16 rounding)
    for (int64_t t = 0; t < c.n_tokens; ++t)
        dequantize_row(c.x_type, x_data.data() + t * row_size(c.x_type, c.n_in), x_back.data() + t * c.n_in, c.n_in);

    TensorView w{c.type, {c.n_in, c.n_out, 1, 1}, const_cast<uint8_t*>(w_data.data())};
    TensorView x{c.x_type, {c.n_in, c.n_tokens, 1, 1}, x_data.data()};
    std::vector<float> got(c.n_out * c.n_tokens, -1.0f), want(c.n_out * c.n_tokens);
    TensorView out{DType::F32, {c.n_out, c.n_tokens, 1, 1}, got.data()};
    TensorView out_ref{DType::F32, {c.n_out, c.n_tokens, 1, 1}, want.data()};
    MatmulScratch scratch;
    matmul(pool, w, x, out, scratch, c.isa);
    matmul_reference(w, x, out_ref);

    const DType act = vec_dot_traits(c.type).act;
    std::vector<std::vector<double>> e_tokens;  // [n_tokens][n_in] per-value activation error bound
    for (int64_t t = 0; t < c.n_tokens; ++t)
        e_tokens.push_back(activation_error_bound(act, x_back.data() + t * c.n_in, c.n_in));
    std::vector<float> w_row(c.n_in);
    int failures = 0;
    double worst_ratio = 0.0;
    for (int64_t r = 0; r < c.n_out; ++r) {
        dequantize_row(c.type, w.row(r), w_row.data(), c.n_in);
        for (int64_t t = 0; t < c.n_tokens; ++t) {
            const float* xr = x_back.data() + t * c.n_in;
            const std::vector<double>& e = e_tokens[t];
            double bound = 0.0, mag = 0.0;
            for (int64_t i = 0; i < c.n_in; ++i) {
                bound += std::fabs(w_row[i]) * e[i];
                mag += std::fabs((double)w_row[i] * xr[i]);
            }
            const double tol = bound + 2e-6 * mag + 1e-6;
            const double err = std::fabs((double)got[t * c.n_out + r] - want[t * c.n_out + r]);
            worst_ratio = std::max(worst_ratio, err / tol);
            if (err > tol && ++failures <= 5)
                ADD_FAILURE() << "row " << r << " token " << t << ": got " << got[t * c.n_out + r] << " want "
                              << want[t * c.n_out + r] << " err " << err << " tol " << tol;
        }
    }
    EXPECT_EQ(failures, 0);
    if (std::getenv("MVLLM_TEST_VERBOSE")) std::printf("%-50s worst err/tol %.3f\n", case_name(c).c_str(), worst_ratio);
}

TEST(MatmulParity, AllTypesShapesTokensIsas) {
    ThreadPool pool(3);  // 3 threads: chunks do not divide evenly
    const int64_t shapes[][2] = {{256, 37}, {896, 67}, {4864, 19}, {512, 16}};
    for (DType type : kWeightTypes)
        for (const auto& s : shapes) {
            if (s[0] % type_traits(type).block_size != 0) continue;  // e.g. 896 is not a K-quant row
            for (int64_t n_tokens : {1, 3, 17})
                for (DType x_type : {DType::F32, DType::F16})
                    for (CpuIsa isa : available_isas()) run_case({type, s[0], s[1], n_tokens, x_type, isa}, pool);
        }
}

TEST(MatmulParity, SingleThreadAndManyRows) {
    ThreadPool pool(1);
    for (CpuIsa isa : available_isas()) {
        run_case({DType::Q4_0, 896, 301, 5, DType::F32, isa}, pool);
        run_case({DType::Q6_K, 256, 150, 4, DType::F32, isa}, pool);
    }
}

// ---- SIMD kernels vs scalar kernels on identical (random-bit) blocks ----------------------------

// Random bytes for every block field, with the f16/f32 scales replaced by sane finite values: this
// reaches corners the quantiser never produces (Q8_0 weight -128, Q6_K scale -128, 6-bit scale 63).
std::vector<uint8_t> random_blocks(DType type, int64_t n, int64_t rows, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> data(row_size(type, n) * rows);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
    const TypeTraits& tt = type_traits(type);
    const int64_t n_blocks = n / tt.block_size * rows;
    for (int64_t i = 0; i < n_blocks; ++i) {
        uint8_t* blk = data.data() + i * tt.type_size;
        const f16_t d = f32_to_f16(scale(rng)), dmin = f32_to_f16(scale(rng));
        switch (type) {
            case DType::Q8_0: std::memcpy(blk, &d, 2); break;
            case DType::Q4_0: std::memcpy(blk, &d, 2); break;
            case DType::Q4_K:
            case DType::Q5_K: std::memcpy(blk, &d, 2), std::memcpy(blk + 2, &dmin, 2); break;
            case DType::Q6_K: std::memcpy(blk + offsetof(BlockQ6_K, d), &d, 2); break;
            default: break;
        }
    }
    if (!tt.is_quantized) {  // plain floats: random finite values
        std::vector<float> f = random_floats(n * rows, seed);
        for (int64_t i = 0; i < n * rows; ++i) {
            if (type == DType::F32) std::memcpy(data.data() + 4 * i, &f[i], 4);
            if (type == DType::F16) { const f16_t h = f32_to_f16(f[i]); std::memcpy(data.data() + 2 * i, &h, 2); }
            if (type == DType::BF16) { const bf16_t h = f32_to_bf16(f[i]); std::memcpy(data.data() + 2 * i, &h, 2); }
        }
    }
    return data;
}

// Activations: Q8_0 / Q8_K rows with q in [-127, 127] (as the quantisers produce) and correct bsums.
std::vector<uint8_t> random_activations(DType act, int64_t n, int n_rows, uint32_t seed) {
    const size_t row_bytes = act_row_bytes(act, n);
    std::vector<uint8_t> data(row_bytes * n_rows);
    if (act == DType::F32) {
        const std::vector<float> f = random_floats(n * n_rows, seed);
        std::memcpy(data.data(), f.data(), data.size());
        return data;
    }
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> q(-127, 127);
    std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
    if (act == DType::Q8_0) {
        for (int r = 0; r < n_rows; ++r) {
            auto* b = reinterpret_cast<BlockQ8_0*>(data.data() + r * row_bytes);
            for (int64_t i = 0; i < n / QK8_0; ++i) {
                b[i].d = f32_to_f16(scale(rng));
                for (auto& v : b[i].qs) v = static_cast<int8_t>(q(rng));
            }
            finish_act_q8_0(b, n);
        }
    } else {
        auto* b = reinterpret_cast<BlockQ8_K*>(data.data());
        for (int64_t i = 0; i < n / QK_K * n_rows; ++i) {
            b[i].d = scale(rng);
            for (auto& v : b[i].qs) v = static_cast<int8_t>(q(rng));
            for (int k = 0; k < QK_K / 16; ++k) {
                int s = 0;
                for (int j = 0; j < 16; ++j) s += b[i].qs[16 * k + j];
                b[i].bsums[k] = static_cast<int16_t>(s);
            }
        }
    }
    return data;
}

// SIMD and scalar kernels compute the same exact int32 block sums and differ only in the order of
// f32 additions: |diff| <= 1e-5 * max(1, sum of |block contributions|) (n <= 4864, eps 6e-8).
TEST(MatmulKernels, SimdMatchesScalar) {
    for (DType type : kWeightTypes) {
        const VecDotTraits& t = vec_dot_traits(type);
        for (int64_t n : {256, 896, 4864}) {
            if (n % type_traits(type).block_size != 0) continue;
            const std::vector<uint8_t> w = random_blocks(type, n, 1, 7u + n);
            const std::vector<uint8_t> x = random_activations(t.act, n, kMaxTokenTile, 11u + n);
            const size_t x_row_bytes = act_row_bytes(t.act, n);
            for (int n_x = 1; n_x <= kMaxTokenTile; ++n_x) {
                float want[kMaxTokenTile];
                t.dot[0](n, w.data(), x.data(), x_row_bytes, n_x, want);
                for (CpuIsa isa : available_isas()) {
                    if (isa == CpuIsa::Scalar) continue;
                    float got[kMaxTokenTile];
                    vec_dot_fn(t, isa)(n, w.data(), x.data(), x_row_bytes, n_x, got);
                    for (int j = 0; j < n_x; ++j) {
                        float ref_tile[1];  // the same token alone (tile of 1) must agree as well
                        vec_dot_fn(t, isa)(n, w.data(), x.data() + j * x_row_bytes, x_row_bytes, 1, ref_tile);
                        const double tol = 1e-5 * std::max(1.0, (double)std::fabs(want[j])) * std::sqrt((double)n);
                        EXPECT_NEAR(got[j], want[j], tol) << type_name(type) << " n=" << n << " n_x=" << n_x
                                                          << " j=" << j << " isa=" << cpu_isa_name(isa);
                        EXPECT_NEAR(ref_tile[0], got[j], tol) << type_name(type) << " tile vs single";
                    }
                }
            }
        }
    }
}

// The interleaved Q4_0 panel GEMM (prefill) and the 8-row register-transpose GEMV (decode) against
// the scalar row kernel, on random nibbles plus extreme blocks (all nibbles 0 or 15 against all
// activations +-127: the largest i16 partial sums the bias words allow), 1..8 rows.
TEST(MatmulKernels, Q4_0PanelsMatchScalar) {
    if (cpu_isa() == CpuIsa::Scalar) GTEST_SKIP() << "no AVX2";
    for (int64_t n : {32, 256, 896, 4864}) {
        const int64_t nb = n / QK4_0;
        std::vector<uint8_t> w = random_blocks(DType::Q4_0, n, 8, 21u + n);
        std::vector<uint8_t> x = random_activations(DType::Q8_0, n, kMaxTokenTile, 23u + n);
        const size_t w_row_bytes = row_size(DType::Q4_0, n), x_row_bytes = act_row_bytes(DType::Q8_0, n);
        for (int64_t b = 0; b < nb; b += 3) {  // every third block extreme, varying patterns
            for (int r = 0; r < 8; ++r) {
                auto* blk = reinterpret_cast<BlockQ4_0*>(w.data() + r * w_row_bytes) + b;
                std::memset(blk->qs, ((b / 3 + r) & 1) ? 0xFF : 0x00, sizeof(blk->qs));
            }
            for (int j = 0; j < kMaxTokenTile; ++j) {
                auto* xb = reinterpret_cast<BlockQ8_0*>(x.data() + j * x_row_bytes) + b;
                for (auto& v : xb->qs) v = static_cast<int8_t>(((b / 3 + j) & 1) ? 127 : -127);
            }
        }
        for (int j = 0; j < kMaxTokenTile; ++j) finish_act_q8_0(x.data() + j * x_row_bytes, n);
        float want[8][kMaxTokenTile];
        for (int r = 0; r < 8; ++r)
            scalar::dot_q4_0(n, w.data() + r * w_row_bytes, x.data(), x_row_bytes, kMaxTokenTile, want[r]);
        std::vector<uint8_t> panel(nb * kQ4PanelBlockBytes + 64);
        uint8_t* p = panel.data() + (64 - reinterpret_cast<uintptr_t>(panel.data()) % 64) % 64;
        for (int rows = 1; rows <= 8; ++rows) {
            avx2::repack_q4_0_x8(w.data(), w_row_bytes, rows, nb, p);
            for (int n_x = 1; n_x <= kMaxTokenTile; ++n_x) {
                float got[kMaxTokenTile][8];
                for (auto& g : got) std::fill(g, g + 8, -1234.0f);
                avx2::gemm_q4_0_x8(nb, p, x.data(), x_row_bytes, n_x, &got[0][0], 8, rows);
                for (int j = 0; j < kMaxTokenTile; ++j)
                    for (int r = 0; r < 8; ++r) {
                        if (j >= n_x || r >= rows) {
                            EXPECT_EQ(got[j][r], -1234.0f) << "wrote outside the tile";
                            continue;
                        }
                        const double tol = 1e-5 * std::max(1.0, (double)std::fabs(want[r][j])) * std::sqrt((double)n);
                        EXPECT_NEAR(got[j][r], want[r][j], tol) << "n=" << n << " rows=" << rows << " r=" << r << " j=" << j;
                    }
            }
        }
        if (cpu_isa() == CpuIsa::Avx512) {  // VNNI: the same integers, so the same bits as AVX2
            avx2::repack_q4_0_x8(w.data(), w_row_bytes, 8, nb, p);
            float a2[kMaxTokenTile][8];
            avx2::gemm_q4_0_x8(nb, p, x.data(), x_row_bytes, kMaxTokenTile, &a2[0][0], 8, 8);
            for (int n_x = 1; n_x <= kMaxTokenTile; ++n_x) {
                float a5[kMaxTokenTile][8];
                avx512::gemm_q4_0_x8(nb, p, x.data(), x_row_bytes, n_x, &a5[0][0], 8, 8);
                EXPECT_EQ(0, std::memcmp(a2, a5, sizeof(float) * 8 * n_x)) << "avx512 gemm n=" << n << " n_x=" << n_x;
            }
            for (int j = 0; j < kMaxTokenTile; ++j)
                for (bool fixed : {false, true}) {
                    float g2[8], g5[8];
                    avx2::gemv_q4_0_x8(nb, w.data(), w_row_bytes, x.data() + j * x_row_bytes, g2, fixed);
                    avx512::gemv_q4_0_x8(nb, w.data(), w_row_bytes, x.data() + j * x_row_bytes, g5, fixed);
                    EXPECT_EQ(0, std::memcmp(g2, g5, sizeof(g2))) << "avx512 gemv n=" << n << " fixed " << fixed;
                }
        }
        for (int j = 0; j < kMaxTokenTile; ++j) {
            float got[8];
            avx2::gemv_q4_0_x8(nb, w.data(), w_row_bytes, x.data() + j * x_row_bytes, got);
            for (int r = 0; r < 8; ++r) {
                const double tol = 1e-5 * std::max(1.0, (double)std::fabs(want[r][j])) * std::sqrt((double)n);
                EXPECT_NEAR(got[r], want[r][j], tol) << "gemv n=" << n << " r=" << r << " j=" << j;
            }
        }
    }
}

// The vectorised activation quantisers produce the core reference's blocks byte for byte.
TEST(MatmulKernels, ActivationQuantisersMatchReference) {
    if (cpu_isa() == CpuIsa::Scalar) GTEST_SKIP() << "no AVX2";
    for (DType act : {DType::Q8_0, DType::Q8_K}) {
        const int64_t n = 4864;
        std::vector<float> f = random_floats(n, 5u);
        f[300] = -4.0f, f[301] = 4.0f;  // ties of magnitude: the first one sets the Q8_K sign
        std::fill(f.begin() + 512, f.begin() + 768, 0.0f);  // an all-zero block
        std::vector<uint8_t> want(act_row_bytes(act, n)), got(act_row_bytes(act, n));
        const VecDotTraits& t = vec_dot_traits(act == DType::Q8_0 ? DType::Q4_0 : DType::Q4_K);
        t.quantize[0](f.data(), want.data(), n);       // scalar activation row (blocks + side arrays)
        std::vector<uint8_t> core(row_size(act, n));
        quantize_row(act, f.data(), core.data(), n);
        t.quantize[1](f.data(), got.data(), n);
        EXPECT_EQ(0, std::memcmp(core.data(), got.data(), core.size())) << type_name(act) << " blocks";
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size())) << type_name(act) << " row";
    }
}

TEST(MatmulIsa, NameAndEnvCap) {
    EXPECT_STREQ(cpu_isa_name(CpuIsa::Scalar), "scalar");
    EXPECT_STREQ(cpu_isa_name(CpuIsa::Avx2), "avx2");
    EXPECT_STREQ(cpu_isa_name(CpuIsa::Avx512), "avx512");
}

}  // namespace
}  // namespace mvllm
