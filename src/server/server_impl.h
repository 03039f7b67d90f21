// Internals of Server shared by server.cpp (routing, auth, small endpoints) and generation.cpp
// (completions and chat: submitting to the engine, collecting or streaming the events).
#pragma once

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "server/connection.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/server.h"

namespace mvllm::server {

using Clock = std::chrono::steady_clock;

// Events of one HTTP request's engine requests, pushed by the engine thread and popped by the
// HTTP thread. choice: the index of the engine request within the HTTP request.
struct ChoiceEvent {
    int32_t choice = 0;
    EngineEvent event;
};

class EventChannel {
public:
    void push(ChoiceEvent event);
    // False when nothing arrived before the deadline.
    bool pop(ChoiceEvent* event, Clock::time_point deadline);

private:
    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<ChoiceEvent> events_;
};

// cpp-httplib's server with access to its listening socket: Debian's 0.11 library listens with a
// backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled in), so a burst of connections overflows the
// accept queue and some clients get a reset. listen(2) again on the bound socket raises it.
class HttpServer : public httplib::Server {
public:
    bool raise_backlog(int backlog) { return ::listen(svr_sock_, backlog) == 0; }
};

enum class Endpoint { Completions, Chat };

// One generation HTTP request: its engine requests (prompt x n) and what they produced so far.
struct Generation {
    Endpoint endpoint = Endpoint::Completions;
    GenerationParams params;
    ResponseMeta meta;
    std::shared_ptr<EventChannel> channel = std::make_shared<EventChannel>();
    ClientConnection client;             // the request's socket: polled for a vanished client
    std::vector<RequestId> ids;          // [n_choices] engine request ids
    std::vector<int64_t> n_prompt;       // [n_choices]
    std::vector<std::string> echo_text;  // [prompts] the prompt as sent, or decoded from ids (params.echo)
    std::vector<int32_t> echo_first;     // [prompts] its first token (params.echo)
    std::vector<ChoiceOutput> outputs;   // [n_choices] accumulated (non-streaming) text / logprobs
    std::vector<size_t> text_bytes;      // [n_choices] text streamed so far (completions text_offset)
    std::vector<int64_t> n_output;       // [n_choices]
    std::vector<bool> finished;          // [n_choices]
    int32_t n_finished = 0;
    Clock::time_point t_start, t_last_event;
    bool started_stream = false;         // role chunks sent (chat)
    bool done = false;                   // [DONE] written or the request answered
};

struct Server::Impl {
    Engine& engine;
    const Tokenizer* tokenizer;
    ServerOptions options;
    HttpServer http;
    // Shared with the engine callbacks, which may outlive the server (an aborted request's last event).
    std::shared_ptr<ServerMetrics> metrics = std::make_shared<ServerMetrics>();
    std::shared_ptr<std::atomic<int64_t>> n_waiting = std::make_shared<std::atomic<int64_t>>(0);  // no event yet
    std::shared_ptr<std::atomic<int64_t>> n_live = std::make_shared<std::atomic<int64_t>>(0);  // submitted, not finished
    std::thread listener;
    std::atomic<bool> draining{false};
    std::atomic<int64_t> n_in_flight{0}; // generation HTTP requests being answered
    std::mutex active_mutex;
    std::map<Generation*, std::weak_ptr<Generation>> active;
    int64_t created = 0;

    Impl(Engine& e, const Tokenizer* t, ServerOptions o) : engine(e), tokenizer(t), options(std::move(o)) {}

    void install_routes();
    void send_error(httplib::Response& res, const ApiError& error);
    void send_json(httplib::Response& res, const json& body, int status = 200);
    std::string token_text(int32_t id) const;
    // The prompt ids of a conversation rendered with the model's chat template (ChatML when none).
    Result<std::vector<int32_t>> encode_chat(const json& messages) const;
    TokenText token_text_fn() const {
        return [this](int32_t id) { return token_text(id); };
    }

    // generation.cpp
    void handle_completions(const httplib::Request& req, httplib::Response& res);
    void handle_chat(const httplib::Request& req, httplib::Response& res);
    void run_generation(std::shared_ptr<Generation> gen, std::vector<std::vector<int32_t>> prompts,
                        const httplib::Request& req, httplib::Response& res);
    void abort_all(Generation& gen);
    void register_active(const std::shared_ptr<Generation>& gen);
    void unregister_active(Generation* gen);
};

}  // namespace mvllm::server
