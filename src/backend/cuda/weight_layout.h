// How the CUDA backend stores a quantised weight matrix in device memory (host code, no CUDA).
//
// GGUF blocks of Q4_0 (18 B), Q8_0 (34 B) and Q6_K (210 B) are only 2-byte aligned, which rules
// out 16-byte loads. upload_weight therefore splits every such matrix into two planes, in the
// same allocation and the same total size:
//
//   body  [n_rows][blocks_per_row][body_bytes]  the block without its f16 scale d
//                                              (Q4_0: qs[16]; Q8_0: qs[32]; Q6_K: ql[128] qh[64] scales[16])
//   scale [n_rows][blocks_per_row] f16          d of each block
//
// body_bytes is a multiple of 16, so every block body starts 16-byte aligned. Q4_K blocks
// (144 B = d, dmin, scales[12], qs[128]) are already 16-byte multiples and stay as they are.
// F32 / F16 / BF16 matrices are stored unchanged.
//
// Every weight allocation carries kWeightSlackBytes after its last byte: the streaming GEMV
// (gemv_stream.cuh) copies a stage's scales by bulk copies whose ends round up to 16 bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/types.h"

namespace mvllm::cuda {

constexpr size_t kWeightSlackBytes = 16;

struct SplitLayout {
    bool split = false;       // false: the GGUF layout as is
    int32_t block_values = 0; // values per block
    int32_t block_bytes = 0;  // GGUF bytes per block
    int32_t body_bytes = 0;   // bytes per block in the body plane
    int32_t scale_offset = 0; // offset of d inside the GGUF block
};

// The layout of `type` on the device.
SplitLayout split_layout(DType type);

// Rewrites n_rows GGUF rows of `type` (src, row_bytes each) into the split layout (dst, same size).
void split_rows(DType type, const uint8_t* src, uint8_t* dst, int64_t n_values_per_row, int64_t n_rows);
// The inverse (tests, downloads).
void join_rows(DType type, const uint8_t* src, uint8_t* dst, int64_t n_values_per_row, int64_t n_rows);

}  // namespace mvllm::cuda
