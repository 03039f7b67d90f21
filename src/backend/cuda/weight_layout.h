// How the CUDA backend stores a quantised weight matrix in device memory (host code, no CUDA).
//
// GGUF blocks of Q4_0 (18 B), Q8_0 (34 B) and Q6_K (210 B) are only 2-byte aligned, which rules
// out 16-byte loads. upload_weight therefore splits every quantised matrix into two planes, in
// the same allocation and the same total size:
//
//   body  [n_rows][blocks_per_row][body_bytes]  the block without its scale record
//                                              (Q4_0: qs[16]; Q8_0: qs[32]; Q6_K: ql[128] qh[64] scales[16];
//                                               Q4_K: qs[128], its 16-byte halves reordered, below)
//   scale [n_rows][blocks_per_row][scale_bytes] the scale record of each block
//                                              (Q4_0, Q8_0, Q6_K: the f16 d; Q4_K: d, dmin, scales[12])
//
// body_bytes is a multiple of 16, so every block body starts 16-byte aligned (Q4_K's 128-byte
// bodies each fill one 128-byte line). Q4_K's qs holds four 32-byte groups g (sub-blocks 2g and
// 2g + 1); the GEMV lane of group g loads its two 16-byte halves as two 16-byte loads, so the
// device body stores the four first halves, then the four second halves: GGUF bytes
// [32 g + 16 h, +16) sit at [16 g + 64 h, +16). Each load of a warp then reads whole sectors.
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
    bool split = false;          // false: stored as is (float types)
    int32_t block_values = 0;    // values per block
    int32_t block_bytes = 0;     // GGUF bytes per block
    int32_t body_bytes = 0;      // bytes per block in the body plane
    int32_t scale_offset = 0;    // offset of the scale record inside the GGUF block
    int32_t scale_bytes = 0;     // bytes per block in the scale plane
    bool halves_apart = false;   // Q4_K: the qs halves reordered (first halves, then second halves)
};

// The layout of `type` on the device.
SplitLayout split_layout(DType type);

// Rewrites n_rows GGUF rows of `type` (src, row_bytes each) into the split layout (dst, same size).
void split_rows(DType type, const uint8_t* src, uint8_t* dst, int64_t n_values_per_row, int64_t n_rows);
// The inverse (tests, downloads).
void join_rows(DType type, const uint8_t* src, uint8_t* dst, int64_t n_values_per_row, int64_t n_rows);

}  // namespace mvllm::cuda
