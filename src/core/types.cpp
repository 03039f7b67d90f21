#include "core/types.h"

#include <cctype>
#include <cstring>

#include "core/quant.h"
#include "core/status.h"

namespace mvllm {
namespace {

void dequantize_row_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, n * 4); }
void quantize_row_f32(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, n * 4); }
void dequantize_row_f16(const void* src, float* dst, int64_t n) {
    const auto* s = static_cast<const f16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
}
void quantize_row_f16(const float* src, void* dst, int64_t n) {
    auto* d = static_cast<f16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
}
void dequantize_row_bf16(const void* src, float* dst, int64_t n) {
    const auto* s = static_cast<const bf16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
}
void quantize_row_bf16(const float* src, void* dst, int64_t n) {
    auto* d = static_cast<bf16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
}

// clang-format off
const TypeTraits kTraits[] = {
    // type        name    block  bytes               quant  store  dequantize            quantize
    {DType::F32,  "f32",  1,     4,                  false, true,  dequantize_row_f32,  quantize_row_f32},
    {DType::F16,  "f16",  1,     2,                  false, true,  dequantize_row_f16,  quantize_row_f16},
    {DType::BF16, "bf16", 1,     2,                  false, true,  dequantize_row_bf16, quantize_row_bf16},
    {DType::Q8_0, "q8_0", QK8_0, sizeof(BlockQ8_0),  true,  true,  dequantize_row_q8_0, quantize_row_q8_0},
    {DType::Q4_0, "q4_0", QK4_0, sizeof(BlockQ4_0),  true,  true,  dequantize_row_q4_0, quantize_row_q4_0},
    {DType::Q4_K, "q4_K", QK_K,  sizeof(BlockQ4_K),  true,  true,  dequantize_row_q4_K, quantize_row_q4_K},
    {DType::Q5_K, "q5_K", QK_K,  sizeof(BlockQ5_K),  true,  true,  dequantize_row_q5_K, quantize_row_q5_K},
    {DType::Q6_K, "q6_K", QK_K,  sizeof(BlockQ6_K),  true,  true,  dequantize_row_q6_K, quantize_row_q6_K},
    {DType::Q8_K, "q8_K", QK_K,  sizeof(BlockQ8_K),  true,  false, dequantize_row_q8_K, quantize_row_q8_K},
};
// clang-format on

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (std::tolower((unsigned char)a[i]) != std::tolower((unsigned char)b[i])) return false;
    return true;
}

}  // namespace

const TypeTraits* find_type_traits(uint32_t type_id) {
    for (const auto& t : kTraits)
        if (static_cast<uint32_t>(t.type) == type_id) return &t;
    return nullptr;
}

const TypeTraits& type_traits(DType type) {
    const TypeTraits* t = find_type_traits(static_cast<uint32_t>(type));
    MVLLM_CHECK(t != nullptr) << "unsupported type id " << static_cast<uint32_t>(type);
    return *t;
}

const char* type_name(DType type) { return type_traits(type).name; }

bool parse_type_name(std::string_view name, DType* out) {
    for (const auto& t : kTraits) {
        if (iequals(name, t.name)) {
            *out = t.type;
            return true;
        }
    }
    return false;
}

size_t row_size(DType type, int64_t n) {
    const TypeTraits& t = type_traits(type);
    MVLLM_CHECK(n % t.block_size == 0) << t.name << " row of " << n << " values";
    return static_cast<size_t>(n / t.block_size) * t.type_size;
}

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
    type_traits(type).dequantize_row(src, dst, n);
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
    type_traits(type).quantize_row(src, dst, n);
}

}  // namespace mvllm
