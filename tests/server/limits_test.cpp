// The server's limits and defaults (README "Limits and defaults"), one test each: bind address,
// API-key comparison, body / header / URI sizes, prompt and output token limits, per-request and
// idle timeouts, queue length. The server runs in-process on a free port over the tiny Llama
// fixture (token-id prompts); the engine is stepped by the test, which can pause it.
#include <gtest/gtest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/openai_request.h"
#include "server_fixture.h"

namespace mvllm::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kContext = 256;

// No pause between steps; a short context for the token-limit tests.
struct LimitsFixture : ServerFixture {
    explicit LimitsFixture(ServerOptions o = {}, bool keep_port = false)
        : ServerFixture(std::move(o), {.max_model_len = kContext, .step_delay_ms = 0, .keep_port = keep_port}) {}
};

// Sends raw bytes on a fresh connection and returns the server's first response.
std::string raw_exchange(int port, const std::string& request) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        close(fd);
        return "";
    }
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t sent = 0;
    while (sent < request.size()) {
        const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) break;  // the server may close before reading everything
        sent += static_cast<size_t>(n);
    }
    // Read one response: the headers, then Content-Length bytes of body (the connection may stay open).
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) {
        out.append(buf, static_cast<size_t>(n));
        const size_t end = out.find("\r\n\r\n");
        if (end == std::string::npos) continue;
        const size_t at = out.find("Content-Length: ");
        const size_t body = at == std::string::npos || at > end ? 0 : std::stoul(out.substr(at + 16));
        if (out.size() >= end + 4 + body) break;
    }
    close(fd);
    return out;
}

int status_of(const std::string& response) {
    if (response.rfind("HTTP/1.1 ", 0) != 0) return 0;
    return std::stoi(response.substr(9, 3));
}

// An IPv4 address of this machine that is not loopback ("" when it has none).
std::string non_loopback_ipv4() {
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return "";
    std::string found;
    for (ifaddrs* a = list; a && found.empty(); a = a->ifa_next) {
        if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
        const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
        if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
        char text[INET_ADDRSTRLEN];
        if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof text)) found = text;
    }
    freeifaddrs(list);
    return found;
}

TEST(ServerLimits, DefaultsAreConservative) {
    const ServerOptions o;
    EXPECT_EQ(o.host, "127.0.0.1");
    EXPECT_TRUE(o.api_key.empty());
    EXPECT_EQ(o.max_body_bytes, size_t(4) << 20);
    EXPECT_EQ(o.max_header_bytes, size_t(64) << 10);
    EXPECT_EQ(o.max_queue, 256);
    EXPECT_EQ(o.request_timeout_s, 600);
    EXPECT_EQ(o.idle_timeout_s, 120);
}

TEST(ServerLimits, BindsLoopbackOnlyByDefault) {
    const std::string other = non_loopback_ipv4();
    if (other.empty()) GTEST_SKIP() << "this machine has no non-loopback IPv4 address";
    LimitsFixture f;
    EXPECT_EQ(f.client().Get("/health")->status, 200);
    EXPECT_FALSE(f.client(other).Get("/health")) << "reachable on " << other << " although bound to 127.0.0.1";

    ServerOptions open;
    open.host = "0.0.0.0";
    LimitsFixture g(open);
    auto res = g.client(other).Get("/health");
    ASSERT_TRUE(res) << "--host 0.0.0.0 is not reachable on " << other;
    EXPECT_EQ(res->status, 200);
}

TEST(ServerLimits, ApiKeyComparison) {
    EXPECT_TRUE(constant_time_equal("sk-abc", "sk-abc"));
    EXPECT_TRUE(constant_time_equal("", ""));
    EXPECT_FALSE(constant_time_equal("sk-abc", "sk-abd"));
    EXPECT_FALSE(constant_time_equal("sk-abc", "sk-ab"));   // a prefix
    EXPECT_FALSE(constant_time_equal("sk-ab", "sk-abc"));
    EXPECT_FALSE(constant_time_equal("sk-abc", std::string("sk-abc\0", 7)));  // a trailing NUL
    EXPECT_FALSE(constant_time_equal("xk-abc", "sk-abc"));  // first byte differs
    EXPECT_TRUE(bearer_matches("Bearer sk-abc", "sk-abc"));
    EXPECT_FALSE(bearer_matches("bearer sk-abc", "sk-abc"));
    EXPECT_FALSE(bearer_matches("Bearer  sk-abc", "sk-abc"));
    EXPECT_FALSE(bearer_matches("Bearer sk-abc ", "sk-abc"));
    EXPECT_FALSE(bearer_matches("sk-abc", "sk-abc"));
    EXPECT_FALSE(bearer_matches("Bearer ", ""));  // an empty configured key matches nothing
    EXPECT_FALSE(bearer_matches("", ""));
}

TEST(ServerLimits, HeaderAndUriSizes) {
    LimitsFixture f;
    const int port = f.server->port();
    EXPECT_EQ(status_of(raw_exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")), 200);
    // One header line beyond httplib's 8 KiB: 400 before any handler runs.
    const std::string long_line = "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(9000, 'a') +
                                  "\r\nConnection: close\r\n\r\n";
    EXPECT_EQ(status_of(raw_exchange(port, long_line)), 400);
    // Many short headers adding up to more than max_header_bytes (64 KiB): 431.
    std::string many = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";
    for (int i = 0; i < 200; ++i) many += "X-Filler-" + std::to_string(i) + ": " + std::string(400, 'b') + "\r\n";
    many += "\r\n";
    const std::string answer = raw_exchange(port, many);
    EXPECT_EQ(status_of(answer), 431) << answer.substr(0, 200);
    // A request target beyond 8 KiB: 414.
    const std::string long_uri = "GET /" + std::string(9000, 'u') + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    EXPECT_EQ(status_of(raw_exchange(port, long_uri)), 414);
    EXPECT_EQ(status_of(raw_exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")), 200);
}

TEST(ServerLimits, BodySize) {
    ServerOptions o;
    o.max_body_bytes = 1024;
    LimitsFixture f(o);
    auto c = f.client();
    const std::string fits = R"({"prompt": [1, 2], "max_tokens": 1, "user": ")" + std::string(900, 'x') + "\"}";
    EXPECT_EQ(c.Post("/v1/completions", fits, "application/json")->status, 200);
    const std::string big = R"({"prompt": [1, 2], "max_tokens": 1, "user": ")" + std::string(1100, 'x') + "\"}";
    auto res = c.Post("/v1/completions", big, "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 413);
    EXPECT_EQ(json::parse(res->body)["error"]["code"], "request_too_large");
}

TEST(ServerLimits, PromptAndOutputTokens) {
    LimitsFixture f;
    auto c = f.client();
    auto post = [&](const json& body) { return c.Post("/v1/completions", body.dump(), "application/json"); };
    const std::vector<int32_t> fill(kContext - 1, 5), full(kContext, 5);
    // The longest prompt that leaves room for one token, and one token more.
    EXPECT_EQ(post({{"prompt", fill}, {"max_tokens", 1}})->status, 200);
    auto too_long = post({{"prompt", full}, {"max_tokens", 1}});
    EXPECT_EQ(too_long->status, 400);
    EXPECT_EQ(json::parse(too_long->body)["error"]["param"], "prompt");
    // max_tokens: prompt + max_tokens may not pass the context; 0, negative and absurd values are refused.
    EXPECT_EQ(post({{"prompt", {1, 2}}, {"max_tokens", kContext - 2}, {"temperature", 0}, {"ignore_eos", true}})->status, 200);
    for (const json& bad : {json(kContext - 1), json(0), json(-1), json(INT32_MAX), json(1e300), json("16")}) {
        auto res = post({{"prompt", {1, 2}}, {"max_tokens", bad}});
        ASSERT_TRUE(res);
        EXPECT_EQ(res->status, 400) << bad;
        EXPECT_EQ(json::parse(res->body)["error"]["param"], "max_tokens") << bad;
    }
    EXPECT_EQ(f.settled_used_blocks(), 0);
}

TEST(ServerLimits, RequestTimeoutAbortsAndFreesBlocks) {
    ServerOptions o;
    o.request_timeout_s = 0.5;
    o.idle_timeout_s = 0;
    LimitsFixture f(o);
    f.paused = true;  // the request waits in the queue past its deadline
    auto c = f.client();
    const Clock::time_point t0 = Clock::now();
    auto res = c.Post("/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 8})", "application/json");
    const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 504);
    EXPECT_EQ(json::parse(res->body)["error"]["type"], "timeout");
    EXPECT_GE(waited, 0.45);
    EXPECT_LT(waited, 5.0);
    f.paused = false;
    EXPECT_EQ(f.settled_used_blocks(), 0);
}

TEST(ServerLimits, IdleTimeoutEndsAStream) {
    ServerOptions o;
    o.request_timeout_s = 0;
    o.idle_timeout_s = 0.5;
    LimitsFixture f(o);
    f.paused = true;  // no event ever arrives
    auto c = f.client();
    std::string body;
    const Clock::time_point t0 = Clock::now();
    auto res = c.Post("/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 8, "stream": true})",
                      "application/json");
    const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);  // the stream had started: the timeout is its last event
    EXPECT_NE(res->body.find("\"type\":\"timeout\""), std::string::npos) << res->body;
    EXPECT_NE(res->body.find("data: [DONE]"), std::string::npos);
    EXPECT_GE(waited, 0.45);
    EXPECT_LT(waited, 5.0);
}

TEST(ServerLimits, QueueLength) {
    ServerOptions o;
    o.max_queue = 3;
    LimitsFixture f(o);
    f.paused = true;
    // One request with n = 3 fills the queue; the next is refused, and n beyond the queue too.
    std::thread first([&] {
        auto c = f.client();
        auto r = c.Post("/v1/completions", R"({"prompt": [1, 2], "max_tokens": 2, "n": 3})", "application/json");
        EXPECT_TRUE(r && r->status == 200);
    });
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
    while (f.server->n_in_flight() < 1 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    auto c1 = f.client();
    auto r = c1.Post("/v1/completions", R"({"prompt": [1], "max_tokens": 1})", "application/json");
    const int status = r ? r->status : 0;
    if (r) {
        EXPECT_EQ(json::parse(r->body)["error"]["code"], "queue_full");
    }
    EXPECT_EQ(status, 429);
    f.paused = false;
    first.join();
    auto c = f.client();
    EXPECT_EQ(c.Post("/v1/completions", R"({"prompt": [1], "max_tokens": 1})", "application/json")->status, 200);
}

}  // namespace
}  // namespace mvllm::server
