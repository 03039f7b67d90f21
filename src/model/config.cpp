#include "model/config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/gguf.h"

namespace mvllm {

using json = nlohmann::json;

const char* arch_name(Arch arch) { return arch == Arch::Qwen2 ? "qwen2" : "llama"; }

Status ModelConfig::validate() const {
    auto positive = [](const char* field, int64_t v) -> Status {
        if (v <= 0) return make_error(field, " must be positive (got ", v, ")");
        return Status::ok();
    };
    MVLLM_TRY(positive("vocab size", n_vocab));
    MVLLM_TRY(positive("hidden size", n_embd));
    MVLLM_TRY(positive("layer count", n_layers));
    MVLLM_TRY(positive("attention head count", n_heads));
    MVLLM_TRY(positive("KV head count", n_kv_heads));
    MVLLM_TRY(positive("head dim", head_dim));
    MVLLM_TRY(positive("feed-forward size", n_ff));
    if (n_layers > 1024 || n_heads > 4096 || head_dim > 1024 || n_embd > (1 << 20) ||
        n_ff > (1 << 22) || n_vocab > (1 << 24))
        return make_error("implausible model size (", summary(), ")");
    if (n_heads % n_kv_heads != 0)
        return make_error("attention head count ", n_heads, " is not a multiple of the KV head count ",
                          n_kv_heads);
    if (head_dim % 2 != 0) return make_error("head dim ", head_dim, " must be even for RoPE");
    if (!(rms_norm_eps > 0) || !(rope_theta > 0))
        return make_error("rms_norm_eps and rope_theta must be positive");
    if (rope_scaling == RopeScaling::Llama3 &&
        (!(rope_factor > 0) || !(rope_high_freq_factor > rope_low_freq_factor) || rope_original_ctx <= 0))
        return make_error("invalid llama3 rope scaling parameters");
    return Status::ok();
}

std::string ModelConfig::summary() const {
    std::ostringstream os;
    os << arch_name(arch) << ": " << n_layers << " layers, hidden " << n_embd << ", heads " << n_heads
       << "/" << n_kv_heads << " x " << head_dim << ", ffn " << n_ff << ", vocab " << n_vocab
       << ", rope theta " << rope_theta << (rope_scaling == RopeScaling::Llama3 ? " (llama3)" : "")
       << (qkv_bias ? ", qkv bias" : "") << (tied_embeddings ? ", tied embeddings" : "");
    return os.str();
}

std::vector<float> rope_inv_freq(const ModelConfig& c) {
    const int half = c.head_dim / 2;
    std::vector<float> inv(half);
    for (int i = 0; i < half; ++i) {
        double freq = std::pow(static_cast<double>(c.rope_theta), -2.0 * i / c.head_dim);
        if (c.rope_scaling == RopeScaling::Llama3) {
            // Long wavelengths are slowed by `factor`, short ones kept, the band between blended.
            const double low_wavelen = c.rope_original_ctx / c.rope_low_freq_factor;
            const double high_wavelen = c.rope_original_ctx / c.rope_high_freq_factor;
            const double wavelen = 2.0 * M_PI / freq;
            if (wavelen > low_wavelen) {
                freq /= c.rope_factor;
            } else if (wavelen >= high_wavelen) {
                const double smooth = (c.rope_original_ctx / wavelen - c.rope_low_freq_factor) /
                                      (c.rope_high_freq_factor - c.rope_low_freq_factor);
                freq = (1.0 - smooth) * freq / c.rope_factor + smooth * freq;
            }
        }
        inv[i] = static_cast<float>(freq);
    }
    return inv;
}

namespace {

// Reads an optional field of the expected JSON kind; an error names the field.
template <typename T>
Status read_field(const json& j, const char* key, T* out, bool required, const std::string& origin) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
        if (required) return make_error(origin, ": missing field \"", key, "\"");
        return Status::ok();
    }
    if constexpr (std::is_same_v<T, bool>) {
        if (!it->is_boolean()) return make_error(origin, ": field \"", key, "\" must be a boolean");
        *out = it->template get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
        if (!it->is_number_integer())
            return make_error(origin, ": field \"", key, "\" must be an integer");
        const int64_t v = it->template get<int64_t>();
        if (v < -1 || v > INT32_MAX) return make_error(origin, ": field \"", key, "\" out of range");
        *out = static_cast<T>(v);
    } else {
        if (!it->is_number()) return make_error(origin, ": field \"", key, "\" must be a number");
        *out = it->template get<T>();
    }
    return Status::ok();
}

// rope_scaling (old dialect) or rope_parameters (new) -> the config's rope fields.
Status read_rope_object(const json& r, ModelConfig* c, const std::string& origin, const char* name) {
    if (!r.is_object()) return make_error(origin, ": \"", name, "\" must be an object");
    std::string type = "default";
    for (const char* key : {"rope_type", "type"}) {
        auto it = r.find(key);
        if (it != r.end() && it->is_string()) type = it->get<std::string>();
    }
    MVLLM_TRY(read_field(r, "rope_theta", &c->rope_theta, false, origin));
    if (type == "default") return Status::ok();
    if (type != "llama3")
        return make_error(origin, ": rope scaling type \"", type,
                          "\" is not supported (supported: default, llama3)");
    c->rope_scaling = RopeScaling::Llama3;
    MVLLM_TRY(read_field(r, "factor", &c->rope_factor, true, origin));
    MVLLM_TRY(read_field(r, "low_freq_factor", &c->rope_low_freq_factor, true, origin));
    MVLLM_TRY(read_field(r, "high_freq_factor", &c->rope_high_freq_factor, true, origin));
    MVLLM_TRY(read_field(r, "original_max_position_embeddings", &c->rope_original_ctx, true, origin));
    return Status::ok();
}

Status read_token_id(const json& j, const char* key, int32_t* out) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return Status::ok();
    if (it->is_number_integer()) *out = it->get<int32_t>();
    else if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) *out = (*it)[0].get<int32_t>();
    return Status::ok();
}

}  // namespace

Result<ModelConfig> config_from_hf_json_text(const std::string& text, const std::string& origin) {
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return make_error(origin, ": not a JSON object");
    ModelConfig c;
    std::string arch;
    if (auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty() &&
                                           (*it)[0].is_string()) {
        arch = (*it)[0].get<std::string>();
    } else if (auto mt = j.find("model_type"); mt != j.end() && mt->is_string()) {
        arch = mt->get<std::string>();
    }
    if (arch == "LlamaForCausalLM" || arch == "llama") c.arch = Arch::Llama;
    else if (arch == "Qwen2ForCausalLM" || arch == "qwen2") c.arch = Arch::Qwen2;
    else return make_error(origin, ": architecture \"", arch,
                           "\" is not supported (supported: LlamaForCausalLM, Qwen2ForCausalLM)");

    MVLLM_TRY(read_field(j, "vocab_size", &c.n_vocab, true, origin));
    MVLLM_TRY(read_field(j, "hidden_size", &c.n_embd, true, origin));
    MVLLM_TRY(read_field(j, "num_hidden_layers", &c.n_layers, true, origin));
    MVLLM_TRY(read_field(j, "num_attention_heads", &c.n_heads, true, origin));
    c.n_kv_heads = c.n_heads;
    MVLLM_TRY(read_field(j, "num_key_value_heads", &c.n_kv_heads, false, origin));
    MVLLM_TRY(read_field(j, "intermediate_size", &c.n_ff, true, origin));
    c.n_ctx_train = 2048;
    MVLLM_TRY(read_field(j, "max_position_embeddings", &c.n_ctx_train, false, origin));
    MVLLM_TRY(read_field(j, "rms_norm_eps", &c.rms_norm_eps, false, origin));
    if (c.n_heads > 0) c.head_dim = c.n_embd / c.n_heads;
    MVLLM_TRY(read_field(j, "head_dim", &c.head_dim, false, origin));
    MVLLM_TRY(read_field(j, "rope_theta", &c.rope_theta, false, origin));
    if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null())
        MVLLM_TRY(read_rope_object(*it, &c, origin, "rope_scaling"));
    if (auto it = j.find("rope_parameters"); it != j.end() && !it->is_null())
        MVLLM_TRY(read_rope_object(*it, &c, origin, "rope_parameters"));
    c.qkv_bias = c.arch == Arch::Qwen2;
    if (c.arch == Arch::Llama) MVLLM_TRY(read_field(j, "attention_bias", &c.qkv_bias, false, origin));
    MVLLM_TRY(read_field(j, "tie_word_embeddings", &c.tied_embeddings, false, origin));
    bool sliding = false;
    MVLLM_TRY(read_field(j, "use_sliding_window", &sliding, false, origin));
    if (sliding) return make_error(origin, ": sliding-window attention is not supported");
    MVLLM_TRY(read_token_id(j, "bos_token_id", &c.bos_token_id));
    MVLLM_TRY(read_token_id(j, "eos_token_id", &c.eos_token_id));
    if (Status st = c.validate(); !st) return st.with_context(origin);
    return c;
}

Result<ModelConfig> config_from_hf_json(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error(path, ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    return config_from_hf_json_text(ss.str(), path);
}

Result<ModelConfig> config_from_gguf(const GgufFile& f) {
    ModelConfig c;
    MVLLM_ASSIGN_OR_RETURN(std::string arch, f.get_string("general.architecture"));
    if (arch == "llama") c.arch = Arch::Llama;
    else if (arch == "qwen2") c.arch = Arch::Qwen2;
    else return make_error(f.path(), ": architecture \"", arch, "\" is not supported (supported: llama, qwen2)");
    const std::string p = arch + ".";
    auto get_i32 = [&](const std::string& key, int32_t* out, bool required) -> Status {
        Result<int64_t> v = required ? f.get_int(key) : f.get_int_or(key, *out);
        if (!v) return v.status();
        if (*v < -1 || *v > INT32_MAX) return make_error(f.path(), ": ", key, " out of range");
        *out = static_cast<int32_t>(*v);
        return Status::ok();
    };
    MVLLM_TRY(get_i32(p + "embedding_length", &c.n_embd, true));
    MVLLM_TRY(get_i32(p + "block_count", &c.n_layers, true));
    MVLLM_TRY(get_i32(p + "attention.head_count", &c.n_heads, true));
    c.n_kv_heads = c.n_heads;
    MVLLM_TRY(get_i32(p + "attention.head_count_kv", &c.n_kv_heads, false));
    MVLLM_TRY(get_i32(p + "feed_forward_length", &c.n_ff, true));
    c.n_ctx_train = 2048;
    MVLLM_TRY(get_i32(p + "context_length", &c.n_ctx_train, false));
    if (c.n_heads > 0) c.head_dim = c.n_embd / c.n_heads;
    MVLLM_TRY(get_i32(p + "attention.key_length", &c.head_dim, false));
    MVLLM_ASSIGN_OR_RETURN(double eps, f.get_float_or(p + "attention.layer_norm_rms_epsilon", 1e-5));
    MVLLM_ASSIGN_OR_RETURN(double theta, f.get_float_or(p + "rope.freq_base", 10000.0));
    c.rms_norm_eps = static_cast<float>(eps);
    c.rope_theta = static_cast<float>(theta);
    if (const GgufValue* st = f.find(p + "rope.scaling.type")) {
        const std::string* s = st->as_string();
        if (!s || (*s != "none" && *s != "llama3"))
            return make_error(f.path(), ": rope scaling type ", s ? *s : "(not a string)", " is not supported");
    }
    const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
    if (!embd) return make_error(f.path(), ": missing tensor token_embd.weight");
    c.n_vocab = static_cast<int32_t>(embd->ne[1]);
    MVLLM_TRY(get_i32(p + "vocab_size", &c.n_vocab, false));
    c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
    c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
    MVLLM_TRY(get_i32("tokenizer.ggml.bos_token_id", &c.bos_token_id, false));
    MVLLM_TRY(get_i32("tokenizer.ggml.eos_token_id", &c.eos_token_id, false));
    if (Status st = c.validate(); !st) return st.with_context(f.path());
    return c;
}

}  // namespace mvllm
