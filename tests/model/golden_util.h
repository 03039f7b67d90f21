// Shared helpers of the model tests: the transformers fixtures, and running our decoder on them.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "model/decoder.h"
#include "model/export.h"
#include "model/generate.h"

namespace mvllm::test {

struct Reference {
    std::string dir;
    std::vector<int32_t> prompt, greedy, top1;
    std::vector<float> logits;  // [prompt.size()][n_vocab]
    int64_t n_vocab = 0;
};

inline Reference load_reference(const std::string& name) {
    Reference r;
    r.dir = std::string(MVLLM_FIXTURE_DIR) + "/" + name;
    std::ifstream in(r.dir + "/reference.json");
    const auto j = nlohmann::json::parse(in);
    r.prompt = j.at("prompt_ids").get<std::vector<int32_t>>();
    r.greedy = j.at("greedy_ids").get<std::vector<int32_t>>();
    r.top1 = j.at("top1").get<std::vector<int32_t>>();
    r.n_vocab = j.at("logits_shape")[1].get<int64_t>();
    r.logits.resize(r.prompt.size() * r.n_vocab);
    std::ifstream lf(r.dir + "/" + j.at("logits_file").get<std::string>(), std::ios::binary);
    lf.read(reinterpret_cast<char*>(r.logits.data()), r.logits.size() * sizeof(float));
    EXPECT_TRUE(lf.good()) << "logits file of " << name;
    return r;
}

struct RunConfig {
    AttentionVariant attention = AttentionVariant::Fused;
    DType activation = DType::F32;
    DType kv = DType::F32;
    int32_t block_size = 16;
    int32_t prefill_chunk = 0;
    int threads = 2;
};

// Our logits at every prompt position, and our greedy continuation of n tokens.
struct Output {
    std::vector<float> logits;
    std::vector<int32_t> greedy;
};

inline Output run_model(const Model& model, const Reference& ref, const RunConfig& rc, int n_greedy) {
    CpuBackendOptions bo;
    bo.n_threads = rc.threads;
    bo.attention = rc.attention;
    CpuBackend backend(bo);
    DecoderOptions dopt;
    dopt.activation_dtype = rc.activation;
    auto decoder = Decoder::create(model, backend, dopt);
    EXPECT_TRUE(decoder.is_ok()) << decoder.status().message();
    const int64_t n_tokens = static_cast<int64_t>(ref.prompt.size()) + n_greedy + 1;
    auto cache = backend.create_kv_cache(
        (*decoder)->kv_config((n_tokens + rc.block_size - 1) / rc.block_size + 2, rc.block_size, rc.kv));
    EXPECT_TRUE(cache.is_ok()) << cache.status().message();
    Output out;
    {
        SequenceRunner runner(**decoder, **cache, rc.prefill_chunk);
        Status st = runner.prefill(ref.prompt, &out.logits, /*all_logits=*/true);
        EXPECT_TRUE(st.is_ok()) << st.message();
    }
    if (n_greedy > 0) {
        SequenceRunner runner(**decoder, **cache, rc.prefill_chunk);
        Status st = runner.greedy(ref.prompt, n_greedy, &out.greedy);
        EXPECT_TRUE(st.is_ok()) << st.message();
    }
    return out;
}

// max |a - b| / max |b|: the error measure of the golden tests.
inline double relative_max_error(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        max_err = std::max(max_err, std::abs(static_cast<double>(a[i]) - b[i]));
        max_ref = std::max(max_ref, std::abs(static_cast<double>(b[i])));
    }
    return max_err / max_ref;
}

inline std::string temp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() / ("mvllm_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

}  // namespace mvllm::test
