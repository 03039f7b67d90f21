#include "cli/text_generation.h"

#include <cmath>
#include <cstdio>
#include <mutex>

#include "tokenizer/chat_template.h"

namespace mvllm::cli {

void add_penalty_flags(CLI::App* cmd, float* repeat, float* presence, float* frequency) {
    cmd->add_option("--repeat-penalty", *repeat, "repetition penalty over prompt and output (1: off)");
    cmd->add_option("--presence-penalty", *presence, "presence penalty over the output (0: off)");
    cmd->add_option("--frequency-penalty", *frequency, "frequency penalty over the output (0: off)");
}

void add_sampling_flags(CLI::App* cmd, SamplingFlags* f) {
    cmd->add_option("--temperature,--temp", f->temperature, "0: greedy (default: 0.8 for text, greedy for --prompt-ids)");
    cmd->add_option("--top-p", f->top_p, "nucleus sampling mass")->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--top-k", f->top_k, "keep the k most likely tokens (0: all)")->check(CLI::NonNegativeNumber);
    cmd->add_option("--min-p", f->min_p, "drop tokens below min_p x the top probability")->check(CLI::Range(0.0, 1.0));
    add_penalty_flags(cmd, &f->repeat_penalty, &f->presence_penalty, &f->frequency_penalty);
    cmd->add_option("--seed", f->seed, "random seed (same seed, same text)");
    cmd->add_option("--stop", f->stop, "stop string (repeatable); never printed");
    cmd->add_option("--logit-bias", f->logit_bias, "TOKEN=BIAS added to a token's logit (repeatable; -100 bans it)")
        ->check(CLI::Validator(
            [](std::string& s) -> std::string {
                int32_t token = 0;
                float bias = 0;
                char extra = 0;
                if (std::sscanf(s.c_str(), "%d=%f%c", &token, &bias, &extra) != 2 || token < 0 || !std::isfinite(bias))
                    return "expected TOKEN=BIAS (a token id >= 0, a finite number), got " + s;
                return {};
            },
            "TOKEN=BIAS"));
    cmd->add_flag("--ignore-eos", f->ignore_eos, "keep generating past end-of-sequence tokens");
}

SamplingParams to_sampling_params(const SamplingFlags& f, bool greedy_default, int n_predict) {
    SamplingParams p;
    p.temperature = f.temperature >= 0 ? f.temperature : (greedy_default ? 0.0f : 0.8f);
    p.top_p = f.top_p;
    p.top_k = f.top_k;
    p.min_p = f.min_p;
    p.repetition_penalty = f.repeat_penalty;
    p.presence_penalty = f.presence_penalty;
    p.frequency_penalty = f.frequency_penalty;
    p.seed = f.seed;
    p.stop = f.stop;
    for (const std::string& b : f.logit_bias) {  // checked by the option's validator
        int32_t token = 0;
        float bias = 0;
        std::sscanf(b.c_str(), "%d=%f", &token, &bias);
        p.logit_bias.push_back({token, bias});
    }
    p.ignore_eos = f.ignore_eos;
    p.max_tokens = n_predict;
    return p;
}

Result<std::vector<int32_t>> encode_chat(const Tokenizer& tok, const nlohmann::ordered_json& messages) {
    ChatTemplateOptions opt;
    opt.add_generation_prompt = true;
    opt.bos_token = tok.bos_text;
    opt.eos_token = tok.eos_text;
    const std::string& source = tok.chat_template.empty() ? fallback_chat_template() : tok.chat_template;
    MVLLM_ASSIGN_OR_RETURN(std::string text, apply_chat_template(source, messages, opt));
    // The template writes BOS itself when the model wants one; specials in it are real specials.
    return tok.encode(text, /*add_bos=*/false, /*parse_special=*/true);
}

Result<std::unique_ptr<Engine>> make_cli_engine(Runtime& rt, const RunOptions& o, int64_t max_tokens) {
    EngineOptions eo;
    eo.block_size = o.kv_block_size;
    eo.kv_dtype = kv_dtype_name(o);
    // + the draft tokens one verification may look ahead
    const int64_t lookahead = rt.speculative.draft ? rt.speculative.draft_tokens : 0;
    const int64_t capacity = std::max<int64_t>(o.ctx_size, max_tokens + 1 + lookahead);
    eo.kv_cache_blocks = (capacity + eo.block_size - 1) / eo.block_size + 1;
    eo.max_model_len = std::max<int64_t>(capacity, rt.model->config.n_ctx_train);
    eo.max_prefill_chunk = o.prefill_chunk;  // 0: the whole prompt in one step
    eo.max_batched_tokens = static_cast<int32_t>(std::min<int64_t>(capacity + 1, 1 << 20));
    eo.speculative = rt.speculative;
    return Engine::create(*rt.decoder, eo, rt.model->tokenizer.get());
}

Result<GenerationResult> run_request(Engine& engine, Request request,
                                     const std::function<void(const EngineEvent&)>& on_token) {
    GenerationResult out;
    std::string error;
    bool finished = false;
    MVLLM_ASSIGN_OR_RETURN(RequestId id, engine.submit(std::move(request), [&](const EngineEvent& e) {
        if (e.kind == EngineEvent::Kind::Token) {
            out.ids.insert(out.ids.end(), e.token_ids.begin(), e.token_ids.end());
            out.text += e.text;
            if (on_token) on_token(e);
        } else {
            finished = true;
            out.stats = e.stats;
            out.reason = e.reason;
            error = e.error;
        }
    }));
    (void)id;
    Status status;
    while (!finished && engine.step(&status)) {
    }
    if (!status.is_ok()) return status;
    if (!finished) return make_error("the engine stopped before the request finished");
    if (out.reason == FinishReason::Error) return make_error(error);
    return out;
}

std::string stats_line(const RequestStats& s) {
    char buf[512];
    const double decode_tps = s.n_output_tokens > 1 && s.decode_seconds > 0 ? (s.n_output_tokens - 1) / s.decode_seconds : 0;
    std::snprintf(buf, sizeof(buf),
                  "prompt %lld tokens, generated %lld tokens | prefill %.1f tok/s, decode %.1f tok/s | "
                  "first token %.0f ms, prefix reused %lld",
                  (long long)s.n_prompt_tokens, (long long)s.n_output_tokens,
                  s.prefill_seconds > 0 ? s.n_prompt_tokens / s.prefill_seconds : 0.0, decode_tps,
                  s.ttft_seconds * 1e3, (long long)s.n_prefix_tokens_reused);
    std::string line = buf;
    if (s.n_spec_steps > 0 || s.n_fallback_steps > 0) {
        std::snprintf(buf, sizeof(buf), " | draft: proposed %lld, accepted %lld (%.1f%%), %.2f tokens/verification, %lld plain steps, accepted lengths [",
                      (long long)s.n_draft_tokens, (long long)s.n_draft_accepted,
                      s.n_draft_tokens ? 100.0 * s.n_draft_accepted / s.n_draft_tokens : 0.0,
                      s.n_spec_steps ? double(s.n_draft_accepted + s.n_spec_steps) / s.n_spec_steps : 0.0,
                      (long long)s.n_fallback_steps);
        line += buf;
        for (size_t i = 0; i < s.accepted_lengths.size(); ++i)
            line += (i ? " " : "") + std::to_string(s.accepted_lengths[i]);
        line += "]";
    }
    return line;
}

}  // namespace mvllm::cli
