#include <cstring>
#include <optional>
#include <filesystem>

#include "model/model.h"

namespace mvllm {
namespace {

namespace fs = std::filesystem;

// The source tensor of one slot, whichever file it came from.
struct Found {
    TensorView view;
    int n_dims = 0;
};

Status check_and_bind(Model& m, const WeightSlot& slot, const std::string& name, const Found& src) {
    const TypeTraits* traits = find_type_traits(static_cast<uint32_t>(src.view.type));
    if (!traits || !traits->storable)
        return make_error(m.path, ": tensor ", name, " has an unsupported type");
    if (src.view.ne != slot.expected_ne)
        return make_error(m.path, ": tensor ", name, " has shape ", shape_string(src.view.ne),
                          ", expected ", shape_string(slot.expected_ne), " (", m.config.summary(), ")");
    const bool is_vector = slot.n_dims == 1;
    const bool needs_permute = m.format == CheckpointFormat::Gguf && m.config.arch == Arch::Llama &&
                               (slot.id == WeightId::Wq || slot.id == WeightId::Wk ||
                                slot.id == WeightId::Bq || slot.id == WeightId::Bk);
    if (!is_vector && !needs_permute) {
        *slot.view = src.view;
        return Status::ok();
    }
    // Vectors (norms, biases, rope factors) become F32; permuted Q/K rows are copied once.
    TensorView out = src.view;
    if (is_vector) out.type = DType::F32;
    std::vector<uint8_t> bytes(out.n_bytes());
    if (is_vector) {
        dequantize_row(src.view.type, src.view.data, reinterpret_cast<float*>(bytes.data()),
                       src.view.n_elements());
    } else {
        std::memcpy(bytes.data(), src.view.data, bytes.size());
    }
    if (needs_permute) {
        const int n_heads = slot.id == WeightId::Wq || slot.id == WeightId::Bq ? m.config.n_heads
                                                                               : m.config.n_kv_heads;
        std::vector<uint8_t> permuted(bytes.size());
        const size_t row_bytes = is_vector ? sizeof(float) : out.row_bytes();
        permute_qk_rows(bytes.data(), permuted.data(), n_heads, m.config.head_dim, row_bytes,
                        QkPermute::FromGguf);
        bytes.swap(permuted);
    }
    m.owned.push_back(std::move(bytes));
    out.data = m.owned.back().data();
    *slot.view = out;
    return Status::ok();
}

template <typename FindFn>
Status bind_all(Model& m, FindFn find) {
    for (const WeightSlot& slot : weight_slots(m.config, &m.weights)) {
        const std::string name = weight_name(m.format, slot.id, slot.layer);
        std::optional<Found> src = find(name);
        if (!src) {
            if (slot.required) return make_error(m.path, ": missing tensor ", name);
            continue;
        }
        MVLLM_TRY(check_and_bind(m, slot, name, *src));
    }
    if (m.config.tied_embeddings) m.weights.output = m.weights.token_embd;
    return Status::ok();
}

// Loads the checkpoint's tokenizer unless it has none (absent); a failure is kept as a message.
template <typename LoadFn>
void attach_tokenizer(Model& m, LoadFn load, bool absent) {
    if (absent) {
        m.tokenizer_error = m.path + ": the model carries no tokenizer";
        return;
    }
    auto t = load();
    if (t.is_ok()) m.tokenizer = std::move(t).value();
    else m.tokenizer_error = t.status().message();
}

Result<std::unique_ptr<Model>> load_gguf(const std::string& path) {
    auto m = std::make_unique<Model>();
    m->path = path;
    m->format = CheckpointFormat::Gguf;
    MVLLM_ASSIGN_OR_RETURN(m->gguf, GgufFile::open(path));
    MVLLM_ASSIGN_OR_RETURN(m->config, config_from_gguf(*m->gguf));
    const GgufFile& f = *m->gguf;
    const GgufValue* vocab_model = f.find("tokenizer.ggml.model");
    const bool no_vocab = !vocab_model || (vocab_model->as_string() && *vocab_model->as_string() == "none");
    attach_tokenizer(*m, [&] { return Tokenizer::from_gguf(f); }, no_vocab);
    MVLLM_TRY(bind_all(*m, [&](const std::string& name) -> std::optional<Found> {
        const GgufTensorInfo* info = f.find_tensor(name);
        if (!info) return std::nullopt;
        return Found{f.view(*info), info->n_dims};
    }));
    return m;
}

Result<std::unique_ptr<Model>> load_hf(const std::string& dir) {
    auto m = std::make_unique<Model>();
    m->path = dir;
    m->format = CheckpointFormat::HuggingFace;
    MVLLM_ASSIGN_OR_RETURN(m->config, config_from_hf_json((fs::path(dir) / "config.json").string()));
    MVLLM_ASSIGN_OR_RETURN(m->safetensors, SafetensorsCheckpoint::open(dir));
    const SafetensorsCheckpoint& st = *m->safetensors;
    std::error_code ec;
    attach_tokenizer(*m, [&] { return Tokenizer::from_hf_dir(dir); },
                     !fs::exists(fs::path(dir) / "tokenizer.json", ec));
    // Some tied checkpoints still store lm_head.weight; the decoder uses the embedding then.
    MVLLM_TRY(bind_all(*m, [&](const std::string& name) -> std::optional<Found> {
        const SafetensorInfo* info = st.find(name);
        if (!info) return std::nullopt;
        return Found{info->view, info->n_dims};
    }));
    return m;
}

}  // namespace

size_t Model::weight_bytes() const {
    size_t total = 0;
    for (const WeightSlot& slot : weight_slots(config, const_cast<ModelWeights*>(&weights))) {
        if (slot.id == WeightId::Output && config.tied_embeddings) continue;
        if (slot.view->data) total += slot.view->n_bytes();
    }
    return total;
}

Result<std::unique_ptr<Model>> load_model(const std::string& path) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) return load_hf(path);
    if (!fs::exists(path, ec)) return make_error(path, ": no such file or folder");
    return load_gguf(path);
}

}  // namespace mvllm
