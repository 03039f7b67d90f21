// Completions and chat: validate, submit prompt x n engine requests, then either collect their
// events into one response or stream them as server-sent events from httplib's chunked content
// provider (which runs on the HTTP thread). Both ask the request's socket after every event (and
// at least every kConnectionCheck while none comes) whether the client is still there, and abort
// the engine requests of one that went away: its KV blocks are freed at the engine's next step.
#include <ctime>
#include <limits>

#include "server/server_impl.h"

namespace mvllm::server {
namespace {

constexpr auto kHeartbeat = std::chrono::seconds(1);  // SSE comment while idle: finds dead clients
constexpr auto kConnectionCheck = std::chrono::milliseconds(50);  // non-streaming: socket poll while idle

std::chrono::milliseconds seconds_ms(double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); }

}  // namespace

void EventChannel::push(ChoiceEvent event) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        events_.push_back(std::move(event));
    }
    ready_.notify_one();
}

bool EventChannel::pop(ChoiceEvent* event, Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!ready_.wait_until(lock, deadline, [this] { return !events_.empty(); })) return false;
    *event = std::move(events_.front());
    events_.pop_front();
    return true;
}

void Server::Impl::abort_all(Generation& gen) {
    for (size_t i = 0; i < gen.ids.size(); ++i)
        if (!gen.finished[i]) engine.abort(gen.ids[i]);
}

void Server::Impl::register_active(const std::shared_ptr<Generation>& gen) {
    std::lock_guard<std::mutex> lock(active_mutex);
    active[gen.get()] = gen;
}

void Server::Impl::unregister_active(Generation* gen) {
    std::lock_guard<std::mutex> lock(active_mutex);
    active.erase(gen);
}

void Server::Impl::handle_completions(const httplib::Request& req, httplib::Response& res) {
    CompletionRequest r;
    if (auto e = parse_completion_request(req.body, &r)) return send_error(res, *e);
    std::vector<std::vector<int32_t>> prompts;
    auto gen = std::make_shared<Generation>();
    for (PromptInput& p : r.prompts) {
        if (r.params.echo) gen->echo_text.push_back(p.is_text ? p.text : tokenizer ? tokenizer->decode(p.ids) : "");
        if (!p.is_text) {
            prompts.push_back(std::move(p.ids));
            continue;
        }
        if (!tokenizer)
            return send_error(res, invalid_field("prompt", "this model has no tokenizer: send the prompt as token ids"));
        prompts.push_back(tokenizer->encode(p.text, tokenizer->add_bos_default, false));
        if (prompts.back().empty()) return send_error(res, invalid_field("prompt", "the prompt encodes to no tokens"));
    }
    if (r.params.echo)
        for (const auto& ids : prompts) gen->echo_first.push_back(ids.front());
    gen->endpoint = Endpoint::Completions;
    gen->params = std::move(r.params);
    gen->meta.id = random_id("cmpl-");
    run_generation(std::move(gen), std::move(prompts), req, res);
}

void Server::Impl::handle_chat(const httplib::Request& req, httplib::Response& res) {
    ChatRequest r;
    if (auto e = parse_chat_request(req.body, &r)) return send_error(res, *e);
    if (!tokenizer) return send_error(res, invalid_field("messages", "this model has no tokenizer: chat needs one"));
    auto ids = encode_chat(r.messages);
    if (!ids) return send_error(res, invalid_field("messages", ids.status().message()));
    auto gen = std::make_shared<Generation>();
    gen->endpoint = Endpoint::Chat;
    gen->params = std::move(r.params);
    gen->meta.id = random_id("chatcmpl-");
    run_generation(std::move(gen), {std::move(*ids)}, req, res);
}

namespace {

// Folds one event into gen; returns the part of it a stream sends (text, logprobs, finish).
ChoiceOutput apply_event(Generation& gen, const ChoiceEvent& ev) {
    const int32_t c = ev.choice;
    const EngineEvent& e = ev.event;
    ChoiceOutput delta;
    delta.index = c;
    delta.has_logprobs = gen.params.sampling.logprobs >= 0;
    ChoiceOutput& total = gen.outputs[c];
    if (e.kind == EngineEvent::Kind::Token) {
        delta.text = e.text;
        delta.logprobs = e.logprobs;
        if (gen.params.echo && gen.n_output[c] == 0) {  // the prompt first: its text, and its logprobs
            const size_t prompt = static_cast<size_t>(c / gen.params.n);
            delta.text = gen.echo_text[prompt] + delta.text;
            if (delta.has_logprobs) {
                std::vector<TokenLogprob> prompt_lp{{gen.echo_first[prompt], std::numeric_limits<float>::quiet_NaN(), {}}};
                prompt_lp.insert(prompt_lp.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
                delta.logprobs.insert(delta.logprobs.begin(), prompt_lp.begin(), prompt_lp.end());
            }
        }
        total.text += delta.text;
        total.logprobs.insert(total.logprobs.end(), delta.logprobs.begin(), delta.logprobs.end());
        gen.n_output[c] += static_cast<int64_t>(e.token_ids.size());
    } else if (!gen.finished[c]) {
        gen.finished[c] = true;
        ++gen.n_finished;
        delta.finish_reason = total.finish_reason = openai_finish_reason(e.reason);
        gen.n_output[c] = std::max<int64_t>(gen.n_output[c], e.stats.n_output_tokens);
    }
    return delta;
}

Usage usage_of(const Generation& gen, int64_t n_prompt_tokens) {
    Usage u;
    u.prompt_tokens = n_prompt_tokens;
    for (int64_t n : gen.n_output) u.completion_tokens += n;
    return u;
}

ApiError timeout_error(bool idle) {
    ApiError e;
    e.status = 504;
    e.type = "timeout";
    e.message = idle ? "the request produced nothing within the idle timeout" : "the request ran past its timeout";
    return e;
}

}  // namespace

void Server::Impl::run_generation(std::shared_ptr<Generation> gen, std::vector<std::vector<int32_t>> prompts,
                                  const httplib::Request& req, httplib::Response& res) {
    const GenerationParams& p = gen->params;
    const char* prompt_field = gen->endpoint == Endpoint::Chat ? "messages" : "prompt";
    if (!p.model.empty() && p.model != options.served_model_name) {
        ApiError e = invalid_field("model", "the model '" + p.model + "' does not exist (this server serves '" +
                                                options.served_model_name + "')");
        e.status = 404;
        e.code = "model_not_found";
        return send_error(res, e);
    }
    const int64_t limit = options.max_model_len;
    int64_t n_prompt_tokens = 0;
    for (const auto& ids : prompts) {
        const int64_t n = static_cast<int64_t>(ids.size());
        n_prompt_tokens += n;
        if (n >= limit)
            return send_error(res, invalid_field(prompt_field, "this model's maximum context length is " +
                                                                   std::to_string(limit) + " tokens, but the prompt has " +
                                                                   std::to_string(n) + " tokens (no room to generate)"));
        if (p.sampling.max_tokens > 0 && n + p.sampling.max_tokens > limit)
            return send_error(res, invalid_field("max_tokens", "this model's maximum context length is " +
                                                                   std::to_string(limit) + " tokens, but " +
                                                                   std::to_string(n) + " prompt tokens + max_tokens " +
                                                                   std::to_string(p.sampling.max_tokens) + " = " +
                                                                   std::to_string(n + p.sampling.max_tokens)));
    }
    const int64_t n_choices = static_cast<int64_t>(prompts.size()) * p.n;
    const int64_t before = n_waiting->fetch_add(n_choices);
    if (options.max_queue > 0 && before >= options.max_queue) {
        *n_waiting -= n_choices;
        ApiError e;
        e.status = 429;
        e.type = "rate_limit_error";
        e.code = "queue_full";
        e.message = "the server's queue is full (" + std::to_string(before) + " requests waiting); retry later";
        return send_error(res, e);
    }

    gen->client = ClientConnection::of(req);
    gen->meta.created = static_cast<int64_t>(std::time(nullptr));
    gen->meta.model = options.served_model_name;
    gen->t_start = gen->t_last_event = Clock::now();
    gen->outputs.resize(n_choices);
    gen->text_bytes.assign(n_choices, 0);
    gen->n_output.assign(n_choices, 0);
    gen->finished.assign(n_choices, false);
    for (int32_t c = 0; c < n_choices; ++c) {
        gen->outputs[c].index = c;
        gen->outputs[c].has_logprobs = p.sampling.logprobs >= 0;
    }
    int32_t choice = 0;
    for (const auto& ids : prompts) {
        for (int32_t j = 0; j < p.n; ++j, ++choice) {
            Request r;
            r.prompt_ids = ids;
            r.sampling = p.sampling;
            if (j > 0 && r.sampling.seed >= 0) r.sampling.seed = (r.sampling.seed + j) & INT64_MAX;
            // The callback runs on the engine thread and may run after this server is gone.
            struct Timing {
                Clock::time_point arrival = Clock::now(), last;
                bool any_event = false, any_token = false;
            };
            auto timing = std::make_shared<Timing>();
            auto cb = [channel = gen->channel, metrics = metrics, waiting = n_waiting, live = n_live, timing,
                       c = choice](const EngineEvent& e) {
                const Clock::time_point now = Clock::now();
                if (!timing->any_event) {
                    timing->any_event = true;
                    --*waiting;
                }
                if (e.kind == EngineEvent::Kind::Token) {
                    if (!timing->any_token) metrics->observe_ttft(std::chrono::duration<double>(now - timing->arrival).count());
                    else metrics->observe_inter_token(std::chrono::duration<double>(now - timing->last).count());
                    timing->any_token = true;
                    timing->last = now;
                } else {
                    --*live;
                    metrics->observe_finish(std::chrono::duration<double>(now - timing->arrival).count(),
                                            e.stats.n_prompt_tokens, e.stats.n_output_tokens, e.reason);
                    metrics->observe_speculation(e.stats);
                }
                channel->push({c, e});
            };
            auto id = engine.submit(std::move(r), std::move(cb));
            if (!id) {
                *n_waiting -= n_choices - choice;
                gen->finished.assign(n_choices, false);
                abort_all(*gen);
                // The engine refuses a prompt (or a logit_bias token) the model cannot take.
                const std::string& why = id.status().message();
                return send_error(res, invalid_field(why.rfind("logit_bias", 0) == 0 ? "logit_bias" : prompt_field, why));
            }
            gen->ids.push_back(*id);
            ++*n_live;
        }
    }

    ++n_in_flight;
    register_active(gen);
    const Clock::time_point total_deadline = options.request_timeout_s > 0
                                                 ? gen->t_start + seconds_ms(options.request_timeout_s)
                                                 : Clock::time_point::max();
    auto next_deadline = [this, total_deadline](const Generation& g, Clock::time_point cap) {
        Clock::time_point d = std::min(cap, total_deadline);
        if (options.idle_timeout_s > 0) d = std::min(d, g.t_last_event + seconds_ms(options.idle_timeout_s));
        return d;
    };

    if (!p.stream) {
        ChoiceEvent ev;
        std::string error;
        bool client_gone = false;
        while (gen->n_finished < n_choices) {
            if (gen->client.gone()) {  // nobody to answer: free the KV blocks now
                abort_all(*gen);
                client_gone = true;
                break;
            }
            const Clock::time_point deadline = next_deadline(*gen, Clock::time_point::max());
            if (!gen->channel->pop(&ev, std::min(deadline, Clock::now() + kConnectionCheck))) {
                if (Clock::now() < deadline) continue;
                abort_all(*gen);
                send_error(res, timeout_error(Clock::now() < total_deadline));
                break;
            }
            gen->t_last_event = Clock::now();
            if (ev.event.kind == EngineEvent::Kind::Finish && ev.event.reason == FinishReason::Error)
                error = ev.event.error;
            apply_event(*gen, ev);
        }
        if (client_gone) {  // nginx's 499 "client closed request"; nobody reads it
            ApiError e;
            e.status = 499;
            e.type = "client_closed_request";
            e.message = "the client closed the connection; the request was aborted";
            send_json(res, error_body(e), e.status);
        } else if (gen->n_finished == n_choices && !error.empty()) {
            ApiError e;
            e.status = 500;
            e.type = "server_error";
            e.message = "the engine failed: " + error;
            send_error(res, e);
        } else if (gen->n_finished == n_choices) {
            const Usage usage = usage_of(*gen, n_prompt_tokens);
            send_json(res, gen->endpoint == Endpoint::Chat ? chat_response(gen->meta, gen->outputs, usage, token_text_fn())
                                                           : completion_response(gen->meta, gen->outputs, usage,
                                                                                 token_text_fn()));
        }
        unregister_active(gen.get());
        --n_in_flight;
        return;
    }

    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto provider = [this, gen, n_choices, n_prompt_tokens, next_deadline, total_deadline](size_t,
                                                                                          httplib::DataSink& sink) {
        auto write = [&sink](const std::string& s) { return sink.is_writable() && sink.write(s.data(), s.size()); };
        if (gen->client.gone()) return false;  // a closed client: the releaser aborts
        const bool chat = gen->endpoint == Endpoint::Chat;
        const TokenText text_of = token_text_fn();
        if (chat && !gen->started_stream) {
            gen->started_stream = true;
            for (int32_t c = 0; c < n_choices; ++c) {
                ChoiceOutput role;
                role.index = c;
                if (!write(sse_event(chat_chunk(gen->meta, role, /*first=*/true, text_of)))) return false;
            }
        }
        if (gen->n_finished == n_choices) {
            if (gen->params.include_usage &&
                !write(sse_event(usage_chunk(gen->meta, chat ? "chat.completion.chunk" : "text_completion",
                                             usage_of(*gen, n_prompt_tokens)))))
                return false;
            if (!write(sse_done())) return false;
            gen->done = true;
            sink.done();
            return true;
        }
        ChoiceEvent ev;
        if (!gen->channel->pop(&ev, next_deadline(*gen, Clock::now() + kHeartbeat))) {
            const Clock::time_point now = Clock::now();
            const bool idle = options.idle_timeout_s > 0 && now >= gen->t_last_event + seconds_ms(options.idle_timeout_s);
            if (now >= total_deadline || idle) {
                abort_all(*gen);
                write(sse_event(error_body(timeout_error(idle))));
                write(sse_done());
                gen->done = true;
                sink.done();
                return true;
            }
            return write(": keep-alive\n\n");  // fails once the client is gone
        }
        gen->t_last_event = Clock::now();
        const bool failed = ev.event.kind == EngineEvent::Kind::Finish && ev.event.reason == FinishReason::Error;
        const std::string engine_error = ev.event.error;
        const int32_t c = ev.choice;
        const size_t text_start = gen->text_bytes[c];
        ChoiceOutput delta = apply_event(*gen, ev);
        gen->text_bytes[c] += delta.text.size();
        if (failed) {
            ApiError e;
            e.status = 500;
            e.type = "server_error";
            e.message = "the engine failed: " + engine_error;
            return write(sse_event(error_body(e)));
        }
        // A token with no text yet (an incomplete UTF-8 character, or a model without a tokenizer)
        // still writes an SSE comment: the write is what notices a client that has gone away.
        if (!delta.finish_reason && delta.text.empty() && delta.logprobs.empty()) return write(":\n\n");
        return write(sse_event(chat ? chat_chunk(gen->meta, delta, false, text_of)
                                    : completion_chunk(gen->meta, delta, text_of, text_start)));
    };
    res.set_chunked_content_provider("text/event-stream", provider, [this, gen](bool success) {
        if (!success || !gen->done) abort_all(*gen);  // the client went away: free its KV blocks
        unregister_active(gen.get());
        --n_in_flight;
    });
}

}  // namespace mvllm::server
