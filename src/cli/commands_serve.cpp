// mvllm serve: the OpenAI-compatible HTTP server (server/server.h) over one engine whose thread
// runs the model. SIGINT/SIGTERM drain: new requests get 503, streams in flight finish, then exit.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include "cli/options.h"
#include "engine/engine.h"
#include "kv/block_manager.h"
#include "server/server.h"

namespace mvllm::cli {
namespace {

struct ServeArgs {
    RunOptions run;
    server::ServerOptions server;
    KvPoolArgs kv_pool;
    int max_num_seqs = 256;
    int max_batched_tokens = 2048;
    int max_prefill_chunk = 512;
    int64_t max_model_len = 0;
    std::string policy = "fcfs";
    bool no_prefix_cache = false;
};

std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal = sig; }

int cmd_serve(ServeArgs& a) {
    EngineOptions eo;
    if (Status st = apply_kv_pool_options(a.kv_pool, &eo); !st) return fail(st);
    eo.block_size = a.run.kv_block_size;
    eo.kv_dtype = kv_dtype_name(a.run);
    eo.max_batched_tokens = a.max_batched_tokens;
    eo.max_seqs = a.max_num_seqs;
    eo.max_prefill_chunk = a.max_prefill_chunk;
    eo.max_model_len = a.max_model_len;
    eo.enable_prefix_cache = !a.no_prefix_cache;
    if (!parse_scheduling_policy(a.policy, &eo.policy)) return fail(make_error("unknown --scheduling-policy ", a.policy));
    auto rt = make_runtime(a.run, 1);  // the engine sizes its own KV pool
    if (!rt) return fail(rt.status());
    eo.speculative = rt->speculative;
    auto engine = Engine::create(*rt->decoder, eo, rt->model->tokenizer.get());
    if (!engine) return fail(engine.status());
    const ModelConfig& mc = rt->model->config;
    a.server.max_model_len = a.max_model_len > 0 ? a.max_model_len : (mc.n_ctx_train > 0 ? mc.n_ctx_train : 4096);
    std::fprintf(stderr, "model: %s\nbackend: %s\n%s\n", mc.summary().c_str(), rt->backend->name().c_str(),
                 (*engine)->startup_report().c_str());
    if (!rt->model->tokenizer) std::fprintf(stderr, "note: the model has no tokenizer: token-id prompts only, no chat\n");

    server::Server http(**engine, rt->model->tokenizer.get(), a.server);
    if (Status s = http.bind(); !s.is_ok()) return fail(s);
    (*engine)->start();
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    http.start();
    std::fprintf(stderr, "serving '%s' on http://%s:%d (OpenAI API under /v1)\n", a.server.served_model_name.c_str(),
                 a.server.host.c_str(), http.port());
    while (g_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::fprintf(stderr, "signal %d: draining %lld request(s)\n", g_signal.load(), (long long)http.n_in_flight());
    http.shutdown();
    (*engine)->stop();
    return 0;
}

}  // namespace

void register_serve_commands(CLI::App& app) {
    static ServeArgs a;
    CLI::App* s = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions)");
    add_run_options(s, &a.run);
    add_draft_options(s, &a.run);
    s->add_option("--host", a.server.host, "address to bind (default 127.0.0.1: this machine only)");
    s->add_option("--port", a.server.port, "TCP port (0: any free one)")->check(CLI::Range(0, 65535));
    s->add_option("--served-model-name", a.server.served_model_name, "the model id clients send and see");
    s->add_option("--api-key", a.server.api_key, "require Authorization: Bearer <key>");
    s->add_option("--max-body-bytes", a.server.max_body_bytes, "largest request body (413 beyond)")
        ->check(CLI::Range(size_t(1024), size_t(1) << 32));
    s->add_option("--max-header-bytes", a.server.max_header_bytes, "all request headers together (431 beyond)")
        ->check(CLI::Range(size_t(1024), size_t(1) << 24));
    s->add_option("--max-queue", a.server.max_queue, "waiting requests before 429 (0: no limit)")
        ->check(CLI::NonNegativeNumber);
    s->add_option("--request-timeout", a.server.request_timeout_s, "seconds a request may take (0: none)")
        ->check(CLI::NonNegativeNumber);
    s->add_option("--idle-timeout", a.server.idle_timeout_s, "seconds without a token before abort (0: none)")
        ->check(CLI::NonNegativeNumber);
    s->add_option("--drain-timeout", a.server.drain_timeout_s, "seconds in-flight requests get on SIGINT/SIGTERM")
        ->check(CLI::NonNegativeNumber);
    s->add_option("--http-threads", a.server.http_threads, "concurrent connections (a stream holds one)")
        ->check(CLI::Range(2, 4096));
    add_kv_pool_options(s, &a.kv_pool);
    s->add_option("--max-num-seqs,--max-seqs", a.max_num_seqs, "running sequences")->check(CLI::Range(1, 1 << 20));
    s->add_option("--max-batched-tokens", a.max_batched_tokens, "tokens per engine step")->check(CLI::Range(1, 1 << 24));
    s->add_option("--max-prefill-chunk", a.max_prefill_chunk, "prefill tokens of one request per step (0: no cap)")
        ->check(CLI::Range(0, 1 << 24));
    s->add_option("--max-model-len", a.max_model_len, "context per request (0: the model's trained context)");
    s->add_option("--scheduling-policy", a.policy, "fcfs | spf | rr")->check(CLI::IsMember({"fcfs", "spf", "rr"}));
    s->add_flag("--no-prefix-cache", a.no_prefix_cache, "disable prefix caching");
    s->callback([] { std::exit(cmd_serve(a)); });
}

}  // namespace mvllm::cli
