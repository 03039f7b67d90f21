// The engine's start-up warm-up on the CUDA backend (gpu label): it records graphs before any
// request arrives (every batch size for every context bucket up to the model's length, so that
// a request whose context crosses a bucket records nothing live; decode steps are padded to a
// warm-up batch size, so an odd batch records nothing either), leaves no trace in the
// counters, the KV pool or the prefix-cache telemetry, and does not change what a request
// generates (greedy tokens equal to an engine without it; drawn tokens equal to the host sampler's).
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "engine/engine.h"
#include "model/decoder.h"

namespace mvllm::test {
namespace {

struct EngineRun {
    std::vector<std::vector<int32_t>> tokens;  // per request
    EngineCounters before, after;               // right after create, after the requests
    std::string report;
    int32_t graphs_at_start = 0, graphs_at_end = 0;
    std::vector<std::vector<TokenLogprob>> logprobs;
};

// temperature 0: greedy requests; otherwise seeded draws at that temperature (min_p 0.02 for every
// other request, top_k 20 for two, top_p 0.85 for two, one of them with both), with `logprobs`
// (scored on the device, CudaBackendOptions::scores_rows). penalised: repetition, presence and
// frequency penalties on the requests (one kind each, all three on the last), applied on the device
// (CudaBackendOptions::penalties_on_device). host: every token sampled by the engine's host sampler
// from the logits (EngineOptions::host_sampling) instead.
EngineRun run_engine(const Model& model, bool warmup, float temperature = 0.0f, int32_t logprobs = -1,
                     bool penalised = false, bool host = false) {
    EngineRun r;
    CudaBackendOptions bo;
    bo.penalties_on_device = penalised;
    auto be = make_cuda(bo);
    if (!be) return r;
    auto dec = Decoder::create(model, *be);
    EXPECT_TRUE(dec.is_ok()) << dec.status().message();
    if (!dec.is_ok()) return r;
    EngineOptions o;
    o.kv_cache_blocks = 256;
    o.block_size = 16;
    o.kv_dtype = "f16";
    o.max_batched_tokens = 512;
    o.max_seqs = 12;
    o.warmup = warmup ? EngineOptions::Warmup::Auto : EngineOptions::Warmup::Off;
    o.host_sampling = host;
    auto engine = Engine::create(**dec, o);
    EXPECT_TRUE(engine.is_ok()) << engine.status().message();
    if (!engine.is_ok()) return r;
    r.before = (*engine)->counters();
    r.report = (*engine)->startup_report();
    r.graphs_at_start = be->n_graphs();
    const int64_t n_vocab = model.config.n_vocab;
    const int n_requests = 5;  // not a warm-up size: padded to 8 with the warm-up (no padding without it)
    r.tokens.resize(n_requests);
    r.logprobs.resize(n_requests);
    for (int i = 0; i < n_requests; ++i) {
        Request q;
        const int n_prompt = i == n_requests - 1 ? 250 : 20 + 13 * i;  // the last one crosses 256 tokens
        for (int k = 0; k < n_prompt; ++k) q.prompt_ids.push_back(static_cast<int32_t>((7 + 31 * k + 101 * i) % n_vocab));
        q.sampling.temperature = temperature;
        q.sampling.min_p = i % 2 ? 0.02f : 0.0f;
        q.sampling.top_k = i == 1 || i == 4 ? 20 : 0;  // truncated on the device (draw_cut.cu)
        q.sampling.top_p = i >= 3 ? 0.85f : 1.0f;
        q.sampling.seed = 1000 + i;
        if (penalised) {
            q.sampling.repetition_penalty = i % 3 == 0 || i == 4 ? 1.3f : 1.0f;
            q.sampling.presence_penalty = i % 3 == 1 || i == 4 ? 0.6f : 0.0f;
            q.sampling.frequency_penalty = i % 3 == 2 || i == 4 ? -0.8f : 0.0f;  // negative: repeats
        }
        q.sampling.logprobs = logprobs;
        q.sampling.ignore_eos = true;
        q.sampling.max_tokens = 24;
        auto id = (*engine)->submit(std::move(q), [&r, i](const EngineEvent& e) {
            if (e.kind != EngineEvent::Kind::Token) return;
            r.tokens[i].insert(r.tokens[i].end(), e.token_ids.begin(), e.token_ids.end());
            r.logprobs[i].insert(r.logprobs[i].end(), e.logprobs.begin(), e.logprobs.end());
        });
        EXPECT_TRUE(id.is_ok());
    }
    (*engine)->run_until_idle();
    r.after = (*engine)->counters();
    r.graphs_at_end = be->n_graphs();
    return r;
}

TEST(EngineWarmUp, RecordsGraphsAndLeavesNoTrace) {
    MVLLM_REQUIRE_GPU();
    auto model = load_model(std::string(MVLLM_FIXTURE_DIR) + "/tiny-qwen2");
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    const EngineRun cold = run_engine(**model, false);
    const EngineRun warm = run_engine(**model, true);
    std::printf("%s\n", warm.report.c_str());
    EXPECT_EQ(cold.graphs_at_start, 0);
    EXPECT_EQ(cold.report.find("warm-up"), std::string::npos);
    // Batch sizes 1, 2, 4, 8, 12 for each context bucket up to the fixture's 512 tokens: 10 graphs,
    // and the 5 requests (decode steps padded to 8 rows, contexts up to 274 over two buckets)
    // need no other.
    EXPECT_EQ(warm.graphs_at_start, 10);
    EXPECT_EQ(warm.graphs_at_end, 10);
    EXPECT_GT(cold.graphs_at_end, 0);
    EXPECT_NE(warm.report.find("warm-up: batch sizes 1..12 (5 sizes, 2 context buckets 256..512)"), std::string::npos)
        << warm.report;
    EXPECT_EQ(warm.before.n_steps, 0);
    EXPECT_EQ(warm.before.n_finished, 0);
    EXPECT_EQ(warm.before.n_prefill_tokens, 0);
    EXPECT_EQ(warm.before.n_decode_tokens, 0);
    EXPECT_EQ(warm.before.prefix_queries, 0);
    EXPECT_EQ(warm.before.n_free_blocks, 256);
    EXPECT_EQ(warm.before.n_total_blocks, 256);
    ASSERT_EQ(warm.tokens.size(), cold.tokens.size());
    for (size_t i = 0; i < cold.tokens.size(); ++i) {
        EXPECT_EQ(cold.tokens[i].size(), 24u);
        EXPECT_EQ(warm.tokens[i], cold.tokens[i]) << "request " << i;
    }
    EXPECT_EQ(warm.after.n_finished, 5);
    EXPECT_GT(warm.after.n_padding_rows, 0);
    EXPECT_EQ(cold.after.n_padding_rows, 0);
    EXPECT_EQ(warm.after.n_steps, cold.after.n_steps);
    EXPECT_EQ(warm.after.n_free_blocks, warm.after.n_total_blocks);
}

// Seeded requests with a temperature, drawn on the device (core/draw.h through cuda::launch_draw,
// in padded decode steps that replay the warm-up's graphs) give the tokens the engine's host
// sampler gives them from the logits, and they are really sampled (not the greedy tokens). Asking
// for 3 top logprobs changes no token, and the device's scores (cuda::launch_row_scores) give the
// host sampler's logprobs: the same alternatives, the same values to float rounding.
TEST(EngineWarmUp, DeviceDrawsEqualHostSampling) {
    MVLLM_REQUIRE_GPU();
    auto model = load_model(std::string(MVLLM_FIXTURE_DIR) + "/tiny-qwen2");
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    const EngineRun device = run_engine(**model, true, 0.9f, -1);
    const EngineRun host = run_engine(**model, false, 0.9f, 3, false, true);
    const EngineRun scored = run_engine(**model, true, 0.9f, 3);
    const EngineRun greedy = run_engine(**model, false);
    int differ_from_greedy = 0;
    for (size_t i = 0; i < host.tokens.size(); ++i) {
        ASSERT_EQ(device.tokens[i].size(), 24u);
        EXPECT_EQ(device.tokens[i], host.tokens[i]) << "request " << i;
        EXPECT_EQ(scored.tokens[i], host.tokens[i]) << "request " << i;
        differ_from_greedy += device.tokens[i] != greedy.tokens[i];
        ASSERT_EQ(scored.logprobs[i].size(), 24u) << "request " << i;
        ASSERT_EQ(host.logprobs[i].size(), 24u) << "request " << i;
        for (size_t t = 0; t < 24; ++t) {
            const TokenLogprob &d = scored.logprobs[i][t], &h = host.logprobs[i][t];
            EXPECT_EQ(d.token, h.token) << "request " << i << " token " << t;
            EXPECT_NEAR(d.logprob, h.logprob, 1e-4) << "request " << i << " token " << t;
            ASSERT_EQ(d.top.size(), 3u);
            ASSERT_EQ(h.top.size(), 3u);
            for (size_t j = 0; j < 3; ++j) {
                EXPECT_EQ(d.top[j].first, h.top[j].first) << "request " << i << " token " << t;
                EXPECT_NEAR(d.top[j].second, h.top[j].second, 1e-4) << "request " << i << " token " << t;
            }
        }
    }
    EXPECT_GE(differ_from_greedy, 4);
    EXPECT_GT(device.after.n_padding_rows, 0);  // the drawn steps took the padded (graph) path
}

// The same with penalties, greedy and drawn: applied on the device (cuda::launch_penalties, the
// engine passing the rows' penalty lists) they give the host sampler's tokens, and they change
// the tokens (against the same requests without them).
TEST(EngineWarmUp, DevicePenaltiesEqualHostSampling) {
    MVLLM_REQUIRE_GPU();
    auto model = load_model(std::string(MVLLM_FIXTURE_DIR) + "/tiny-qwen2");
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    for (const float temperature : {0.0f, 0.9f}) {
        const EngineRun device = run_engine(**model, true, temperature, temperature > 0 ? -1 : 0, true);
        const EngineRun host = run_engine(**model, false, temperature, 1, true, true);
        const EngineRun plain = run_engine(**model, false, temperature, 1, false, true);
        int differ_from_plain = 0;
        for (size_t i = 0; i < host.tokens.size(); ++i) {
            ASSERT_EQ(device.tokens[i].size(), 24u);
            EXPECT_EQ(device.tokens[i], host.tokens[i]) << "temperature " << temperature << " request " << i;
            differ_from_plain += device.tokens[i] != plain.tokens[i];
        }
        EXPECT_GE(differ_from_plain, 3) << "temperature " << temperature;
        EXPECT_GT(device.after.n_padding_rows, 0);  // the penalised steps took the padded (graph) path
    }
}

}  // namespace
}  // namespace mvllm::test
