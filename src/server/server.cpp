#include "server/server.h"

#include <csignal>
#include <ctime>

#include "server/server_impl.h"
#include "tokenizer/chat_template.h"

namespace mvllm::server {
namespace {

bool needs_auth(const std::string& path) {
    return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
}

ApiError status_error(int status) {
    ApiError e;
    e.status = status;
    switch (status) {
        case 404: e.message = "not found"; e.code = "not_found"; break;
        case 405: e.message = "method not allowed"; break;
        case 413: e.message = "request body too large"; e.code = "request_too_large"; break;
        case 414: e.message = "request target too long"; break;
        default: e.message = "HTTP error " + std::to_string(status); break;
    }
    return e;
}

}  // namespace

void Server::Impl::send_json(httplib::Response& res, const json& body, int status) {
    res.status = status;
    res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

void Server::Impl::send_error(httplib::Response& res, const ApiError& error) {
    metrics->count_rejected(error.status);
    send_json(res, error_body(error), error.status);
}

std::string Server::Impl::token_text(int32_t id) const {
    if (tokenizer && id >= 0 && id < tokenizer->n_vocab()) return tokenizer->token_bytes(id);
    return "token_id:" + std::to_string(id);
}

Result<std::vector<int32_t>> Server::Impl::encode_chat(const json& messages) const {
    ChatTemplateOptions opt;
    opt.add_generation_prompt = true;
    opt.bos_token = tokenizer->bos_text;
    opt.eos_token = tokenizer->eos_text;
    const std::string& source = tokenizer->chat_template.empty() ? fallback_chat_template() : tokenizer->chat_template;
    MVLLM_ASSIGN_OR_RETURN(std::string text, apply_chat_template(source, messages, opt));
    // The template writes BOS itself when the model wants one; specials in it are real specials.
    return tokenizer->encode(text, /*add_bos=*/false, /*parse_special=*/true);
}

void Server::Impl::install_routes() {
    http.set_payload_max_length(options.max_body_bytes);
    // Streams are many small writes: without TCP_NODELAY, Nagle's algorithm holds each behind
    // the peer's delayed ACK (~40 ms on Linux), which showed as a fixed ~80 ms time to first token.
    http.set_tcp_nodelay(true);
    const int n_threads = std::max(2, options.http_threads);
    http.new_task_queue = [n_threads] { return new httplib::ThreadPool(static_cast<size_t>(n_threads)); };

    // Before the body is read: header size, draining, authentication.
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        size_t header_bytes = 0;
        for (const auto& [name, value] : req.headers) header_bytes += name.size() + value.size() + 4;  // ": ", CRLF
        if (header_bytes > options.max_header_bytes) {
            ApiError e;
            e.status = 431;
            e.message = "request header fields too large (" + std::to_string(header_bytes) + " bytes; the limit is " +
                        std::to_string(options.max_header_bytes) + ")";
            e.code = "headers_too_large";
            send_error(res, e);
            return httplib::Server::HandlerResponse::Handled;
        }
        if (draining && req.path != "/metrics") {
            ApiError e;
            e.status = 503;
            e.type = "server_error";
            e.message = "the server is shutting down";
            send_error(res, e);
            return httplib::Server::HandlerResponse::Handled;
        }
        if (!options.api_key.empty() && needs_auth(req.path) &&
            !bearer_matches(req.get_header_value("Authorization"), options.api_key)) {
            ApiError e;
            e.status = 401;
            e.message = "invalid or missing API key (Authorization: Bearer <key>)";
            e.code = "invalid_api_key";
            send_error(res, e);
            return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });
    http.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
        if (res.body.empty()) send_error(res, status_error(res.status));
    });
    http.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        ApiError e;
        e.status = 500;
        e.type = "server_error";
        e.message = "internal error";
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& ex) {
            e.message = std::string("internal error: ") + ex.what();
        } catch (...) {
        }
        send_error(res, e);
    });

    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        send_json(res, json{{"status", "ok"}});
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        // The engine's running count is a snapshot of its last step; the server knows which of its
        // requests have finished since.
        EngineCounters c = engine.counters();
        c.n_running = std::max<int64_t>(0, std::min<int64_t>(c.n_running, *n_live - c.n_waiting));
        res.set_content(metrics->render(c), "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
        json model = {{"id", options.served_model_name}, {"object", "model"}, {"created", created},
                      {"owned_by", "mvllm"}, {"max_model_len", options.max_model_len}};
        send_json(res, json{{"object", "list"}, {"data", json::array({model})}});
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
        handle_completions(req, res);
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
        handle_chat(req, res);
    });
    http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
        TokenizeRequest t;
        if (auto e = parse_tokenize_request(req.body, &t)) return send_error(res, *e);
        if (!tokenizer) return send_error(res, invalid_field("", "this model has no tokenizer"));
        std::vector<int32_t> ids;
        if (t.is_chat) {
            auto chat = encode_chat(t.messages);
            if (!chat) return send_error(res, invalid_field("messages", chat.status().message()));
            ids = std::move(*chat);
        } else {
            ids = tokenizer->encode(t.prompt, t.add_special_tokens && tokenizer->add_bos_default, false);
        }
        send_json(res, json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", options.max_model_len}});
    });
    http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
        std::vector<int32_t> ids;
        if (auto e = parse_detokenize_request(req.body, &ids)) return send_error(res, *e);
        if (!tokenizer) return send_error(res, invalid_field("", "this model has no tokenizer"));
        for (int32_t id : ids)
            if (id >= tokenizer->n_vocab())
                return send_error(res, invalid_field("tokens", "token id " + std::to_string(id) +
                                                                   " is outside the vocabulary of " +
                                                                   std::to_string(tokenizer->n_vocab())));
        send_json(res, json{{"prompt", tokenizer->decode(ids)}});
    });
}

Server::Server(Engine& engine, const Tokenizer* tokenizer, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, std::move(options))) {
    impl_->created = static_cast<int64_t>(std::time(nullptr));
    if (impl_->options.max_model_len <= 0) impl_->options.max_model_len = 4096;
    // A client that closes its socket must not kill the process on the next write.
    std::signal(SIGPIPE, SIG_IGN);
    impl_->install_routes();
}

Server::~Server() {
    shutdown();
}

Status Server::bind() {
    Impl& s = *impl_;
    if (s.options.port == 0) {
        const int port = s.http.bind_to_any_port(s.options.host);
        if (port <= 0) return make_error("cannot bind ", s.options.host, " on any port");
        s.options.port = port;
    } else if (!s.http.bind_to_port(s.options.host, s.options.port)) {
        return make_error("cannot bind ", s.options.host, ":", s.options.port, " (in use, or not an address here)");
    }
    // Room for a burst of new connections (the kernel caps it at net.core.somaxconn).
    if (!s.http.raise_backlog(std::max(SOMAXCONN, s.options.http_threads)))
        return make_error("cannot listen on ", s.options.host, ":", s.options.port);
    return Status();
}

int Server::port() const { return impl_->options.port; }

int64_t Server::n_in_flight() const { return impl_->n_in_flight.load(); }

void Server::serve() { impl_->http.listen_after_bind(); }

void Server::start() {
    impl_->listener = std::thread([this] { serve(); });
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
    while (!impl_->http.is_running() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void Server::shutdown() {
    Impl& s = *impl_;
    s.draining = true;
    const Clock::time_point deadline =
        Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(s.options.drain_timeout_s * 1000));
    while (s.n_in_flight > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (s.n_in_flight > 0) {  // too slow: abort what is left; streams then end with finish_reason "abort"
        std::vector<std::shared_ptr<Generation>> left;
        {
            std::lock_guard<std::mutex> lock(s.active_mutex);
            for (auto& [ptr, weak] : s.active)
                if (auto gen = weak.lock()) left.push_back(gen);
        }
        for (auto& gen : left) s.abort_all(*gen);
        const Clock::time_point grace = Clock::now() + std::chrono::seconds(2);
        while (s.n_in_flight > 0 && Clock::now() < grace) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    s.http.stop();
    if (s.listener.joinable()) s.listener.join();
}

}  // namespace mvllm::server
