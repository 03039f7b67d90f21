// mvllm bench serve: an HTTP load generator against a running OpenAI-compatible server (mvllm
// serve, or any server with /v1/completions that streams server-sent events). For each level of
// --concurrency it sends --num-requests streaming completions from that many client threads at
// once (each thread starts its next request when the previous one ends), with prompts of random
// token ids and ignore_eos, and reports, per level: requests/s, output tok/s, time to first token
// (request sent -> first chunk with output) and inter-token latency (gaps between such chunks),
// mean / p50 / p99, and end-to-end latency. The prompts' ids are drawn from the ids the server's
// /tokenize gives for a built-in English text (realistic tokens, no specials). A server without a
// tokenizer (e.g. a make-model file) streams no text: then the ids come from 1..255 and the
// requests ask for logprobs 0, so that each token's chunk is visible by its logprobs entry.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <cstring>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "cli/options.h"

#ifndef MVLLM_GIT_COMMIT
#define MVLLM_GIT_COMMIT "unknown"
#endif

namespace mvllm::cli {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct BenchServeArgs {
    std::string url = "http://127.0.0.1:8000";
    std::string api_key;
    std::string model;  // empty: the server's first model
    std::string concurrency = "1,16,64";
    int num_requests = 0;  // per level; 0: 4 x concurrency, at least 8
    std::string input_len = "128";
    std::string output_len = "128";
    int seed = 0;
    double temperature = 0;
    double timeout_s = 600;
    std::string label;  // free text stored in the JSON (device, model file, ...)
    bool token_logprobs = false;  // set when the server has no tokenizer (see above)
    std::string json_out;
};

constexpr const char* kPoolText =
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in "
    "want of a wife. However little known the feelings or views of such a man may be on his first entering a "
    "neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is considered "
    "the rightful property of some one or other of their daughters. The quick brown fox jumps over the lazy dog "
    "while 12 engineers measure 345 requests per second at 6.78 ms each; results vary between machines.";

Result<std::pair<int, int>> parse_length(const std::string& text, const char* flag) {
    int lo = 0, hi = 0;
    char extra = 0;
    if (std::sscanf(text.c_str(), "%d:%d%c", &lo, &hi, &extra) == 2 && lo >= 1 && hi >= lo) return std::make_pair(lo, hi);
    if (std::sscanf(text.c_str(), "%d%c", &lo, &extra) == 1 && lo >= 1) return std::make_pair(lo, lo);
    return make_error(flag, ": not a length: \"", text, "\" (N or MIN:MAX, >= 1)");
}

// "http(s)://host[:port]", also with a trailing "/" or "/v1" (an OpenAI base URL) -> without them.
Result<std::string> normalize_url(std::string url) {
    for (const char* suffix : {"/", "/v1", "/v1/"})
        if (url.size() > std::strlen(suffix) && url.compare(url.size() - std::strlen(suffix), std::string::npos, suffix) == 0)
            url.resize(url.size() - std::strlen(suffix));
    static const std::regex shape(R"(^https?://([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$)");
    if (!std::regex_match(url, shape))
        return make_error("--url: \"", url, "\" is not http://HOST[:PORT] or https://HOST[:PORT]");
    return url;
}

Result<std::vector<int>> parse_levels(const std::string& text) {
    std::vector<int> levels;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        char* end = nullptr;
        const long c = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || c < 1 || c > 4096)
            return make_error("--concurrency: \"", item, "\" is not a number of clients in 1..4096");
        levels.push_back(static_cast<int>(c));
    }
    if (levels.empty()) return make_error("--concurrency: no levels given");
    return levels;
}

// Linear interpolation between closest ranks (numpy's default); 0 for no samples.
double percentile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const double rank = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(rank);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / static_cast<double>(v.size());
}

json summary_ms(const std::vector<double>& seconds) {
    return {{"mean_ms", mean(seconds) * 1e3}, {"p50_ms", percentile(seconds, 0.5) * 1e3},
            {"p99_ms", percentile(seconds, 0.99) * 1e3}, {"n", seconds.size()}};
}

struct Planned {
    std::vector<int32_t> prompt;
    int max_tokens = 0;
};

struct Outcome {
    bool ok = false;
    std::string error;
    Clock::time_point sent, finished;
    std::vector<Clock::time_point> token_chunks;  // arrival of each chunk with output (text, or a logprobs entry)
    int64_t n_output = 0;                        // the usage chunk's completion_tokens
};

// One streaming completion; parses the server-sent events as they arrive.
Outcome run_request(httplib::Client& http, const BenchServeArgs& a, const std::string& model, const Planned& p) {
    Outcome out;
    const json body = {{"model", model}, {"prompt", p.prompt}, {"max_tokens", p.max_tokens},
                       {"temperature", a.temperature}, {"ignore_eos", true}, {"stream", true},
                       {"stream_options", {{"include_usage", true}}}};
    json request = body;
    if (a.token_logprobs) request["logprobs"] = 0;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = request.dump();
    req.set_header("Content-Type", "application/json");
    if (!a.api_key.empty()) req.set_header("Authorization", "Bearer " + a.api_key);
    std::string pending, raw;
    bool done = false;
    std::string finish;
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
        const Clock::time_point now = Clock::now();
        if (raw.size() < 4096) raw.append(data, std::min(len, 4096 - raw.size()));
        pending.append(data, len);
        for (size_t end; (end = pending.find("\n\n")) != std::string::npos; pending.erase(0, end + 2)) {
            if (pending.compare(0, 6, "data: ") != 0) continue;  // an SSE comment (keep-alive)
            const std::string payload = pending.substr(6, end - 6);
            if (payload == "[DONE]") {
                done = true;
                continue;
            }
            const json chunk = json::parse(payload, nullptr, false);
            if (chunk.is_discarded() || !chunk.is_object()) {
                out.error = "a chunk that is not JSON: " + payload.substr(0, 200);
                return false;
            }
            if (chunk.contains("error")) {
                out.error = chunk["error"].value("message", chunk["error"].dump());
                continue;
            }
            if (chunk.contains("usage") && chunk["usage"].is_object())
                out.n_output = chunk["usage"].value("completion_tokens", int64_t{0});
            if (!chunk.contains("choices") || !chunk["choices"].is_array()) continue;
            for (const json& c : chunk["choices"]) {
                const bool text = c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty();
                const bool token = c.contains("logprobs") && c["logprobs"].is_object() &&
                                   c["logprobs"].contains("tokens") && !c["logprobs"]["tokens"].empty();
                if (text || token) out.token_chunks.push_back(now);
                if (c.contains("finish_reason") && c["finish_reason"].is_string()) finish = c["finish_reason"];
            }
        }
        return true;
    };
    out.sent = Clock::now();
    httplib::Result res = http.send(req);
    out.finished = Clock::now();
    if (!res) {
        out.error = "HTTP: " + httplib::to_string(res.error()) + " after " +
                    std::to_string(std::chrono::duration<double>(out.finished - out.sent).count()) + " s, " +
                    std::to_string(out.token_chunks.size()) + " tokens received";
    } else if (res->status != 200) {
        out.error = "status " + std::to_string(res->status) + ": " + raw.substr(0, 300);
    } else if (out.error.empty() && !done) {
        out.error = "the stream ended without data: [DONE]";
    } else if (out.error.empty() && finish != "length" && finish != "stop") {
        out.error = "finish_reason '" + finish + "'";
    }
    out.ok = out.error.empty();
    if (out.ok && out.n_output == 0) out.n_output = static_cast<int64_t>(out.token_chunks.size());
    return out;
}

std::unique_ptr<httplib::Client> make_client(const BenchServeArgs& a) {
    auto http = std::make_unique<httplib::Client>(a.url);
    const auto secs = static_cast<time_t>(a.timeout_s);
    http->set_read_timeout(secs, 0);
    http->set_write_timeout(secs, 0);
    http->set_connection_timeout(10, 0);
    http->set_keep_alive(true);
    http->set_tcp_nodelay(true);  // the request leaves at once (server.cpp says why)
    return http;
}

// The server's model id and context; a clear error when nothing answers.
Result<std::pair<std::string, int64_t>> server_model(const BenchServeArgs& a) {
    auto http = make_client(a);
    httplib::Headers headers;
    if (!a.api_key.empty()) headers.emplace("Authorization", "Bearer " + a.api_key);
    auto res = http->Get("/v1/models", headers);
    if (!res)
        return make_error("cannot reach ", a.url, " (", httplib::to_string(res.error()),
                          "): start a server first, e.g. `mvllm serve --port 8000`");
    if (res->status != 200) return make_error(a.url, "/v1/models answered ", res->status, ": ", res->body.substr(0, 300));
    const json j = json::parse(res->body, nullptr, false);
    if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
        !j["data"][0].contains("id"))
        return make_error(a.url, "/v1/models: no model in ", res->body.substr(0, 300));
    const std::string id = a.model.empty() ? j["data"][0]["id"].get<std::string>() : a.model;
    return std::make_pair(id, j["data"][0].value("max_model_len", int64_t{0}));
}

// mvllm's count of aborted requests from /metrics (-1 when the server has no such metric): a
// request the server aborted tells a server-side failure from a client-side one.
double server_aborted(const BenchServeArgs& a) {
    auto http = make_client(a);
    auto res = http->Get("/metrics");
    if (!res || res->status != 200) return -1;
    const std::string key = "mvllm:request_success_total{finished_reason=\"abort\"} ";
    const size_t at = res->body.find(key);
    return at == std::string::npos ? -1 : std::atof(res->body.c_str() + at + key.size());
}

std::vector<int32_t> token_pool(BenchServeArgs& a) {
    auto http = make_client(a);
    httplib::Headers headers;
    if (!a.api_key.empty()) headers.emplace("Authorization", "Bearer " + a.api_key);
    auto res = http->Post("/tokenize", headers, json{{"prompt", kPoolText}, {"add_special_tokens", false}}.dump(),
                          "application/json");
    std::set<int32_t> ids;
    if (res && res->status == 200) {
        const json j = json::parse(res->body, nullptr, false);
        if (!j.is_discarded() && j.contains("tokens") && j["tokens"].is_array())
            for (const json& t : j["tokens"])
                if (t.is_number_integer()) ids.insert(t.get<int32_t>());
    }
    if (ids.size() < 16) {
        std::fprintf(stderr, "note: the server has no usable /tokenize (no tokenizer?): prompt ids drawn from "
                             "1..255, tokens counted by their logprobs entries\n");
        a.token_logprobs = true;
        ids.clear();
        for (int32_t i = 1; i < 256; ++i) ids.insert(i);
    }
    return {ids.begin(), ids.end()};
}

json run_level(const BenchServeArgs& a, const std::string& model, const std::vector<int32_t>& pool,
               std::pair<int, int> in_len, std::pair<int, int> out_len, int concurrency, std::string* first_error) {
    const int n = a.num_requests > 0 ? a.num_requests : std::max(8, 4 * concurrency);
    std::mt19937 rng(static_cast<uint32_t>(a.seed) * 7919u + static_cast<uint32_t>(concurrency));
    auto uniform = [&rng](std::pair<int, int> r) { return r.first + static_cast<int>(rng() % (r.second - r.first + 1)); };
    std::vector<Planned> plan(n);
    int64_t n_input = 0;
    for (Planned& p : plan) {
        p.prompt.resize(uniform(in_len));
        for (int32_t& t : p.prompt) t = pool[rng() % pool.size()];
        p.max_tokens = uniform(out_len);
        n_input += static_cast<int64_t>(p.prompt.size());
    }
    double load[3] = {0, 0, 0};  // the machine's load when the level starts: shared machines are noisy
    if (getloadavg(load, 3) < 1) load[0] = -1;
    const double aborted_before = server_aborted(a);
    std::vector<Outcome> outcomes(n);
    std::atomic<int> next{0};
    const Clock::time_point t0 = Clock::now();
    std::vector<std::thread> clients;
    for (int c = 0; c < std::min(concurrency, n); ++c)
        clients.emplace_back([&] {
            auto http = make_client(a);
            for (int i; (i = next.fetch_add(1)) < n;) outcomes[i] = run_request(*http, a, model, plan[i]);
        });
    for (std::thread& t : clients) t.join();
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();

    const double aborted_after = server_aborted(a);
    std::vector<double> ttft, itl, e2e, tpot;
    int64_t n_output = 0, n_ok = 0;
    json errors = json::array();  // the first few failures, verbatim
    for (const Outcome& o : outcomes) {
        if (!o.ok) {
            if (first_error->empty()) *first_error = o.error;
            if (errors.size() < 8) errors.push_back(o.error);
            continue;
        }
        ++n_ok;
        n_output += o.n_output;
        e2e.push_back(std::chrono::duration<double>(o.finished - o.sent).count());
        if (o.token_chunks.empty()) continue;
        ttft.push_back(std::chrono::duration<double>(o.token_chunks.front() - o.sent).count());
        for (size_t k = 1; k < o.token_chunks.size(); ++k)
            itl.push_back(std::chrono::duration<double>(o.token_chunks[k] - o.token_chunks[k - 1]).count());
        if (o.n_output > 1)
            tpot.push_back(std::chrono::duration<double>(o.token_chunks.back() - o.token_chunks.front()).count() /
                           static_cast<double>(o.n_output - 1));
    }
    return {{"concurrency", concurrency}, {"requests", n}, {"completed", n_ok}, {"failed", n - n_ok},
            {"elapsed_s", elapsed}, {"input_tokens", n_input}, {"output_tokens", n_output},
            {"requests_per_s", n_ok / elapsed}, {"output_tok_s", n_output / elapsed},
            {"total_tok_s", (n_input + n_output) / elapsed}, {"ttft", summary_ms(ttft)}, {"itl", summary_ms(itl)},
            {"tpot", summary_ms(tpot)}, {"e2e", summary_ms(e2e)}, {"load_average_1m", load[0]},
            {"server_aborted", aborted_before >= 0 && aborted_after >= 0 ? aborted_after - aborted_before : -1},
            {"errors", errors}};
}

int cmd_bench_serve(BenchServeArgs a) {
    auto url = normalize_url(a.url);
    if (!url) return fail(url.status());
    a.url = *url;
    auto levels = parse_levels(a.concurrency);
    if (!levels) return fail(levels.status());
    auto in_len = parse_length(a.input_len, "--input-len");
    if (!in_len) return fail(in_len.status());
    auto out_len = parse_length(a.output_len, "--output-len");
    if (!out_len) return fail(out_len.status());
    auto server = server_model(a);
    if (!server) return fail(server.status());
    const auto& [model, max_model_len] = *server;
    if (max_model_len > 0 && in_len->second + out_len->second > max_model_len)
        return fail(make_error("--input-len + --output-len (", in_len->second + out_len->second,
                               ") exceed the server's max_model_len ", max_model_len));
    const std::vector<int32_t> pool = token_pool(a);
    std::fprintf(stderr, "server %s, model '%s' (context %lld); %zu distinct prompt ids\n", a.url.c_str(),
                 model.c_str(), (long long)max_model_len, pool.size());
    {  // one short request first: the server's first request may page its weights in
        BenchServeArgs warm = a;
        warm.num_requests = 1;
        std::string ignored;
        run_level(warm, model, pool, {4, 4}, {2, 2}, 1, &ignored);
    }
    json results = json::array();
    std::string first_error;
    std::printf("| clients | requests | failed | req/s | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | "
                "ITL p99 ms | TPOT mean ms | E2E p50 s |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int c : *levels) {
        json r = run_level(a, model, pool, *in_len, *out_len, c, &first_error);
        std::printf("| %d | %d | %d | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f |\n", c,
                    r["requests"].get<int>(), r["failed"].get<int>(), r["requests_per_s"].get<double>(),
                    r["output_tok_s"].get<double>(), r["ttft"]["p50_ms"].get<double>(),
                    r["ttft"]["p99_ms"].get<double>(), r["itl"]["p50_ms"].get<double>(),
                    r["itl"]["p99_ms"].get<double>(), r["tpot"]["mean_ms"].get<double>(),
                    r["e2e"]["p50_ms"].get<double>() / 1e3);
        std::fflush(stdout);
        results.push_back(std::move(r));
    }
    if (!first_error.empty()) std::fprintf(stderr, "first failure: %s\n", first_error.c_str());
    if (!a.json_out.empty()) {
        std::time_t now = std::time(nullptr);
        char date[32];
        std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
        const json j = {{"benchmark", "serve"}, {"commit", MVLLM_GIT_COMMIT}, {"date", date}, {"label", a.label},
                        {"url", a.url}, {"model", model}, {"max_model_len", max_model_len},
                        {"input_len", a.input_len}, {"output_len", a.output_len}, {"seed", a.seed},
                        {"temperature", a.temperature}, {"num_requests", a.num_requests},
                        {"token_logprobs", a.token_logprobs},
                        {"hardware_threads", std::thread::hardware_concurrency()}, {"levels", results}};
        std::ofstream out(a.json_out);
        if (!(out << j.dump(2) << "\n")) return fail(make_error("cannot write ", a.json_out));
    }
    return first_error.empty() ? 0 : 1;
}

}  // namespace

void register_bench_serve_command(CLI::App& app) {
    static BenchServeArgs a;
    CLI::App* s = bench_group(app)->add_subcommand(
        "serve", "HTTP load against a running server: TTFT and inter-token latency at each concurrency");
    s->add_option("--url", a.url, "the server (default http://127.0.0.1:8000)");
    s->add_option("--api-key", a.api_key, "sent as Authorization: Bearer <key>");
    s->add_option("--model", a.model, "model id to request (default: the server's first)");
    s->add_option("-c,--concurrency", a.concurrency, "concurrent streaming clients, one level or a list: 1,16,64");
    s->add_option("--num-requests", a.num_requests, "requests per level (0: 4 x concurrency, at least 8)")
        ->check(CLI::Range(0, 1 << 20));
    s->add_option("--input-len", a.input_len, "prompt tokens: N or MIN:MAX (uniform)");
    s->add_option("--output-len", a.output_len, "generated tokens (EOS ignored): N or MIN:MAX (uniform)");
    s->add_option("--seed", a.seed, "seed of the lengths and prompt ids");
    s->add_option("--temperature", a.temperature, "sampling temperature (default 0: greedy)")->check(CLI::Range(0.0, 2.0));
    s->add_option("--timeout", a.timeout_s, "seconds one request may take")->check(CLI::Range(1.0, 86400.0));
    s->add_option("--label", a.label, "free text stored in the JSON (device, model file, ...)");
    s->add_option("--json-out", a.json_out, "write every level's figures as JSON");
    s->callback([] { std::exit(cmd_bench_serve(a)); });
}

}  // namespace mvllm::cli
