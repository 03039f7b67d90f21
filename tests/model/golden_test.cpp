// Golden tests: our decoder against Hugging Face transformers (fixtures written by
// scripts/make_golden.py: tiny random Llama-3 with llama3 RoPE scaling and untied head, tiny Qwen2
// with QKV bias, tied embeddings and a 7:1 GQA ratio).
#include <unistd.h>

#include "golden_util.h"

namespace mvllm::test {
namespace {

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, HfCheckpointF32MatchesTransformers) {
    const Reference ref = load_reference(GetParam());
    auto model = load_model(ref.dir);
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    const Output out = run_model(**model, ref, RunConfig{}, static_cast<int>(ref.greedy.size()));
    // Both sides compute in f32; differences come from summation order only (~1e-6 relative).
    EXPECT_LT(relative_max_error(out.logits, ref.logits), 1e-4);
    EXPECT_EQ(out.greedy, ref.greedy);
}

TEST_P(Golden, AttentionVariantsAgree) {
    const Reference ref = load_reference(GetParam());
    auto model = load_model(ref.dir);
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    const Output fused = run_model(**model, ref, RunConfig{}, 0);
    for (AttentionVariant v : {AttentionVariant::Naive, AttentionVariant::Grouped}) {
        RunConfig rc;
        rc.attention = v;
        const Output other = run_model(**model, ref, rc, static_cast<int>(ref.greedy.size()));
        EXPECT_LT(relative_max_error(other.logits, fused.logits), 1e-5) << attention_variant_name(v);
        EXPECT_LT(relative_max_error(other.logits, ref.logits), 1e-4) << attention_variant_name(v);
        EXPECT_EQ(other.greedy, ref.greedy) << attention_variant_name(v);
    }
}

TEST_P(Golden, ChunkedPrefillAndBlockSizesMatch) {
    const Reference ref = load_reference(GetParam());
    auto model = load_model(ref.dir);
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    const Output whole = run_model(**model, ref, RunConfig{}, 0);
    for (int chunk : {1, 5, 16}) {
        for (int block : {1, 4, 32}) {
            RunConfig rc;
            rc.prefill_chunk = chunk;
            rc.block_size = block;
            const Output out = run_model(**model, ref, rc, 0);
            EXPECT_LT(relative_max_error(out.logits, whole.logits), 1e-5) << "chunk " << chunk << " block " << block;
        }
    }
}

TEST_P(Golden, F16ActivationsWithinBound) {
    const Reference ref = load_reference(GetParam());
    auto model = load_model(ref.dir);
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    RunConfig rc;
    rc.activation = DType::F16;
    rc.kv = DType::F16;
    const Output out = run_model(**model, ref, rc, static_cast<int>(ref.greedy.size()));
    // F16 keeps 11 significant bits (relative rounding 2^-11 = 4.9e-4) on every matmul input and on
    // K/V; through two layers and the LM head the logit error stays a few times that.
    EXPECT_LT(relative_max_error(out.logits, ref.logits), 5e-3);
    // The smallest top-1 margin of the fixtures (0.07 on logits of std 4) is far above that error.
    EXPECT_EQ(out.greedy, ref.greedy);
}

TEST_P(Golden, GgufF32AndF16MatchTransformers) {
    const Reference ref = load_reference(GetParam());
    auto hf = load_model(ref.dir);
    ASSERT_TRUE(hf.is_ok()) << hf.status().message();
    ThreadPool pool(2);
    for (FileType ft : {FileType::F32, FileType::F16}) {
        const std::string path = temp_path(GetParam() + "-" + file_type_name(ft) + ".gguf");
        ASSERT_TRUE(convert_model(**hf, path, ft, pool).is_ok());
        auto gguf = load_model(path);
        ASSERT_TRUE(gguf.is_ok()) << gguf.status().message();
        EXPECT_EQ((*gguf)->format, CheckpointFormat::Gguf);
        const Output out = run_model(**gguf, ref, RunConfig{}, static_cast<int>(ref.greedy.size()));
        // F32: the same numbers as the HF checkpoint. F16 weights: relative rounding 4.9e-4 per weight.
        EXPECT_LT(relative_max_error(out.logits, ref.logits), ft == FileType::F32 ? 1e-4 : 5e-3)
            << file_type_name(ft);
        EXPECT_EQ(out.greedy, ref.greedy) << file_type_name(ft);
        std::filesystem::remove(path);
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Golden, ::testing::Values("tiny-llama", "tiny-qwen2"));

}  // namespace
}  // namespace mvllm::test
