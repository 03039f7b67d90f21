// Fed tokens (kv/batch.h): a decode step that names its token as a row of the previous greedy
// step, so it can be queued before that token reaches the host. On the CPU backend the decoder
// substitutes the ids itself; these tests hold that path to the plain one (explicit ids, host
// argmax) and check that a fed token that cannot be resolved is refused with a clear error.
#include <algorithm>

#include "core/race.h"
#include "golden_util.h"

namespace mvllm::test {
namespace {

struct Fixture {
    std::unique_ptr<Model> model;
    std::unique_ptr<CpuBackend> backend;
    std::unique_ptr<Decoder> decoder;

    explicit Fixture(const std::string& name) {
        auto m = load_model(std::string(MVLLM_FIXTURE_DIR) + "/" + name);
        EXPECT_TRUE(m.is_ok()) << m.status().message();
        model = std::move(*m);
        CpuBackendOptions o;
        o.n_threads = 2;
        backend = std::make_unique<CpuBackend>(o);
        auto d = Decoder::create(*model, *backend);
        EXPECT_TRUE(d.is_ok()) << d.status().message();
        decoder = std::move(*d);
    }
    std::unique_ptr<KvCache> cache(int64_t n_blocks) {
        auto c = backend->create_kv_cache(decoder->kv_config(n_blocks, 16, DType::F32));
        EXPECT_TRUE(c.is_ok()) << c.status().message();
        return std::move(*c);
    }
    // The batch's logits on a fresh cache of n_blocks (empty on an error).
    std::vector<float> logits_of(const Batch& batch, int64_t n_blocks) {
        std::vector<float> logits;
        auto c = cache(n_blocks);
        const Status st = decoder->forward(batch, *c, &logits);
        EXPECT_TRUE(st.is_ok()) << st.message();
        if (!st.is_ok()) logits.clear();
        return logits;
    }
};

std::vector<int32_t> blocks(int32_t first, int32_t n) {
    std::vector<int32_t> t(n);
    for (int32_t i = 0; i < n; ++i) t[i] = first + i;
    return t;
}

// Two sequences (blocks 0-3 and 4-7) decoding together: a greedy step, then a step whose tokens
// are fed from it in swapped rows, against the same step with the ids written out.
TEST(FedTokens, FedStepEqualsStepWithTheIds) {
    Fixture f("tiny-qwen2");
    const std::vector<int32_t> prompts[2] = {{3, 17, 42, 8, 99}, {250, 1, 64}};
    std::vector<float> fed_logits, explicit_logits;
    for (bool fed : {true, false}) {
        auto cache = f.cache(8);
        Batch prefill;
        for (int s = 0; s < 2; ++s) prefill.add_sequence(prompts[s], 0, blocks(4 * s, 4), true);
        std::vector<int32_t> first;
        ASSERT_TRUE(f.decoder->forward_greedy(prefill, *cache, &first).is_ok());
        ASSERT_EQ(first.size(), 2u);
        Batch step;  // sequence 1 first: its token is row 1 of the greedy step, sequence 0's row 0
        for (int s : {1, 0}) {
            const int32_t token = fed ? fed_token(s) : first[s];
            step.add_sequence({token}, static_cast<int32_t>(prompts[s].size()), blocks(4 * s, 4), true);
        }
        ASSERT_TRUE(f.decoder->forward(step, *cache, fed ? &fed_logits : &explicit_logits).is_ok());
    }
    ASSERT_EQ(fed_logits.size(), explicit_logits.size());
    EXPECT_EQ(fed_logits, explicit_logits);  // the same ids through the same kernels: identical
}

// SequenceRunner::greedy (each step queued with a fed token) against a loop of explicit steps
// with the argmax taken on the host from the logits.
TEST(FedTokens, RunnerGreedyEqualsExplicitSteps) {
    for (const char* name : {"tiny-qwen2", "tiny-llama"}) {
        Fixture f(name);
        const std::vector<int32_t> prompt = {11, 7, 300, 2, 45, 45, 9};
        const int n = 24;
        std::vector<int32_t> runner_ids;
        {
            auto cache = f.cache(4);
            SequenceRunner runner(*f.decoder, *cache);
            ASSERT_TRUE(runner.greedy(prompt, n, &runner_ids).is_ok());
            EXPECT_EQ(runner.n_cached(), static_cast<int64_t>(prompt.size()) + n - 1);
        }
        std::vector<int32_t> explicit_ids;
        {
            auto cache = f.cache(4);
            SequenceRunner runner(*f.decoder, *cache);
            std::vector<float> logits;
            ASSERT_TRUE(runner.prefill(prompt, &logits).is_ok());
            const int64_t n_vocab = f.model->config.n_vocab;
            for (int i = 0; i < n; ++i) {
                explicit_ids.push_back(argmax(logits.data(), n_vocab));
                if (i + 1 < n) {
                    ASSERT_TRUE(runner.step(explicit_ids.back(), &logits).is_ok());
                }
            }
        }
        EXPECT_EQ(runner_ids, explicit_ids) << name;
    }
}

TEST(FedTokens, UnresolvableFedTokensAreRefused) {
    Fixture f("tiny-qwen2");
    auto cache = f.cache(8);
    std::vector<float> logits;
    std::vector<int32_t> tokens;
    auto one = [](int32_t token, int32_t pos) {
        Batch b;
        b.add_sequence({token}, pos, blocks(0, 4), true);
        return b;
    };
    Status st = f.decoder->forward(one(fed_token(0), 0), *cache, &logits);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("without a greedy step"), std::string::npos) << st.message();

    auto t1 = f.decoder->forward_greedy_enqueue(one(5, 0), *cache);
    ASSERT_TRUE(t1.is_ok()) << t1.status().message();
    st = f.decoder->forward(one(fed_token(1), 1), *cache, &logits);  // the greedy step had one row
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("row 1"), std::string::npos) << st.message();
    st = f.decoder->greedy_result(*t1, &tokens, &logits);  // queued without logprobs
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("without logprobs"), std::string::npos) << st.message();

    // Two more greedy steps: the first ticket is no longer kept.
    auto t2 = f.decoder->forward_greedy_enqueue(one(fed_token(0), 1), *cache);
    ASSERT_TRUE(t2.is_ok()) << t2.status().message();
    auto t3 = f.decoder->forward_greedy_enqueue(one(fed_token(0), 2), *cache);
    ASSERT_TRUE(t3.is_ok()) << t3.status().message();
    st = f.decoder->greedy_result(*t1, &tokens);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("not kept"), std::string::npos) << st.message();
    ASSERT_TRUE(f.decoder->greedy_result(*t2, &tokens).is_ok());
    ASSERT_TRUE(f.decoder->greedy_result(*t3, &tokens).is_ok());

    // Another decoder's greedy step on the same backend in between: the fed row is not ours.
    auto other = Decoder::create(*f.model, *f.backend);
    ASSERT_TRUE(other.is_ok());
    auto other_cache = f.cache(4);
    ASSERT_TRUE((*other)->forward_greedy(one(9, 0), *other_cache, &tokens).is_ok());
    st = f.decoder->forward(one(fed_token(0), 3), *cache, &logits);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("without a greedy step"), std::string::npos) << st.message();
}

// Three prompts as one prefill step (blocks 0-3, 4-7 and 8-11), each wanting its last logits.
Batch three_prompts() {
    const std::vector<int32_t> prompts[3] = {{3, 17, 42, 8, 99}, {250, 1, 64}, {7, 7, 9}};
    Batch b;
    for (int s = 0; s < 3; ++s) b.add_sequence(prompts[s], 0, blocks(4 * s, 4), true);
    return b;
}

// Token draws (core/race.h) through the decoder: a row with a temperature is race_row's draw over
// that row's logits (from forward on a fresh cache), a row without one its argmax, in one step;
// malformed draws are refused with an error.
TEST(TokenDraws, DrawnRowsAreTheRaceOverTheirLogits) {
    Fixture f("tiny-qwen2");
    const auto step = three_prompts;
    const std::vector<float> logits = f.logits_of(step(), 12);
    ASSERT_FALSE(logits.empty());
    const int64_t n_vocab = f.decoder->config().n_vocab;
    int not_argmax = 0;
    for (uint64_t key = 1; key <= 30; ++key) {
        const std::vector<TokenDraw> draws = {{1.5f, 0.0f, mix64(key)}, {}, {0.8f, 0.05f, mix64(key + 1000)}};
        auto cache = f.cache(12);
        std::vector<int32_t> got;
        ASSERT_TRUE(f.decoder->forward_greedy(step(), *cache, &got, nullptr, TokenPicks{draws, {}}).is_ok());
        ASSERT_EQ(got.size(), 3u);
        for (size_t r = 0; r < 3; ++r) {
            const float* row = logits.data() + r * n_vocab;
            const int32_t want = draws[r].temperature > 0
                                     ? race_row(row, n_vocab, draws[r].temperature, draws[r].min_p, draws[r].key)
                                     : row_argmax(row, n_vocab);
            EXPECT_EQ(got[r], want) << "row " << r << ", key " << key;
            not_argmax += got[r] != row_argmax(row, n_vocab);
        }
    }
    EXPECT_GT(not_argmax, 10);  // the drawn rows really are drawn
    auto cache = f.cache(12);
    std::vector<int32_t> got;
    std::vector<float> lp;
    EXPECT_FALSE(f.decoder->forward_greedy(step(), *cache, &got, nullptr, TokenPicks{{{1.0f, 0.0f, 1}}, {}}).is_ok());  // 1 of 3 rows
    const Status with_logprobs = f.decoder->forward_greedy(step(), *cache, &got, &lp, TokenPicks{{{1.0f, 0.0f, 1}, {}, {}}, {}});
    EXPECT_FALSE(with_logprobs.is_ok());
    EXPECT_NE(with_logprobs.message().find("logprob"), std::string::npos) << with_logprobs.message();
    EXPECT_FALSE(f.decoder->forward_greedy(step(), *cache, &got, nullptr, TokenPicks{{{-1.0f, 0.0f, 1}, {}, {}}, {}}).is_ok());
}

// The two halves the engine queues a step in (queue_pass, then the picks made while the pass runs,
// queue_picks): the same tokens as forward_greedy with those picks (draws and a penalty that moves
// a row's argmax), and clear errors for picks without a pass or that do not fit the pass's rows.
TEST(TokenDraws, PicksQueuedAfterThePassEqualForwardGreedy) {
    Fixture f("tiny-qwen2");
    const auto step = three_prompts;
    const std::vector<float> logits = f.logits_of(step(), 12);
    ASSERT_FALSE(logits.empty());
    const int64_t n_vocab = f.decoder->config().n_vocab;
    const int32_t top1 = row_argmax(logits.data() + n_vocab, n_vocab);
    TokenPicks picks{{{}, {0.9f, 0.0f, mix64(7)}, {}}, {{1, top1, 0.0f, 1.0f, 1e4f}}};  // row 1: its argmax pushed down
    for (uint64_t key = 1; key <= 8; ++key) {
        picks.draws[1].key = mix64(key);
        auto whole_cache = f.cache(12), halves_cache = f.cache(12);
        std::vector<int32_t> whole, halves;
        ASSERT_TRUE(f.decoder->forward_greedy(step(), *whole_cache, &whole, nullptr, picks).is_ok());
        ASSERT_TRUE(f.decoder->queue_pass(step(), *halves_cache).is_ok());
        auto ticket = f.decoder->queue_picks(false, picks);
        ASSERT_TRUE(ticket.is_ok()) << ticket.status().message();
        ASSERT_TRUE(f.decoder->greedy_result(*ticket, &halves).is_ok());
        EXPECT_EQ(halves, whole) << "key " << key;
        ASSERT_EQ(halves.size(), 3u);
        EXPECT_NE(halves[1], top1);  // the penalty reached the drawn row
        EXPECT_EQ(halves[0], row_argmax(logits.data(), n_vocab));
    }
    const Status no_pass = f.decoder->queue_picks(false, picks).status();
    EXPECT_FALSE(no_pass.is_ok());
    EXPECT_NE(no_pass.message().find("queue_pass"), std::string::npos) << no_pass.message();
    auto cache = f.cache(12);
    ASSERT_TRUE(f.decoder->queue_pass(step(), *cache).is_ok());
    EXPECT_FALSE(f.decoder->queue_picks(false, TokenPicks{{{1.0f, 0.0f, 1}}, {}}).is_ok());  // 1 draw for 3 rows
    EXPECT_FALSE(f.decoder->queue_picks(false, picks).is_ok());  // the refused picks took the pass's rows
}

}  // namespace
}  // namespace mvllm::test
