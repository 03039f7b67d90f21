// --batch-invariant on the CUDA backend (gpu label): the shipped model (q8_0) and its q4_0
// conversion give one request bit-identical greedy tokens and logprobs alone and among 31 other
// requests (the workload of tests/engine/batch_invariance_test.cpp): the GEMV for every batch size
// instead of cuBLAS, and the fused attention split at fixed positions. Also checks the two kernel
// rules directly: the matmul path no longer depends on n_tokens, the split on the batch.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "../engine/batch_invariance_workload.h"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/matmul.cuh"
#include "cuda_test_util.h"
#include "model/export.h"

namespace mvllm {
namespace {

using namespace test;

const std::string kModelPath = std::string(MVLLM_TEST_DATA_DIR) + "/../../models/mvllm-austen-q8_0.gguf";

TEST(CudaBatchInvariance, KernelChoicesDoNotDependOnTheBatch) {
    for (int64_t n : {1, 2, 8, 9, 48, 600})
        EXPECT_EQ(cuda::choose_matmul_path(DType::Q4_0, n, true), cuda::MatmulPath::Gemv) << n;
    EXPECT_NE(cuda::choose_matmul_path(DType::Q4_0, 600, false), cuda::MatmulPath::Gemv);
    // A 600-token context: splits of 512 whatever the rows and SM count.
    for (int32_t rows : {1, 7, 256}) {
        const cuda::FusedSplit s = cuda::fused_split(rows, 2, 1, 600, 132, true);
        EXPECT_EQ(s.split_tokens, cuda::kInvariantSplitTokens);
        EXPECT_EQ(s.n_splits, 2);
    }
}

void expect_invariant_on_cuda(const Model& model) {
    CudaBackendOptions o;
    o.batch_invariant = true;
    auto backend = CudaBackend::create(o);
    ASSERT_TRUE(backend.is_ok()) << backend.status().message();
    auto decoder = Decoder::create(model, **backend);
    ASSERT_TRUE(decoder.is_ok()) << decoder.status().message();
    const Workload w = make_workload(model.config.n_vocab);
    const TargetRun alone = run_target(**decoder, alone_options(), w.target, {}, 0);
    const TargetRun crowded = run_target(**decoder, crowded_options(), w.target, w.others, w.n_before);
    ASSERT_EQ(alone.tokens.size(), 32u);
    EXPECT_EQ(alone.tokens, crowded.tokens);
    EXPECT_TRUE(same_bits(alone.logprobs, crowded.logprobs));
    EXPECT_GT(crowded.prefix_reused, 0);
}

TEST(CudaBatchInvariance, AloneEqualsAmong31OthersQ8_0AndQ4_0) {
    MVLLM_REQUIRE_GPU();
    if (!std::filesystem::exists(kModelPath)) GTEST_SKIP() << "shipped model not found at " << kModelPath;
    auto q8 = load_model(kModelPath);
    ASSERT_TRUE(q8.is_ok()) << q8.status().message();
    {
        SCOPED_TRACE("q8_0");
        expect_invariant_on_cuda(**q8);
    }
    const std::string q4_path =
        (std::filesystem::temp_directory_path() / ("mvllm-bi-cuda-" + std::to_string(::getpid()) + ".gguf")).string();
    ThreadPool pool(2);
    ASSERT_TRUE(convert_model(**q8, q4_path, FileType::Q4_0, pool).is_ok());
    auto q4 = load_model(q4_path);
    std::filesystem::remove(q4_path);
    ASSERT_TRUE(q4.is_ok()) << q4.status().message();
    SCOPED_TRACE("q4_0");
    expect_invariant_on_cuda(**q4);
}

}  // namespace
}  // namespace mvllm
