#include "backend/cuda/weight_layout.h"

#include <cstring>

#include "core/status.h"

namespace mvllm::cuda {

SplitLayout split_layout(DType type) {
    switch (type) {
        case DType::Q4_0: return {true, 32, 18, 16, 0};
        case DType::Q8_0: return {true, 32, 34, 32, 0};
        case DType::Q6_K: return {true, 256, 210, 208, 208};
        default: return {};
    }
}

namespace {

// Copies the body bytes of a GGUF block (everything but the 2-byte d at scale_offset).
void copy_body(const SplitLayout& l, const uint8_t* block, uint8_t* body) {
    std::memcpy(body, block, static_cast<size_t>(l.scale_offset));
    std::memcpy(body + l.scale_offset, block + l.scale_offset + 2,
                static_cast<size_t>(l.block_bytes - l.scale_offset - 2));
}

}  // namespace

void split_rows(DType type, const uint8_t* src, uint8_t* dst, int64_t n_values_per_row, int64_t n_rows) {
    const SplitLayout l = split_layout(type);
    MVLLM_CHECK(l.split && n_values_per_row % l.block_values == 0) << "split_rows " << type_name(type);
    const int64_t n_blocks = n_values_per_row / l.block_values * n_rows;
    uint8_t* scales = dst + n_blocks * l.body_bytes;
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* block = src + b * l.block_bytes;
        copy_body(l, block, dst + b * l.body_bytes);
        std::memcpy(scales + 2 * b, block + l.scale_offset, 2);
    }
}

void join_rows(DType type, const uint8_t* src, uint8_t* dst, int64_t n_values_per_row, int64_t n_rows) {
    const SplitLayout l = split_layout(type);
    MVLLM_CHECK(l.split && n_values_per_row % l.block_values == 0) << "join_rows " << type_name(type);
    const int64_t n_blocks = n_values_per_row / l.block_values * n_rows;
    const uint8_t* scales = src + n_blocks * l.body_bytes;
    for (int64_t b = 0; b < n_blocks; ++b) {
        uint8_t* block = dst + b * l.block_bytes;
        const uint8_t* body = src + b * l.body_bytes;
        std::memcpy(block, body, static_cast<size_t>(l.scale_offset));
        std::memcpy(block + l.scale_offset, scales + 2 * b, 2);
        std::memcpy(block + l.scale_offset + 2, body + l.scale_offset,
                    static_cast<size_t>(l.block_bytes - l.scale_offset - 2));
    }
}

}  // namespace mvllm::cuda
