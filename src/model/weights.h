// The canonical weight schema: every architecture's checkpoint is mapped onto these tensors by a
// small per-format name table (weight_names.cpp), so the one decoder never sees checkpoint names.
//
// Shapes (GGUF order, ne[0] innermost): matrices {n_in, n_out}; vectors {n}.
//   token_embd  {n_embd, n_vocab}      output_norm {n_embd}     output {n_embd, n_vocab}
//   per layer: attn_norm {n_embd}; wq {n_embd, q_dim}; wk, wv {n_embd, kv_dim};
//              bq {q_dim}, bk, bv {kv_dim} (optional); wo {q_dim, n_embd}; ffn_norm {n_embd};
//              w_gate, w_up {n_embd, n_ff}; w_down {n_ff, n_embd}
// Q/K rows are in the Hugging Face (half-split RoPE) order; the GGUF llama loader un-permutes them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace mvllm {

struct LayerWeights {
    TensorView attn_norm, wq, wk, wv, bq, bk, bv, wo;
    TensorView ffn_norm, w_gate, w_up, w_down;
};

struct ModelWeights {
    TensorView token_embd, output_norm, output;  // output == token_embd when tied
    TensorView rope_freqs;                       // optional GGUF llama3 frequency factors {head_dim/2}
    std::vector<LayerWeights> layers;
};

// Canonical tensor identifiers, with the expected shape of each.
enum class WeightId {
    TokenEmbd, OutputNorm, Output, RopeFreqs,
    AttnNorm, Wq, Wk, Wv, Bq, Bk, Bv, Wo, FfnNorm, WGate, WUp, WDown,
};

struct WeightSlot {
    WeightId id;
    int layer;  // -1 for global tensors
    TensorView* view;
    std::array<int64_t, 4> expected_ne;
    int n_dims;
    bool required;
};

// Every tensor slot of the schema for this config, pointing into `weights`.
std::vector<WeightSlot> weight_slots(const ModelConfig& config, ModelWeights* weights);

enum class CheckpointFormat { Gguf, HuggingFace };
// The checkpoint name of a canonical tensor ("blk.3.attn_q.weight" / "model.layers.3.self_attn.q_proj.weight").
std::string weight_name(CheckpointFormat format, WeightId id, int layer);

// GGUF llama stores Q/K rows permuted for interleaved RoPE. These move whole rows, so they work
// for every type: src and dst are n_rows rows of row_bytes each, n_rows = n_heads * head_dim.
enum class QkPermute { FromGguf, ToGguf };
void permute_qk_rows(const void* src, void* dst, int n_heads, int head_dim, size_t row_bytes,
                     QkPermute direction);

}  // namespace mvllm
