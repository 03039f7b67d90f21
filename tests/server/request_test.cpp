// Request parsing and validation: OpenAI shapes accepted, wrong types and ranges rejected with the
// field named, unknown fields ignored. No network.
#include <gtest/gtest.h>

#include <algorithm>

#include "server/openai_request.h"
#include "server/openai_response.h"

namespace mvllm::server {
namespace {

CompletionRequest completion(const std::string& body) {
    CompletionRequest r;
    auto e = parse_completion_request(body, &r);
    EXPECT_FALSE(e) << (e ? e->message : "");
    return r;
}

std::string completion_error_param(const std::string& body) {
    CompletionRequest r;
    auto e = parse_completion_request(body, &r);
    EXPECT_TRUE(e) << body;
    if (!e) return "<none>";
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->type, "invalid_request_error");
    return e->param;
}

TEST(ServerRequest, PromptShapes) {
    EXPECT_TRUE(completion(R"({"prompt": "hi"})").prompts[0].is_text);
    EXPECT_EQ(completion(R"({"prompt": ["a", "b"]})").prompts.size(), 2u);
    auto ids = completion(R"({"prompt": [1, 2, 3]})");
    ASSERT_EQ(ids.prompts.size(), 1u);
    EXPECT_EQ(ids.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
    auto lists = completion(R"({"prompt": [[1], [2, 3]]})");
    ASSERT_EQ(lists.prompts.size(), 2u);
    EXPECT_EQ(lists.prompts[1].ids, (std::vector<int32_t>{2, 3}));
    EXPECT_EQ(completion_error_param(R"({"prompt": 5})"), "prompt");
    EXPECT_EQ(completion_error_param(R"({"prompt": []})"), "prompt");
    EXPECT_EQ(completion_error_param(R"({"prompt": [1, -2]})"), "prompt");
    EXPECT_EQ(completion_error_param(R"({})"), "prompt");
}

TEST(ServerRequest, SamplingFieldsAndDefaults) {
    auto r = completion(R"({"prompt": "x", "model": "m", "max_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 4,
        "min_p": 0.1, "repetition_penalty": 1.1, "presence_penalty": 0.5, "frequency_penalty": -0.5, "seed": 3,
        "stop": ["a", "b"], "n": 2, "logprobs": 2, "ignore_eos": true, "user": "u", "stream": true,
        "stream_options": {"include_usage": true}, "logit_bias": {"50256": -100, "7": 2.5},
        "some_unknown_field": {"x": 1}})");
    const SamplingParams& s = r.params.sampling;
    EXPECT_EQ(r.params.model, "m");
    EXPECT_EQ(s.max_tokens, 7);
    EXPECT_EQ(s.temperature, 0.0f);
    EXPECT_FLOAT_EQ(s.top_p, 0.5f);
    EXPECT_EQ(s.top_k, 4);
    EXPECT_FLOAT_EQ(s.min_p, 0.1f);
    EXPECT_FLOAT_EQ(s.repetition_penalty, 1.1f);
    EXPECT_FLOAT_EQ(s.frequency_penalty, -0.5f);
    auto sorted = s.logit_bias;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<std::pair<int32_t, float>>{{7, 2.5f}, {50256, -100.0f}}));
    EXPECT_EQ(s.seed, 3);
    EXPECT_EQ(s.stop, (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(r.params.n, 2);
    EXPECT_EQ(s.logprobs, 2);
    EXPECT_TRUE(s.ignore_eos);
    EXPECT_TRUE(r.params.stream);
    EXPECT_TRUE(r.params.include_usage);
    // echo with logprobs asks the engine for the prompt's logprobs too; echo alone only for its text.
    auto echo = completion(R"({"prompt": "x", "echo": true, "logprobs": 2})");
    EXPECT_TRUE(echo.params.echo);
    EXPECT_EQ(echo.params.sampling.prompt_logprobs, 2);
    auto echo_text = completion(R"({"prompt": "x", "echo": true})");
    EXPECT_TRUE(echo_text.params.echo);
    EXPECT_EQ(echo_text.params.sampling.prompt_logprobs, -1);
    auto d = completion(R"({"prompt": "x", "stop": "s"})");
    EXPECT_EQ(d.params.sampling.max_tokens, kDefaultCompletionMaxTokens);
    EXPECT_EQ(d.params.sampling.temperature, 1.0f);
    EXPECT_EQ(d.params.sampling.stop, (std::vector<std::string>{"s"}));
    EXPECT_EQ(d.params.sampling.logprobs, -1);
    EXPECT_EQ(d.params.sampling.seed, -1);
    EXPECT_FALSE(d.params.echo);
    EXPECT_EQ(d.params.sampling.prompt_logprobs, -1);
}

TEST(ServerRequest, WrongTypesAndRangesNameTheField) {
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "max_tokens": "5"})"), "max_tokens");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "max_tokens": 0})"), "max_tokens");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "temperature": 3})"), "temperature");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "temperature": "hot"})"), "temperature");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "top_p": 0})"), "top_p");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "min_p": 1.5})"), "min_p");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "presence_penalty": 9})"), "presence_penalty");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "n": 0})"), "n");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "echo": "yes"})"), "echo");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "logit_bias": [1]})"), "logit_bias");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "logit_bias": {"a1": 1}})"), "logit_bias");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "logit_bias": {"-3": 1}})"), "logit_bias");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "logit_bias": {"99999999999": 1}})"), "logit_bias");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "logit_bias": {"3": 101}})"), "logit_bias");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "logit_bias": {"3": "up"}})"), "logit_bias");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "n": 1.5})"), "n");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "logprobs": 21})"), "logprobs");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "stop": [1]})"), "stop");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "stream": "yes"})"), "stream");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "seed": "1"})"), "seed");
    EXPECT_EQ(completion_error_param(R"({"prompt": "x", "stream_options": {"include_usage": 1}})"),
              "stream_options.include_usage");
    EXPECT_EQ(completion_error_param("not json"), "");
    EXPECT_EQ(completion_error_param("[1]"), "");
}

TEST(ServerRequest, ChatMessagesAndLogprobs) {
    ChatRequest r;
    ASSERT_FALSE(parse_chat_request(R"({"messages": [{"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": null}], "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 3})",
                                   &r));
    ASSERT_EQ(r.messages.size(), 3u);
    EXPECT_EQ(r.messages[1]["content"], "a\nb");
    EXPECT_EQ(r.messages[2]["content"], "");
    EXPECT_EQ(r.params.sampling.max_tokens, 9);
    EXPECT_EQ(r.params.sampling.logprobs, 3);
    ChatRequest d;
    ASSERT_FALSE(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}]})", &d));
    EXPECT_EQ(d.params.sampling.max_tokens, -1);
    EXPECT_EQ(d.params.sampling.logprobs, -1);
    auto param = [](const std::string& body) {
        ChatRequest c;
        auto e = parse_chat_request(body, &c);
        return e ? e->param : std::string("<none>");
    };
    EXPECT_EQ(param(R"({})"), "messages");
    EXPECT_EQ(param(R"({"messages": []})"), "messages");
    EXPECT_EQ(param(R"({"messages": [{"role": "robot", "content": "x"}]})"), "messages[0].role");
    EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": 3}]})"), "messages[0].content");
    EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})"), "logprobs");
    EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})"), "top_logprobs");
}

TEST(ServerRequest, TokenizeAndApiKey) {
    TokenizeRequest t;
    ASSERT_FALSE(parse_tokenize_request(R"({"prompt": "hello", "add_special_tokens": false})", &t));
    EXPECT_EQ(t.prompt, "hello");
    EXPECT_FALSE(t.add_special_tokens);
    std::vector<int32_t> ids;
    ASSERT_FALSE(parse_detokenize_request(R"({"tokens": [4, 5]})", &ids));
    EXPECT_EQ(ids, (std::vector<int32_t>{4, 5}));
    EXPECT_TRUE(parse_detokenize_request(R"({"tokens": "4"})", &ids));
    EXPECT_TRUE(bearer_matches("Bearer sk-1", "sk-1"));
    EXPECT_FALSE(bearer_matches("Bearer sk-2", "sk-1"));
    EXPECT_FALSE(bearer_matches("sk-1", "sk-1"));
    EXPECT_FALSE(bearer_matches("Bearer sk-10", "sk-1"));
    EXPECT_FALSE(bearer_matches("Bearer ", ""));
    EXPECT_TRUE(constant_time_equal("abc", "abc"));
    EXPECT_FALSE(constant_time_equal("abc", "abd"));
    EXPECT_FALSE(constant_time_equal("ab", "abc"));
}

}  // namespace
}  // namespace mvllm::server
