// The engine on the golden tiny Llama: greedy outputs match the transformers reference and do
// not depend on batching, preemption, prefix reuse or the submitting thread.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <set>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "kv/block_manager.h"
#include "model/decoder.h"
#include "engine/perplexity.h"
#include "engine/sampler.h"
#include "model/generate.h"
#include "../model/golden_util.h"

namespace mvllm {
namespace {

struct TinyModel {
    std::unique_ptr<Model> model;
    std::unique_ptr<CpuBackend> backend;
    std::unique_ptr<Decoder> decoder;
};

TinyModel& tiny() {
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

EngineOptions small_options(int64_t n_blocks, int32_t block_size = 4) {
    EngineOptions o;
    o.kv_cache_blocks = n_blocks;
    o.block_size = block_size;
    o.max_batched_tokens = 64;
    o.max_seqs = 16;
    o.max_prefill_chunk = 16;
    return o;
}

SamplingParams greedy(int max_tokens) {
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
std::vector<Outcome> run_all(Engine& engine, const std::vector<Request>& requests) {
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

std::vector<int32_t> greedy_alone(const std::vector<int32_t>& prompt, int n) {
    auto engine = Engine::create(*tiny().decoder, small_options(256)).value();
    Request r;
    r.prompt_ids = prompt;
    r.sampling = greedy(n);
    return run_all(*engine, {r})[0].tokens;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int n) {
    std::vector<int32_t> p(n);
    for (auto& t : p) t = static_cast<int32_t>(rng() % 512);
    return p;
}

TEST(Engine, GreedyMatchesTransformersReference) {
    std::ifstream in(MVLLM_FIXTURE_DIR "/tiny-llama/reference.json");
    const auto ref = nlohmann::json::parse(in);
    const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
    const auto expected = ref["greedy_ids"].get<std::vector<int32_t>>();
    auto engine = Engine::create(*tiny().decoder, small_options(64)).value();
    Request r;
    r.prompt_ids = prompt;
    r.sampling = greedy(static_cast<int>(expected.size()));
    const Outcome o = run_all(*engine, {r})[0];
    EXPECT_EQ(o.tokens, expected);
    EXPECT_EQ(o.reason, FinishReason::Length);
    EXPECT_EQ(o.stats.n_prompt_tokens, static_cast<int64_t>(prompt.size()));
    EXPECT_EQ(o.stats.n_output_tokens, static_cast<int64_t>(expected.size()));
    EXPECT_GE(o.stats.ttft_seconds, o.stats.queue_seconds);
    // Once idle, the counters show nothing running and every block free (metrics read them).
    const EngineCounters c = engine->counters();
    EXPECT_EQ(c.n_running, 0);
    EXPECT_EQ(c.n_waiting, 0);
    EXPECT_EQ(c.n_free_blocks, c.n_total_blocks);
}

// A step whose requests are all plain greedy takes the backend's argmax; one penalised request in
// the batch sends the whole step through the host sampler. Either way each request gets its own
// tokens: the plain ones as alone, the penalised one never repeats a token.
// The start-up warm-up's bookkeeping (forced on the CPU backend, which does not need it): it
// leaves no trace in the counters, the pool or the prefix-cache telemetry, later requests
// generate what they generate without it, and a pool too small for it skips it.
TEST(Engine, WarmUpLeavesNoTraceAndChangesNoOutput) {
    EngineOptions warm = small_options(64);
    warm.warmup = EngineOptions::Warmup::Always;
    auto engine = Engine::create(*tiny().decoder, warm);
    ASSERT_TRUE(engine.is_ok()) << engine.status().message();
    const std::string report = (*engine)->startup_report();
    // max_seqs 16, max_batched_tokens 64, 64 blocks of 4: sizes 1, 2, 4, 8, 16.
    EXPECT_NE(report.find("warm-up: batch sizes 1..16 (5 sizes)"), std::string::npos) << report;
    const EngineCounters c = (*engine)->counters();
    EXPECT_EQ(c.n_steps, 0);
    EXPECT_EQ(c.n_finished, 0);
    EXPECT_EQ(c.n_prefill_tokens, 0);
    EXPECT_EQ(c.n_decode_tokens, 0);
    EXPECT_EQ(c.prefix_queries, 0);
    EXPECT_EQ(c.n_free_blocks, 64);
    EXPECT_EQ(c.n_total_blocks, 64);
    std::mt19937 rng(11);
    std::vector<Request> requests(3);
    for (size_t i = 0; i < requests.size(); ++i) {
        requests[i].prompt_ids = random_prompt(rng, 9 + 7 * static_cast<int>(i));
        requests[i].sampling = greedy(12);
    }
    const std::vector<Outcome> got = run_all(**engine, requests);
    for (size_t i = 0; i < requests.size(); ++i)
        EXPECT_EQ(got[i].tokens, greedy_alone(requests[i].prompt_ids, 12)) << "request " << i;
    EXPECT_EQ((*engine)->counters().n_finished, 3);

    EngineOptions tiny_pool = small_options(2, 1);  // a throw-away request needs 3 blocks of 1 token
    tiny_pool.warmup = EngineOptions::Warmup::Always;
    auto skipped = Engine::create(*tiny().decoder, tiny_pool);
    ASSERT_TRUE(skipped.is_ok()) << skipped.status().message();
    EXPECT_NE((*skipped)->startup_report().find("warm-up: skipped"), std::string::npos);
    EXPECT_EQ((*skipped)->counters().n_steps, 0);

    // Auto: only backends that record or tune on first use; the CPU backend does neither.
    EngineOptions autow = small_options(64);
    autow.warmup = EngineOptions::Warmup::Auto;
    auto cpu = Engine::create(*tiny().decoder, autow);
    ASSERT_TRUE(cpu.is_ok());
    EXPECT_EQ((*cpu)->startup_report().find("warm-up"), std::string::npos);
}

// Decode padding (forced on the CPU backend, which records nothing): decode steps of 3 sequences
// whose tokens the backend picks (greedy, or drawn with a temperature: core/race.h) run as 4 rows
// (the next warm-up size), the throw-away rows write only their own block outside the pool, and
// every request generates what it generates alone, drawn and penalised steps are padded too; steps
// that sample on the host (top logprobs: logits to the host) are not padded; with padding off no
// row is added. Drawn and host-sampled tokens are the same with and without padding.
TEST(Engine, DecodePaddingChangesNoOutput) {
    std::vector<Outcome> drawn[2], nucleus[2], penalised[2], with_logprobs[2], on_host[2];
    for (const auto mode : {EngineOptions::DecodePadding::On, EngineOptions::DecodePadding::Off}) {
        const bool on = mode == EngineOptions::DecodePadding::On;
        EngineOptions o = small_options(64);
        o.decode_padding = mode;
        auto engine = Engine::create(*tiny().decoder, o);
        ASSERT_TRUE(engine.is_ok()) << engine.status().message();
        std::mt19937 rng(5);
        std::vector<Request> requests(3);
        for (size_t i = 0; i < requests.size(); ++i) {
            requests[i].prompt_ids = random_prompt(rng, 9 + 7 * static_cast<int>(i));
            requests[i].sampling = greedy(12);
        }
        const std::vector<Request> copy = requests;
        const std::vector<Outcome> got = run_all(**engine, requests);
        for (size_t i = 0; i < copy.size(); ++i)
            EXPECT_EQ(got[i].tokens, greedy_alone(copy[i].prompt_ids, 12)) << "request " << i << (on ? " padded" : "");
        const int64_t greedy_padding = (*engine)->counters().n_padding_rows;
        std::vector<Request> hot(3);
        for (size_t i = 0; i < hot.size(); ++i) {
            hot[i].prompt_ids = copy[i].prompt_ids;
            hot[i].sampling.temperature = 0.8f;
            hot[i].sampling.seed = 100 + static_cast<int64_t>(i);
            hot[i].sampling.max_tokens = 10;
            hot[i].sampling.ignore_eos = true;
        }
        drawn[on ? 0 : 1] = run_all(**engine, hot);  // drawn by the backend: padded like greedy steps
        const int64_t drawn_padding = (*engine)->counters().n_padding_rows - greedy_padding;
        for (Request& r : hot) r.sampling.top_p = 0.9f, r.sampling.top_k = 20;
        nucleus[on ? 0 : 1] = run_all(**engine, hot);  // drawn by the backend too: padded
        const int64_t nucleus_padding = (*engine)->counters().n_padding_rows - greedy_padding - drawn_padding;
        for (Request& r : hot) r.sampling.repetition_penalty = 1.3f, r.sampling.frequency_penalty = 0.4f;
        penalised[on ? 0 : 1] = run_all(**engine, hot);  // penalised and drawn by the backend: padded
        const int64_t penalised_padding =
            (*engine)->counters().n_padding_rows - greedy_padding - drawn_padding - nucleus_padding;
        for (Request& r : hot) r.sampling.logprobs = 2;
        // drawn by the backend, their rows copied back for the top logprobs: padded
        with_logprobs[on ? 0 : 1] = run_all(**engine, hot);
        const int64_t logprobs_padding = (*engine)->counters().n_padding_rows - greedy_padding - drawn_padding -
                                         nucleus_padding - penalised_padding;
        EngineOptions h = o;
        h.host_sampling = true;
        auto host_engine = Engine::create(*tiny().decoder, h);
        ASSERT_TRUE(host_engine.is_ok()) << host_engine.status().message();
        on_host[on ? 0 : 1] = run_all(**host_engine, hot);  // sampled on the host: not padded
        const EngineCounters c = (*engine)->counters();
        if (on) {
            EXPECT_GT(greedy_padding, 0);
            EXPECT_GT(drawn_padding, 0);
            EXPECT_GT(nucleus_padding, 0);
            EXPECT_GT(penalised_padding, 0);
            EXPECT_GT(logprobs_padding, 0);
        }
        EXPECT_EQ((*host_engine)->counters().n_padding_rows, 0);
        if (!on) {
            EXPECT_EQ(c.n_padding_rows, 0);
        }
        EXPECT_EQ(c.n_finished, 15);
        EXPECT_EQ((*host_engine)->counters().n_finished, 3);
        EXPECT_EQ(c.n_free_blocks, 64);
        EXPECT_EQ(c.n_total_blocks, 64);
    }
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(drawn[0][i].tokens.size(), 10u);
        EXPECT_EQ(drawn[0][i].tokens, drawn[1][i].tokens) << "drawn request " << i;
        EXPECT_EQ(nucleus[0][i].tokens.size(), 10u);
        EXPECT_EQ(nucleus[0][i].tokens, nucleus[1][i].tokens) << "nucleus request " << i;
        EXPECT_EQ(penalised[0][i].tokens.size(), 10u);
        EXPECT_EQ(penalised[0][i].tokens, penalised[1][i].tokens) << "penalised request " << i;
        EXPECT_EQ(with_logprobs[0][i].tokens, penalised[0][i].tokens) << "request with logprobs " << i;
        EXPECT_EQ(with_logprobs[1][i].tokens, penalised[0][i].tokens) << "request with logprobs " << i;
        EXPECT_EQ(on_host[0][i].tokens, penalised[0][i].tokens) << "host-sampled request " << i;
        EXPECT_EQ(on_host[1][i].tokens, penalised[0][i].tokens) << "host-sampled request " << i;
    }
}

// A drawn token is the host sampler's: the same seeded requests give the same tokens whether the
// backend draws them (temperature, top_k, top_p, min_p, after the penalties) or the engine samples
// the logits on the host (EngineOptions::host_sampling); asking for logprobs (the chosen token's
// and the top 2, which the engine computes from the rows the backend copies back) changes no token,
// and the logprobs equal the host path's, bit for bit. Requests 7-10 are penalised: 7 and 8 drawn, 9 and 10 greedy (the argmax of the
// penalised row), with repetition, presence and frequency penalties alone and together, and a
// logit bias on 7 and 9.
TEST(Engine, BackendDrawsEqualHostSampling) {
    std::mt19937 rng(23);
    std::vector<Request> on_backend(11);
    for (size_t i = 0; i < on_backend.size(); ++i) {
        on_backend[i].prompt_ids = random_prompt(rng, 5 + 3 * static_cast<int>(i));
        on_backend[i].sampling.temperature = i >= 9 ? 0.0f : i % 2 ? 1.3f : 0.7f;
        on_backend[i].sampling.min_p = i == 2 || i == 3 || i == 6 ? 0.05f : 0.0f;
        on_backend[i].sampling.top_k = i == 4 || i == 6 || i == 8 ? 12 : 0;
        on_backend[i].sampling.top_p = i == 5 || i == 6 || i == 8 ? 0.8f : 1.0f;
        on_backend[i].sampling.repetition_penalty = i == 7 || i == 9 ? 1.5f : 1.0f;
        on_backend[i].sampling.presence_penalty = i == 8 || i == 9 ? 0.7f : 0.0f;
        on_backend[i].sampling.frequency_penalty = i == 8 ? 0.9f : i == 10 ? -2.0f : 0.0f;  // 10: repeats
        if (i == 7 || i == 9) on_backend[i].sampling.logit_bias = {{5, 3.0f}, {17, -1.5f}, {200, 6.0f}};
        on_backend[i].sampling.seed = 7 + static_cast<int64_t>(i);
        on_backend[i].sampling.max_tokens = 16;
        on_backend[i].sampling.ignore_eos = true;
    }
    std::vector<Request> with_logprobs = on_backend;
    for (Request& r : with_logprobs) r.sampling.logprobs = 2;
    EngineOptions host = small_options(256);
    host.host_sampling = true;
    auto e1 = Engine::create(*tiny().decoder, small_options(256)).value();
    auto e2 = Engine::create(*tiny().decoder, host).value();
    auto e4 = Engine::create(*tiny().decoder, small_options(256)).value();
    const std::vector<Outcome> a = run_all(*e1, on_backend), b = run_all(*e2, with_logprobs),
                               c = run_all(*e4, with_logprobs);
    std::set<int32_t> distinct;
    for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].tokens.size(), 16u);
        EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
        EXPECT_EQ(c[i].tokens, b[i].tokens) << "request " << i;
        ASSERT_EQ(c[i].logprobs.size(), 16u) << "request " << i;
        ASSERT_EQ(b[i].logprobs.size(), 16u) << "request " << i;
        for (size_t t = 0; t < 16; ++t) {
            EXPECT_EQ(c[i].logprobs[t].token, b[i].logprobs[t].token);
            EXPECT_EQ(c[i].logprobs[t].logprob, b[i].logprobs[t].logprob) << "request " << i << " token " << t;
            EXPECT_EQ(c[i].logprobs[t].top, b[i].logprobs[t].top) << "request " << i << " token " << t;
            EXPECT_EQ(c[i].logprobs[t].top.size(), 2u);
        }
        if (i < 9) distinct.insert(a[i].tokens.begin(), a[i].tokens.end());
    }
    EXPECT_GT(distinct.size(), 8u);  // really sampled, not a greedy run
    // The penalties changed the greedy requests' tokens (else the check above proves nothing
    // about them).
    for (size_t i = 9; i < a.size(); ++i) {
        Request plain = on_backend[i];
        plain.sampling.repetition_penalty = 1.0f, plain.sampling.presence_penalty = 0.0f;
        plain.sampling.frequency_penalty = 0.0f;
        auto e3 = Engine::create(*tiny().decoder, small_options(256)).value();
        EXPECT_NE(run_all(*e3, {plain})[0].tokens, a[i].tokens) << "request " << i;
    }
}

// Twelve penalised requests in one step (their lists built on the engine's row pool, from 8 rows
// on) give the host sampler's tokens: greedy and drawn, repetition, presence, frequency and a logit
// bias in turn.
TEST(Engine, ManyPenalisedRowsEqualHostSampling) {
    std::mt19937 rng(29);
    std::vector<Request> requests(12);
    for (size_t i = 0; i < requests.size(); ++i) {
        SamplingParams& p = requests[i].sampling;
        requests[i].prompt_ids = random_prompt(rng, 6 + 2 * static_cast<int>(i));
        p.temperature = i % 3 == 0 ? 0.0f : 0.9f;
        p.top_k = i % 4 == 1 ? 10 : 0;
        p.repetition_penalty = i % 2 ? 1.4f : 1.0f;
        p.presence_penalty = i % 3 == 1 ? 0.6f : 0.0f;
        p.frequency_penalty = i % 4 == 2 ? 0.8f : i % 5 == 0 ? -1.5f : 0.0f;
        if (i % 6 == 3) p.logit_bias = {{3, 2.0f}, {40, -4.0f}};
        if (!has_penalties(p)) p.repetition_penalty = 1.2f;
        p.seed = 300 + static_cast<int64_t>(i);
        p.max_tokens = 12;
        p.ignore_eos = true;
    }
    EngineOptions host = small_options(256);
    host.host_sampling = true;
    auto on_backend = Engine::create(*tiny().decoder, small_options(256)).value();
    auto on_host = Engine::create(*tiny().decoder, host).value();
    const std::vector<Outcome> a = run_all(*on_backend, requests), b = run_all(*on_host, requests);
    for (size_t i = 0; i < requests.size(); ++i) {
        ASSERT_EQ(a[i].tokens.size(), 12u) << "request " << i;
        EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
    }
}

TEST(Engine, PlainGreedyAndPenalisedRequestsShareSteps) {
    std::mt19937 rng(5);
    const std::vector<int32_t> p1 = random_prompt(rng, 9), p2 = random_prompt(rng, 6), p3 = random_prompt(rng, 12);
    auto engine = Engine::create(*tiny().decoder, small_options(256)).value();
    Request plain1, penalised, plain2;
    plain1.prompt_ids = p1;
    plain1.sampling = greedy(12);
    penalised.prompt_ids = p2;
    penalised.sampling = greedy(10);
    penalised.sampling.repetition_penalty = 1e4f;
    plain2.prompt_ids = p3;
    plain2.sampling = greedy(16);  // outlives the penalised one: later steps are all plain greedy
    const std::vector<Outcome> out = run_all(*engine, {plain1, penalised, plain2});
    EXPECT_EQ(out[0].tokens, greedy_alone(p1, 12));
    EXPECT_EQ(out[2].tokens, greedy_alone(p3, 16));
    std::vector<int32_t> seen = p2;
    ASSERT_EQ(out[1].tokens.size(), 10u);
    for (int32_t t : out[1].tokens) {
        EXPECT_EQ(std::count(seen.begin(), seen.end(), t), 0) << "repeated token " << t;
        seen.push_back(t);
    }
    auto alone = Engine::create(*tiny().decoder, small_options(256)).value();
    EXPECT_EQ(run_all(*alone, {penalised})[0].tokens, out[1].tokens);
}

// prompt_logprobs: the logprob of every prompt token from the second on, given the ones before it,
// against transformers' logits of the fixture's prompt (log-softmax in double), with the top 3 at
// each position led by transformers' argmax; computed over prefill chunks of 5 tokens, beside
// other requests, and although an identical earlier request left the prompt in the prefix cache.
TEST(Engine, PromptLogprobsMatchTransformers) {
    const test::Reference ref = test::load_reference("tiny-llama");
    EngineOptions o = small_options(64);
    o.max_prefill_chunk = 5;
    auto engine = Engine::create(*tiny().decoder, o).value();
    Request plain;
    plain.prompt_ids = ref.prompt;
    plain.sampling = greedy(3);
    run_all(*engine, {plain});  // the prompt's blocks now in the prefix cache
    Request scored = plain;
    scored.sampling.prompt_logprobs = 3;
    Request other;
    std::mt19937 rng(41);
    other.prompt_ids = random_prompt(rng, 13);
    other.sampling = greedy(6);
    const std::vector<Outcome> out = run_all(*engine, {scored, other});
    const Outcome& o1 = out[0];
    EXPECT_EQ(o1.stats.n_prefix_tokens_reused, 0);
    EXPECT_EQ(o1.tokens, std::vector<int32_t>(ref.greedy.begin(), ref.greedy.begin() + 3));
    ASSERT_EQ(o1.prompt_logprobs.size(), ref.prompt.size() - 1);
    for (size_t k = 0; k + 1 < ref.prompt.size(); ++k) {
        const float* row = ref.logits.data() + k * ref.n_vocab;
        double z = 0;
        for (int64_t i = 0; i < ref.n_vocab; ++i) z += std::exp(static_cast<double>(row[i]));
        const TokenLogprob& got = o1.prompt_logprobs[k];
        EXPECT_EQ(got.token, ref.prompt[k + 1]) << "position " << k;
        EXPECT_NEAR(got.logprob, row[ref.prompt[k + 1]] - std::log(z), 1e-4) << "position " << k;
        ASSERT_EQ(got.top.size(), 3u);
        EXPECT_EQ(got.top[0].first, ref.top1[k]) << "position " << k;
        EXPECT_NEAR(got.top[0].second, row[ref.top1[k]] - std::log(z), 1e-4) << "position " << k;
        EXPECT_GE(got.top[0].second, got.top[1].second);
        EXPECT_GE(got.top[1].second, got.top[2].second);
    }
    EXPECT_TRUE(out[1].prompt_logprobs.empty());
    EXPECT_EQ(out[1].tokens, greedy_alone(other.prompt_ids, 6));
}

// Prompt logprobs (up to 1 alternative) scored by the backend (argmax_rows' targets, the GPU's
// way; CpuBackendOptions::scores_targets) equal those the engine scores on its own threads from
// the rows copied back, in chunks of 5 beside a sampled request: the same tokens, logprobs and top
// token (prompt_logprobs 3: copied back on both). And with the copies capped at two rows a step
// (EngineOptions::max_copied_logits_bytes), the steps that need more go to the host sampler
// whole, with the same results bit for bit.
TEST(Engine, PromptLogprobsScoredByTheBackendEqualTheHosts) {
    CpuBackendOptions bo;
    bo.n_threads = 1;
    bo.scores_targets = true;
    CpuBackend scoring(bo);
    auto decoder = Decoder::create(*tiny().model, scoring);
    ASSERT_TRUE(decoder.is_ok()) << decoder.status().message();
    const test::Reference ref = test::load_reference("tiny-llama");
    for (const int32_t n_top : {0, 1, 3}) {
        SCOPED_TRACE("prompt_logprobs " + std::to_string(n_top));
        EngineOptions o = small_options(64);
        o.max_prefill_chunk = 5;
        std::vector<Request> requests(2);
        requests[0].prompt_ids = ref.prompt;
        requests[0].sampling = greedy(4);
        requests[0].sampling.prompt_logprobs = n_top;
        std::mt19937 rng(43);
        requests[1].prompt_ids = random_prompt(rng, 11);
        requests[1].sampling.temperature = 0.8f;
        requests[1].sampling.seed = 5;
        requests[1].sampling.max_tokens = 6;
        requests[1].sampling.ignore_eos = true;
        auto on_host = Engine::create(*tiny().decoder, o).value();
        auto on_backend = Engine::create(**decoder, o).value();
        EngineOptions capped = o;
        capped.max_copied_logits_bytes = 2 * tiny().decoder->config().n_vocab * static_cast<int64_t>(sizeof(float));
        auto whole_steps = Engine::create(*tiny().decoder, capped).value();
        const std::vector<Outcome> a = run_all(*on_host, requests), b = run_all(*on_backend, requests),
                                   c = run_all(*whole_steps, requests);
        EXPECT_EQ(a[0].tokens, b[0].tokens);
        EXPECT_EQ(a[1].tokens, b[1].tokens);
        EXPECT_EQ(c[0].tokens, a[0].tokens);
        EXPECT_EQ(c[1].tokens, a[1].tokens);
        ASSERT_EQ(c[0].prompt_logprobs.size(), ref.prompt.size() - 1);
        for (size_t k = 0; k < c[0].prompt_logprobs.size(); ++k) {
            const TokenLogprob &x = a[0].prompt_logprobs[k], &z = c[0].prompt_logprobs[k];
            EXPECT_EQ(z.token, x.token);
            EXPECT_EQ(z.logprob, x.logprob) << "position " << k;
            EXPECT_EQ(z.top, x.top) << "position " << k;
        }
        ASSERT_EQ(a[0].prompt_logprobs.size(), ref.prompt.size() - 1);
        ASSERT_EQ(b[0].prompt_logprobs.size(), ref.prompt.size() - 1);
        for (size_t k = 0; k < a[0].prompt_logprobs.size(); ++k) {
            const TokenLogprob &x = a[0].prompt_logprobs[k], &y = b[0].prompt_logprobs[k];
            EXPECT_EQ(x.token, y.token) << "position " << k;
            EXPECT_NEAR(x.logprob, y.logprob, 1e-5) << "position " << k;
            ASSERT_EQ(x.top.size(), y.top.size()) << "position " << k;
            ASSERT_EQ(x.top.size(), static_cast<size_t>(n_top));
            for (size_t j = 0; j < x.top.size(); ++j) {
                EXPECT_EQ(x.top[j].first, y.top[j].first) << "position " << k;
                EXPECT_NEAR(x.top[j].second, y.top[j].second, 1e-5) << "position " << k;
            }
        }
    }
}

// The log-softmax of row[token] in double.
double log_softmax(const float* row, int64_t n, int32_t token) {
    double z = 0;
    for (int64_t i = 0; i < n; ++i) z += std::exp(static_cast<double>(row[i]));
    return row[token] - std::log(z);
}

// perplexity (engine/perplexity.h): one window of the fixture's 24 prompt tokens scores tokens
// 13..23 against transformers' logits; windows of 8 (with a BOS in each window's first slot) score
// positions 4..6 of each against the decoder run on that window alone (SequenceRunner, a fresh
// cache), all windows submitted at once.
TEST(Engine, PerplexityMatchesTransformersAndWindowsRunAlone) {
    const test::Reference ref = test::load_reference("tiny-llama");
    auto engine = Engine::create(*tiny().decoder, small_options(64)).value();
    PerplexityOptions po;
    po.ctx = 24;
    auto one = perplexity(*engine, ref.prompt, po);
    ASSERT_TRUE(one.is_ok()) << one.status().message();
    std::vector<double> want;
    for (int64_t k = 12; k < 23; ++k) want.push_back(-log_softmax(ref.logits.data() + k * ref.n_vocab, ref.n_vocab, ref.prompt[k + 1]));
    const PerplexityResult w1 = summarise_nll(want, 1);
    EXPECT_EQ(one->n_windows, 1);
    EXPECT_EQ(one->n_scored, 11);
    EXPECT_NEAR(one->mean_nll, w1.mean_nll, 1e-5);
    EXPECT_NEAR(one->ppl, w1.ppl, 1e-4 * w1.ppl);
    EXPECT_GT(one->ppl_error, 0.0);

    po.ctx = 8;
    po.bos = 1;
    auto three = perplexity(*engine, ref.prompt, po);
    ASSERT_TRUE(three.is_ok()) << three.status().message();
    want.clear();
    for (int w = 0; w < 3; ++w) {
        test::Reference window = ref;
        window.prompt.assign(ref.prompt.begin() + 8 * w, ref.prompt.begin() + 8 * (w + 1));
        window.prompt[0] = 1;
        const test::Output alone = test::run_model(*tiny().model, window, test::RunConfig{}, 0);
        for (int64_t k = 4; k < 7; ++k)
            want.push_back(-log_softmax(alone.logits.data() + k * ref.n_vocab, ref.n_vocab, window.prompt[k + 1]));
    }
    const PerplexityResult w3 = summarise_nll(want, 3);
    EXPECT_EQ(three->n_windows, 3);
    EXPECT_EQ(three->n_scored, 9);
    EXPECT_NEAR(three->mean_nll, w3.mean_nll, 1e-5);
    po.ctx = 25;
    EXPECT_FALSE(perplexity(*engine, ref.prompt, po).is_ok());  // no whole window
}

// OpenAI's logit_bias: -100 bans a token (the greedy text never has it), +100 forces one (every
// greedy token is it), on the backend's path and on the host sampler's (top logprobs); a token
// outside the vocabulary is refused at submit.
TEST(Engine, LogitBiasBansAndForcesTokens) {
    std::mt19937 rng(29);
    Request plain;
    plain.prompt_ids = random_prompt(rng, 9);
    plain.sampling = greedy(12);
    auto e0 = Engine::create(*tiny().decoder, small_options(256)).value();
    const std::vector<int32_t> free_text = run_all(*e0, {plain})[0].tokens;
    ASSERT_EQ(free_text.size(), 12u);
    for (const int32_t logprobs : {-1, 2}) {
        SCOPED_TRACE(logprobs < 0 ? "backend" : "host");
        Request ban = plain, force = plain;
        ban.sampling.logprobs = force.sampling.logprobs = logprobs;
        for (const int32_t t : free_text) ban.sampling.logit_bias.push_back({t, -100.0f});
        force.sampling.logit_bias = {{free_text[3], 0.5f}, {77, 100.0f}};
        auto engine = Engine::create(*tiny().decoder, small_options(256)).value();
        const std::vector<Outcome> out = run_all(*engine, {ban, force});
        ASSERT_EQ(out[0].tokens.size(), 12u);
        for (const int32_t t : out[0].tokens)
            EXPECT_EQ(std::count(free_text.begin(), free_text.end(), t), 0) << "banned token " << t;
        EXPECT_EQ(out[1].tokens, std::vector<int32_t>(12, 77));
    }
    Request outside = plain;
    outside.sampling.logit_bias = {{static_cast<int32_t>(tiny().decoder->config().n_vocab), 1.0f}};
    const auto refused = e0->submit(outside);
    ASSERT_FALSE(refused.is_ok());
    EXPECT_NE(refused.status().message().find("vocabulary"), std::string::npos) << refused.status().message();
}

// Greedy requests asking only for the chosen token's logprob (logprobs 0) take the backend's
// argmax path, which also returns the token's log-softmax; asking for one alternative (logprobs
// 1) takes the host sampler over the copied logits. Same tokens, same logprobs.
// The same with penalties: the logprob is that of the penalised row on both paths.
TEST(Engine, ChosenTokenLogprobsFromTheArgmaxPathMatchTheSampler) {
    for (const bool penalised : {false, true}) {
        SCOPED_TRACE(penalised ? "penalised" : "plain");
        std::mt19937 rng(17);
        const std::vector<int32_t> prompt = random_prompt(rng, 11);
        Request fast, slow;
        fast.prompt_ids = slow.prompt_ids = prompt;
        fast.sampling = slow.sampling = greedy(12);
        if (penalised) {
            fast.sampling.repetition_penalty = slow.sampling.repetition_penalty = 1.4f;
            fast.sampling.frequency_penalty = slow.sampling.frequency_penalty = 0.3f;
        }
        fast.sampling.logprobs = 0;
        slow.sampling.logprobs = 1;
        auto e1 = Engine::create(*tiny().decoder, small_options(256)).value();
        auto e2 = Engine::create(*tiny().decoder, small_options(256)).value();
        const Outcome a = run_all(*e1, {fast})[0], b = run_all(*e2, {slow})[0];
        ASSERT_EQ(a.tokens, b.tokens);
        ASSERT_EQ(a.logprobs.size(), a.tokens.size());
        ASSERT_EQ(b.logprobs.size(), b.tokens.size());
        for (size_t i = 0; i < a.tokens.size(); ++i) {
            EXPECT_EQ(a.logprobs[i].token, a.tokens[i]);
            EXPECT_TRUE(a.logprobs[i].top.empty());
            EXPECT_LT(a.logprobs[i].logprob, 0.0f);
            EXPECT_FLOAT_EQ(a.logprobs[i].logprob, b.logprobs[i].logprob) << "token " << i;
            ASSERT_EQ(b.logprobs[i].top.size(), 1u);
            EXPECT_EQ(b.logprobs[i].top[0].first, b.tokens[i]);
        }
    }
}

TEST(Engine, TinyPoolPreemptsAndMatchesEachRequestAlone) {
    std::mt19937 rng(11);
    std::vector<Request> requests;
    for (int i = 0; i < 12; ++i) {
        Request r;
        r.prompt_ids = random_prompt(rng, 5 + rng() % 36);
        r.sampling = greedy(8 + rng() % 12);
        requests.push_back(r);
    }
    // 16 blocks of 4 = 64 token slots for 12 requests of up to 60 tokens.
    auto engine = Engine::create(*tiny().decoder, small_options(16)).value();
    const auto outcomes = run_all(*engine, requests);
    const EngineCounters c = engine->counters();
    EXPECT_GT(c.n_preemptions, 0);
    EXPECT_LE(c.max_step_tokens, 64);
    EXPECT_EQ(c.n_free_blocks, 16);
    for (size_t i = 0; i < requests.size(); ++i)
        EXPECT_EQ(outcomes[i].tokens, greedy_alone(requests[i].prompt_ids, requests[i].sampling.max_tokens)) << i;
}

TEST(Engine, PrefixReuseGivesTheSameLogitsAsAFreshComputation) {
    Decoder& decoder = *tiny().decoder;
    const int32_t block_size = 4;
    auto cache = KvCache::create(decoder.kv_config(64, block_size, DType::F32)).value();
    BlockManager bm(64, block_size);
    std::mt19937 rng(5);
    const auto first = random_prompt(rng, 32);
    std::vector<int32_t> second(first.begin(), first.begin() + 24);
    for (int i = 0; i < 6; ++i) second.push_back(static_cast<int32_t>(rng() % 512));
    std::vector<float> logits;
    {   // compute the first prompt and leave its blocks cached
        BlockTable t;
        ASSERT_TRUE(bm.allocate(&t, first.size()));
        Batch b;
        b.block_size = block_size;
        b.add_sequence(first, 0, t.blocks, true);
        ASSERT_TRUE(decoder.forward(b, *cache, &logits).is_ok());
        bm.commit(&t, first.data(), first.size(), first.size());
        bm.release(&t);
    }
    BlockTable t;
    const int64_t reused = bm.acquire_prefix(&t, second.data(), second.size() - 1);
    ASSERT_EQ(reused, 24);
    ASSERT_TRUE(bm.allocate(&t, second.size()));
    Batch b;
    b.block_size = block_size;
    b.add_sequence(std::vector<int32_t>(second.begin() + reused, second.end()), reused, t.blocks, true);
    b.want_all_logits();
    std::vector<float> reused_logits;
    ASSERT_TRUE(decoder.forward(b, *cache, &reused_logits).is_ok());

    auto fresh_cache = KvCache::create(decoder.kv_config(64, block_size, DType::F32)).value();
    SequenceRunner runner(decoder, *fresh_cache);
    std::vector<float> fresh;
    ASSERT_TRUE(runner.prefill(second, &fresh, true).is_ok());
    const int64_t n_vocab = decoder.config().n_vocab;
    ASSERT_EQ(reused_logits.size(), static_cast<size_t>(6 * n_vocab));
    for (int64_t i = 0; i < 6 * n_vocab; ++i)
        ASSERT_NEAR(reused_logits[i], fresh[24 * n_vocab + i], 1e-4) << i;
}

TEST(Engine, PrefixCacheHitsIncludingGeneratedTokensKeepGreedyOutputs) {
    std::mt19937 rng(3);
    Request a;
    a.prompt_ids = random_prompt(rng, 20);
    a.sampling = greedy(12);
    auto engine = Engine::create(*tiny().decoder, small_options(128)).value();
    const Outcome first = run_all(*engine, {a})[0];
    // A follow-up whose prompt is the first prompt + its output + more (a chat turn).
    Request b;
    b.prompt_ids = a.prompt_ids;
    b.prompt_ids.insert(b.prompt_ids.end(), first.tokens.begin(), first.tokens.end());
    for (int i = 0; i < 5; ++i) b.prompt_ids.push_back(static_cast<int32_t>(rng() % 512));
    b.sampling = greedy(10);
    const Outcome second = run_all(*engine, {b})[0];
    // 20 + 11 computed tokens (the last output token is never fed back) = 7 full blocks.
    EXPECT_EQ(second.stats.n_prefix_tokens_reused, 28);
    EXPECT_EQ(engine->counters().prefix_tokens_reused, 28);
    EXPECT_EQ(second.tokens, greedy_alone(b.prompt_ids, 10));
}

TEST(Engine, IdenticalConcurrentPrefixesAreComputedOnce) {
    std::mt19937 rng(9);
    Request r;
    r.prompt_ids = random_prompt(rng, 40);
    r.sampling = greedy(6);
    EngineOptions o = small_options(128);
    o.max_prefill_chunk = 0;
    auto engine = Engine::create(*tiny().decoder, o).value();
    const auto outcomes = run_all(*engine, {r, r, r, r});
    for (const Outcome& x : outcomes) EXPECT_EQ(x.tokens, outcomes[0].tokens);
    const EngineCounters c = engine->counters();
    EXPECT_EQ(c.n_prefill_tokens, 40 + 3 * 4);  // the twins reuse 9 of 10 blocks
    EXPECT_EQ(c.prefix_tokens_reused, 3 * 36);
    EXPECT_GE(c.prefix_pending_waits, 3);
}

TEST(Engine, AbortFreesBlocksAndFinishesWithAbort) {
    auto engine = Engine::create(*tiny().decoder, small_options(64)).value();
    Request r;
    r.prompt_ids = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    r.sampling = greedy(200);
    std::vector<EngineEvent> events;
    const RequestId id = engine->submit(r, [&](const EngineEvent& e) { events.push_back(e); }).value();
    for (int i = 0; i < 5; ++i) engine->step();
    EXPECT_LT(engine->counters().n_free_blocks, 64);
    EXPECT_TRUE(engine->abort(id));
    engine->step();
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back().kind, EngineEvent::Kind::Finish);
    EXPECT_EQ(events.back().reason, FinishReason::Abort);
    EXPECT_EQ(engine->counters().n_free_blocks, 64);
    EXPECT_TRUE(engine->idle());
    EXPECT_FALSE(engine->abort(id));
}

TEST(Engine, RequestsThatCanNeverFitAreRejected) {
    auto engine = Engine::create(*tiny().decoder, small_options(4)).value();  // 16 token slots
    Request r;
    r.prompt_ids = std::vector<int32_t>(20, 1);
    auto res = engine->submit(r);
    ASSERT_FALSE(res.is_ok());
    EXPECT_NE(res.status().message().find("can never"), std::string::npos) << res.status().message();
    r.prompt_ids = {1, 2, 3};
    r.sampling.max_tokens = 50;
    EXPECT_FALSE(engine->submit(r).is_ok());
    r.prompt_ids = {1, 100000};
    r.sampling.max_tokens = 2;
    EXPECT_FALSE(engine->submit(r).is_ok());
    r.prompt_ids = {1, 2};
    r.sampling.stop = {"x"};  // no text without a tokenizer
    EXPECT_FALSE(engine->submit(r).is_ok());
}

// Token i as text "<i>".
class IdText final : public TextStream {
public:
    std::string push(int32_t t) override { return "<" + std::to_string(t) + ">"; }
    std::string flush() override { return ""; }
};

TEST(Engine, StopStringsCutTheStreamedText) {
    const std::vector<int32_t> prompt{3, 1, 4, 1, 5, 9, 2, 6};
    const auto expected = greedy_alone(prompt, 6);
    auto engine = Engine::create(*tiny().decoder, small_options(64), nullptr,
                                 [] { return std::make_unique<IdText>(); }).value();
    Request r;
    r.prompt_ids = prompt;
    r.sampling = greedy(6);
    r.sampling.stop = {"<" + std::to_string(expected[3]) + ">"};
    const Outcome o = run_all(*engine, {r})[0];
    std::string want;
    for (int i = 0; i < 3 && expected[i] != expected[3]; ++i) want += "<" + std::to_string(expected[i]) + ">";
    EXPECT_EQ(o.reason, FinishReason::Stop);
    EXPECT_EQ(o.text, want);
    r.sampling.stop.clear();
    r.sampling.stop_token_ids = {expected[1]};
    const Outcome by_id = run_all(*engine, {r})[0];
    EXPECT_EQ(by_id.reason, FinishReason::Stop);
    EXPECT_EQ(by_id.tokens.back(), expected[1]);
}

TEST(Engine, SeededSamplingIsReproducibleAloneAndBatched) {
    Request r;
    r.prompt_ids = {7, 8, 9, 10, 11};
    r.sampling.temperature = 1.0f;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = 42;
    r.sampling.max_tokens = 12;
    r.sampling.ignore_eos = true;
    Request other = r;
    other.prompt_ids = {100, 200, 300};
    other.sampling.seed = 7;
    auto engine = Engine::create(*tiny().decoder, small_options(64)).value();
    const auto alone = run_all(*engine, {r});
    const auto batched = run_all(*engine, {other, r, other});
    EXPECT_EQ(alone[0].tokens, batched[1].tokens);
}

TEST(Engine, ThreadSafeSubmissionFromSeveralThreads) {
    auto engine = Engine::create(*tiny().decoder, small_options(24)).value();
    engine->start();
    std::mutex mu;
    std::map<int, std::vector<int32_t>> outputs;
    std::map<int, std::vector<int32_t>> prompts;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            std::mt19937 rng(100 + t);
            for (int k = 0; k < 4; ++k) {
                const int key = t * 10 + k;
                Request r;
                r.prompt_ids = random_prompt(rng, 3 + rng() % 20);
                r.sampling = greedy(6);
                {
                    std::lock_guard<std::mutex> lock(mu);
                    prompts[key] = r.prompt_ids;
                }
                auto id = engine->submit(r, [&, key](const EngineEvent& e) {
                    std::lock_guard<std::mutex> lock(mu);
                    if (e.kind == EngineEvent::Kind::Token)
                        outputs[key].insert(outputs[key].end(), e.token_ids.begin(), e.token_ids.end());
                });
                EXPECT_TRUE(id.is_ok());
            }
        });
    for (auto& th : threads) th.join();
    // The queue path too.
    Request q;
    q.prompt_ids = {5, 6, 7};
    q.sampling = greedy(4);
    const RequestId qid = engine->submit(q).value();
    std::vector<int32_t> queued;
    EngineEvent e;
    while (engine->next_event(&e, 30.0)) {
        EXPECT_EQ(e.id, qid);
        if (e.kind == EngineEvent::Kind::Finish) break;
        queued.insert(queued.end(), e.token_ids.begin(), e.token_ids.end());
    }
    for (int i = 0; i < 3000 && !engine->idle(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    engine->stop();
    ASSERT_TRUE(engine->idle());
    EXPECT_EQ(queued, greedy_alone(q.prompt_ids, 4));
    ASSERT_EQ(outputs.size(), 16u);
    for (const auto& [key, out] : outputs) EXPECT_EQ(out, greedy_alone(prompts[key], 6)) << key;
}

}  // namespace
}  // namespace mvllm
