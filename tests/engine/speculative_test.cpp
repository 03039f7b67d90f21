// Speculative decoding in the engine: greedy output identical to plain decoding for any draft
// (the target itself, a random-weight model, a quantised copy, the shipped trained draft for the
// shipped model), inside continuous batching and under preemption; sampled output distributed as
// the target's (exact law of two tokens computed from the target's logits); rollback leaves no
// stale KV (prefix-cache hits on blocks written during speculation give a fresh computation's
// logprobs); the draft's vocabulary is checked.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include <unistd.h>

#include "backend/cpu/cpu_backend.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "model/decoder.h"
#include "model/export.h"
#include "model/generate.h"

namespace mvllm {
namespace {

struct Loaded {
    std::unique_ptr<Model> model;
    std::unique_ptr<Decoder> decoder;
};

CpuBackend& backend() {
    static CpuBackend b([] {
        CpuBackendOptions o;
        o.n_threads = 1;
        return o;
    }());
    return b;
}

Loaded load(const std::string& path) {
    Loaded l;
    auto model = load_model(path);
    MVLLM_CHECK(model.is_ok()) << model.status().message();
    l.model = std::move(model.value());
    auto dec = Decoder::create(*l.model, backend());
    MVLLM_CHECK(dec.is_ok()) << dec.status().message();
    l.decoder = std::move(dec.value());
    return l;
}

std::string temp_path(const std::string& name) {
    // One file per process: CTest runs these tests as parallel processes of one binary.
    return (std::filesystem::path(testing::TempDir()) / ("mvllm_spec_" + std::to_string(getpid()) + "_" + name)).string();
}

Loaded& tiny() {
    static Loaded l = load(MVLLM_FIXTURE_DIR "/tiny-llama");
    return l;
}

// A random-weight model with the tiny Llama's vocabulary and one layer.
Loaded& random_draft() {
    static Loaded l = [] {
        ModelConfig c = tiny().model->config;
        c.n_layers = 1;
        const std::string path = temp_path("random_draft.gguf");
        ThreadPool pool(1);
        MVLLM_CHECK(make_random_model(c, path, FileType::Q8_0, 77, pool).is_ok());
        Loaded loaded = load(path);
        std::filesystem::remove(path);  // loaded: the file is no longer needed (nor left in the temp folder)
        return loaded;
    }();
    return l;
}

// The tiny Llama quantised to q4_0: a different model that often agrees with the original.
Loaded& quantised_draft() {
    static Loaded l = [] {
        const std::string path = temp_path("q4_draft.gguf");
        ThreadPool pool(1);
        MVLLM_CHECK(convert_model(*tiny().model, path, FileType::Q4_0, pool).is_ok());
        Loaded loaded = load(path);
        std::filesystem::remove(path);
        return loaded;
    }();
    return l;
}

EngineOptions options(int64_t n_blocks, Decoder* draft, int k = 4, DraftPolicy policy = DraftPolicy::Fixed) {
    EngineOptions o;
    o.kv_cache_blocks = n_blocks;
    o.block_size = 4;
    o.max_batched_tokens = 96;
    o.max_seqs = 16;
    o.max_prefill_chunk = 16;
    o.speculative.draft = draft;
    o.speculative.draft_tokens = k;
    o.speculative.policy = policy;
    o.speculative.fallback = false;  // timing-free: these tests are about the output
    return o;
}

struct Outcome {
    std::vector<int32_t> tokens;
    std::vector<TokenLogprob> logprobs;
    RequestStats stats;
    FinishReason reason = FinishReason::Error;
};

std::vector<Outcome> run_all(Engine& engine, const std::vector<Request>& requests) {
    std::vector<Outcome> out(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
        auto id = engine.submit(requests[i], [&out, i](const EngineEvent& e) {
            if (e.kind == EngineEvent::Kind::Token) {
                out[i].tokens.insert(out[i].tokens.end(), e.token_ids.begin(), e.token_ids.end());
                out[i].logprobs.insert(out[i].logprobs.end(), e.logprobs.begin(), e.logprobs.end());
            } else {
                out[i].stats = e.stats;
                out[i].reason = e.reason;
            }
        });
        EXPECT_TRUE(id.is_ok()) << id.status().message();
    }
    engine.run_until_idle();
    return out;
}

std::vector<Request> greedy_requests(int n, int32_t n_vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<Request> rs(n);
    for (int i = 0; i < n; ++i) {
        rs[i].prompt_ids.resize(3 + rng() % 20);
        for (auto& t : rs[i].prompt_ids) t = static_cast<int32_t>(rng() % n_vocab);
        rs[i].sampling.temperature = 0;
        rs[i].sampling.max_tokens = 10 + static_cast<int32_t>(rng() % 30);
        rs[i].sampling.ignore_eos = true;
    }
    return rs;
}

void expect_same_greedy(Decoder& target, Decoder* draft, const std::vector<Request>& requests, int64_t n_blocks,
                        int k, DraftPolicy policy, const char* what) {
    auto plain = Engine::create(target, options(n_blocks, nullptr)).value();
    auto spec = Engine::create(target, options(n_blocks, draft, k, policy)).value();
    const auto a = run_all(*plain, requests);
    const auto b = run_all(*spec, requests);
    int64_t drafted = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
        EXPECT_EQ(a[i].tokens, b[i].tokens) << what << ", request " << i;
        EXPECT_EQ(b[i].reason, FinishReason::Length);
        EXPECT_EQ(b[i].stats.n_output_tokens, requests[i].sampling.max_tokens);
        drafted += b[i].stats.n_draft_tokens;
    }
    EXPECT_GT(drafted, 0) << what << ": speculation never ran";
    EXPECT_EQ(spec->counters().n_draft_tokens, drafted);
}

TEST(Speculative, GreedyOutputEqualsPlainForAnyDraft) {
    const auto requests = greedy_requests(10, 512, 1);
    expect_same_greedy(*tiny().decoder, tiny().decoder.get(), requests, 256, 4, DraftPolicy::Fixed, "self draft");
    expect_same_greedy(*tiny().decoder, random_draft().decoder.get(), requests, 256, 3, DraftPolicy::Fixed, "random draft");
    expect_same_greedy(*tiny().decoder, quantised_draft().decoder.get(), requests, 256, 5, DraftPolicy::Fixed,
                       "q4_0 draft");
}

TEST(Speculative, GreedyOutputEqualsPlainForEveryPolicy) {
    const auto requests = greedy_requests(6, 512, 2);
    for (DraftPolicy p : {DraftPolicy::AcceptanceRate, DraftPolicy::AcceptedLength})
        expect_same_greedy(*tiny().decoder, quantised_draft().decoder.get(), requests, 256, 6, p, draft_policy_name(p));
}

TEST(Speculative, GreedyOutputEqualsPlainUnderPreemption) {
    // 40 blocks of 4 tokens for 10 requests of up to 62 tokens: sequences are preempted and
    // recomputed (their draft KV too) while others speculate.
    const auto requests = greedy_requests(10, 512, 3);
    auto spec = Engine::create(*tiny().decoder, options(40, quantised_draft().decoder.get(), 4)).value();
    const auto b = run_all(*spec, requests);
    auto plain = Engine::create(*tiny().decoder, options(256, nullptr)).value();
    const auto a = run_all(*plain, requests);
    for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(a[i].tokens, b[i].tokens) << i;
    EXPECT_GT(spec->counters().n_preemptions, 0);
    EXPECT_EQ(spec->counters().n_free_blocks, 40) << "every block returned";
}

TEST(Speculative, StatisticsCountDraftsAndAcceptedLengths) {
    const auto requests = greedy_requests(4, 512, 4);
    auto spec = Engine::create(*tiny().decoder, options(256, quantised_draft().decoder.get(), 4)).value();
    for (const Outcome& o : run_all(*spec, requests)) {
        const RequestStats& s = o.stats;
        ASSERT_EQ(s.accepted_lengths.size(), 5u);
        int64_t steps = 0, accepted = 0;
        for (size_t len = 0; len < s.accepted_lengths.size(); ++len) {
            steps += s.accepted_lengths[len];
            accepted += static_cast<int64_t>(len) * s.accepted_lengths[len];
        }
        EXPECT_EQ(steps, s.n_spec_steps);
        EXPECT_EQ(accepted, s.n_draft_accepted);
        EXPECT_LE(s.n_draft_accepted, s.n_draft_tokens);
        // Output: the prefill's token, accepted drafts + one per verification, and at most one
        // plain decode at the end (no room left to draft before max_tokens).
        const int64_t from_spec = s.n_draft_accepted + s.n_spec_steps + 1;
        EXPECT_GE(s.n_output_tokens, from_spec);
        EXPECT_LE(s.n_output_tokens, from_spec + 1);
    }
}

TEST(Speculative, SelfDraftIsAcceptedAlmostAlways) {
    const auto requests = greedy_requests(4, 512, 5);
    auto spec = Engine::create(*tiny().decoder, options(256, tiny().decoder.get(), 4)).value();
    run_all(*spec, requests);
    const EngineCounters c = spec->counters();
    // The same weights: only rounding differences between a one-token and a multi-token forward
    // could ever flip an argmax.
    EXPECT_GE(double(c.n_draft_accepted), 0.95 * double(c.n_draft_tokens));
}

// The exact law of two sampled tokens after a prompt: p(x) p(y | x) from the target's logits.
std::map<int, double> two_token_law(Decoder& d, const std::vector<int32_t>& prompt, const SamplingParams& params,
                                    int64_t n_vocab) {
    auto cache = KvCache::create(d.kv_config(64, 4, DType::F32)).value();
    std::map<int, double> law;
    std::vector<float> logits;
    SequenceRunner first(d, *cache);
    MVLLM_CHECK(first.prefill(prompt, &logits).is_ok());
    for (const auto& [x, px] : sampling_distribution(logits.data(), n_vocab, params)) {
        std::vector<int32_t> longer = prompt;
        longer.push_back(x);
        SequenceRunner r(d, *cache);
        std::vector<float> next;
        MVLLM_CHECK(r.prefill(longer, &next).is_ok());
        for (const auto& [y, py] : sampling_distribution(next.data(), n_vocab, params))
            law[x * static_cast<int>(n_vocab) + y] = double(px) * py;
    }
    return law;
}

// Pearson's statistic with bins of expected count < 5 pooled; *df receives the degrees of freedom.
double chi2(const std::map<int, int64_t>& counts, const std::map<int, double>& law, int64_t n, int* df) {
    double stat = 0, pooled_e = 0, pooled_o = 0;
    int bins = 0;
    for (const auto& [k, p] : law) {
        const double e = p * n, o = counts.count(k) ? double(counts.at(k)) : 0.0;
        if (e < 5) {
            pooled_e += e, pooled_o += o;
            continue;
        }
        stat += (o - e) * (o - e) / e;
        ++bins;
    }
    for (const auto& [k, c] : counts)
        if (!law.count(k)) pooled_o += double(c);
    if (pooled_e > 0) {
        stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
        ++bins;
    }
    *df = bins - 1;
    return stat;
}

// Upper 1e-6 tail of chi-square (Wilson-Hilferty): a correct engine fails this fixed-seed run
// with probability 1e-6.
double chi2_critical(int df) {
    const double a = 2.0 / (9.0 * df), z = 4.753;
    return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

TEST(Speculative, SampledOutputHasTheTargetsDistribution) {
    Decoder& target = *tiny().decoder;
    const int64_t n_vocab = target.config().n_vocab;
    const std::vector<int32_t> prompt = {11, 305, 42, 7, 199, 64, 480};
    SamplingParams params;
    params.temperature = 1.0f;
    params.top_k = 6;
    params.max_tokens = 4;  // the first token comes from the prefill, the second from a verification
    params.ignore_eos = true;
    const auto law = two_token_law(target, prompt, params, n_vocab);
    const auto draft_law = two_token_law(*quantised_draft().decoder, prompt, params, n_vocab);
    const int64_t n = 4000;
    std::vector<Request> requests(n);
    for (int64_t i = 0; i < n; ++i) {
        requests[i].prompt_ids = prompt;
        requests[i].sampling = params;
        requests[i].sampling.seed = i;
    }
    EngineOptions o = options(1024, quantised_draft().decoder.get(), 3);
    o.max_seqs = 128;
    o.max_batched_tokens = 1024;
    auto spec = Engine::create(target, o).value();
    std::map<int, int64_t> counts;
    for (const Outcome& out : run_all(*spec, requests)) {
        ASSERT_EQ(out.tokens.size(), 4u);
        ++counts[out.tokens[0] * static_cast<int>(n_vocab) + out.tokens[1]];
    }
    const EngineCounters c = spec->counters();
    ASSERT_GT(c.n_draft_tokens, 0);
    // Both branches of the rule ran many times.
    EXPECT_GT(c.n_draft_accepted, c.n_draft_tokens / 10);
    EXPECT_LT(c.n_draft_accepted, c.n_draft_tokens * 9 / 10);
    int df = 0, df_draft = 0;
    const double stat = chi2(counts, law, n, &df);
    EXPECT_LT(stat, chi2_critical(df)) << "df " << df;
    // Power: the same samples are told apart from the draft's own law.
    const double stat_draft = chi2(counts, draft_law, n, &df_draft);
    std::printf("chi-square against the target's law %.1f (df %d, critical %.1f); against the draft's %.1f (df %d); "
                "acceptance %.2f\n", stat, df, chi2_critical(df), stat_draft, df_draft,
                double(c.n_draft_accepted) / double(c.n_draft_tokens));
    EXPECT_GT(stat_draft, chi2_critical(df_draft)) << "df " << df_draft;
}

TEST(Speculative, RollbackLeavesNoStaleKv) {
    // A speculates with a random draft (most drafts rejected: their KV is written, then
    // overwritten). B's prompt is A's prompt + output + more: its prefix comes from blocks A wrote
    // while speculating, and must give what a fresh computation gives.
    Decoder& target = *tiny().decoder;
    std::mt19937 rng(8);
    Request a;
    for (int i = 0; i < 9; ++i) a.prompt_ids.push_back(static_cast<int32_t>(rng() % 512));
    a.sampling.temperature = 0;
    a.sampling.max_tokens = 30;
    a.sampling.ignore_eos = true;
    EngineOptions o = options(128, random_draft().decoder.get(), 4);
    auto spec = Engine::create(target, o).value();
    const Outcome first = run_all(*spec, {a})[0];
    ASSERT_GT(first.stats.n_draft_tokens, first.stats.n_draft_accepted) << "nothing was rolled back";
    Request b;
    b.prompt_ids = a.prompt_ids;
    b.prompt_ids.insert(b.prompt_ids.end(), first.tokens.begin(), first.tokens.end());
    for (int i = 0; i < 3; ++i) b.prompt_ids.push_back(static_cast<int32_t>(rng() % 512));
    b.sampling = a.sampling;
    b.sampling.max_tokens = 8;
    b.sampling.logprobs = 20;
    const Outcome second = run_all(*spec, {b})[0];
    // 9 + 29 computed tokens = 9 full blocks of 4 hit, 20 of them decoded under speculation.
    EXPECT_EQ(second.stats.n_prefix_tokens_reused, 36);
    EngineOptions fresh_o = options(128, nullptr);
    fresh_o.enable_prefix_cache = false;
    auto fresh = Engine::create(target, fresh_o).value();
    const Outcome reference = run_all(*fresh, {b})[0];
    EXPECT_EQ(second.tokens, reference.tokens);
    ASSERT_EQ(second.logprobs.size(), reference.logprobs.size());
    for (size_t i = 0; i < reference.logprobs.size(); ++i) {
        ASSERT_EQ(second.logprobs[i].top.size(), 20u);
        for (size_t j = 0; j < 20; ++j) {
            EXPECT_EQ(second.logprobs[i].top[j].first, reference.logprobs[i].top[j].first) << i << "," << j;
            EXPECT_NEAR(second.logprobs[i].top[j].second, reference.logprobs[i].top[j].second, 1e-4) << i << "," << j;
        }
    }
}

TEST(Speculative, DraftVocabularyMustMatch) {
    Loaded qwen = load(MVLLM_FIXTURE_DIR "/tiny-qwen2");  // 384 tokens against 512
    const Status st = check_draft_vocabulary(*tiny().model, *qwen.model);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("384"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("512"), std::string::npos) << st.message();
    auto engine = Engine::create(*tiny().decoder, options(64, qwen.decoder.get()));
    ASSERT_FALSE(engine.is_ok());
    EXPECT_NE(engine.status().message().find("vocabulary"), std::string::npos);
    EXPECT_TRUE(check_draft_vocabulary(*tiny().model, *random_draft().model).is_ok());
    EngineOptions bad = options(64, tiny().decoder.get(), 0);
    EXPECT_FALSE(Engine::create(*tiny().decoder, bad).is_ok());
}

// --kv-cache-memory is the budget of both KV caches: the pool's blocks and the draft's copy of
// each fit in it together.
TEST(Speculative, KvBudgetCoversTheDraftsCache) {
    for (Decoder* draft : {tiny().decoder.get(), random_draft().decoder.get()}) {
        EngineOptions o = options(0, draft);
        o.kv_cache_memory = size_t(1) << 20;
        auto engine = Engine::create(*tiny().decoder, o);
        ASSERT_TRUE(engine.is_ok()) << engine.status().message();
        const size_t t = kv_block_bytes(tiny().decoder->kv_config(0, o.block_size, DType::F32));
        const size_t d = kv_block_bytes(draft->kv_config(0, o.block_size, DType::F32));
        ASSERT_GT(t, 0u);
        ASSERT_GT(d, 0u);
        const int64_t n = (*engine)->counters().n_total_blocks;
        EXPECT_LE(static_cast<size_t>(n) * (t + d), o.kv_cache_memory);
        EXPECT_GT(static_cast<size_t>(n + 1) * (t + d), o.kv_cache_memory);  // and no block less than that
        const std::string report = (*engine)->startup_report();
        EXPECT_NE(report.find("draft KV cache"), std::string::npos) << report;
    }
}

// The shipped pair: models/mvllm-austen-q8_0.gguf and its trained draft share one tokenizer.
TEST(Speculative, ShippedDraftMatchesTheDefaultModelsGreedyText) {
    const std::string dir = std::string(MVLLM_TEST_DATA_DIR) + "/../../models/";
    Loaded target = load(dir + "mvllm-austen-q8_0.gguf");
    Loaded draft = load(dir + "mvllm-austen-draft-q8_0.gguf");
    ASSERT_TRUE(check_draft_vocabulary(*target.model, *draft.model).is_ok());
    const Tokenizer& tok = *target.model->tokenizer;
    std::vector<Request> requests;
    for (const char* text : {"It is a truth universally acknowledged, that a single man in possession",
                             "Captain Wentworth", "The quick brown fox jumps over"}) {
        Request r;
        r.prompt_ids = tok.encode(text, false, false);
        r.sampling.temperature = 0;
        r.sampling.max_tokens = 40;
        r.sampling.ignore_eos = true;
        requests.push_back(r);
    }
    EngineOptions o = options(256, draft.decoder.get(), 4);
    o.max_batched_tokens = 256;
    auto plain = Engine::create(*target.decoder, options(256, nullptr)).value();
    auto spec = Engine::create(*target.decoder, o).value();
    const auto a = run_all(*plain, requests);
    const auto b = run_all(*spec, requests);
    for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(a[i].tokens, b[i].tokens) << i;
    const EngineCounters c = spec->counters();
    // A trained draft agrees often (26% on these three prompts, one of them far from the corpus;
    // a random draft of this vocabulary is accepted about once in 8192).
    EXPECT_GT(c.n_draft_accepted, c.n_draft_tokens / 8);
}

}  // namespace
}  // namespace mvllm
