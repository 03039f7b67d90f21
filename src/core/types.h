// Element types and quantisation formats: one row per type in a traits table (DESIGN.md decision 3).
//
// Numeric ids are the GGUF/ggml type ids, so a GGUF tensor's type field maps onto DType directly.
// Quantised types store a row of `n` values as n / block_size blocks of type_size bytes each. The
// block layouts below are the GGUF layouts, byte for byte (little endian, no padding):
//
//   Q8_0  32 values: f16 d; int8 qs[32]                       x = d * q
//   Q4_0  32 values: f16 d; uint8 qs[16]                      x = d * (nibble - 8); low nibbles
//         hold values 0..15, high nibbles values 16..31
//   Q4_K 256 values: f16 d, dmin; uint8 scales[12]; uint8 qs[128]
//         8 sub-blocks of 32 with 6-bit scale sc and 6-bit min m (packed in scales[12]):
//         x = d * sc * nibble - dmin * m
//   Q5_K 256 values: like Q4_K plus uint8 qh[32] holding the fifth bit of each value
//   Q6_K 256 values: uint8 ql[128], qh[64]; int8 scales[16]; f16 d
//         16 sub-blocks of 16: x = d * scale * (q6 - 32)
//   Q8_K 256 values: f32 d; int8 qs[256]; int16 bsums[16] (sums of 16 qs each). Used only for
//         activations in K-quant dot products; never stored in a file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/half.h"

namespace mvllm {

enum class DType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q8_0 = 8,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    BF16 = 30,
};

constexpr int QK4_0 = 32;
constexpr int QK8_0 = 32;
constexpr int QK_K = 256;
constexpr int K_SCALE_SIZE = 12;

#pragma pack(push, 1)
struct BlockQ8_0 {
    f16_t d;
    int8_t qs[QK8_0];
};
struct BlockQ4_0 {
    f16_t d;
    uint8_t qs[QK4_0 / 2];
};
struct BlockQ4_K {
    f16_t d;
    f16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
};
struct BlockQ5_K {
    f16_t d;
    f16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
struct BlockQ6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    f16_t d;
};
struct BlockQ8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};
#pragma pack(pop)

static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// dequantize: n values (a multiple of block_size) from src blocks to dst floats.
using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);
// quantize: n floats (a multiple of block_size) into dst blocks (reference quantiser).
using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);

struct TypeTraits {
    DType type;
    const char* name;       // "f32", "q4_0", "q4_K" ... (ggml spelling)
    int64_t block_size;     // values per block (1 for plain floats)
    size_t type_size;       // bytes per block
    bool is_quantized;
    bool storable;          // may appear in a model file (Q8_K may not)
    DequantizeRowFn dequantize_row;
    QuantizeRowFn quantize_row;
};

// The traits row of a type, or nullptr when the id is not a type mvllm supports.
const TypeTraits* find_type_traits(uint32_t type_id);
// The traits row of a supported type (CHECK-fails on an unsupported one: internal use only).
const TypeTraits& type_traits(DType type);
const char* type_name(DType type);
// Parses "f32", "F16", "q4_0", "q4_k", ... Returns false when unknown.
bool parse_type_name(std::string_view name, DType* out);

// Bytes of a row of n values; n must be a multiple of the block size.
size_t row_size(DType type, int64_t n);

// Reference (scalar) implementations, also used by the CPU backend's parity tests.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);
void quantize_row(DType type, const float* src, void* dst, int64_t n);

}  // namespace mvllm
