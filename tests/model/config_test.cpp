// config.json in both dialects, GGUF round trip of the config, and clear errors.
#include <gtest/gtest.h>

#include "model/config.h"

namespace mvllm {
namespace {

const char* kOldDialect = R"({
  "architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "hidden_size": 2048,
  "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
  "intermediate_size": 8192, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0, "tie_word_embeddings": true, "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"}})";

const char* kNewDialect = R"({
  "architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "hidden_size": 2048,
  "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
  "intermediate_size": 8192, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
  "tie_word_embeddings": true, "bos_token_id": 128000, "eos_token_id": 128009,
  "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 32.0,
                      "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 8192}})";

TEST(Config, BothRopeDialectsGiveTheSameConfig) {
    auto a = config_from_hf_json_text(kOldDialect, "old.json");
    auto b = config_from_hf_json_text(kNewDialect, "new.json");
    ASSERT_TRUE(a.is_ok()) << a.status().message();
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    for (const ModelConfig* c : {&a.value(), &b.value()}) {
        EXPECT_EQ(c->arch, Arch::Llama);
        EXPECT_EQ(c->head_dim, 64);
        EXPECT_EQ(c->n_kv_heads, 8);
        EXPECT_FLOAT_EQ(c->rope_theta, 500000.0f);
        EXPECT_EQ(c->rope_scaling, RopeScaling::Llama3);
        EXPECT_FLOAT_EQ(c->rope_factor, 32.0f);
        EXPECT_EQ(c->rope_original_ctx, 8192);
        EXPECT_TRUE(c->tied_embeddings);
        EXPECT_FALSE(c->qkv_bias);
    }
    EXPECT_EQ(a->eos_token_id, 128001);  // the first of a list
    EXPECT_EQ(rope_inv_freq(*a), rope_inv_freq(*b));
}

TEST(Config, Llama3ScalingKeepsHighAndSlowsLowFrequencies) {
    auto c = config_from_hf_json_text(kOldDialect, "x");
    ASSERT_TRUE(c.is_ok());
    ModelConfig plain = *c;
    plain.rope_scaling = RopeScaling::None;
    const auto scaled = rope_inv_freq(*c), base = rope_inv_freq(plain);
    EXPECT_FLOAT_EQ(scaled[0], base[0]);                  // wavelength 2*pi: kept
    EXPECT_FLOAT_EQ(scaled.back(), base.back() / 32.0f);  // longest wavelength: divided by factor
}

TEST(Config, Qwen2DefaultsToQkvBias) {
    auto c = config_from_hf_json_text(R"({"architectures": ["Qwen2ForCausalLM"], "vocab_size": 151936,
      "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
      "intermediate_size": 4864, "rope_theta": 1000000.0, "tie_word_embeddings": true})", "q.json");
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    EXPECT_EQ(c->arch, Arch::Qwen2);
    EXPECT_TRUE(c->qkv_bias);
    EXPECT_EQ(c->group_size(), 7);
}

TEST(Config, ErrorsNameTheFileAndTheField) {
    struct Case {
        const char* json;
        const char* expected;
    } cases[] = {
        {"not json", "not a JSON object"},
        {R"({"architectures": ["MistralForCausalLM"]})", "MistralForCausalLM"},
        {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64})", "vocab_size"},
        {R"({"architectures": ["LlamaForCausalLM"], "vocab_size": "big", "hidden_size": 64})", "vocab_size"},
        {R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 64, "num_hidden_layers": 1,
             "num_attention_heads": 6, "num_key_value_heads": 4, "intermediate_size": 8})", "not a multiple"},
        {R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 64, "num_hidden_layers": 1,
             "num_attention_heads": 4, "intermediate_size": 8, "rope_scaling": {"rope_type": "yarn", "factor": 4}})", "yarn"},
        {R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 64, "num_hidden_layers": 0,
             "num_attention_heads": 4, "intermediate_size": 8})", "layer count"},
    };
    for (const auto& c : cases) {
        auto r = config_from_hf_json_text(c.json, "dir/config.json");
        ASSERT_FALSE(r.is_ok()) << c.json;
        EXPECT_NE(r.status().message().find("dir/config.json"), std::string::npos) << r.status().message();
        EXPECT_NE(r.status().message().find(c.expected), std::string::npos) << r.status().message();
    }
}

}  // namespace
}  // namespace mvllm
