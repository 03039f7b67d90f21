// The server in-process on a free loopback port over the tiny Llama fixture (no tokenizer, so
// prompts are token ids and logprobs name tokens "token_id:N"). The test drives the engine from
// its own slow step thread, which it can pause to fill the queue.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server_fixture.h"

namespace mvllm::server {
namespace {

using nlohmann::json;

using Fixture = ServerFixture;

std::vector<int32_t> ids_from_logprobs(const json& tokens) {
    std::vector<int32_t> out;
    for (const auto& t : tokens) out.push_back(std::stoi(t.get<std::string>().substr(9)));  // "token_id:N"
    return out;
}

std::vector<int32_t> engine_greedy(Engine& engine, std::vector<int32_t> prompt, int n) {
    Request r;
    r.prompt_ids = std::move(prompt);
    r.sampling.temperature = 0;
    r.sampling.max_tokens = n;
    r.sampling.ignore_eos = true;
    std::vector<int32_t> out;
    std::atomic<bool> done{false};
    EXPECT_TRUE(engine.submit(r, [&](const EngineEvent& e) {
        if (e.kind == EngineEvent::Kind::Token) out.insert(out.end(), e.token_ids.begin(), e.token_ids.end());
        else done = true;
    }).is_ok());
    while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return out;
}

TEST(ServerHttp, SpeculativeGreedyCompletionAndMetrics) {
    Fixture f({}, {.self_draft = true});
    std::ifstream in(MVLLM_FIXTURE_DIR "/tiny-llama/reference.json");
    const json ref = json::parse(in);  // transformers' greedy continuation
    const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
    const auto expected = ref["greedy_ids"].get<std::vector<int32_t>>();
    json body = {{"prompt", prompt}, {"max_tokens", expected.size()}, {"temperature", 0}, {"logprobs", 0},
                 {"ignore_eos", true}, {"stream", true}};
    auto res = f.client().Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    std::vector<int32_t> streamed;
    for (size_t pos = 0; (pos = res->body.find("data: {", pos)) != std::string::npos;) {
        const size_t end = res->body.find("\n\n", pos);
        const json chunk = json::parse(res->body.substr(pos + 6, end - pos - 6));
        pos = end;
        for (const auto& t : ids_from_logprobs(chunk["choices"][0]["logprobs"]["tokens"])) streamed.push_back(t);
    }
    EXPECT_EQ(streamed, expected);
    auto metrics = f.client().Get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_EQ(metrics->body.find("mvllm:spec_decode_num_draft_tokens_total 0\n"), std::string::npos) << metrics->body;
    EXPECT_NE(metrics->body.find("mvllm:spec_decode_num_draft_tokens_total "), std::string::npos);
    EXPECT_NE(metrics->body.find("mvllm:spec_decode_accepted_length_count "), std::string::npos);
}

TEST(ServerHttp, ModelsHealthAndGreedyCompletion) {
    Fixture f;
    auto c = f.client();
    auto models = c.Get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "mvllm");
    EXPECT_EQ(c.Get("/health")->status, 200);

    const std::vector<int32_t> prompt = {1, 5, 9, 300, 42};
    const auto expected = engine_greedy(*f.engine, prompt, 12);
    json body = {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"logprobs", 1}, {"ignore_eos", true}};
    auto res = c.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const json r = json::parse(res->body);
    EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(r["usage"]["prompt_tokens"], 5);
    EXPECT_EQ(r["usage"]["completion_tokens"], 12);
    EXPECT_EQ(ids_from_logprobs(r["choices"][0]["logprobs"]["tokens"]), expected);

    // Streaming: the same ids, ending in [DONE], with the usage chunk.
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    std::string sse;
    auto sres = c.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(sres);
    sse = sres->body;
    std::vector<int32_t> streamed;
    bool done = false, usage = false;
    for (size_t pos = 0; (pos = sse.find("data: ", pos)) != std::string::npos;) {
        const size_t end = sse.find("\n\n", pos);
        const std::string data = sse.substr(pos + 6, end - pos - 6);
        pos = end;
        if (data == "[DONE]") {
            done = true;
            continue;
        }
        const json chunk = json::parse(data);
        if (chunk.contains("usage")) {
            usage = chunk["usage"]["completion_tokens"] == 12;
            continue;
        }
        for (int32_t id : ids_from_logprobs(chunk["choices"][0]["logprobs"]["tokens"])) streamed.push_back(id);
    }
    EXPECT_TRUE(done);
    EXPECT_TRUE(usage);
    EXPECT_EQ(streamed, expected);

    // logit_bias +100 on one token: every greedy token is it.
    json forced = {{"prompt", prompt}, {"max_tokens", 5}, {"temperature", 0}, {"logprobs", 0}, {"ignore_eos", true},
                   {"logit_bias", {{"77", 100}}}};
    auto fres = c.Post("/v1/completions", forced.dump(), "application/json");
    ASSERT_EQ(fres->status, 200) << fres->body;
    EXPECT_EQ(ids_from_logprobs(json::parse(fres->body)["choices"][0]["logprobs"]["tokens"]),
              std::vector<int32_t>(5, 77));

    // echo with logprobs (a loglikelihood evaluation's request): the prompt's tokens first, the
    // first one's logprob null, the others the engine's prompt logprobs; then the completion. The
    // same in one streamed chunk.
    json scored = {{"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}, {"logprobs", 1}, {"echo", true}};
    auto eres = c.Post("/v1/completions", scored.dump(), "application/json");
    ASSERT_EQ(eres->status, 200) << eres->body;
    const json elp = json::parse(eres->body)["choices"][0]["logprobs"];
    std::vector<int32_t> echoed = prompt;
    echoed.push_back(expected[0]);
    EXPECT_EQ(ids_from_logprobs(elp["tokens"]), echoed);
    EXPECT_TRUE(elp["token_logprobs"][0].is_null());
    EXPECT_TRUE(elp["top_logprobs"][0].is_null());
    Request direct;
    direct.prompt_ids = prompt;
    direct.sampling = SamplingParams{};
    direct.sampling.temperature = 0;
    direct.sampling.max_tokens = 1;
    direct.sampling.prompt_logprobs = 1;
    std::vector<TokenLogprob> want;
    std::atomic<bool> direct_done{false};
    ASSERT_TRUE(f.engine->submit(direct, [&](const EngineEvent& e) {
        if (e.kind == EngineEvent::Kind::Token) want.insert(want.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
        else direct_done = true;
    }).is_ok());
    while (!direct_done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(want.size(), prompt.size() - 1);
    for (size_t k = 1; k < prompt.size(); ++k) {
        EXPECT_FLOAT_EQ(elp["token_logprobs"][k].get<float>(), want[k - 1].logprob) << "prompt token " << k;
        EXPECT_EQ(elp["top_logprobs"][k].size(), 1u);
    }
    scored["stream"] = true;
    const std::string echo_sse = c.Post("/v1/completions", scored.dump(), "application/json")->body;
    const size_t first = echo_sse.find("data: ");
    ASSERT_NE(first, std::string::npos);
    const json chunk = json::parse(echo_sse.substr(first + 6, echo_sse.find("\n\n", first) - first - 6));
    EXPECT_EQ(ids_from_logprobs(chunk["choices"][0]["logprobs"]["tokens"]), echoed);

    // n = 2 with a seed: two choices.
    json n2 = {{"prompt", prompt}, {"max_tokens", 4}, {"n", 2}, {"seed", 7}};
    auto nres = c.Post("/v1/completions", n2.dump(), "application/json");
    ASSERT_EQ(nres->status, 200);
    EXPECT_EQ(json::parse(nres->body)["choices"].size(), 2u);
}

TEST(ServerHttp, ErrorsNameTheField) {
    Fixture f;
    auto c = f.client();
    auto bad = c.Post("/v1/completions", R"({"prompt": [1, 2], "temperature": "x"})", "application/json");
    ASSERT_EQ(bad->status, 400);
    EXPECT_EQ(json::parse(bad->body)["error"]["param"], "temperature");
    auto text = c.Post("/v1/completions", R"({"prompt": "no tokenizer here"})", "application/json");
    EXPECT_EQ(text->status, 400);
    std::vector<int32_t> long_prompt(600, 3);
    auto too_long = c.Post("/v1/completions", json{{"prompt", long_prompt}}.dump(), "application/json");
    ASSERT_EQ(too_long->status, 400);
    const std::string msg = json::parse(too_long->body)["error"]["message"];
    EXPECT_NE(msg.find("512"), std::string::npos) << msg;
    EXPECT_NE(msg.find("600"), std::string::npos) << msg;
    auto vocab = c.Post("/v1/completions", R"({"prompt": [100000]})", "application/json");
    EXPECT_EQ(vocab->status, 400);
    auto bias = c.Post("/v1/completions", R"({"prompt": [1], "logit_bias": {"100000": 5}})", "application/json");
    ASSERT_EQ(bias->status, 400);
    EXPECT_EQ(json::parse(bias->body)["error"]["param"], "logit_bias");
    auto model = c.Post("/v1/completions", R"({"prompt": [1], "model": "gpt-9"})", "application/json");
    EXPECT_EQ(model->status, 404);
    EXPECT_EQ(c.Get("/nowhere")->status, 404);
}

TEST(ServerHttp, ApiKeyAndBodyLimit) {
    ServerOptions o;
    o.api_key = "sk-test";
    o.max_body_bytes = 2048;
    Fixture f(o);
    auto c = f.client();
    EXPECT_EQ(c.Get("/v1/models")->status, 401);
    EXPECT_EQ(c.Get("/health")->status, 200);
    httplib::Headers auth = {{"Authorization", "Bearer sk-test"}};
    EXPECT_EQ(c.Get("/v1/models", auth)->status, 200);
    httplib::Headers wrong = {{"Authorization", "Bearer sk-tesu"}};
    EXPECT_EQ(c.Get("/v1/models", wrong)->status, 401);
    const std::string big = R"({"prompt": [1], "user": ")" + std::string(4096, 'x') + "\"}";
    auto res = c.Post("/v1/completions", auth, big, "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 413);
}

TEST(ServerHttp, FullQueueGets429) {
    ServerOptions o;
    o.max_queue = 2;
    Fixture f(o);
    f.paused = true;
    const std::string body = R"({"prompt": [1, 2, 3], "max_tokens": 4})";
    std::vector<std::thread> waiting;
    std::atomic<int> ok{0};
    for (int i = 0; i < 2; ++i)
        waiting.emplace_back([&] {
            auto c = f.client();
            auto r = c.Post("/v1/completions", body, "application/json");
            if (r && r->status == 200) ++ok;
        });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto c = f.client();
    auto full = c.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(full);
    EXPECT_EQ(full->status, 429);
    f.paused = false;
    for (auto& t : waiting) t.join();
    EXPECT_EQ(ok, 2);
}

// A burst of new connections must not overflow the accept queue (cpp-httplib 0.11 listens with a
// backlog of 5; the server raises it). Nothing accepts here, so every connection that completes
// its handshake waits in the backlog: with a backlog of 5, the 7th connect would hang.
TEST(ServerHttp, BurstOfConnectionsFitsTheBacklog) {
    Fixture f(ServerOptions{}, {.listen = false});
    std::vector<int> fds;
    for (int i = 0; i < 100; ++i) {
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(static_cast<uint16_t>(f.server->port()));
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
        EXPECT_TRUE(rc == 0 || errno == EINPROGRESS);
        fds.push_back(fd);
    }
    int n_connected = 0;
    for (int fd : fds) {
        pollfd p{fd, POLLOUT, 0};
        int error = -1;
        socklen_t len = sizeof(error);
        if (::poll(&p, 1, 2000) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0)
            ++n_connected;
        ::close(fd);
    }
    EXPECT_EQ(n_connected, 100);
}

// Sends a raw HTTP request on a new loopback connection and returns the socket.
int send_raw_request(int port, const std::string& body) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    EXPECT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    return fd;
}

// A client that vanishes mid-request, streaming or not, closing politely (FIN) or with a reset
// (as a crashed or killed client does): the server aborts the request within about one engine
// step, the engine frees its blocks, and /metrics counts it as aborted.
TEST(ServerHttp, DisconnectAbortsAndFreesBlocks) {
    Fixture f(ServerOptions{}, {.step_delay_ms = 10});  // 500 tokens take >= 5 s: an abort is not a finish
    const int64_t total = f.engine->counters().n_total_blocks;
    int n_aborted = 0;
    for (const bool stream : {false, true}) {
        for (const bool reset : {false, true}) {
            SCOPED_TRACE(std::string(stream ? "streaming" : "non-streaming") + (reset ? ", reset" : ", FIN"));
            const std::string body = std::string(R"({"prompt": [1, 2, 3], "max_tokens": 500, "ignore_eos": true)") +
                                     (stream ? R"(, "stream": true})" : "}");
            const int fd = send_raw_request(f.server->port(), body);
            if (stream) {
                // The first streamed bytes after the headers (tiny-llama has no tokenizer, so its
                // tokens stream as SSE comments until the final chunk): the request is running.
                std::string got;
                char buf[4096];
                while (true) {
                    const size_t h = got.find("\r\n\r\n");
                    if (h != std::string::npos && got.size() > h + 4) break;
                    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
                    ASSERT_GT(n, 0);
                    got.append(buf, n);
                }
            } else {
                // Nothing comes back before the answer: wait until the request holds KV blocks.
                const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
                while (f.engine->counters().n_free_blocks == total && std::chrono::steady_clock::now() < until)
                    std::this_thread::sleep_for(std::chrono::milliseconds(2));
                ASSERT_LT(f.engine->counters().n_free_blocks, total);
            }
            if (reset) {
                linger hard_close{1, 0};
                ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard_close, sizeof(hard_close));
            }
            ::close(fd);
            const auto t_close = std::chrono::steady_clock::now();
            EngineCounters c;
            while (std::chrono::steady_clock::now() < t_close + std::chrono::seconds(10)) {
                c = f.engine->counters();
                if (f.server->n_in_flight() == 0 && c.n_free_blocks == total) break;
                std::this_thread::sleep_for(std::chrono::milliseconds(2));
            }
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_close).count();
            EXPECT_EQ(f.server->n_in_flight(), 0);
            EXPECT_EQ(c.n_free_blocks, total);
            // One step is ~10 ms here and the socket is polled every step (every 50 ms while idle);
            // the bound leaves room for a loaded CI machine, and is far below the 5 s of a finish.
            EXPECT_LT(seconds, 1.5);
            ++n_aborted;
            auto metrics = f.client().Get("/metrics");
            ASSERT_TRUE(metrics);
            EXPECT_NE(metrics->body.find("mvllm:num_requests_running 0\n"), std::string::npos);
            EXPECT_NE(metrics->body.find("mvllm:kv_blocks_used 0\n"), std::string::npos);
            EXPECT_NE(metrics->body.find("mvllm:request_success_total{finished_reason=\"abort\"} " +
                                         std::to_string(n_aborted) + "\n"),
                      std::string::npos)
                << metrics->body;
            EXPECT_NE(metrics->body.find("mvllm:request_success_total{finished_reason=\"length\"} 0\n"),
                      std::string::npos);
        }
    }
}

}  // namespace
}  // namespace mvllm::server
