// `mvllm serve`: an OpenAI-compatible HTTP server over one Engine. HTTP worker threads parse
// requests, submit them and stream the engine's events back; the engine thread (started by the
// caller) runs the model. A client that goes away has its requests aborted, so their KV blocks
// are freed at the engine's next step.
//
//   GET  /health  /metrics  /v1/models
//   POST /v1/completions  /v1/chat/completions  /tokenize  /detokenize
//
//   Server server(*engine, tokenizer, options);
//   MVLLM_TRY(server.bind());           // host:port (port 0: a free one, see port())
//   server.start();                     // listens on a background thread
//   ...
//   server.shutdown();                  // refuse new requests, let streams finish, stop
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace mvllm::server {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8000;                        // 0: any free port
    std::string api_key;                    // non-empty: "Authorization: Bearer <key>" on /v1, /tokenize, /detokenize
    std::string served_model_name = "mvllm";
    int64_t max_model_len = 0;              // context the engine was built with (prompt + output)
    size_t max_body_bytes = size_t(4) << 20;  // larger request bodies: 413
    size_t max_header_bytes = size_t(64) << 10;  // all header lines together; more: 431 (one line > 8 KiB: 400)
    int max_queue = 256;                    // engine requests submitted and not yet started; more: 429
    double request_timeout_s = 600;         // whole request (0: none)
    double idle_timeout_s = 120;            // without any event from the engine (0: none)
    double drain_timeout_s = 30;            // shutdown: how long in-flight requests may take
    int http_threads = 128;                 // concurrent connections (a stream holds one)
};

class Server {
public:
    // tokenizer may be null: then prompts must be token ids and chat is unavailable.
    Server(Engine& engine, const Tokenizer* tokenizer, ServerOptions options);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    Status bind();
    int port() const;
    void serve();     // blocks until shutdown()
    void start();     // serve() on a background thread
    // Draining: new requests get 503, in-flight ones run to their end (aborted after
    // drain_timeout_s), then the listener stops. Safe to call from any thread, once or more.
    void shutdown();
    int64_t n_in_flight() const;  // HTTP generation requests not yet answered

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace mvllm::server
