// Fuzz target: the OpenAI request parsing of src/server, and what the server does with a request
// it accepts before the engine sees it (chat messages through the shipped model's chat template
// and tokenizer, text prompts through the tokenizer, the error body it would send).
// Input: selector byte (0 completions, 1 chat, 2 tokenize, 3 detokenize, 4 Authorization header)
// then the request body (or the header).
// Properties: an accepted request is within the documented ranges; a refused one has a 4xx status
// and an error body that serialises.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

using namespace mvllm;
using namespace mvllm::server;

namespace {

const Tokenizer& shipped_tokenizer() {
    static const std::unique_ptr<Tokenizer> tok = [] {
        auto t = Tokenizer::from_path(fuzz::source_path("models/mvllm-austen-q8_0.gguf"));
        if (!t) {
            std::fprintf(stderr, "fuzz_openai_request: %s\n", t.status().message().c_str());
            std::abort();
        }
        return std::move(t).value();
    }();
    return *tok;
}

void check_error(const ApiError& e) {
    FUZZ_REQUIRE(e.status >= 400 && e.status < 500, "a refused request is a client error");
    FUZZ_REQUIRE(!e.message.empty(), "an error has a message");
    (void)error_body(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void check_params(const GenerationParams& p) {
    const SamplingParams& s = p.sampling;
    FUZZ_REQUIRE(p.n >= 1 && p.n <= kMaxChoices, "n in range");
    FUZZ_REQUIRE(s.temperature >= 0 && s.temperature <= 2, "temperature in range");
    FUZZ_REQUIRE(s.top_p > 0 && s.top_p <= 1, "top_p in range");
    FUZZ_REQUIRE(s.top_k >= 0, "top_k in range");
    FUZZ_REQUIRE(s.max_tokens == -1 || s.max_tokens >= 1, "max_tokens in range");
    FUZZ_REQUIRE(s.logprobs >= -1 && s.logprobs <= kMaxLogprobs, "logprobs in range");
    FUZZ_REQUIRE(s.seed >= -1, "seed is -1 or non-negative");
    for (const std::string& stop : s.stop) FUZZ_REQUIRE(!stop.empty(), "no empty stop string");
}

void render_chat(const nlohmann::ordered_json& messages) {
    const Tokenizer& tok = shipped_tokenizer();
    ChatTemplateOptions opt;
    opt.add_generation_prompt = true;
    opt.bos_token = tok.bos_text;
    opt.eos_token = tok.eos_text;
    const std::string& source = tok.chat_template.empty() ? fallback_chat_template() : tok.chat_template;
    auto text = apply_chat_template(source, messages, opt);
    FUZZ_REQUIRE(text.is_ok(), "normalised messages always render with the model's template");
    for (int32_t id : tok.encode(*text, false, true)) FUZZ_REQUIRE(id >= 0 && id < tok.n_vocab(), "vocabulary ids");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    (void)shipped_tokenizer();  // seconds under ASan: outside the timed inputs
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz::Input in(data, size);
    const uint8_t selector = in.byte() % 5;
    const std::string body(in.rest());
    switch (selector) {
        case 0: {
            CompletionRequest r;
            if (auto e = parse_completion_request(body, &r)) return check_error(*e), 0;
            check_params(r.params);
            FUZZ_REQUIRE(!r.prompts.empty(), "at least one prompt");
            for (const PromptInput& p : r.prompts) {
                FUZZ_REQUIRE(p.is_text ? !p.text.empty() : !p.ids.empty(), "no empty prompt");
                for (int32_t id : p.ids) FUZZ_REQUIRE(id >= 0, "token ids are non-negative");
                if (p.is_text) (void)shipped_tokenizer().encode(p.text, true, false);
            }
            break;
        }
        case 1: {
            ChatRequest r;
            if (auto e = parse_chat_request(body, &r)) return check_error(*e), 0;
            check_params(r.params);
            FUZZ_REQUIRE(r.messages.is_array() && !r.messages.empty(), "at least one message");
            render_chat(r.messages);
            break;
        }
        case 2: {
            TokenizeRequest r;
            if (auto e = parse_tokenize_request(body, &r)) return check_error(*e), 0;
            if (r.is_chat) render_chat(r.messages);
            else (void)shipped_tokenizer().encode(r.prompt, r.add_special_tokens, false);
            break;
        }
        case 3: {
            std::vector<int32_t> ids;
            if (auto e = parse_detokenize_request(body, &ids)) return check_error(*e), 0;
            for (int32_t id : ids) FUZZ_REQUIRE(id >= 0, "token ids are non-negative");
            (void)shipped_tokenizer().decode(ids);
            break;
        }
        default: {
            const std::string key = "sk-test-key";
            const bool ok = bearer_matches(body, key);
            FUZZ_REQUIRE(ok == (body == "Bearer " + key), "only the exact bearer header matches");
            FUZZ_REQUIRE(!bearer_matches(body, ""), "an empty key matches nothing");
            break;
        }
    }
    return 0;
}
