// Fed tokens read on the device (CudaBackendOptions::fed_tokens_on_device): SequenceRunner::greedy
// queues each decode step before the previous step's token has reached the host, and the
// embedding takes the token from the argmax's device copy. Against the same backend with the ids
// substituted on the host (the decoder waits for each token first): the greedy tokens must be
// equal over eager, recorded and replayed steps (a 240-token prompt and 40 tokens: the context
// crosses the 256 bucket), on the tiny-qwen2 fixture (F32, and a Q4_0 conversion: the Q4_0
// embedding kernel) and a random Q4_0 model with head_dim 64. Both runs issue the same kernels on
// the same inputs, so the tokens are equal exactly, also where random weights leave near ties.
// And a two-sequence step fed in swapped rows must give the logits of that step with the ids
// written out.
#include <unistd.h>

#include <filesystem>

#include "cuda_test_util.h"
#include "model/decoder.h"
#include "model/export.h"
#include "model/generate.h"

namespace mvllm::test {
namespace {

std::unique_ptr<CudaBackend> make_fed_cuda(bool fed_on_device) {
    CudaBackendOptions o;
    o.fed_tokens_on_device = fed_on_device;
    auto b = CudaBackend::create(o);
    EXPECT_TRUE(b.is_ok()) << b.status().message();
    return b.is_ok() ? std::move(b).value() : nullptr;
}

struct GreedyRun {
    std::vector<int32_t> ids;
    int32_t n_graphs = 0;
};

GreedyRun greedy_on_cuda(const Model& model, bool fed_on_device) {
    GreedyRun r;
    auto be = make_fed_cuda(fed_on_device);
    if (!be) return r;
    EXPECT_EQ(be->embeds_fed_tokens(), fed_on_device);
    auto dec = Decoder::create(model, *be);
    EXPECT_TRUE(dec.is_ok()) << dec.status().message();
    if (!dec.is_ok()) return r;
    auto cache = be->create_kv_cache((*dec)->kv_config(24, 16, DType::F16));
    EXPECT_TRUE(cache.is_ok());
    if (!cache.is_ok()) return r;
    std::mt19937 rng(11);
    std::vector<int32_t> prompt(240);
    for (int32_t& id : prompt) id = static_cast<int32_t>(rng() % model.config.n_vocab);
    SequenceRunner runner(**dec, **cache);
    const Status st = runner.greedy(prompt, 40, &r.ids);
    EXPECT_TRUE(st.is_ok()) << st.message();
    r.n_graphs = be->n_graphs();
    return r;
}

class CudaFedTokens : public ::testing::Test {
protected:
    void SetUp() override {
        if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
        auto hf = load_model(std::string(MVLLM_FIXTURE_DIR) + "/tiny-qwen2");
        ASSERT_TRUE(hf.is_ok()) << hf.status().message();
        ThreadPool pool(2);
        const std::string base = (std::filesystem::temp_directory_path() /
                                  ("mvllm_fed_test_" + std::to_string(::getpid()))).string();
        models_.push_back(std::move(*hf));
        const std::string q4 = base + "_q4_0.gguf";
        ASSERT_TRUE(convert_model(*models_[0], q4, FileType::Q4_0, pool).is_ok());
        ModelConfig c = models_[0]->config;
        c.head_dim = 64;
        c.n_heads = 4;
        c.n_kv_heads = 2;
        c.n_embd = 256;
        const std::string hd64 = base + "_hd64.gguf";
        ASSERT_TRUE(make_random_model(c, hd64, FileType::Q4_0, 64, pool).is_ok());
        for (const std::string& path : {q4, hd64}) {
            auto m = load_model(path);
            ASSERT_TRUE(m.is_ok()) << m.status().message();
            models_.push_back(std::move(*m));
            std::filesystem::remove(path);
        }
    }
    std::vector<std::unique_ptr<Model>> models_;
};

TEST_F(CudaFedTokens, GreedyEqualsHostSubstitutedTokens) {
    for (const auto& model : models_) {
        const GreedyRun host = greedy_on_cuda(*model, false);
        const GreedyRun device = greedy_on_cuda(*model, true);
        std::printf("%s: %zu tokens, graphs %d (host-fed run %d), %s\n", model->path.c_str(), device.ids.size(),
                    device.n_graphs, host.n_graphs, device.ids == host.ids ? "equal" : "DIFFERENT");
        ASSERT_EQ(host.ids.size(), 40u);
        EXPECT_EQ(device.ids, host.ids) << model->path;
        EXPECT_GE(device.n_graphs, 2) << "the steps of buckets 256 and 512 are recorded";
    }
}

TEST_F(CudaFedTokens, SwappedRowsGiveTheLogitsOfTheIds) {
    const Model& model = *models_[2];  // Q4_0: the GEMV path and the quantised embedding
    std::vector<float> logits[2];
    for (bool fed : {true, false}) {
        auto be = make_fed_cuda(true);
        ASSERT_TRUE(be);
        auto dec = Decoder::create(model, *be);
        ASSERT_TRUE(dec.is_ok()) << dec.status().message();
        auto cache = be->create_kv_cache((*dec)->kv_config(8, 16, DType::F16));
        ASSERT_TRUE(cache.is_ok());
        const std::vector<int32_t> prompts[2] = {{3, 17, 42, 8, 99}, {250, 1, 64}};
        auto table = [](int s) { return std::vector<int32_t>{4 * s, 4 * s + 1, 4 * s + 2, 4 * s + 3}; };
        Batch prefill;
        for (int s = 0; s < 2; ++s) prefill.add_sequence(prompts[s], 0, table(s), true);
        std::vector<int32_t> first;
        ASSERT_TRUE((*dec)->forward_greedy(prefill, **cache, &first).is_ok());
        Batch step;
        for (int s : {1, 0})
            step.add_sequence({fed ? fed_token(s) : first[s]}, static_cast<int32_t>(prompts[s].size()), table(s), true);
        ASSERT_TRUE((*dec)->forward(step, **cache, &logits[fed ? 0 : 1]).is_ok());
    }
    EXPECT_EQ(logits[0], logits[1]);
}

}  // namespace
}  // namespace mvllm::test
