// Recorded decode steps (CUDA graphs, graph_step.cpp) against the same steps run eagerly: three
// sequences of different lengths decoding together (the GEMV path), twelve together (beyond
// kGemvMaxTokens rows: cuBLAS GEMMs inside the recording) and one alone, over a context-bucket
// boundary (256 -> 512), on the F32 tiny-qwen2 fixture and its Q8_0 / Q4_K_M conversions, and on two
// random-weight Q8_0 models of its shape with head_dim 64 and 128 (the fixture's is 16), whose decode
// attention takes its K/V tiles by tensor copies: the recorded steps carry the tensor maps. Logits
// must agree to rounding and greedy tokens must be equal (on the fixture models: random weights
// can put two logits within the rounding of each other). The eager run plans the attention split for the
// exact context, the graph for the bucket: the same sums grouped differently, and the tensor-core
// attention of F16 KV rounds each split's probabilities to f16 (2^-11 relative), so logits differ
// by up to ~1e-4 of their range (measured 2.2e-5 F32, 1.1e-4 Q8_0, 8.5e-5 Q4_K_M on the H200);
// bound 1e-3, far below what a wrong position, slot or block table moves (> 1e-2).
#include <unistd.h>

#include <filesystem>

#include "cuda_test_util.h"
#include "model/decoder.h"
#include "model/export.h"
#include "model/generate.h"

namespace mvllm::test {
namespace {

struct StepLogits {
    std::vector<std::vector<float>> steps;  // per decode step: [n_seqs][n_vocab]
    std::vector<int32_t> greedy;            // SequenceRunner greedy continuation
    int32_t n_graphs = 0;
};

// Prefills the sequences (contexts as given), then decodes them together for 12 steps with fixed
// random tokens (contexts cross 256), then a lone greedy continuation of 24 tokens.
StepLogits run_steps(const Model& model, bool graphs, const std::vector<int32_t>& contexts) {
    CudaBackendOptions o;
    o.graphs = graphs;
    auto be = CudaBackend::create(o);
    EXPECT_TRUE(be.is_ok());
    StepLogits r;
    if (!be.is_ok()) return r;
    auto dec = Decoder::create(model, **be);
    EXPECT_TRUE(dec.is_ok()) << dec.status().message();
    if (!dec.is_ok()) return r;
    const int32_t bs = 16, blocks_per_seq = 24;
    const int32_t n_seqs = static_cast<int32_t>(contexts.size());
    auto cache = (*be)->create_kv_cache((*dec)->kv_config(n_seqs * blocks_per_seq, bs, DType::F16));
    EXPECT_TRUE(cache.is_ok());
    if (!cache.is_ok()) return r;
    const int64_t n_vocab = model.config.n_vocab;
    std::mt19937 rng(7);
    std::vector<std::vector<int32_t>> tables(contexts.size());
    std::vector<int32_t> pos(contexts.size());
    for (size_t s = 0; s < contexts.size(); ++s) {
        for (int32_t b = 0; b < blocks_per_seq; ++b) tables[s].push_back(static_cast<int32_t>(s) * blocks_per_seq + b);
        std::vector<int32_t> prompt(contexts[s]);
        for (int32_t& id : prompt) id = static_cast<int32_t>(rng() % n_vocab);
        Batch b;
        b.block_size = bs;
        b.add_sequence(prompt, 0, std::vector<int32_t>(tables[s].begin(), tables[s].begin() + (contexts[s] + bs - 1) / bs), true);
        std::vector<float> logits;
        EXPECT_TRUE((*dec)->forward(b, **cache, &logits).is_ok());
        pos[s] = contexts[s];
    }
    for (int step = 0; step < 12; ++step) {
        Batch b;
        b.block_size = bs;
        for (size_t s = 0; s < contexts.size(); ++s) {
            const int32_t n_blocks = (pos[s] + 1 + bs - 1) / bs;
            b.add_sequence({static_cast<int32_t>(rng() % n_vocab)}, pos[s],
                           std::vector<int32_t>(tables[s].begin(), tables[s].begin() + n_blocks), true);
            ++pos[s];
        }
        std::vector<float> logits;
        EXPECT_TRUE((*dec)->forward(b, **cache, &logits).is_ok());
        r.steps.push_back(logits);
    }
    {
        // A lone sequence in the blocks of the fourth slot: greedy decode from a 240-token prompt.
        auto cache1 = (*be)->create_kv_cache((*dec)->kv_config(blocks_per_seq, bs, DType::F16));
        EXPECT_TRUE(cache1.is_ok());
        if (!cache1.is_ok()) return r;
        std::vector<int32_t> prompt(240);
        for (int32_t& id : prompt) id = static_cast<int32_t>(rng() % n_vocab);
        SequenceRunner runner(**dec, **cache1);
        EXPECT_TRUE(runner.greedy(prompt, 24, &r.greedy).is_ok());
    }
    r.n_graphs = (*be)->n_graphs();
    return r;
}

TEST(CudaGraphs, RecordedStepsMatchEagerSteps) {
    MVLLM_REQUIRE_GPU();
    auto hf = load_model(std::string(MVLLM_FIXTURE_DIR) + "/tiny-qwen2");
    ASSERT_TRUE(hf.is_ok()) << hf.status().message();
    ThreadPool pool(2);
    const std::string base = (std::filesystem::temp_directory_path() /
                              ("mvllm_graph_test_" + std::to_string(::getpid()))).string();
    std::vector<std::unique_ptr<Model>> models;
    models.push_back(std::move(*hf));
    for (FileType ft : {FileType::Q8_0, FileType::Q4_K_M}) {
        const std::string path = base + "_" + file_type_name(ft) + ".gguf";
        ASSERT_TRUE(convert_model(*models[0], path, ft, pool).is_ok());
        auto m = load_model(path);
        ASSERT_TRUE(m.is_ok()) << m.status().message();
        models.push_back(std::move(*m));
        std::filesystem::remove(path);
    }
    const size_t n_fixture_models = models.size();
    for (int32_t head_dim : {64, 128}) {
        ModelConfig c = models[0]->config;
        c.head_dim = head_dim;
        c.n_heads = 256 / head_dim;
        c.n_kv_heads = c.n_heads / 2;
        c.n_embd = c.n_heads * head_dim;
        const std::string path = base + "_hd" + std::to_string(head_dim) + ".gguf";
        ASSERT_TRUE(make_random_model(c, path, FileType::Q8_0, 40 + head_dim, pool).is_ok());
        auto m = load_model(path);
        ASSERT_TRUE(m.is_ok()) << m.status().message();
        models.push_back(std::move(*m));
        std::filesystem::remove(path);
    }
    std::vector<int32_t> twelve;
    for (int32_t i = 0; i < 12; ++i) twelve.push_back(5 + 22 * i);  // 5 .. 247: the last ones cross 256
    for (size_t mi = 0; mi < models.size(); ++mi) {
        const auto& model = models[mi];
        for (const std::vector<int32_t>& contexts : {std::vector<int32_t>{5, 120, 250}, twelve}) {
            const StepLogits eager = run_steps(*model, false, contexts);
            const StepLogits graph = run_steps(*model, true, contexts);
            ASSERT_EQ(eager.steps.size(), graph.steps.size());
            double worst = 0;
            for (size_t i = 0; i < eager.steps.size(); ++i)
                worst = std::max(worst, rel_max_error(graph.steps[i], eager.steps[i]));
            std::printf("%s, %zu sequences: graphs %d (eager run %d), logits rel err vs eager %.3g, greedy %s\n",
                        model->path.c_str(), contexts.size(), graph.n_graphs, eager.n_graphs, worst,
                        graph.greedy == eager.greedy ? "equal" : "DIFFERENT");
            EXPECT_EQ(eager.n_graphs, 0);
            // The batch in buckets 256 and 512, the lone sequence in 256 and 512.
            EXPECT_GE(graph.n_graphs, 3);
            EXPECT_LE(worst, 1e-3);
            if (mi < n_fixture_models) {
                EXPECT_EQ(graph.greedy, eager.greedy);
            }
        }
    }
}

}  // namespace
}  // namespace mvllm::test
