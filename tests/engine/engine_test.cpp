// The engine on the golden tiny Llama: greedy outputs match the transformers reference and do
// not depend on batching, preemption, prefix reuse or the submitting thread.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "kv/block_manager.h"
#include "model/decoder.h"
#include "model/generate.h"
#include "engine_test_util.h"

namespace mvllm {
namespace {

using namespace engine_test;

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
// every request generates what it generates alone, drawn and penalised steps are padded too, and so
// are steps with top logprobs (their rows copied back); steps sampled on the host
// (EngineOptions::host_sampling) are not; with padding off no row is added. Drawn and host-sampled
// tokens are the same with and without padding.
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
