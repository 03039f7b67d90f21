// tokenizer.ggml.* metadata <-> VocabData.
//
//   tokenizer.ggml.model          string   "gpt2" (byte-level BPE) | "llama" (SentencePiece)
//   tokenizer.ggml.pre            string   pre-tokenizer name (BPE): gpt2, llama-bpe, qwen2, ...
//   tokenizer.ggml.tokens         [n_vocab] string
//   tokenizer.ggml.scores         [n_vocab] f32 (SPM)
//   tokenizer.ggml.token_type     [n_vocab] i32 (TokenType)
//   tokenizer.ggml.merges         [n_merges] string "left right" (BPE)
//   tokenizer.ggml.{bos,eos,eot,unknown,padding}_token_id   u32
//   tokenizer.ggml.add_bos_token, add_eos_token, add_space_prefix   bool
//   tokenizer.chat_template       string
#include "io/gguf.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/vocab.h"

namespace mvllm {
namespace {

Result<const GgufArray*> get_array(const GgufFile& file, const char* key, bool required) {
    const GgufValue* v = file.find(key);
    if (!v) {
        if (required) return make_error("missing ", key);
        return static_cast<const GgufArray*>(nullptr);
    }
    const GgufArray* a = v->as_array();
    if (!a) return make_error(key, " is a ", gguf_type_name(v->type), ", not an array");
    return a;
}

Status read_strings(const GgufFile& file, const char* key, bool required, std::vector<std::string>& out) {
    MVLLM_ASSIGN_OR_RETURN(const GgufArray* a, get_array(file, key, required));
    if (!a) return Status::ok();
    out.reserve(a->items.size());
    for (const GgufValue& item : a->items) {
        const std::string* s = item.as_string();
        if (!s) return make_error(key, " holds a ", gguf_type_name(item.type), ", not strings");
        out.push_back(*s);
    }
    return Status::ok();
}

}  // namespace

Result<VocabData> read_gguf_vocab(const GgufFile& file) {
    VocabData d;
    if (!file.find("tokenizer.ggml.model")) return Status::error("no tokenizer in this file (tokenizer.ggml.model is missing)");
    MVLLM_ASSIGN_OR_RETURN(std::string model, file.get_string("tokenizer.ggml.model"));
    if (model == "gpt2") {
        d.kind = VocabKind::BPE;
    } else if (model == "llama") {
        d.kind = VocabKind::SPM;
    } else if (model == "none" || model == "no_vocab") {
        return Status::error("this file carries no vocabulary (tokenizer.ggml.model = " + model + ")");
    } else {
        return Status::error("unsupported tokenizer.ggml.model '" + model + "' (mvllm reads gpt2 and llama)");
    }
    MVLLM_TRY(read_strings(file, "tokenizer.ggml.tokens", true, d.tokens));
    const size_t n = d.tokens.size();

    MVLLM_ASSIGN_OR_RETURN(const GgufArray* scores, get_array(file, "tokenizer.ggml.scores", false));
    if (scores) {
        if (scores->items.size() != n) return make_error("tokenizer.ggml.scores has ", scores->items.size(), " entries for ", n, " tokens");
        d.scores.reserve(n);
        for (const GgufValue& v : scores->items) {
            auto f = v.as_float();
            if (!f) return Status::error("tokenizer.ggml.scores holds non-numbers");
            d.scores.push_back(static_cast<float>(*f));
        }
    }
    MVLLM_ASSIGN_OR_RETURN(const GgufArray* types, get_array(file, "tokenizer.ggml.token_type", false));
    if (types) {
        if (types->items.size() != n) return make_error("tokenizer.ggml.token_type has ", types->items.size(), " entries for ", n, " tokens");
        d.types.reserve(n);
        for (const GgufValue& v : types->items) {
            auto t = v.as_int();
            if (!t || *t < 0 || *t > 6) return Status::error("tokenizer.ggml.token_type holds a value outside 0..6");
            d.types.push_back(static_cast<TokenType>(*t));
        }
    }
    MVLLM_TRY(read_strings(file, "tokenizer.ggml.merges", false, d.merges));
    if (d.kind == VocabKind::BPE) {
        if (file.find("tokenizer.ggml.pre")) {
            MVLLM_ASSIGN_OR_RETURN(d.pre, file.get_string("tokenizer.ggml.pre"));
        }
        if (!pre_pattern_for_name(d.pre))
            return make_error("unsupported tokenizer.ggml.pre '", d.pre, "' (mvllm knows gpt2, llama-bpe, qwen2, default)");
        // Llama 3's tokenizer keeps a word that is a token whole (Hugging Face's ignore_merges).
        d.ignore_merges = d.pre == "llama-bpe" || d.pre == "llama3";
    }

    auto read_id = [&](const char* key, int32_t& id) -> Status {
        MVLLM_ASSIGN_OR_RETURN(int64_t v, file.get_int_or(key, -1));
        if (v >= static_cast<int64_t>(n)) return make_error(key, " = ", v, " is outside the vocabulary of ", n, " tokens");
        id = static_cast<int32_t>(v);
        return Status::ok();
    };
    MVLLM_TRY(read_id("tokenizer.ggml.bos_token_id", d.bos_id));
    MVLLM_TRY(read_id("tokenizer.ggml.eos_token_id", d.eos_id));
    MVLLM_TRY(read_id("tokenizer.ggml.eot_token_id", d.eot_id));
    MVLLM_TRY(read_id("tokenizer.ggml.unknown_token_id", d.unk_id));
    MVLLM_TRY(read_id("tokenizer.ggml.padding_token_id", d.pad_id));
    const bool spm = d.kind == VocabKind::SPM;
    MVLLM_ASSIGN_OR_RETURN(d.add_bos, file.get_bool_or("tokenizer.ggml.add_bos_token", spm));
    MVLLM_ASSIGN_OR_RETURN(d.add_eos, file.get_bool_or("tokenizer.ggml.add_eos_token", false));
    MVLLM_ASSIGN_OR_RETURN(d.add_space_prefix, file.get_bool_or("tokenizer.ggml.add_space_prefix", spm));
    if (file.find("tokenizer.chat_template")) {
        MVLLM_ASSIGN_OR_RETURN(d.chat_template, file.get_string("tokenizer.chat_template"));
    }
    return d;
}

void write_gguf_vocab(const VocabData& d, GgufWriter& writer) {
    const bool spm = d.kind == VocabKind::SPM;
    writer.set("tokenizer.ggml.model", GgufValue::str(spm ? "llama" : "gpt2"));
    if (!spm) writer.set("tokenizer.ggml.pre", GgufValue::str(d.pre));
    writer.set("tokenizer.ggml.tokens", GgufValue::string_array(d.tokens));
    if (!d.scores.empty()) {
        std::vector<GgufValue> scores;
        scores.reserve(d.scores.size());
        for (float s : d.scores) scores.push_back(GgufValue::f32(s));
        writer.set("tokenizer.ggml.scores", GgufValue::array(GgufType::FLOAT32, std::move(scores)));
    }
    std::vector<GgufValue> types;
    types.reserve(d.types.size());
    for (TokenType t : d.types) types.push_back(GgufValue::i32(static_cast<int32_t>(t)));
    writer.set("tokenizer.ggml.token_type", GgufValue::array(GgufType::INT32, std::move(types)));
    if (!d.merges.empty()) writer.set("tokenizer.ggml.merges", GgufValue::string_array(d.merges));
    auto write_id = [&](const char* key, int32_t id) {
        if (id >= 0) writer.set(key, GgufValue::u32(static_cast<uint32_t>(id)));
    };
    write_id("tokenizer.ggml.bos_token_id", d.bos_id);
    write_id("tokenizer.ggml.eos_token_id", d.eos_id);
    write_id("tokenizer.ggml.eot_token_id", d.eot_id);
    write_id("tokenizer.ggml.unknown_token_id", d.unk_id);
    write_id("tokenizer.ggml.padding_token_id", d.pad_id);
    writer.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(d.add_bos));
    writer.set("tokenizer.ggml.add_eos_token", GgufValue::boolean(d.add_eos));
    if (spm) writer.set("tokenizer.ggml.add_space_prefix", GgufValue::boolean(d.add_space_prefix));
    if (!d.chat_template.empty()) writer.set("tokenizer.chat_template", GgufValue::str(d.chat_template));
}

}  // namespace mvllm
