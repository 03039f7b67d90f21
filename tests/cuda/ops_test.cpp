// Table-driven parity of the CUDA ops against the CPU scalar references over (type, shape):
// matmul (GEMV and GEMM paths, every weight type, F32/F16 activations, with and without bias,
// 7B-sized matrices for the decode GEMV), the fused forms (residual-add epilogue, gate/up +
// SwiGLU), embedding, RMSNorm, RoPE, SwiGLU, add, row gather (the argmax and the draws: token_pick_test.cpp;
// the fused QKV projection's RoPE and K/V store: qkv_rope_test.cpp). Skips
// without a GPU.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/gemv_stream.cuh"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/weight_layout.h"
#include "core/half.h"
#include "core/race.h"
#include "model/generate.h"
#include "cuda_test_util.h"

namespace mvllm::test {
namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The device layout of quantised weights (weight_layout.h; host code, runs without a GPU): split
// then joined gives the GGUF bytes back, and Q4_K's planes hold what the header comment says.
TEST(WeightLayout, SplitThenJoinRestoresTheGgufBytes) {
    std::mt19937 rng(44);
    for (DType type : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
        const int64_t n_values = 512, n_rows = 3;
        std::vector<uint8_t> gguf(row_size(type, n_values) * n_rows), split(gguf.size()), back(gguf.size());
        for (auto& b : gguf) b = static_cast<uint8_t>(rng());
        cuda::split_rows(type, gguf.data(), split.data(), n_values, n_rows);
        EXPECT_NE(split, gguf) << type_name(type);
        cuda::join_rows(type, split.data(), back.data(), n_values, n_rows);
        EXPECT_EQ(back, gguf) << type_name(type);
        if (type != DType::Q4_K) continue;
        const int64_t n_blocks = n_values / 256 * n_rows;
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t* block = gguf.data() + 144 * b;
            EXPECT_EQ(std::memcmp(split.data() + 128 * n_blocks + 16 * b, block, 16), 0) << "scale record " << b;
            for (int g = 0; g < 4; ++g)
                for (int h = 0; h < 2; ++h)
                    EXPECT_EQ(std::memcmp(split.data() + 128 * b + 16 * g + 64 * h, block + 16 + 32 * g + 16 * h, 16), 0)
                        << "block " << b << " group " << g << " half " << h;
        }
    }
}

struct Shape {
    int64_t n_in, n_out;
};

struct MatmulCase {
    DType weight;
    int64_t n_in, n_out;
};

const MatmulCase kMatmulCases[] = {
    {DType::F32, 256, 72},   {DType::F32, 96, 33},  {DType::F16, 256, 64},  {DType::BF16, 256, 40},
    {DType::Q8_0, 256, 70},  {DType::Q8_0, 96, 20}, {DType::Q4_0, 512, 66}, {DType::Q4_0, 64, 9},
    {DType::Q4_K, 512, 37},  {DType::Q6_K, 512, 45}, {DType::Q4_K, 256, 8}, {DType::Q6_K, 256, 130},
};

TEST(CudaOps, MatmulMatchesReference) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda();
    ASSERT_TRUE(be);
    uint64_t seed = 1;
    for (const MatmulCase& mc : kMatmulCases) {
        const std::vector<float> w_values = random_floats(static_cast<size_t>(mc.n_in * mc.n_out), seed++, 0.5f);
        std::vector<uint8_t> w_bytes = encode_rows(mc.weight, w_values, mc.n_in);
        const TensorView w_host = host_view(mc.weight, mc.n_in, mc.n_out, w_bytes.data());
        auto w_dev = be->upload_weight(w_host);
        ASSERT_TRUE(w_dev.is_ok()) << w_dev.status().message();
        std::vector<float> bias = random_floats(static_cast<size_t>(mc.n_out), seed++, 0.1f);
        auto bias_dev = be->upload_weight(host_view(DType::F32, mc.n_out, 1, bias.data()));
        ASSERT_TRUE(bias_dev.is_ok());
        for (int64_t n_tokens : {1, 2, 3, 5, 8, 9, 40, 70, 300}) {
            for (DType xt : {DType::F32, DType::F16}) {
                for (bool with_bias : {false, true}) {
                    const std::vector<float> xv = random_floats(static_cast<size_t>(mc.n_in * n_tokens), seed++);
                    std::vector<uint8_t> x_bytes = encode_rows(xt, xv, mc.n_in);
                    Batch batch = simple_batch(std::vector<int32_t>(n_tokens, 0), 0);
                    be->begin(batch);
                    TensorView x = be->alloc(xt, mc.n_in, n_tokens);
                    be->upload(x_bytes.data(), x);
                    TensorView out = be->alloc(DType::F32, mc.n_out, n_tokens);
                    be->matmul(*w_dev, x, with_bias ? *bias_dev : TensorView{}, out);
                    std::vector<float> got(static_cast<size_t>(mc.n_out * n_tokens));
                    be->to_host(out, got.data());
                    std::vector<float> ref(got.size());
                    matmul_reference(w_host, host_view(xt, mc.n_in, n_tokens, x_bytes.data()),
                                     host_view(DType::F32, mc.n_out, n_tokens, ref.data()));
                    if (with_bias)
                        for (int64_t t = 0; t < n_tokens; ++t)
                            for (int64_t o = 0; o < mc.n_out; ++o) ref[t * mc.n_out + o] += bias[o];
                    const cuda::MatmulPath path = cuda::choose_matmul_path(mc.weight, n_tokens);
                    // F32 math (GEMV, F32 GEMM): rounding of sums of <= 512 products, far below
                    // 1e-4. F16 GEMM (cuBLAS, or the quantised tile GEMM): x rounded to f16 (2^-11
                    // relative) and the weight too where its dequantised value needs more than 11
                    // mantissa bits: a few 1e-4, bound 2e-3.
                    const bool f16_operands = path == cuda::MatmulPath::GemmF16 || path == cuda::MatmulPath::GemmTiles;
                    const double tol = f16_operands ? 2e-3 : 1e-4;
                    const double err = rel_max_error(got, ref);
                    EXPECT_LE(err, tol) << type_name(mc.weight) << " " << mc.n_in << "x" << mc.n_out << " tokens "
                                        << n_tokens << " x " << type_name(xt) << " path "
                                        << cuda::matmul_path_name(path) << " bias " << with_bias;
                }
            }
        }
    }
}

// Decode GEMV on 7B-sized matrices (Qwen2.5-7B fused QKV 3584 -> 4608, and an 18944-long row as
// in its down projection): every weight type, 1..8 token columns, against the scalar reference.
// The QX activation keeps 16 bits per value (gemv.cuh): over rows of 3584-18944 products the
// error stays near 1e-5 of the largest output; bound 1e-4 as for the small shapes.
TEST(CudaOps, DecodeGemvLargeShapes) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda();
    ASSERT_TRUE(be);
    uint64_t seed = 100;
    for (DType type : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16, DType::BF16}) {
        for (const Shape& sh : {Shape{3584, 4608}, Shape{18944, 96}}) {
            const std::vector<float> w_values = random_floats(static_cast<size_t>(sh.n_in * sh.n_out), seed++, 0.5f);
            std::vector<uint8_t> w_bytes = encode_rows(type, w_values, sh.n_in);
            const TensorView w_host = host_view(type, sh.n_in, sh.n_out, w_bytes.data());
            auto w_dev = be->upload_weight(w_host);
            ASSERT_TRUE(w_dev.is_ok()) << w_dev.status().message();
            for (int64_t n_tokens : {1, 2, 5, 8}) {
                const std::vector<float> xv = random_floats(static_cast<size_t>(sh.n_in * n_tokens), seed++);
                std::vector<float> xh = xv;
                TensorView x = begin_with_input(*be, xv, sh.n_in, n_tokens);
                TensorView out = be->alloc(DType::F32, sh.n_out, n_tokens);
                be->matmul(*w_dev, x, TensorView{}, out);
                std::vector<float> got(static_cast<size_t>(sh.n_out * n_tokens)), ref(got.size());
                be->to_host(out, got.data());
                matmul_reference(w_host, host_view(DType::F32, sh.n_in, n_tokens, xh.data()),
                                 host_view(DType::F32, sh.n_out, n_tokens, ref.data()));
                const double err = rel_max_error(got, ref);
                EXPECT_LE(err, 1e-4) << type_name(type) << " " << sh.n_in << "x" << sh.n_out << " tokens " << n_tokens;
                if (n_tokens == 1) std::printf("gemv %s %ldx%ld: rel err %.3g\n", type_name(type), long(sh.n_in), long(sh.n_out), err);
            }
        }
    }
}

// The streaming GEMV (gemv_stream.cuh: rows by bulk copies through a shared-memory ring, one CTA
// per SM) against the register GEMV on the same QX column, for every quantised type: a matrix
// whose CTAs wrap the ring (3584 x 8192), long rows split over 8-16 warps (18944 x 1024), a small
// one (1024 x 208), with bias, as a residual add, and the gate/up pair with SwiGLU. Where the plan
// splits rows over 1, 2 or 4 warps, the register GEMV runs with that K split, and the sums (same
// items, same order) must be the same bits; over 8 or 16 warps (no such K split), within 1e-5.
TEST(CudaOps, StreamingGemvEqualsRegisterGemv) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda();
    ASSERT_TRUE(be);
    uint64_t seed = 900;
    for (DType type : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
        for (const Shape& sh : {Shape{3584, 8192}, Shape{18944, 1024}, Shape{1024, 208}}) {
            SCOPED_TRACE(std::string(type_name(type)) + " " + std::to_string(sh.n_in) + "x" + std::to_string(sh.n_out));
            std::vector<uint8_t> wb = random_blocks(type, sh.n_in, sh.n_out, seed++);
            std::vector<uint8_t> ub = random_blocks(type, sh.n_in, sh.n_out, seed++);
            auto w = be->upload_weight(host_view(type, sh.n_in, sh.n_out, wb.data()));
            auto u = be->upload_weight(host_view(type, sh.n_in, sh.n_out, ub.data()));
            std::vector<float> bias = random_floats(static_cast<size_t>(sh.n_out), seed++, 0.1f);
            auto b = be->upload_weight(host_view(DType::F32, sh.n_out, 1, bias.data()));
            ASSERT_TRUE(w.is_ok() && u.is_ok() && b.is_ok());
            const std::vector<float> xv = random_floats(static_cast<size_t>(sh.n_in), seed++);
            const std::vector<float> acc0 = random_floats(static_cast<size_t>(sh.n_out), seed++);
            // out = W x + bias; acc += W x; hidden = silu(W x) * (U x).
            auto run = [&](int mode, int k_split, std::vector<float>* out, std::vector<float>* acc, std::vector<float>* hidden) {
                cuda::set_gemv_stream_mode(mode);
                cuda::set_gemv_k_split(k_split);
                TensorView x = begin_with_input(*be, xv, sh.n_in, 1);
                TensorView o = be->alloc(DType::F32, sh.n_out, 1), a = be->alloc(DType::F32, sh.n_out, 1);
                TensorView h = be->alloc(DType::F32, sh.n_out, 1), gu = be->alloc(DType::F32, 2 * sh.n_out, 1);
                TensorView s1 = be->alloc(DType::F32, sh.n_out, 1);
                be->upload(acc0.data(), a);
                be->matmul(*w, x, *b, o);
                be->matmul_add(*w, x, a, s1);
                be->matmul_swiglu(*w, *u, x, h, gu);
                for (auto [t, v] : {std::pair{o, out}, std::pair{a, acc}, std::pair{h, hidden}}) {
                    v->resize(static_cast<size_t>(sh.n_out));
                    be->to_host(t, v->data());
                }
            };
            for (bool pair : {false, true}) {
                const cuda::GemvStreamPlan plan = cuda::gemv_stream_plan(type, sh.n_in, sh.n_out, pair, be->sm_count(), true);
                ASSERT_TRUE(plan.ok) << "pair " << pair;
                SCOPED_TRACE("pair " + std::to_string(pair) + " warps per row " + std::to_string(plan.wpr) + " stages " +
                             std::to_string(plan.n_stages) + " rows per stage " + std::to_string(plan.rows_per_stage));
                std::vector<float> ro, ra, rh, so, sa, sh2;
                const int ks = plan.wpr <= 4 ? plan.wpr : 0;
                run(0, ks, &ro, &ra, &rh);
                run(2, 0, &so, &sa, &sh2);
                if (!pair) {
                    if (ks) {
                        EXPECT_TRUE(same_bits(so, ro));
                        EXPECT_TRUE(same_bits(sa, ra));
                    } else {
                        EXPECT_LE(rel_max_error(so, ro), 1e-5);
                        EXPECT_LE(rel_max_error(sa, ra), 1e-5);
                    }
                } else if (ks) {
                    EXPECT_TRUE(same_bits(sh2, rh));
                } else {
                    EXPECT_LE(rel_max_error(sh2, rh), 1e-5);
                }
            }
        }
    }
    cuda::set_gemv_stream_mode(-1);
    cuda::set_gemv_k_split(0);
}

// The register GEMV's K split for one token column (host only, no GPU): the fewest warps per row
// that bring a launch to ~2,048 warps while each lane keeps a whole item (32 values): the 7B O
// projection 2 (112 items per row: 4 would leave lanes without one), its down projection 4, QKV 2,
// gate/up 1 (enough rows); the 0.5B's 896-long rows stay whole (28 items), its down takes 4.
TEST(CudaOps, GemvKSplitRule) {
    struct Case {
        int64_t n_in, n_out;
        bool pair;
        int ks;
    };
    const Case cases[] = {
        {3584, 3584, false, 2}, {18944, 3584, false, 4}, {3584, 4608, false, 2}, {3584, 18944, true, 1},
        {896, 896, false, 1},   {4864, 896, false, 4},   {896, 1152, false, 1},
    };
    cuda::set_gemv_k_split(0);
    for (const Case& c : cases)
        EXPECT_EQ(cuda::gemv_one_column_k_split(DType::Q4_0, c.n_in, c.n_out, c.pair), c.ks)
            << c.n_in << "x" << c.n_out << (c.pair ? " pair" : "");
    cuda::set_gemv_k_split(4);  // the hook overrides the rule
    EXPECT_EQ(cuda::gemv_one_column_k_split(DType::Q4_0, 3584, 3584, false), 4);
    cuda::set_gemv_k_split(0);
}

// The streaming GEMV's rules (host only, no GPU): on 132 SMs it takes the 7B's large decode
// matrices with a CTA imbalance of at most 6 %, leaves matrices under 8 MB to the register GEMV,
// refuses row counts that are not a multiple of 16 and unquantised weights, and each plan fits the
// shared memory and the registers (items per lane) of one CTA per SM.
TEST(CudaOps, StreamingGemvPlanRules) {
    struct Case {
        DType type;
        int64_t n_in, n_out;
        bool pair, ok;
        int wpr;
    };
    const Case cases[] = {
        {DType::Q4_0, 3584, 18944, true, true, 2},    // 7B gate/up + SwiGLU
        {DType::Q4_0, 18944, 3584, false, true, 16},  // 7B down
        {DType::Q4_0, 3584, 4608, false, true, 4},    // 7B QKV
        {DType::Q4_0, 3584, 3584, false, false, 0},   // 7B O: 7.2 MB
        {DType::Q6_K, 3584, 152064, false, true, 2},  // 7B LM head of a q4_0 file
        {DType::Q4_K, 3584, 18944, true, true, 2},
        {DType::Q6_K, 18944, 3584, false, true, 16},
        {DType::Q4_0, 896, 4864, true, false, 0},     // 0.5B gate/up: 4.9 MB
        {DType::Q4_0, 4864, 896, false, false, 0},    // 0.5B down
        {DType::Q4_0, 3584, 18936, false, false, 0},  // rows not a multiple of 16
        {DType::F16, 3584, 18944, false, false, 0},
    };
    // By default only Q6_K takes it (the types where it measured faster).
    for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16})
        EXPECT_EQ(cuda::gemv_stream_preferred(t), t == DType::Q6_K) << type_name(t);
    for (const Case& c : cases) {
        const cuda::GemvStreamPlan p = cuda::gemv_stream_plan(c.type, c.n_in, c.n_out, c.pair, 132, false);
        SCOPED_TRACE(std::string(type_name(c.type)) + " " + std::to_string(c.n_in) + "x" + std::to_string(c.n_out));
        ASSERT_EQ(p.ok, c.ok);
        if (!p.ok) continue;
        EXPECT_EQ(p.wpr, c.wpr);
        const int64_t upp = 16 / p.wpr, per = (p.units + p.n_ctas - 1) / p.n_ctas;
        EXPECT_EQ(p.units * upp, c.n_out);
        EXPECT_LE(static_cast<double>(per * p.n_ctas) / p.units, 1.06);
        EXPECT_EQ(p.rows_per_stage % upp, 0);
        EXPECT_GE(p.n_stages, 2);
        EXPECT_LE(p.smem_bytes, 227 << 10);
        EXPECT_LE(p.items_per_lane, c.type == DType::Q4_0 || c.type == DType::Q8_0 ? 2 : 1);
    }
}

// The quantised tile GEMM (gemm_tiles.cuh) on 7B-sized matrices, every tile variant: Q4_0,
// 9..256 token columns (partial token tiles), an 18944-long row (split into K slices that the
// last CTA sums) with only 96 rows (a partial row tile), a 1056-long row (33 blocks: a partial
// last stage and scales not 8-byte aligned), with bias and as a residual add. F16 operands as
// cuBLAS's: bound 2e-3 of the largest output.
TEST(CudaOps, QuantisedTileGemmLargeShapes) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda();
    ASSERT_TRUE(be);
    const int64_t saved_max = cuda::gemm_tiles_max_tokens(), saved_min = cuda::gemm_tiles_min_weights();
    cuda::set_gemm_tiles_max_tokens(256);  // whatever the default
    uint64_t seed = 500;
    for (DType type : {DType::Q4_0}) {
        for (const Shape& sh : {Shape{3584, 4608}, Shape{18944, 96}, Shape{1056, 300}}) {
            const std::vector<float> w_values = random_floats(static_cast<size_t>(sh.n_in * sh.n_out), seed++, 0.5f);
            std::vector<uint8_t> w_bytes = encode_rows(type, w_values, sh.n_in);
            const TensorView w_host = host_view(type, sh.n_in, sh.n_out, w_bytes.data());
            auto w_dev = be->upload_weight(w_host);
            ASSERT_TRUE(w_dev.is_ok()) << w_dev.status().message();
            std::vector<float> bias = random_floats(static_cast<size_t>(sh.n_out), seed++, 0.1f);
            auto bias_dev = be->upload_weight(host_view(DType::F32, sh.n_out, 1, bias.data()));
            ASSERT_TRUE(bias_dev.is_ok());
            for (int64_t n_tokens : {9, 64, 65, 200}) {
                ASSERT_EQ(cuda::choose_matmul_path(type, n_tokens), cuda::MatmulPath::GemmTiles);
                const std::vector<float> xv = random_floats(static_cast<size_t>(sh.n_in * n_tokens), seed++);
                const std::vector<float> acc0 = random_floats(static_cast<size_t>(sh.n_out * n_tokens), seed++);
                std::vector<float> xh = xv;
                std::vector<float> ref(static_cast<size_t>(sh.n_out * n_tokens));
                matmul_reference(w_host, host_view(DType::F32, sh.n_in, n_tokens, xh.data()),
                                 host_view(DType::F32, sh.n_out, n_tokens, ref.data()));
                std::vector<float> ref_bias = ref, ref_acc = ref;
                for (int64_t t = 0; t < n_tokens; ++t)
                    for (int64_t o = 0; o < sh.n_out; ++o) {
                        ref_bias[t * sh.n_out + o] += bias[o];
                        ref_acc[t * sh.n_out + o] += acc0[t * sh.n_out + o];
                    }
                for (const cuda::GemmTilesVariant& v : cuda::gemm_tiles_variants()) {
                    cuda::force_gemm_tiles_variant(&v);
                    TensorView x = begin_with_input(*be, xv, sh.n_in, n_tokens);
                    TensorView out = be->alloc(DType::F32, sh.n_out, n_tokens);
                    TensorView acc = be->alloc(DType::F32, sh.n_out, n_tokens);
                    TensorView scratch = be->alloc(DType::F32, sh.n_out, n_tokens);
                    be->upload(acc0.data(), acc);
                    be->matmul(*w_dev, x, *bias_dev, out);
                    be->matmul_add(*w_dev, x, acc, scratch);
                    std::vector<float> got(ref.size()), got_acc(ref.size());
                    be->to_host(out, got.data());
                    be->to_host(acc, got_acc.data());
                    const std::string what = std::string(type_name(type)) + " " + std::to_string(sh.n_in) + "x" +
                                             std::to_string(sh.n_out) + " tokens " + std::to_string(n_tokens) +
                                             " variant " + cuda::gemm_tiles_variant_name(v);
                    const double err = rel_max_error(got, ref_bias), err_acc = rel_max_error(got_acc, ref_acc);
                    EXPECT_LE(err, 2e-3) << what;
                    EXPECT_LE(err_acc, 2e-3) << "accumulate " << what;
                    std::printf("gemm tiles %s: rel err %.3g (bias), %.3g (residual add)\n", what.c_str(), err, err_acc);
                }
                cuda::force_gemm_tiles_variant(nullptr);
            }
        }
    }
    cuda::set_gemm_tiles_max_tokens(saved_max, saved_min);
}

// The default rule for the quantised tile GEMM: Q4_0 at 9-16 rows on large matrices only (the 7B
// gate/up and down products), cuBLAS on the F16 copies for small matrices and more rows.
TEST(CudaOps, TileGemmRuleTakesLargeQ4_0MatricesAt9To16Rows) {
    const int64_t saved_max = cuda::gemm_tiles_max_tokens(), saved_min = cuda::gemm_tiles_min_weights();
    cuda::set_gemm_tiles_max_tokens(cuda::kGemmTilesMaxTokens, cuda::kGemmTilesMinWeights);
    const int64_t down = 18944 * 3584, gate_up = 2 * down, qkv = 3584 * 4608, small_gate_up = 2 * 896 * 4864;
    for (int64_t n : {9, 16}) {
        EXPECT_EQ(cuda::choose_matmul_path(DType::Q4_0, n, false, down), cuda::MatmulPath::GemmTiles) << n;
        EXPECT_EQ(cuda::choose_matmul_path(DType::Q4_0, n, false, gate_up), cuda::MatmulPath::GemmTiles) << n;
        EXPECT_EQ(cuda::choose_matmul_path(DType::Q4_0, n, false, qkv), cuda::MatmulPath::GemmF16) << n;
        EXPECT_EQ(cuda::choose_matmul_path(DType::Q4_0, n, false, small_gate_up), cuda::MatmulPath::GemmF16) << n;
        EXPECT_EQ(cuda::choose_matmul_path(DType::Q4_K, n, false, down), cuda::MatmulPath::GemmF16) << n;
        EXPECT_EQ(cuda::choose_matmul_path(DType::Q4_0, n, true, down), cuda::MatmulPath::Gemv) << n;
    }
    EXPECT_EQ(cuda::choose_matmul_path(DType::Q4_0, 8, false, down), cuda::MatmulPath::Gemv);
    EXPECT_EQ(cuda::choose_matmul_path(DType::Q4_0, 17, false, down), cuda::MatmulPath::GemmF16);
    cuda::set_gemm_tiles_max_tokens(saved_max, saved_min);
}

// The fused forms against their definitions on the CPU reference: acc += W x (the residual add
// in the GEMV epilogue; and cuBLAS beta = 1 beyond 8 rows) and silu(W_gate x) * (W_up x).
TEST(CudaOps, FusedMatmulsMatchReference) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda();
    ASSERT_TRUE(be);
    ThreadPool pool(2);
    uint64_t seed = 300;
    const int64_t n_in = 512, n_out = 200;
    for (DType type : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F32, DType::F16}) {
        std::vector<uint8_t> wg = encode_rows(type, random_floats(n_in * n_out, seed++, 0.5f), n_in);
        std::vector<uint8_t> wu = encode_rows(type, random_floats(n_in * n_out, seed++, 0.5f), n_in);
        const TensorView g_host = host_view(type, n_in, n_out, wg.data()), u_host = host_view(type, n_in, n_out, wu.data());
        auto g_dev = be->upload_weight(g_host);
        auto u_dev = be->upload_weight(u_host);
        ASSERT_TRUE(g_dev.is_ok() && u_dev.is_ok());
        // 12 rows: the first GEMM-sized call stacks the F16 copies of gate and up; 16: stacked already.
        // Q4_0 runs the GEMM-sized rows twice more on the quantised tile GEMM (gate and up as one
        // launch, the 200-row boundary inside a row tile).
        const int64_t saved_max = cuda::gemm_tiles_max_tokens(), saved_min = cuda::gemm_tiles_min_weights();
        for (int64_t n_tokens : {1, 3, 8, 12, 16, -12, -16}) {
            cuda::set_gemm_tiles_max_tokens(n_tokens < 0 ? 256 : 0);
            if (n_tokens < 0 && type != DType::Q4_0) continue;
            n_tokens = n_tokens < 0 ? -n_tokens : n_tokens;
            const std::vector<float> xv = random_floats(static_cast<size_t>(n_in * n_tokens), seed++);
            const std::vector<float> acc0 = random_floats(static_cast<size_t>(n_out * n_tokens), seed++);
            std::vector<float> xh = xv;
            TensorView x = begin_with_input(*be, xv, n_in, n_tokens);
            TensorView acc = be->alloc(DType::F32, n_out, n_tokens);
            TensorView s1 = be->alloc(DType::F32, n_out, n_tokens), gate_up = be->alloc(DType::F32, 2 * n_out, n_tokens);
            TensorView hidden = be->alloc(DType::F32, n_out, n_tokens);
            be->upload(acc0.data(), acc);
            be->matmul_add(*g_dev, x, acc, s1);
            be->matmul_swiglu(*g_dev, *u_dev, x, hidden, gate_up);
            std::vector<float> got_acc(acc0.size()), got_h(acc0.size());
            be->to_host(acc, got_acc.data());
            be->to_host(hidden, got_h.data());
            std::vector<float> rg(acc0.size()), ru(acc0.size()), ref_acc(acc0.size()), ref_h(acc0.size());
            const TensorView xhost = host_view(DType::F32, n_in, n_tokens, xh.data());
            matmul_reference(g_host, xhost, host_view(DType::F32, n_out, n_tokens, rg.data()));
            matmul_reference(u_host, xhost, host_view(DType::F32, n_out, n_tokens, ru.data()));
            for (size_t i = 0; i < rg.size(); ++i) ref_acc[i] = acc0[i] + rg[i];
            cpu::silu_mul(pool, host_view(DType::F32, n_out, n_tokens, rg.data()),
                          host_view(DType::F32, n_out, n_tokens, ru.data()),
                          host_view(DType::F32, n_out, n_tokens, ref_h.data()));
            const cuda::MatmulPath path = cuda::choose_matmul_path(type, n_tokens);
            const bool gemm_f16 = path == cuda::MatmulPath::GemmF16 || path == cuda::MatmulPath::GemmTiles;
            const double tol = gemm_f16 ? 2e-3 : 1e-4;
            EXPECT_LE(rel_max_error(got_acc, ref_acc), tol) << "matmul_add " << type_name(type) << " tokens " << n_tokens;
            EXPECT_LE(rel_max_error(got_h, ref_h), tol) << "matmul_swiglu " << type_name(type) << " tokens " << n_tokens
                                                        << " path " << cuda::matmul_path_name(path);
        }
        cuda::set_gemm_tiles_max_tokens(saved_max, saved_min);
    }
}

TEST(CudaOps, RefusesQ5K) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda();
    ASSERT_TRUE(be);
    std::vector<uint8_t> bytes(row_size(DType::Q5_K, 256) * 2);
    auto r = be->upload_weight(host_view(DType::Q5_K, 256, 2, bytes.data()));
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("q5_K"), std::string::npos) << r.status().message();
}

// Activations that do not fit the GPU: an exception with the sizes (Decoder::forward turns it into
// an error Status), and the backend keeps working afterwards.
TEST(CudaOps, OutOfMemoryIsAnErrorNotACrash) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda();
    ASSERT_TRUE(be);
    const std::vector<int32_t> ids = {1, 2, 3};
    Batch batch = simple_batch(ids, 0);
    be->begin(batch);
    try {
        be->alloc(DType::F32, int64_t{1} << 31, int64_t{1} << 12);  // 32 TiB
        ADD_FAILURE() << "a 32 TiB activation was allocated";
    } catch (const DeviceOutOfMemory& e) {
        EXPECT_NE(std::string(e.what()).find("did not fit"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("free"), std::string::npos) << e.what();
    }
    be->begin(batch);
    TensorView small = be->alloc(DType::F32, 64, 3);
    const std::vector<float> in = random_floats(64 * 3, 5);
    be->upload(in.data(), small);
    std::vector<float> back(in.size());
    be->download(small, back.data());
    EXPECT_EQ(back, in);
}

TEST(CudaOps, EmbedMatchesDequantisedRows) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda();
    ASSERT_TRUE(be);
    const int64_t width = 256, n_vocab = 50;
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
        for (DType out_type : {DType::F32, DType::F16}) {
            std::vector<uint8_t> table = encode_rows(t, random_floats(width * n_vocab, 7), width);
            auto dev = be->upload_weight(host_view(t, width, n_vocab, table.data()));
            ASSERT_TRUE(dev.is_ok());
            const std::vector<int32_t> ids = {3, 0, 49, 3, 17};
            Batch batch = simple_batch(ids, 0);
            be->begin(batch);
            TensorView out = be->alloc(out_type, width, static_cast<int64_t>(ids.size()));
            be->embed(*dev, out);
            std::vector<uint8_t> got_bytes(out.n_bytes());
            be->download(out, got_bytes.data());
            const std::vector<float> got = decode_rows(out_type, got_bytes.data(), width, out.ne[1]);
            std::vector<float> ref;
            for (int32_t id : ids) {
                std::vector<float> row = decode_rows(t, table.data() + id * row_size(t, width), width, 1);
                std::vector<uint8_t> enc = encode_rows(out_type, row, width);  // rounded like the GPU store
                std::vector<float> back = decode_rows(out_type, enc.data(), width, 1);
                ref.insert(ref.end(), back.begin(), back.end());
            }
            EXPECT_LE(rel_max_error(got, ref), 1e-6) << type_name(t) << " -> " << type_name(out_type);
        }
    }
}

TEST(CudaOps, RowOpsMatchCpu) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda();
    ASSERT_TRUE(be);
    ThreadPool pool(2);
    struct Shape {
        int64_t width, n_rows;
        int32_t head_dim;
    };
    for (const Shape& s : {Shape{256, 1, 64}, Shape{896, 7, 64}, Shape{224, 13, 16}, Shape{3584, 3, 128}}) {
        std::vector<int32_t> tokens(static_cast<size_t>(s.n_rows), 1);
        Batch batch = simple_batch(tokens, 37);
        be->begin(batch);
        const std::vector<float> xv = random_floats(s.width * s.n_rows, 11);
        const std::vector<float> yv = random_floats(s.width * s.n_rows, 12);
        const std::vector<float> wv = random_floats(s.width, 13);
        auto w_dev = be->upload_weight(host_view(DType::F32, s.width, 1, const_cast<float*>(wv.data())));
        ASSERT_TRUE(w_dev.is_ok());
        TensorView x = be->alloc(DType::F32, s.width, s.n_rows);
        TensorView y = be->alloc(DType::F32, s.width, s.n_rows);
        be->upload(xv.data(), x);
        be->upload(yv.data(), y);
        std::vector<float> got(xv.size()), ref(xv.size());
        std::vector<float> xh = xv;
        const TensorView xhost = host_view(DType::F32, s.width, s.n_rows, xh.data());

        // rms_norm to F32 and to F16
        for (DType ot : {DType::F32, DType::F16}) {
            TensorView out = be->alloc(ot, s.width, s.n_rows);
            be->rms_norm(x, *w_dev, 1e-5f, out);
            std::vector<uint8_t> ob(out.n_bytes());
            be->download(out, ob.data());
            std::vector<uint8_t> rb(out.n_bytes());
            cpu::rms_norm(pool, xhost, host_view(DType::F32, s.width, 1, const_cast<float*>(wv.data())), 1e-5f,
                          host_view(ot, s.width, s.n_rows, rb.data()));
            EXPECT_LE(rel_max_error(decode_rows(ot, ob.data(), s.width, s.n_rows),
                                    decode_rows(ot, rb.data(), s.width, s.n_rows)),
                      ot == DType::F32 ? 1e-5 : 1e-3)
                << "rms_norm " << s.width << " -> " << type_name(ot);
        }
        // silu_mul
        {
            TensorView out = be->alloc(DType::F32, s.width, s.n_rows);
            be->silu_mul(x, y, out);
            be->to_host(out, got.data());
            std::vector<float> yh = yv;
            cpu::silu_mul(pool, xhost, host_view(DType::F32, s.width, s.n_rows, yh.data()),
                          host_view(DType::F32, s.width, s.n_rows, ref.data()));
            EXPECT_LE(rel_max_error(got, ref), 1e-5) << "silu_mul";
        }
        // rope (in place), then add
        {
            const int32_t n_heads = static_cast<int32_t>(s.width / s.head_dim);
            std::vector<float> inv_freq(s.head_dim / 2);
            for (int32_t i = 0; i < s.head_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / s.head_dim);
            be->rope(x, n_heads, RopeParams{inv_freq.data(), s.head_dim});
            be->to_host(x, got.data());
            ref = xv;
            cpu::rope(pool, host_view(DType::F32, s.width, s.n_rows, ref.data()), n_heads, s.head_dim,
                      batch.positions.data(), inv_freq.data());
            EXPECT_LE(rel_max_error(got, ref), 1e-5) << "rope";
            be->add(x, y);
            be->to_host(x, got.data());
            for (size_t i = 0; i < ref.size(); ++i) ref[i] += yv[i];
            EXPECT_LE(rel_max_error(got, ref), 1e-6) << "add";
        }
        // gather rows (the batch wants the last row) and argmax of every row
        {
            TensorView g = be->alloc(DType::F32, s.width, 1);
            be->gather_logit_rows(y, g);
            std::vector<float> row(s.width);
            be->to_host(g, row.data());
            EXPECT_EQ(0, std::memcmp(row.data(), yv.data() + (s.n_rows - 1) * s.width, s.width * sizeof(float)));
            std::vector<int32_t> am(s.n_rows);
            std::vector<float> lp(s.n_rows);
            be->argmax_rows(y, am.data(), lp.data());
            for (int64_t r = 0; r < s.n_rows; ++r) {
                const float* row = yv.data() + r * s.width;
                EXPECT_EQ(am[r], argmax(row, s.width)) << "argmax row " << r;
                double sum = 0;  // the chosen token's log-softmax in double
                for (int64_t i = 0; i < s.width; ++i) sum += std::exp(double(row[i]) - row[am[r]]);
                EXPECT_NEAR(lp[r], -std::log(sum), 1e-5 * std::max(1.0, std::log(sum))) << "logprob row " << r;
            }
        }
    }
}

// A step may hold more rows than a grid's y dimension (65535): the row-wise kernels put the row in
// x (B4(a) at 256 x 512 prompt tokens in one step failed to launch before).
TEST(CudaOps, RowWiseKernelsTakeMoreThan65535Rows) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda();
    ASSERT_TRUE(be);
    ThreadPool pool(2);
    const int64_t width = 64, n_vocab = 97, n_rows = 70000;
    const int32_t head_dim = 64;
    std::vector<float> table = random_floats(width * n_vocab, 21);
    auto dev = be->upload_weight(host_view(DType::F32, width, n_vocab, table.data()));
    ASSERT_TRUE(dev.is_ok());
    std::vector<int32_t> ids(n_rows);
    for (int64_t i = 0; i < n_rows; ++i) ids[i] = static_cast<int32_t>((i * 31 + 7) % n_vocab);
    Batch batch = simple_batch(ids, 0);
    be->begin(batch);
    TensorView x = be->alloc(DType::F32, width, n_rows);
    be->embed(*dev, x);
    std::vector<float> got(static_cast<size_t>(width * n_rows)), ref(got.size());
    be->to_host(x, got.data());
    for (int64_t r = 0; r < n_rows; ++r)
        std::memcpy(ref.data() + r * width, table.data() + ids[r] * width, width * sizeof(float));
    EXPECT_EQ(0, std::memcmp(got.data(), ref.data(), got.size() * sizeof(float))) << "embed";
    std::vector<float> inv_freq(head_dim / 2);
    for (int32_t i = 0; i < head_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / head_dim);
    be->rope(x, 1, RopeParams{inv_freq.data(), head_dim});
    be->to_host(x, got.data());
    cpu::rope(pool, host_view(DType::F32, width, n_rows, ref.data()), 1, head_dim, batch.positions.data(),
              inv_freq.data());
    EXPECT_LE(rel_max_error(got, ref), 1e-5) << "rope";
}

}  // namespace
}  // namespace mvllm::test
