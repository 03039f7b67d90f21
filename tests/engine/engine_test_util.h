// What the engine tests share: the golden tiny Llama on the CPU backend, small engine options, and
// requests run to completion with their events collected.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "model/decoder.h"
#include "model/generate.h"

namespace mvllm::engine_test {

struct TinyModel {
    std::unique_ptr<Model> model;
    std::unique_ptr<CpuBackend> backend;
    std::unique_ptr<Decoder> decoder;
};

inline TinyModel& tiny() {
    static TinyModel t = [] {
        TinyModel m;
        auto model = load_model(MVLLM_FIXTURE_DIR "/tiny-llama");
        MVLLM_CHECK(model.is_ok()) << model.status().message();
        m.model = std::move(model.value());
        CpuBackendOptions o;
        o.n_threads = 1;
        m.backend = std::make_unique<CpuBackend>(o);
        auto dec = Decoder::create(*m.model, *m.backend);
        MVLLM_CHECK(dec.is_ok()) << dec.status().message();
        m.decoder = std::move(dec.value());
        return m;
    }();
    return t;
}

// The tiny model on a one-thread CpuBackend of its own that scores prompt targets and / or rows
// (CpuBackendOptions::scores_targets, scores_rows).
struct TinyOnBackend {
    std::unique_ptr<CpuBackend> backend;
    std::unique_ptr<Decoder> decoder;
};
inline TinyOnBackend tiny_scoring(bool scores_targets, bool scores_rows) {
    CpuBackendOptions o;
    o.n_threads = 1;
    o.scores_targets = scores_targets;
    o.scores_rows = scores_rows;
    TinyOnBackend t;
    t.backend = std::make_unique<CpuBackend>(o);
    auto dec = Decoder::create(*tiny().model, *t.backend);
    MVLLM_CHECK(dec.is_ok()) << dec.status().message();
    t.decoder = std::move(dec.value());
    return t;
}

inline EngineOptions small_options(int64_t n_blocks, int32_t block_size = 4) {
    EngineOptions o;
    o.kv_cache_blocks = n_blocks;
    o.block_size = block_size;
    o.max_batched_tokens = 64;
    o.max_seqs = 16;
    o.max_prefill_chunk = 16;
    return o;
}

inline SamplingParams greedy(int max_tokens) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
}

struct Outcome {
    std::vector<int32_t> tokens;
    std::vector<TokenLogprob> logprobs;
    std::vector<TokenLogprob> prompt_logprobs;
    std::string text;
    FinishReason reason = FinishReason::Error;
    RequestStats stats;
    bool finished = false;
};

// Runs requests to completion on the calling thread; outcomes in submission order.
inline std::vector<Outcome> run_all(Engine& engine, const std::vector<Request>& requests) {
    std::vector<Outcome> out(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
        auto id = engine.submit(requests[i], [&out, i](const EngineEvent& e) {
            Outcome& o = out[i];
            EXPECT_FALSE(o.finished) << "event after finish";
            if (e.kind == EngineEvent::Kind::Token) {
                o.tokens.insert(o.tokens.end(), e.token_ids.begin(), e.token_ids.end());
                o.logprobs.insert(o.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
                o.prompt_logprobs.insert(o.prompt_logprobs.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
                o.text += e.text;
            } else {
                o.reason = e.reason;
                o.stats = e.stats;
                o.finished = true;
            }
        });
        EXPECT_TRUE(id.is_ok()) << id.status().message();
    }
    engine.run_until_idle();
    for (const Outcome& o : out) EXPECT_TRUE(o.finished);
    return out;
}

inline std::vector<int32_t> greedy_alone(const std::vector<int32_t>& prompt, int n) {
    auto engine = Engine::create(*tiny().decoder, small_options(256)).value();
    Request r;
    r.prompt_ids = prompt;
    r.sampling = greedy(n);
    return run_all(*engine, {r})[0].tokens;
}

inline std::vector<int32_t> random_prompt(std::mt19937& rng, int n) {
    std::vector<int32_t> p(n);
    for (auto& t : p) t = static_cast<int32_t>(rng() % 512);
    return p;
}

}  // namespace mvllm::engine_test
