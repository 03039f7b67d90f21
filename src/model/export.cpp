#include "model/export.h"

#include <cmath>
#include <cstring>
#include <random>

#include "io/gguf.h"

namespace mvllm {

namespace {
struct FileTypeRow {
    FileType type;
    const char* name;
    uint32_t gguf_file_type;  // general.file_type, as llama.cpp numbers them
};
const FileTypeRow kFileTypes[] = {
    {FileType::F32, "f32", 0},   {FileType::F16, "f16", 1},   {FileType::BF16, "bf16", 32},
    {FileType::Q8_0, "q8_0", 7}, {FileType::Q4_0, "q4_0", 2}, {FileType::Q4_K_M, "q4_k_m", 15},
};

bool fits(DType type, int64_t n_in) { return n_in % type_traits(type).block_size == 0; }

// The first type of the chain whose block divides the row length.
DType first_fitting(std::initializer_list<DType> chain, int64_t n_in) {
    for (DType t : chain)
        if (fits(t, n_in)) return t;
    return DType::F16;
}

bool is_qk(WeightId id) {
    return id == WeightId::Wq || id == WeightId::Wk || id == WeightId::Bq || id == WeightId::Bk;
}
}  // namespace

bool parse_file_type(const std::string& name, FileType* out) {
    std::string lower;
    for (char ch : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    for (const auto& row : kFileTypes)
        if (lower == row.name) {
            *out = row.type;
            return true;
        }
    return false;
}

const char* file_type_name(FileType type) {
    for (const auto& row : kFileTypes)
        if (row.type == type) return row.name;
    return "?";
}

DType tensor_type_for(FileType ft, WeightId id, int64_t n_in, bool tied) {
    switch (ft) {
        case FileType::F32: return DType::F32;
        case FileType::F16: return DType::F16;
        case FileType::BF16: return DType::BF16;
        case FileType::Q8_0: return first_fitting({DType::Q8_0}, n_in);
        case FileType::Q4_0:
            // A tied embedding stays Q4_0 (as in llama.cpp's q4_0 files of Qwen2.5-0.5B); an
            // untied output matrix gets Q6_K.
            if (id == WeightId::Output) return first_fitting({DType::Q6_K, DType::Q8_0}, n_in);
            return first_fitting({DType::Q4_0, DType::Q8_0}, n_in);
        case FileType::Q4_K_M:
            if (id == WeightId::Output || id == WeightId::Wv || id == WeightId::WDown ||
                (id == WeightId::TokenEmbd && tied))
                return first_fitting({DType::Q6_K, DType::Q8_0}, n_in);
            return first_fitting({DType::Q4_K, DType::Q4_0, DType::Q8_0}, n_in);
    }
    return DType::F32;
}

Status write_model_gguf(const std::string& path, const ModelConfig& c, FileType file_type,
                        const ModelWeights& present, const TensorFill& fill, const std::string& name,
                        const Tokenizer* tokenizer) {
    GgufWriter w;
    const std::string a = arch_name(c.arch);
    w.set("general.architecture", GgufValue::str(a));
    w.set("general.name", GgufValue::str(name));
    for (const auto& row : kFileTypes)
        if (row.type == file_type) w.set("general.file_type", GgufValue::u32(row.gguf_file_type));
    w.set(a + ".vocab_size", GgufValue::u32(c.n_vocab));
    w.set(a + ".context_length", GgufValue::u32(c.n_ctx_train));
    w.set(a + ".embedding_length", GgufValue::u32(c.n_embd));
    w.set(a + ".block_count", GgufValue::u32(c.n_layers));
    w.set(a + ".feed_forward_length", GgufValue::u32(c.n_ff));
    w.set(a + ".attention.head_count", GgufValue::u32(c.n_heads));
    w.set(a + ".attention.head_count_kv", GgufValue::u32(c.n_kv_heads));
    w.set(a + ".attention.key_length", GgufValue::u32(c.head_dim));
    w.set(a + ".attention.value_length", GgufValue::u32(c.head_dim));
    w.set(a + ".attention.layer_norm_rms_epsilon", GgufValue::f32(c.rms_norm_eps));
    w.set(a + ".rope.freq_base", GgufValue::f32(c.rope_theta));
    w.set(a + ".rope.dimension_count", GgufValue::u32(c.head_dim));
    if (tokenizer) {
        tokenizer->write_gguf(w);
    } else {
        // A placeholder vocabulary of the right size (random-weight models have no real one).
        std::vector<std::string> tokens(c.n_vocab);
        for (int32_t i = 0; i < c.n_vocab; ++i) tokens[i] = "<t" + std::to_string(i) + ">";
        w.set("tokenizer.ggml.model", GgufValue::str("none"));
        w.set("tokenizer.ggml.tokens", GgufValue::string_array(tokens));
        if (c.bos_token_id >= 0) w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(c.bos_token_id));
        if (c.eos_token_id >= 0) w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(c.eos_token_id));
    }

    ModelWeights shapes = present;
    for (const WeightSlot& slot : weight_slots(c, &shapes)) {
        if (slot.id == WeightId::Output && c.tied_embeddings) continue;
        if (slot.id == WeightId::RopeFreqs) continue;  // written below
        if (!slot.view->data && !slot.required) continue;
        const int64_t n_in = slot.expected_ne[0];
        const DType type = slot.n_dims == 1 ? DType::F32
                                            : tensor_type_for(file_type, slot.id, n_in, c.tied_embeddings);
        const bool permute = c.arch == Arch::Llama && is_qk(slot.id);
        const int n_heads = slot.id == WeightId::Wq || slot.id == WeightId::Bq ? c.n_heads : c.n_kv_heads;
        WeightSlot copy = slot;
        w.add_tensor(weight_name(CheckpointFormat::Gguf, slot.id, slot.layer), type, slot.expected_ne,
                     slot.n_dims, [=, &fill, &c](void* dst) {
                         if (!permute) return fill(copy, type, dst);
                         const size_t row_bytes = row_size(type, n_in);
                         std::vector<uint8_t> tmp(row_bytes * copy.expected_ne[1]);
                         fill(copy, type, tmp.data());
                         permute_qk_rows(tmp.data(), dst, n_heads, c.head_dim, row_bytes, QkPermute::ToGguf);
                     });
    }
    // llama3 scaling travels as per-frequency divisors (rope_freqs.weight), as GGUF readers expect.
    std::vector<float> factors;
    if (c.rope_scaling == RopeScaling::Llama3) {
        ModelConfig plain = c;
        plain.rope_scaling = RopeScaling::None;
        const std::vector<float> base = rope_inv_freq(plain), scaled = rope_inv_freq(c);
        for (size_t i = 0; i < base.size(); ++i) factors.push_back(base[i] / scaled[i]);
    } else if (present.rope_freqs.data) {
        const float* f = present.rope_freqs.as<float>();
        factors.assign(f, f + present.rope_freqs.ne[0]);
    }
    if (!factors.empty())
        w.add_tensor("rope_freqs.weight", DType::F32, {static_cast<int64_t>(factors.size()), 1, 1, 1}, 1,
                     [factors](void* dst) { std::memcpy(dst, factors.data(), factors.size() * 4); });
    return w.write(path);
}

Status convert_model(const Model& model, const std::string& out_path, FileType file_type, ThreadPool& pool) {
    TensorFill fill = [&](const WeightSlot& slot, DType type, void* dst) {
        const TensorView& src = *slot.view;
        const int64_t n_in = src.ne[0];
        const size_t out_row = row_size(type, n_in);
        pool.parallel_for(src.n_rows(), [&](int64_t begin, int64_t end) {
            std::vector<float> row(n_in);
            for (int64_t r = begin; r < end; ++r) {
                dequantize_row(src.type, src.row(r), row.data(), n_in);
                quantize_row(type, row.data(), static_cast<uint8_t*>(dst) + out_row * r, n_in);
            }
        });
    };
    std::string name = model.path;
    if (auto pos = name.find_last_of('/'); pos != std::string::npos) name = name.substr(pos + 1);
    return write_model_gguf(out_path, model.config, file_type, model.weights, fill, name,
                            model.tokenizer.get());
}

Result<ModelConfig> preset_config(const std::string& name) {
    ModelConfig c;
    if (name == "qwen2.5-0.5b" || name == "qwen2.5-7b") {
        const bool big = name == "qwen2.5-7b";
        c.arch = Arch::Qwen2;
        c.n_layers = big ? 28 : 24;
        c.n_embd = big ? 3584 : 896;
        c.n_heads = big ? 28 : 14;
        c.n_kv_heads = big ? 4 : 2;
        c.head_dim = big ? 128 : 64;
        c.n_ff = big ? 18944 : 4864;
        c.n_vocab = big ? 152064 : 151936;
        c.tied_embeddings = !big;
        c.qkv_bias = true;
        c.rope_theta = 1000000.0f;
        c.rms_norm_eps = 1e-6f;
        c.n_ctx_train = 32768;
        c.bos_token_id = 151643;
        c.eos_token_id = 151645;
    } else if (name == "llama-3.2-1b" || name == "llama-3.1-8b") {
        const bool big = name == "llama-3.1-8b";
        c.arch = Arch::Llama;
        c.n_layers = big ? 32 : 16;
        c.n_embd = big ? 4096 : 2048;
        c.n_heads = 32;
        c.n_kv_heads = 8;
        c.head_dim = big ? 128 : 64;
        c.n_ff = big ? 14336 : 8192;
        c.n_vocab = 128256;
        c.tied_embeddings = !big;
        c.rope_theta = 500000.0f;
        c.rope_scaling = RopeScaling::Llama3;
        c.rope_factor = big ? 8.0f : 32.0f;
        c.rope_original_ctx = 8192;
        c.rms_norm_eps = 1e-5f;
        c.n_ctx_train = 131072;
        c.bos_token_id = 128000;
        c.eos_token_id = 128009;
    } else {
        std::string known;
        for (const auto& p : preset_names()) known += (known.empty() ? "" : ", ") + p;
        return make_error("unknown preset \"", name, "\" (known: ", known, ")");
    }
    return c;
}

std::vector<std::string> preset_names() {
    return {"qwen2.5-0.5b", "qwen2.5-7b", "llama-3.2-1b", "llama-3.1-8b"};
}

Status make_random_model(const ModelConfig& c, const std::string& out_path, FileType file_type,
                         uint64_t seed, ThreadPool& pool) {
    // Decode speed does not depend on weight values: each matrix is tiled from a pool of
    // kPoolRows random rows (quantised once), picked at random per row. The token embedding and
    // the output matrix get a random row each, so that a step's logits are distinct values, as a
    // trained model's: from a pool they took 64 values, each ~2,400 times, and every top_k /
    // top_p cut fell among ties (the sampling benchmarks then timed a rare path).
    constexpr int kPoolRows = 64;
    TensorFill fill = [&](const WeightSlot& slot, DType type, void* dst) {
        const int64_t n_in = slot.expected_ne[0], n_rows = slot.expected_ne[1];
        std::mt19937_64 rng(seed * 1000003u + static_cast<uint64_t>(slot.id) * 131u + slot.layer + 7);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        if (slot.n_dims == 1) {
            float* out = static_cast<float*>(dst);
            const bool is_norm = slot.id == WeightId::AttnNorm || slot.id == WeightId::FfnNorm ||
                                 slot.id == WeightId::OutputNorm;
            for (int64_t i = 0; i < n_in; ++i) out[i] = is_norm ? 1.0f : 0.02f * normal(rng);
            return;
        }
        const size_t row_bytes = row_size(type, n_in);
        const float stddev = 1.0f / std::sqrt(static_cast<float>(n_in));
        if (slot.id == WeightId::TokenEmbd || slot.id == WeightId::Output) {  // logits of sd ~3, as a trained model's
            const float logit_stddev = 3.0f * stddev;
            pool.parallel_for(n_rows, [&](int64_t begin, int64_t end) {
                std::vector<float> row(static_cast<size_t>(n_in));
                for (int64_t r = begin; r < end; ++r) {
                    std::mt19937_64 row_rng(seed * 1000003u + static_cast<uint64_t>(slot.id) * 131u + 0x9e3779b97f4a7c15ull * (r + 1));
                    std::normal_distribution<float> row_normal(0.0f, logit_stddev);
                    for (float& x : row) x = row_normal(row_rng);
                    quantize_row(type, row.data(), static_cast<uint8_t*>(dst) + row_bytes * r, n_in);
                }
            });
            return;
        }
        std::vector<uint8_t> rows(row_bytes * kPoolRows);
        std::vector<float> values(n_in);
        for (int r = 0; r < kPoolRows; ++r) {
            for (auto& x : values) x = stddev * normal(rng);
            quantize_row(type, values.data(), rows.data() + row_bytes * r, n_in);
        }
        pool.parallel_for(n_rows, [&](int64_t begin, int64_t end) {
            uint64_t state = seed ^ (0x9e3779b97f4a7c15ull * (begin + 1));
            for (int64_t r = begin; r < end; ++r) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                const int pick = static_cast<int>((state >> 33) % kPoolRows);
                std::memcpy(static_cast<uint8_t*>(dst) + row_bytes * r, rows.data() + row_bytes * pick, row_bytes);
            }
        });
    };
    ModelWeights none;
    return write_model_gguf(out_path, c, file_type, none, fill, "random " + std::string(arch_name(c.arch)));
}

}  // namespace mvllm
