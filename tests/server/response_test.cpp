// Response builders: the JSON shapes OpenAI clients parse, SSE framing, the error object, and
// the Prometheus text of the metrics.
#include <gtest/gtest.h>

#include <limits>

#include "server/metrics.h"
#include "server/openai_response.h"

namespace mvllm::server {
namespace {

std::string text_of(int32_t id) { return "t" + std::to_string(id); }

TEST(ServerResponse, ErrorObject) {
    const json e = error_body(invalid_field("top_p", "bad"));
    EXPECT_EQ(e["error"]["message"], "bad");
    EXPECT_EQ(e["error"]["type"], "invalid_request_error");
    EXPECT_EQ(e["error"]["param"], "top_p");
    EXPECT_TRUE(e["error"]["code"].is_null());
}

TEST(ServerResponse, CompletionWithLogprobs) {
    ResponseMeta meta{"cmpl-1", 5, "m"};
    ChoiceOutput c;
    c.text = "t1t2";
    c.has_logprobs = true;
    c.logprobs = {{1, -0.5f, {{1, -0.5f}, {3, -1.0f}}}, {2, -0.25f, {}}};
    c.finish_reason = "length";
    const json r = completion_response(meta, {c}, Usage{3, 2}, text_of);
    EXPECT_EQ(r["object"], "text_completion");
    EXPECT_EQ(r["choices"][0]["text"], "t1t2");
    EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(r["choices"][0]["logprobs"]["tokens"], json({"t1", "t2"}));
    EXPECT_EQ(r["choices"][0]["logprobs"]["text_offset"], json({0, 2}));
    EXPECT_DOUBLE_EQ(r["choices"][0]["logprobs"]["top_logprobs"][0]["t3"].get<double>(), -1.0);
    EXPECT_EQ(r["usage"]["total_tokens"], 5);
    // An echoed prompt's first token (NaN logprob): null logprob and null alternatives.
    c.logprobs.insert(c.logprobs.begin(), TokenLogprob{7, std::numeric_limits<float>::quiet_NaN(), {}});
    const json echo = completion_response(meta, {c}, Usage{3, 2}, text_of)["choices"][0]["logprobs"];
    EXPECT_EQ(echo["tokens"], json({"t7", "t1", "t2"}));
    EXPECT_TRUE(echo["token_logprobs"][0].is_null());
    EXPECT_TRUE(echo["top_logprobs"][0].is_null());
    EXPECT_DOUBLE_EQ(echo["token_logprobs"][1].get<double>(), -0.5);
    EXPECT_EQ(echo["text_offset"], json({0, 2, 4}));
}

TEST(ServerResponse, ChatAndChunks) {
    ResponseMeta meta{"chatcmpl-1", 5, "m"};
    ChoiceOutput c;
    c.text = "hi";
    c.finish_reason = "stop";
    const json r = chat_response(meta, {c}, Usage{1, 1}, text_of);
    EXPECT_EQ(r["object"], "chat.completion");
    EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(r["choices"][0]["message"]["content"], "hi");
    EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
    ChoiceOutput first;
    const json f = chat_chunk(meta, first, true, text_of);
    EXPECT_EQ(f["object"], "chat.completion.chunk");
    EXPECT_EQ(f["choices"][0]["delta"]["role"], "assistant");
    EXPECT_TRUE(f["choices"][0]["finish_reason"].is_null());
    ChoiceOutput last;
    last.finish_reason = "stop";
    EXPECT_TRUE(chat_chunk(meta, last, false, text_of)["choices"][0]["delta"].empty());
    ChoiceOutput lp;
    lp.has_logprobs = true;
    lp.logprobs = {{7, -0.1f, {{7, -0.1f}}}};
    const json l = chat_chunk(meta, lp, false, text_of);
    EXPECT_EQ(l["choices"][0]["logprobs"]["content"][0]["token"], "t7");
    EXPECT_EQ(l["choices"][0]["logprobs"]["content"][0]["bytes"], json({116, 55}));
    const json u = usage_chunk(meta, "chat.completion.chunk", Usage{2, 3});
    EXPECT_TRUE(u["choices"].empty());
    EXPECT_EQ(u["usage"]["completion_tokens"], 3);
    const std::string sse = sse_event(json{{"a", 1}});
    EXPECT_EQ(sse, "data: {\"a\":1}\n\n");
    EXPECT_STREQ(sse_done(), "data: [DONE]\n\n");
    EXPECT_EQ(random_id("cmpl-").size(), 5u + 24u);
    EXPECT_STREQ(openai_finish_reason(FinishReason::Length), "length");
}

TEST(ServerResponse, InvalidUtf8IsReplacedNotThrown) {
    EXPECT_NO_THROW(sse_event(json{{"text", std::string("\xff\xfe")}}));
}

TEST(ServerMetricsText, HistogramsAndGauges) {
    ServerMetrics m;
    m.observe_ttft(0.003);
    m.observe_ttft(100);
    m.observe_finish(1.0, 4, 6, FinishReason::Length);
    EngineCounters c;
    c.n_total_blocks = 10;
    c.n_free_blocks = 7;
    c.prefix_query_blocks = 4;
    c.prefix_hit_blocks = 1;
    const std::string text = m.render(c);
    EXPECT_NE(text.find("mvllm:kv_blocks_used 3\n"), std::string::npos);
    EXPECT_NE(text.find("mvllm:kv_blocks_total 10\n"), std::string::npos);
    EXPECT_NE(text.find("mvllm:prefix_cache_hit_rate 0.25\n"), std::string::npos);
    EXPECT_NE(text.find("mvllm:time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"), std::string::npos);
    EXPECT_NE(text.find("mvllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"), std::string::npos);
    EXPECT_NE(text.find("mvllm:time_to_first_token_seconds_count 2\n"), std::string::npos);
    EXPECT_NE(text.find("mvllm:generation_tokens_total 6\n"), std::string::npos);
    EXPECT_NE(text.find("mvllm:request_success_total{finished_reason=\"length\"} 1\n"), std::string::npos);
}

TEST(ServerMetricsText, SpeculativeDecodingCounters) {
    ServerMetrics m;
    RequestStats a, b;
    a.n_draft_tokens = 12, a.n_draft_accepted = 7, a.n_spec_steps = 3, a.n_fallback_steps = 2;
    a.accepted_lengths = {0, 1, 1, 0, 1};  // 1 + 2 + 4 accepted
    b.n_draft_tokens = 4, b.n_draft_accepted = 0, b.n_spec_steps = 1;
    b.accepted_lengths = {1, 0, 0, 0, 0};
    m.observe_speculation(a);
    m.observe_speculation(b);
    m.observe_speculation(RequestStats{});  // a request without a draft changes nothing
    const std::string text = m.render(EngineCounters{});
    EXPECT_NE(text.find("mvllm:spec_decode_num_draft_tokens_total 16\n"), std::string::npos) << text;
    EXPECT_NE(text.find("mvllm:spec_decode_num_accepted_tokens_total 7\n"), std::string::npos);
    EXPECT_NE(text.find("mvllm:spec_decode_num_verifications_total 4\n"), std::string::npos);
    EXPECT_NE(text.find("mvllm:spec_decode_num_fallback_steps_total 2\n"), std::string::npos);
    // Verifications by accepted length: 0 (b), 1, 2, 4: cumulative 1, 2, 3, 3, 4.
    EXPECT_NE(text.find("mvllm:spec_decode_accepted_length_bucket{le=\"0\"} 1\n"), std::string::npos);
    EXPECT_NE(text.find("mvllm:spec_decode_accepted_length_bucket{le=\"2\"} 3\n"), std::string::npos);
    EXPECT_NE(text.find("mvllm:spec_decode_accepted_length_bucket{le=\"3\"} 3\n"), std::string::npos);
    EXPECT_NE(text.find("mvllm:spec_decode_accepted_length_bucket{le=\"4\"} 4\n"), std::string::npos);
    EXPECT_NE(text.find("mvllm:spec_decode_accepted_length_sum 7\n"), std::string::npos);
    EXPECT_NE(text.find("mvllm:spec_decode_accepted_length_count 4\n"), std::string::npos);
}

}  // namespace
}  // namespace mvllm::server
