// tokenizer.json + tokenizer_config.json (Hugging Face) -> VocabData.
//
// tokenizer.json: model {type "BPE", vocab {text: id}, merges ["a b", ...] or [["a", "b"], ...],
// ignore_merges}, added_tokens [{id, content, special}], pre_tokenizer (a Split with a Regex
// pattern, possibly inside a Sequence, followed by ByteLevel; or ByteLevel alone, which uses the
// GPT-2 expression). tokenizer_config.json: bos_token / eos_token / pad_token (a string or
// {content}), add_bos_token, add_eos_token, chat_template (a string, or a list of {name,
// template} of which "default" is taken).
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/pretokenize.h"
#include "tokenizer/vocab.h"

namespace mvllm {
namespace {

using nlohmann::json;

Result<json> read_json(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error(path, ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    try {
        return json::parse(ss.str());
    } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
        return make_error(path, ": malformed JSON: ", e.what());
    }
}

// The regex of the pre-tokenizer: a Split(Regex) anywhere in a Sequence, or ByteLevel(use_regex).
std::string find_pre_pattern(const json& pre) {
    if (!pre.is_object()) return {};
    const std::string type = pre.value("type", "");
    if (type == "Sequence" && pre.contains("pretokenizers")) {
        for (const json& p : pre["pretokenizers"]) {
            std::string found = find_pre_pattern(p);
            if (!found.empty()) return found;
        }
        return {};
    }
    if (type == "Split" && pre.contains("pattern") && pre["pattern"].contains("Regex"))
        return pre["pattern"]["Regex"].get<std::string>();
    if (type == "ByteLevel" && pre.value("use_regex", true)) return pre_pattern_for_name("gpt2");
    return {};
}

// "<s>" or {"content": "<s>", ...} -> "<s>"; empty for null.
std::string token_content(const json& j) {
    if (j.is_string()) return j.get<std::string>();
    if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
    return {};
}

// A token id of tokenizer.json: a JSON integer. Anything else is refused; nlohmann's get<int64_t>
// on a float would convert it, which is undefined beyond the int64 range (found by fuzzing).
bool read_token_id(const json& v, int64_t* id) {
    if (v.is_number_unsigned()) {
        const uint64_t u = v.get<uint64_t>();
        if (u > static_cast<uint64_t>(INT64_MAX)) return false;
        *id = static_cast<int64_t>(u);
        return true;
    }
    if (!v.is_number_integer()) return false;
    *id = v.get<int64_t>();
    return true;
}

}  // namespace

Result<VocabData> read_hf_vocab(const std::string& dir) {
    const std::string path = dir + "/tokenizer.json";
    MVLLM_ASSIGN_OR_RETURN(json tj, read_json(path));
    VocabData d;
    try {
        if (!tj.contains("model") || !tj["model"].is_object()) return make_error(path, ": no \"model\" object");
        const json& model = tj["model"];
        const std::string type = model.value("type", "");
        if (type != "BPE")
            return make_error(path, ": unsupported tokenizer model type '", type, "' (mvllm reads byte-level BPE from tokenizer.json)");
        if (model.value("byte_fallback", false))
            return make_error(path, ": a SentencePiece-style (byte_fallback) tokenizer.json is not supported; use a GGUF file");
        d.kind = VocabKind::BPE;
        d.ignore_merges = model.value("ignore_merges", false);

        const json& vocab = model.at("vocab");
        if (!vocab.is_object()) return make_error(path, ": model.vocab is not an object");
        int64_t max_id = -1, id = 0;
        for (auto it = vocab.begin(); it != vocab.end(); ++it) {
            if (!read_token_id(it.value(), &id)) return make_error(path, ": the id of '", it.key(), "' is not an integer");
            max_id = std::max(max_id, id);
        }
        const json& added = tj.contains("added_tokens") && tj["added_tokens"].is_array() ? tj["added_tokens"] : json::array();
        for (const json& a : added) {
            if (!a.is_object() || !a.contains("id") || !read_token_id(a["id"], &id))
                return make_error(path, ": an added token's id is missing or not an integer");
            max_id = std::max(max_id, id);
        }
        // Real vocabularies number their tokens densely (a hole is named "[PADn]" below); an id range
        // mostly of holes is a corrupt file, and building it would take gigabytes.
        const int64_t n_defined = static_cast<int64_t>(vocab.size() + added.size());
        if (max_id < 0 || max_id > (1 << 24) || max_id + 1 > 2 * n_defined + 1024)
            return make_error(path, ": vocabulary ids out of range (highest ", max_id, " for ", n_defined,
                              " tokens; at most 1,024 + one hole per token is accepted)");
        d.tokens.assign(max_id + 1, std::string());
        d.types.assign(max_id + 1, TokenType::UNUSED);
        for (auto it = vocab.begin(); it != vocab.end(); ++it) {
            read_token_id(it.value(), &id);
            if (id < 0) return make_error(path, ": negative id for '", it.key(), "'");
            d.tokens[id] = it.key();
            d.types[id] = TokenType::NORMAL;
        }
        for (const json& a : added) {
            read_token_id(a["id"], &id);
            if (id < 0) return make_error(path, ": negative added-token id");
            d.tokens[id] = a.at("content").get<std::string>();
            d.types[id] = a.value("special", false) ? TokenType::CONTROL : TokenType::USER_DEFINED;
        }
        for (size_t id = 0; id < d.tokens.size(); ++id)  // holes in the id range
            if (d.types[id] == TokenType::UNUSED) d.tokens[id] = "[PAD" + std::to_string(id) + "]";

        if (model.contains("merges")) {
            const json& merges = model["merges"];
            d.merges.reserve(merges.size());
            for (const json& m : merges) {
                if (m.is_string()) {
                    d.merges.push_back(m.get<std::string>());
                } else if (m.is_array() && m.size() == 2) {
                    d.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
                } else {
                    return make_error(path, ": a merge is neither \"a b\" nor [\"a\", \"b\"]");
                }
            }
        }

        d.pre_pattern = find_pre_pattern(tj.value("pre_tokenizer", json()));
        if (d.pre_pattern.empty()) return make_error(path, ": no byte-level pre-tokenizer (Split regex or ByteLevel) found");
        d.pre = pre_name_for_pattern(d.pre_pattern);
        if (d.pre.empty()) d.pre = "default";  // an unknown expression: GGUF output falls back to GPT-2's
    } catch (const json::exception& e) {
        return make_error(path, ": unexpected structure: ", e.what());
    }

    auto find_id = [&](const std::string& text) -> int32_t {
        if (text.empty()) return -1;
        for (size_t id = 0; id < d.tokens.size(); ++id)
            if (d.tokens[id] == text && d.types[id] != TokenType::NORMAL) return static_cast<int32_t>(id);
        for (size_t id = 0; id < d.tokens.size(); ++id)
            if (d.tokens[id] == text) return static_cast<int32_t>(id);
        return -1;
    };

    const std::string config_path = dir + "/tokenizer_config.json";
    std::ifstream probe(config_path);
    if (probe) {
        probe.close();
        MVLLM_ASSIGN_OR_RETURN(json cj, read_json(config_path));
        try {
            const std::string bos = token_content(cj.value("bos_token", json()));
            const std::string eos = token_content(cj.value("eos_token", json()));
            d.bos_id = find_id(bos);
            d.eos_id = find_id(eos);
            d.pad_id = find_id(token_content(cj.value("pad_token", json())));
            d.unk_id = find_id(token_content(cj.value("unk_token", json())));
            if (cj.contains("add_bos_token") && cj["add_bos_token"].is_boolean()) {
                d.add_bos = cj["add_bos_token"].get<bool>();
            } else if (!bos.empty() && tj.contains("post_processor")) {
                // A TemplateProcessing post-processor that inserts BOS asks for it.
                d.add_bos = tj["post_processor"].dump().find("\"" + bos + "\"") != std::string::npos;
            }
            if (cj.contains("add_eos_token") && cj["add_eos_token"].is_boolean()) d.add_eos = cj["add_eos_token"].get<bool>();
            if (cj.contains("chat_template")) {
                const json& ct = cj["chat_template"];
                if (ct.is_string()) {
                    d.chat_template = ct.get<std::string>();
                } else if (ct.is_array()) {
                    for (const json& t : ct)
                        if (t.value("name", "") == "default") d.chat_template = t.value("template", "");
                }
            }
        } catch (const json::exception& e) {
            return make_error(config_path, ": unexpected structure: ", e.what());
        }
    }
    if (d.eos_id < 0) d.eos_id = find_id("<|endoftext|>");
    return d;
}

}  // namespace mvllm
