// The batch-invariance workload shared by the CPU (tests/engine) and CUDA (tests/cuda) tests: one
// 600-token target request run alone (whole prompt in one forward) and among 31 others (small
// shared token budget, prefix shared with three of them), with its greedy tokens and logprobs.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "engine/engine.h"
#include "model/decoder.h"

namespace mvllm::test {

struct TargetRun {
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;  // of each generated token
    int64_t prefix_reused = 0;
};

inline Request greedy_request(std::vector<int32_t> prompt, int max_tokens) {
    Request r;
    r.prompt_ids = std::move(prompt);
    r.sampling.temperature = 0;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    r.sampling.logprobs = 0;
    return r;
}

// Submits others[0, n_before), the target, then the rest; runs to idle; the target's outcome.
inline TargetRun run_target(Decoder& decoder, const EngineOptions& options, const Request& target,
                            const std::vector<Request>& others, size_t n_before) {
    auto engine = Engine::create(decoder, options);
    MVLLM_CHECK(engine.is_ok()) << engine.status().message();
    TargetRun run;
    int finished = 0;
    auto submit = [&](const Request& r, bool is_target) {
        auto id = (*engine)->submit(r, [&, is_target](const EngineEvent& e) {
            if (e.kind == EngineEvent::Kind::Finish) {
                EXPECT_NE(e.reason, FinishReason::Error) << e.error;
                ++finished;
                if (is_target) run.prefix_reused = e.stats.n_prefix_tokens_reused;
                return;
            }
            if (!is_target) return;
            run.tokens.insert(run.tokens.end(), e.token_ids.begin(), e.token_ids.end());
            for (const TokenLogprob& lp : e.logprobs) run.logprobs.push_back(lp.logprob);
        });
        ASSERT_TRUE(id.is_ok()) << id.status().message();
    };
    for (size_t i = 0; i < n_before; ++i) submit(others[i], false);
    submit(target, true);
    for (size_t i = n_before; i < others.size(); ++i) submit(others[i], false);
    (*engine)->run_until_idle();
    EXPECT_EQ(finished, static_cast<int>(others.size()) + 1);
    return run;
}

struct Workload {
    Request target;
    std::vector<Request> others;  // 31
    size_t n_before = 10;
};

// A 600-token target (its context passes the 512-token fixed attention split) generating 32
// tokens; 31 others of 5..400 prompt tokens and 1..48 output tokens, three of which share the
// target's first 304 tokens (19 blocks) and arrive before it.
inline Workload make_workload(int32_t n_vocab) {
    std::mt19937 rng(2024);
    auto ids = [&](int n) {
        std::vector<int32_t> v(n);
        for (auto& t : v) t = static_cast<int32_t>(rng() % n_vocab);
        return v;
    };
    Workload w;
    w.target = greedy_request(ids(600), 32);
    for (int i = 0; i < 31; ++i) {
        std::vector<int32_t> prompt = ids(5 + static_cast<int>(rng() % 396));
        if (i == 2 || i == 5 || i == 8) {
            prompt.assign(w.target.prompt_ids.begin(), w.target.prompt_ids.begin() + 304);
            const std::vector<int32_t> tail = ids(1 + static_cast<int>(rng() % 100));
            prompt.insert(prompt.end(), tail.begin(), tail.end());
        }
        w.others.push_back(greedy_request(std::move(prompt), 1 + static_cast<int>(rng() % 48)));
    }
    return w;
}

inline EngineOptions alone_options() {
    EngineOptions o;
    o.kv_cache_blocks = 1024;
    o.max_batched_tokens = 2048;
    o.max_prefill_chunk = 0;  // the whole prompt in one forward
    return o;
}

inline EngineOptions crowded_options() {
    EngineOptions o;
    o.kv_cache_blocks = 1024;
    o.max_batched_tokens = 160;  // prompts cut at budget-dependent points, decodes batched with them
    o.max_prefill_chunk = 48;
    o.max_seqs = 32;
    return o;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace mvllm::test
