// The batch metadata of one forward pass as the CUDA kernels see it: device pointers into one
// buffer that CudaBackend::begin() fills with a single host-to-device copy, plus the host-side
// figures the launchers size their grids with. Plain header (no CUDA types).
#pragma once

#include <cstdint>

namespace mvllm::cuda {

struct DeviceBatch {
    int32_t n_tokens = 0;
    int32_t n_seqs = 0;
    int32_t n_logit_rows = 0;
    int32_t block_size = 16;
    int32_t max_context = 0;        // longest context_len of the batch (host figure)
    int32_t max_seq_tokens = 0;     // most query rows of one sequence (host figure)
    int32_t n_multi_row_seqs = 0;   // sequences with more than one query row (host figure)
    const int32_t* token_ids = nullptr;      // [n_tokens]
    const int32_t* positions = nullptr;      // [n_tokens]
    const int64_t* slot_mapping = nullptr;   // [n_tokens] block_id * block_size + offset
    const int32_t* row_seq = nullptr;        // [n_tokens] index of the row's sequence
    const int32_t* block_tables = nullptr;   // [sum of n_blocks] block ids
    const int32_t* seq_block_begin = nullptr;  // [n_seqs] offset of each block table
    const int32_t* seq_token_begin = nullptr;  // [n_seqs] first row of each sequence
    const int32_t* seq_n_tokens = nullptr;     // [n_seqs]
    const int32_t* seq_context_len = nullptr;  // [n_seqs]
    const int32_t* logit_rows = nullptr;       // [n_logit_rows]
    const int32_t* multi_row_seqs = nullptr;   // [n_multi_row_seqs] their indices (prefill chunks)
    // The rows ordered by their sequence's query-row count (ascending, then by row), so the rows of
    // short sequences (decodes, verification steps) are a prefix: the decode attention kernel walks
    // that prefix when the batch's prefill chunks go to the tiled kernel. Device [n_tokens], and
    // on the host (valid until the next step) each of those rows' query-row count.
    const int32_t* rows_by_query_len = nullptr;
    const int32_t* host_query_len_by_row = nullptr;
};

// Geometry of one layer of the paged KV cache on the device:
// K and V each [n_blocks][n_kv_heads][block_size][head_dim] of dtype (F32, F16 or BF16).
struct DeviceKvLayer {
    void* k = nullptr;
    void* v = nullptr;
    uint32_t dtype = 0;  // DType id
    int32_t n_kv_heads = 0;
    int32_t head_dim = 0;
    int32_t block_size = 16;
    int64_t n_rows = 0;  // rows of head_dim values in k (and in v): blocks x n_kv_heads x block_size
};

}  // namespace mvllm::cuda
