// CPU attention over the paged KV cache, three ways (switchable with --attention):
//
//  * Naive:   for each sequence, materialise K and V repeated to the query-head count
//             ([ctx][n_heads][head_dim], the "repeat_kv" of reference decoders), then
//             scores = Q K^T, softmax, out = P V. The baseline the project exists to beat.
//  * Grouped: the group's query heads (n_heads / n_kv_heads of them, times the sequence's query
//             tokens) as one small matrix against the shared K/V head read in place from its
//             blocks; still three passes (scores, softmax, P V), no copy of K/V.
//  * Fused:   one pass over the paged blocks with an online softmax (running max and sum), each
//             K/V block read once per group.
//
// Inputs: q [n_tokens][n_heads][head_dim] (F32 or F16, RoPE applied); the layer's K/V already
// hold the batch's new tokens (kv_store). Output: out [n_tokens][n_heads][head_dim] (same dtype
// as q). Causal: row i attends to positions 0..batch.positions[i] of its own sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kv/batch.h"
#include "kv/kv_cache.h"

namespace mvllm {

enum class AttentionVariant { Naive, Grouped, Fused };
const char* attention_variant_name(AttentionVariant v);
bool parse_attention_variant(const std::string& name, AttentionVariant* out);

struct AttentionScratch {
    std::vector<float> buffer;  // per-thread scores / repeated K,V; grows as needed
};

// Writes the batch's new K and V rows (k, v: [n_tokens][n_kv_heads][head_dim], F32 or F16)
// into the layer's cache slots (batch.slot_mapping), converting to the cache dtype.
void kv_store(const Batch& batch, const TensorView& k, const TensorView& v, const KvLayerView& kv);

// batch_invariant: a row's result depends only on its own sequence's cache and position. The
// fused variant then splits every context at fixed multiples of kInvariantSplitTokens (merged in
// order) instead of splitting long contexts only when a batch has fewer work items than threads.
// The grouped and naive variants are batch-invariant either way.
void attention(ThreadPool& pool, AttentionVariant variant, const Batch& batch,
               const KvLayerView& kv, const TensorView& q, const TensorView& out, int32_t n_heads,
               float scale, AttentionScratch& scratch, bool batch_invariant = false);

// Context positions per split of the batch-invariant fused attention (rounded to whole spans of
// the fused loop for the cache's block size).
constexpr int64_t kInvariantSplitTokens = 512;

// The reference: straightforward double-precision softmax attention over the paged cache.
void attention_reference(const Batch& batch, const KvLayerView& kv, const TensorView& q,
                         const TensorView& out, int32_t n_heads, float scale);

}  // namespace mvllm
