// ModelConfig: one set of hyperparameters and feature flags for every supported architecture
// (DESIGN.md decision 2). Llama 2/3.x, SmolLM2 and Qwen2/2.5 differ only by these values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace mvllm {

class GgufFile;

enum class Arch { Llama, Qwen2 };
const char* arch_name(Arch arch);  // "llama", "qwen2" (the GGUF general.architecture spelling)

enum class RopeScaling { None, Llama3 };

struct ModelConfig {
    Arch arch = Arch::Llama;
    int32_t n_vocab = 0;
    int32_t n_embd = 0;         // hidden size
    int32_t n_layers = 0;
    int32_t n_heads = 0;        // query heads
    int32_t n_kv_heads = 0;
    int32_t head_dim = 0;
    int32_t n_ff = 0;           // MLP intermediate size
    int32_t n_ctx_train = 0;    // max_position_embeddings / context_length
    float rms_norm_eps = 1e-5f;
    float rope_theta = 10000.0f;
    RopeScaling rope_scaling = RopeScaling::None;
    float rope_factor = 1.0f;            // llama3: factor
    float rope_low_freq_factor = 1.0f;   // llama3
    float rope_high_freq_factor = 4.0f;  // llama3
    int32_t rope_original_ctx = 8192;    // llama3: original_max_position_embeddings
    bool qkv_bias = false;
    bool tied_embeddings = false;
    int32_t bos_token_id = -1;
    int32_t eos_token_id = -1;

    int32_t group_size() const { return n_heads / n_kv_heads; }
    int32_t q_dim() const { return n_heads * head_dim; }
    int32_t kv_dim() const { return n_kv_heads * head_dim; }

    // Rejects impossible or unsupported combinations with a message naming the field.
    Status validate() const;
    std::string summary() const;
};

// From a Hugging Face config.json (LlamaForCausalLM / Qwen2ForCausalLM), in both dialects:
// rope_theta + rope_scaling, or the newer rope_parameters object.
Result<ModelConfig> config_from_hf_json(const std::string& path);
Result<ModelConfig> config_from_hf_json_text(const std::string& text, const std::string& origin);

// From GGUF metadata ({arch}.block_count, ...). n_vocab comes from the token embedding when the
// metadata has no vocab_size; tied_embeddings from the absence of output.weight.
Result<ModelConfig> config_from_gguf(const GgufFile& file);

// The inverse frequencies of RoPE, [head_dim / 2], including llama3 scaling.
std::vector<float> rope_inv_freq(const ModelConfig& config);

}  // namespace mvllm
