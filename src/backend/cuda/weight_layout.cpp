#include "backend/cuda/weight_layout.h"

#include <cstring>

#include "core/status.h"

namespace mvllm::cuda {

SplitLayout split_layout(DType type) {
    switch (type) {
        case DType::Q4_0: return {true, 32, 18, 16, 0, 2, false};
        case DType::Q8_0: return {true, 32, 34, 32, 0, 2, false};
        case DType::Q6_K: return {true, 256, 210, 208, 208, 2, false};
        case DType::Q4_K: return {true, 256, 144, 128, 0, 16, true};
        default: return {};
    }
}

namespace {

// Bodies move in 16-byte chunks (body_bytes and scale_offset are multiples of 16, so no chunk
// straddles the scale record). The offset in the GGUF block of the chunk stored at device body
// byte 16 c.
int chunk_source(const SplitLayout& l, int c) {
    int i = 16 * c;  // in GGUF body order (the block without its scale record)
    if (l.halves_apart) i = 32 * (c & 3) + 16 * (c >> 2);  // device chunk 4 h + g holds GGUF chunk 2 g + h
    return i < l.scale_offset ? i : i + l.scale_bytes;
}

}  // namespace

void split_rows(DType type, const uint8_t* src, uint8_t* dst, int64_t n_values_per_row, int64_t n_rows) {
    const SplitLayout l = split_layout(type);
    MVLLM_CHECK(l.split && n_values_per_row % l.block_values == 0) << "split_rows " << type_name(type);
    const int64_t n_blocks = n_values_per_row / l.block_values * n_rows;
    uint8_t* scales = dst + n_blocks * l.body_bytes;
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* block = src + b * l.block_bytes;
        uint8_t* body = dst + b * l.body_bytes;
        for (int c = 0; c < l.body_bytes / 16; ++c) std::memcpy(body + 16 * c, block + chunk_source(l, c), 16);
        std::memcpy(scales + b * l.scale_bytes, block + l.scale_offset, static_cast<size_t>(l.scale_bytes));
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
        for (int c = 0; c < l.body_bytes / 16; ++c) std::memcpy(block + chunk_source(l, c), body + 16 * c, 16);
        std::memcpy(block + l.scale_offset, scales + b * l.scale_bytes, static_cast<size_t>(l.scale_bytes));
    }
}

}  // namespace mvllm::cuda
