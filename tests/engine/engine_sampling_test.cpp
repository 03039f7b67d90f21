// The engine's token picks on the golden tiny Llama: the backend's draws, penalties, logit bias and
// logprobs (the chosen token's, top alternatives, the prompt's) against the host sampler and
// transformers' logits, and perplexity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "engine/perplexity.h"
#include "engine/sampler.h"
#include "../model/golden_util.h"

namespace mvllm {
namespace {

using namespace engine_test;

// A drawn token is the host sampler's: the same seeded requests give the same tokens whether the
// backend draws them (temperature, top_k, top_p, min_p, after the penalties) or the engine samples
// the logits on the host (EngineOptions::host_sampling); asking for logprobs (the chosen token's
// and the top 2, which the engine computes from the rows the backend copies back) changes no token,
// and the logprobs equal the host path's, bit for bit. Requests 7-10 are penalised: 7 and 8 drawn,
// 9 and 10 greedy (the argmax of the penalised row), with repetition, presence and frequency
// penalties alone and together, and a logit bias on 7 and 9.
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

// Plain greedy and penalised requests share steps (the penalties applied to the penalised row
// alone): the plain ones get their tokens as alone, the penalised one never repeats a token.
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
    const TinyOnBackend scoring = tiny_scoring(true, false);
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
        auto on_backend = Engine::create(*scoring.decoder, o).value();
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

// Rows scored by the backend (TokenPicks::scores, the GPU's way of giving top logprobs;
// CpuBackendOptions::scores_rows) give what the engine computes from rows copied back, and what the
// host sampler gives, bit for bit: greedy and drawn requests, penalised or not, asking for the
// chosen token's logprob alone, for 2-5 or for 20 alternatives, and for prompt logprobs with 3.
TEST(Engine, RowsScoredByTheBackendEqualTheHosts) {
    const TinyOnBackend scoring = tiny_scoring(false, true);
    std::mt19937 rng(53);
    std::vector<Request> requests(5);
    for (size_t i = 0; i < requests.size(); ++i) {
        requests[i].prompt_ids = random_prompt(rng, 7 + 4 * static_cast<int>(i));
        requests[i].sampling = greedy(10);
        requests[i].sampling.seed = 90 + static_cast<int64_t>(i);
    }
    requests[0].sampling.logprobs = 3;
    requests[1].sampling.temperature = 0.8f, requests[1].sampling.top_k = 12, requests[1].sampling.logprobs = 0;
    requests[2].sampling.temperature = 1.1f, requests[2].sampling.top_p = 0.9f, requests[2].sampling.logprobs = 5;
    requests[2].sampling.repetition_penalty = 1.3f;
    requests[3].sampling.logprobs = 2, requests[3].sampling.frequency_penalty = 0.5f;
    requests[3].sampling.logit_bias = {{11, 2.5f}};
    requests[4].sampling.logprobs = 20, requests[4].sampling.prompt_logprobs = 3;
    EngineOptions host = small_options(256);
    host.host_sampling = true;
    auto on_host = Engine::create(*tiny().decoder, host).value();
    auto copied = Engine::create(*tiny().decoder, small_options(256)).value();
    auto scored = Engine::create(*scoring.decoder, small_options(256)).value();
    const std::vector<Outcome> a = run_all(*on_host, requests), b = run_all(*copied, requests),
                               c = run_all(*scored, requests);
    for (size_t i = 0; i < requests.size(); ++i) {
        SCOPED_TRACE("request " + std::to_string(i));
        ASSERT_EQ(a[i].tokens.size(), 10u);
        EXPECT_EQ(b[i].tokens, a[i].tokens);
        EXPECT_EQ(c[i].tokens, a[i].tokens);
        ASSERT_EQ(a[i].logprobs.size(), 10u);
        for (const Outcome* o : {&b[i], &c[i]}) {
            ASSERT_EQ(o->logprobs.size(), 10u);
            for (size_t t = 0; t < 10; ++t) {
                EXPECT_EQ(o->logprobs[t].token, a[i].logprobs[t].token) << "token " << t;
                EXPECT_EQ(o->logprobs[t].logprob, a[i].logprobs[t].logprob) << "token " << t;
                EXPECT_EQ(o->logprobs[t].top, a[i].logprobs[t].top) << "token " << t;
                EXPECT_EQ(o->logprobs[t].top.size(), static_cast<size_t>(requests[i].sampling.logprobs));
            }
            ASSERT_EQ(o->prompt_logprobs.size(), a[i].prompt_logprobs.size());
            for (size_t k = 0; k < a[i].prompt_logprobs.size(); ++k) {
                EXPECT_EQ(o->prompt_logprobs[k].token, a[i].prompt_logprobs[k].token) << "position " << k;
                EXPECT_EQ(o->prompt_logprobs[k].logprob, a[i].prompt_logprobs[k].logprob) << "position " << k;
                EXPECT_EQ(o->prompt_logprobs[k].top, a[i].prompt_logprobs[k].top) << "position " << k;
            }
        }
    }
    EXPECT_EQ(a[4].prompt_logprobs.size(), requests[4].prompt_ids.size() - 1);
    EXPECT_EQ(a[4].prompt_logprobs[2].top.size(), 3u);
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
// greedy token is it), on the backend's path, with top logprobs (the rows copied back) and on the
// host sampler's (EngineOptions::host_sampling); a token outside the vocabulary is refused at submit.
TEST(Engine, LogitBiasBansAndForcesTokens) {
    std::mt19937 rng(29);
    Request plain;
    plain.prompt_ids = random_prompt(rng, 9);
    plain.sampling = greedy(12);
    auto e0 = Engine::create(*tiny().decoder, small_options(256)).value();
    const std::vector<int32_t> free_text = run_all(*e0, {plain})[0].tokens;
    ASSERT_EQ(free_text.size(), 12u);
    for (const int path : {0, 1, 2}) {
        SCOPED_TRACE(path == 0 ? "backend" : path == 1 ? "backend, top logprobs" : "host");
        Request ban = plain, force = plain;
        ban.sampling.logprobs = force.sampling.logprobs = path == 1 ? 2 : -1;
        for (const int32_t t : free_text) ban.sampling.logit_bias.push_back({t, -100.0f});
        force.sampling.logit_bias = {{free_text[3], 0.5f}, {77, 100.0f}};
        EngineOptions o = small_options(256);
        o.host_sampling = path == 2;
        auto engine = Engine::create(*tiny().decoder, o).value();
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

// Greedy requests asking only for the chosen token's logprob (logprobs 0) get the token's
// log-softmax from the backend's argmax; asking for one alternative (logprobs 1) has the row copied
// back and scored on the host. Same tokens, same logprobs. The same with penalties: the logprob is
// that of the penalised row on both paths.
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

}  // namespace
}  // namespace mvllm
