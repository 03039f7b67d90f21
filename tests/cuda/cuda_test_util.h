// Helpers of the CUDA tests: skipping without a GPU, random data, host <-> device tensors, and
// the error measure shared by the parity tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/half.h"
#include "core/types.h"
#include "kv/batch.h"

namespace mvllm::test {

// Skips the test (cleanly, at run time) when no CUDA device can be used.
#define MVLLM_REQUIRE_GPU()                                                         \
    do {                                                                            \
        if (!::mvllm::cuda_device_available()) GTEST_SKIP() << "no CUDA device"; \
    } while (0)

// Random GGUF blocks of `type` (random quants and 6-bit scales) whose f16 d (and Q4_K dmin) are
// small normal values: matrices of any size without the reference quantiser's cost (Q6_K takes
// ~300 ns per value).
inline std::vector<uint8_t> random_blocks(DType type, int64_t n_in, int64_t n_out, uint64_t seed) {
    std::vector<uint8_t> bytes(row_size(type, n_in) * n_out);
    std::mt19937_64 rng(seed);
    for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
        const uint64_t r = rng();
        std::memcpy(&bytes[i], &r, 8);
    }
    const int64_t block_bytes = static_cast<int64_t>(row_size(type, 256)) / (type == DType::Q4_K || type == DType::Q6_K ? 1 : 8);
    const std::vector<int64_t> d_offsets = type == DType::Q4_K ? std::vector<int64_t>{0, 2}
                                           : type == DType::Q6_K ? std::vector<int64_t>{208}
                                                                 : std::vector<int64_t>{0};
    std::uniform_real_distribution<float> mag(0.5f, 1.0f);
    for (size_t b = 0; b + block_bytes <= bytes.size(); b += block_bytes)
        for (int64_t off : d_offsets) {
            const uint16_t h = f32_to_f16(mag(rng) * (rng() & 1 ? -1.0f : 1.0f) / 256.0f);
            std::memcpy(&bytes[b + off], &h, 2);
        }
    return bytes;
}

// A CUDA backend with options o (null, with a failed expectation, when it cannot be made).
inline std::unique_ptr<CudaBackend> make_cuda(const CudaBackendOptions& o) {
    auto b = CudaBackend::create(o);
    EXPECT_TRUE(b.is_ok()) << b.status().message();
    return b.is_ok() ? std::move(b).value() : nullptr;
}

inline std::unique_ptr<CudaBackend> make_cuda(CudaAttentionVariant variant = CudaAttentionVariant::Fused,
                                              CudaBackendOptions::QkvRopeEpilogue qkv_rope_epilogue =
                                                  CudaBackendOptions::QkvRopeEpilogue::Auto) {
    CudaBackendOptions o;
    o.attention = variant;
    o.qkv_rope_epilogue = qkv_rope_epilogue;
    return make_cuda(o);
}

inline std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

// Host bytes of n_rows rows of `type` holding `values` (quantised with the reference quantiser).
inline std::vector<uint8_t> encode_rows(DType type, const std::vector<float>& values, int64_t width) {
    const int64_t n_rows = static_cast<int64_t>(values.size()) / width;
    std::vector<uint8_t> bytes(row_size(type, width) * n_rows);
    for (int64_t r = 0; r < n_rows; ++r)
        quantize_row(type, values.data() + r * width, bytes.data() + r * row_size(type, width), width);
    return bytes;
}

inline std::vector<float> decode_rows(DType type, const void* bytes, int64_t width, int64_t n_rows) {
    std::vector<float> out(static_cast<size_t>(width * n_rows));
    for (int64_t r = 0; r < n_rows; ++r)
        dequantize_row(type, static_cast<const uint8_t*>(bytes) + r * row_size(type, width), out.data() + r * width,
                       width);
    return out;
}

inline TensorView host_view(DType type, int64_t width, int64_t n_rows, void* data) {
    TensorView t;
    t.type = type;
    t.ne = {width, n_rows, 1, 1};
    t.data = data;
    return t;
}

// max |a - b| / max |b|.
inline double rel_max_error(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double err = 0, ref = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        if (!std::isfinite(a[i])) return INFINITY;
        err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
        ref = std::max(ref, std::abs(static_cast<double>(b[i])));
    }
    return ref > 0 ? err / ref : err;
}

// A batch of one sequence: tokens from start_pos, blocks 0, 1, ... of 16 tokens.
inline Batch simple_batch(const std::vector<int32_t>& tokens, int32_t start_pos) {
    Batch b;
    b.block_size = 16;
    std::vector<int32_t> table;
    for (int32_t i = 0; i * 16 < start_pos + static_cast<int32_t>(tokens.size()); ++i) table.push_back(i);
    b.add_sequence(tokens, start_pos, table, true);
    return b;
}

// Starts a forward pass of n_tokens rows and uploads x ([n_tokens][width] f32) as its input.
inline TensorView begin_with_input(CudaBackend& be, const std::vector<float>& x, int64_t width, int64_t n_tokens) {
    be.begin(simple_batch(std::vector<int32_t>(n_tokens, 0), 0));
    TensorView t = be.alloc(DType::F32, width, n_tokens);
    be.upload(x.data(), t);
    return t;
}

}  // namespace mvllm::test
