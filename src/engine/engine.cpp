// The engine: request intake (any thread), the step loop (the engine thread), and event delivery.
#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/thread_pool.h"
#include "engine/kv_pool_sizing.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/speculative.h"
#include "engine/step_picks.h"
#include "engine/text_stream.h"
#include "model/decoder.h"
#include "tokenizer/tokenizer.h"

namespace mvllm {

const char* finish_reason_name(FinishReason reason) {
    switch (reason) {
        case FinishReason::Stop: return "stop";
        case FinishReason::Length: return "length";
        case FinishReason::Abort: return "abort";
        case FinishReason::Error: return "error";
    }
    return "?";
}

bool parse_scheduling_policy(const std::string& name, SchedulingPolicy* out) {
    if (name == "fcfs") *out = SchedulingPolicy::Fcfs;
    else if (name == "spf") *out = SchedulingPolicy::ShortestPrefillFirst;
    else if (name == "rr") *out = SchedulingPolicy::RoundRobin;
    else return false;
    return true;
}

namespace {
double seconds(EngineClock::duration d) { return std::chrono::duration<double>(d).count(); }
uint64_t mix_seed(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
}  // namespace

struct Engine::Impl {
    Decoder& decoder;
    const Tokenizer* tokenizer;
    TextStreamFactory text_streams;
    EngineOptions options;
    KvPoolPlan plan;
    std::string budget_source;  // how the pool's budget was derived (start-up report)
    int64_t max_model_len = 0;
    std::vector<int32_t> eos_ids;
    std::unique_ptr<KvCache> cache;
    std::unique_ptr<BlockManager> blocks;
    std::unique_ptr<Scheduler> scheduler;
    std::unique_ptr<Speculator> speculator;                          // null without a draft model
    std::unordered_map<RequestId, std::unique_ptr<Sequence>> seqs;  // engine thread only
    std::vector<float> logits;                                       // [n_sampled][n_vocab] f32
    std::vector<int32_t> argmax;  // [n_sampled]: the step's tokens when the backend picked them
    std::vector<float> argmax_logprob;  // [n_sampled]: their log-softmax, when a request asked for it
    std::vector<float> target_logprob;  // [logit rows]: prompt rows' scores, when the backend took them
    const float* copied = nullptr;      // [picks.copies][n_vocab]: the rows scored on the host (backend's)
    const RowScore* row_scores = nullptr;  // [picks.scores]: the rows the backend scored (backend's)
    TokenPicks picks;  // the backend's penalties and draws of a greedy_step (draws empty: all argmax)
    std::unique_ptr<ThreadPool> row_pool;  // the host's per-row work (for_rows), made on first use
    bool greedy_step = false;      // the backend picked the tokens (argmax or draw on the device)
    bool device_logprobs = false;  // ... and gave greedy logprobs (build_picks)
    // Decode padding (EngineOptions::decode_padding): the KV block the padding rows write, one
    // past the pool's blocks (-1: no padding), and the batch sizes a decode step is padded to.
    int32_t pad_block = -1;
    std::vector<int64_t> pad_sizes;

    // Intake, shared with submitting threads.
    std::mutex mu;
    std::condition_variable wake;
    std::vector<std::unique_ptr<Sequence>> inbox;
    std::vector<RequestId> aborts;
    std::unordered_set<RequestId> live;  // submitted and not finished
    bool stopping = false;
    std::thread thread;
    std::atomic<RequestId> next_id{1};

    std::mutex events_mu;
    std::condition_variable events_cv;
    std::deque<EngineEvent> events;  // for requests without a callback

    mutable std::mutex counters_mu;
    EngineCounters counters;

    Impl(Decoder& d, const Tokenizer* t, TextStreamFactory f, const EngineOptions& o)
        : decoder(d), tokenizer(t), text_streams(std::move(f)), options(o) {}

    Result<RequestId> submit(Request request, EventCallback on_event);
    bool step(Status* status);
    void loop();
    void drain_inbox();
    Status run_models(const SchedulerOutput& plan);
    Batch build_batch(const SchedulerOutput& plan) const;
    // fn(begin, end) over [0, n): on the row pool from kPoolRows rows on, else on this thread.
    void for_rows(int64_t n, const RowRange& fn);
    void sample(SchedulerOutput* plan);
    void postprocess(const SchedulerOutput& plan);
    bool check_stop(Sequence* seq, int32_t token, int64_t n_output, std::string* text, FinishReason* reason);
    void emit(Sequence* seq, EngineEvent event);
    void finish(Sequence* seq, FinishReason reason, const std::string& error = "");
    void note_scheduled(const SchedulerOutput& plan);
    // Returns the tokens the step's decodes produced (accepted drafts included) and whether the
    // step ran decodes only.
    std::pair<int64_t, bool> update_counters(const SchedulerOutput& plan);
    void note_step_time(int64_t n_decode, bool decode_only, double step_seconds);
    void refresh_occupancy();
    std::vector<int64_t> warmup_sizes() const;
    Status warm_up();
    std::string warmup_report;  // start-up report line, empty without a warm-up
};

// One engine step: schedule -> (draft) -> forward -> sample or verify -> postprocess.
bool Engine::Impl::step(Status* status) {
    const auto t_start = EngineClock::now();
    drain_inbox();
    if (speculator) speculator->plan(scheduler->running());  // draft tokens each decode may verify
    SchedulerOutput plan = scheduler->schedule();
    if (plan.empty()) {
        refresh_occupancy();  // aborts drained from the inbox free their blocks without a step
        return false;
    }
    note_scheduled(plan);
    const auto t0 = EngineClock::now();
    if (Status st = run_models(plan); !st) {  // the draft's proposals, then the target's forward
        for (const ScheduledSequence& s : plan.scheduled) finish(s.seq, FinishReason::Error, st.message());
        if (status != nullptr) *status = st;
        return true;
    }
    const double model_seconds = seconds(EngineClock::now() - t0);
    sample(&plan);            // next tokens: sampled, or accepted drafts + one
    scheduler->commit(plan);  // KV written: count the tokens, publish full blocks
    if (speculator) speculator->observe(plan, model_seconds);
    const auto [n_decode, decode_only] = update_counters(plan);
    postprocess(plan);        // stop checks, stream, free finished sequences
    refresh_occupancy();      // finished sequences no longer count as running
    note_step_time(n_decode, decode_only, seconds(EngineClock::now() - t_start));
    return true;
}

Status Engine::Impl::run_models(const SchedulerOutput& plan) {
    if (speculator) MVLLM_TRY(speculator->propose(plan));
    greedy_step = !options.host_sampling && backend_picks_tokens(plan, decoder.backend(), decoder.config().n_vocab,
                                                                 options.max_copied_logits_bytes);
    const Batch batch = build_batch(plan);
    if (const int64_t padding = batch.n_tokens() - plan.n_tokens; padding > 0 && pad_block >= 0) {
        std::lock_guard<std::mutex> lock(counters_mu);
        counters.n_padding_rows += padding;
    }
    if (greedy_step) {  // the picks (penalty lists, draws) are made while the device runs the pass
        MVLLM_TRY(decoder.queue_pass(batch, *cache));
        device_logprobs = build_picks(plan, decoder.backend(), decoder.config().n_vocab, batch.logit_rows.size(),
                                      [this](int64_t n, const RowRange& fn) { for_rows(n, fn); }, &picks);
        MVLLM_ASSIGN_OR_RETURN(const uint64_t ticket, decoder.queue_picks(device_logprobs, picks));
        return decoder.greedy_result(ticket, &argmax, device_logprobs ? &argmax_logprob : nullptr,
                                     picks.targets.empty() ? nullptr : &target_logprob,
                                     picks.copies.empty() ? nullptr : &copied,
                                     picks.scores.empty() ? nullptr : &row_scores);
    }
    return decoder.forward(batch, *cache, &logits);
}

void Engine::Impl::for_rows(int64_t n, const RowRange& fn) {
    constexpr int64_t kPoolRows = 8;
    if (n < kPoolRows) return fn(0, n);
    if (!row_pool) row_pool = std::make_unique<ThreadPool>(ThreadPool::hardware_threads());
    row_pool->parallel_for(n, fn);
}

// Each sequence's new tokens, then its drafts; logits for the last token and every draft.
Batch Engine::Impl::build_batch(const SchedulerOutput& plan) const {
    Batch batch;
    batch.block_size = blocks->block_size();
    for (const ScheduledSequence& s : plan.scheduled) {
        const auto begin = s.seq->tokens.begin() + s.seq->n_computed;
        std::vector<int32_t> tokens(begin, begin + s.n_tokens);
        const std::vector<int32_t>& drafts = s.seq->draft.tokens;
        tokens.insert(tokens.end(), drafts.begin(), drafts.end());
        const int seq = batch.add_sequence(tokens, static_cast<int32_t>(s.seq->n_computed), s.seq->blocks.blocks, false);
        const int64_t n_rows = prompt_rows(s).n + (s.sample ? static_cast<int64_t>(drafts.size()) + 1 : 0);
        if (n_rows > 0) batch.want_last_logits(seq, static_cast<int32_t>(n_rows));
    }
    // A greedy decode step (one token per sequence, argmax on the backend) grows to the next
    // padded size with rows of token 0 at position 0 in the padding block; they come after the
    // real rows, whose outputs keep their places. Steps that copy logits to the host are not
    // padded: every padding row would add a vocabulary-wide row to that copy, on every step.
    const int64_t n = static_cast<int64_t>(plan.scheduled.size());
    if (pad_block < 0 || !greedy_step || n == 0 || static_cast<int64_t>(batch.token_ids.size()) != n ||
        static_cast<int64_t>(batch.logit_rows.size()) != n)
        return batch;
    const auto to = std::lower_bound(pad_sizes.begin(), pad_sizes.end(), n);
    if (to == pad_sizes.end()) return batch;
    for (int64_t i = n; i < *to; ++i) batch.want_last_logits(batch.add_sequence({0}, 0, {pad_block}, false), 1);
    return batch;
}

// Sampling (no drafts) or verification: appends each sampling sequence's new tokens. Rows of
// prompt positions come first: the logprob of the prompt token each predicts, over the raw logits.
// Rows scored on the host (every row of a step without backend picks, the copied rows of one with)
// are scored at the end on every hardware thread (a vocabulary-wide log-sum-exp per row); the rows
// a backend scored (picks.scores) only become logprobs.
void Engine::Impl::sample(SchedulerOutput* plan) {
    const int64_t n_vocab = decoder.config().n_vocab;
    struct HostScore {
        const float* row;
        int32_t token, n_top;
        TokenLogprob* out;  // in its sequence's prompt_logprobs or verified.logprobs, sized before
    };
    std::vector<HostScore> scores;
    size_t next_copy = 0, next_score = 0;
    const auto host_row = [&](size_t r) -> const float* {  // row r's logits on the host, or null
        if (!greedy_step) return logits.data() + r * n_vocab;
        if (next_copy < picks.copies.size() && picks.copies[next_copy] == static_cast<int32_t>(r))
            return copied + next_copy++ * n_vocab;
        return nullptr;
    };
    const auto backend_score = [&](size_t r) -> const RowScore* {  // row r's score by the backend, or null
        if (!greedy_step || next_score >= picks.scores.size() || picks.scores[next_score].row != static_cast<int32_t>(r))
            return nullptr;
        return row_scores + next_score++;
    };
    size_t row = 0;
    for (ScheduledSequence& s : plan->scheduled) {
        Sequence* seq = s.seq;
        const PromptRows pr = prompt_rows(s);
        const size_t base = seq->prompt_logprobs.size();
        seq->prompt_logprobs.resize(base + static_cast<size_t>(pr.n));
        for (int64_t j = 0; j < pr.n; ++j, ++row) {
            const int32_t token = seq->tokens[pr.first + j + 1];
            TokenLogprob& out = seq->prompt_logprobs[base + static_cast<size_t>(j)];
            if (const float* r = host_row(row)) {
                scores.push_back({r, token, seq->params.prompt_logprobs, &out});
                continue;
            }
            if (const RowScore* r = backend_score(row)) {
                out = row_logprob(*r);
                continue;
            }
            out = TokenLogprob{token, target_logprob[row], {}};  // scored by the backend (prompt_logprobs <= 1)
            if (seq->params.prompt_logprobs == 1) out.top = {{argmax[row], argmax_logprob[row]}};
        }
        if (!s.sample) continue;  // a prefill chunk short of the prompt's end
        if (greedy_step) {
            const int32_t token = argmax[row];
            seq->verified = Verification{{token}, {}, 0};
            if (seq->params.logprobs >= 0) {
                const float* r = host_row(row);
                const RowScore* b = r ? nullptr : backend_score(row);
                seq->verified.logprobs.push_back(b ? row_logprob(*b) : TokenLogprob{token, r ? 0.0f : argmax_logprob[row], {}});
                if (r) scores.push_back({r, token, seq->params.logprobs, &seq->verified.logprobs.back()});
            }
            ++row;
        } else {
            seq->verified = verify_draft(logits.data() + row * n_vocab, n_vocab, seq->params, seq->tokens, seq->n_prompt,
                                         seq->draft, seq->rng);
            row += seq->draft.tokens.size() + 1;
        }
        s.n_accepted = seq->verified.n_accepted;
        seq->tokens.insert(seq->tokens.end(), seq->verified.tokens.begin(), seq->verified.tokens.end());
    }
    const auto score = [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const HostScore& p = scores[static_cast<size_t>(i)];
            token_logprob(p.row, n_vocab, p.token, p.n_top, p.out);
        }
    };
    for_rows(static_cast<int64_t>(scores.size()), score);
}

// Streams each new token with its stop checks; a stop drops the tokens after it.
void Engine::Impl::postprocess(const SchedulerOutput& plan) {
    const auto now = EngineClock::now();
    for (const ScheduledSequence& s : plan.scheduled) {
        Sequence* seq = s.seq;
        if (!s.sample) continue;
        const Verification& v = seq->verified;
        const int64_t n_output_before = seq->n_output() - static_cast<int64_t>(v.tokens.size());
        if (n_output_before == 0) seq->t_first_token = now;
        for (size_t i = 0; i < v.tokens.size(); ++i) {
            EngineEvent event;
            event.kind = EngineEvent::Kind::Token;
            event.token_ids = {v.tokens[i]};
            if (n_output_before + static_cast<int64_t>(i) == 0) event.prompt_logprobs = seq->prompt_logprobs;
            if (seq->params.logprobs >= 0) event.logprobs.push_back(v.logprobs[i]);
            FinishReason reason = FinishReason::Stop;
            const int64_t n_output = n_output_before + static_cast<int64_t>(i) + 1;
            const bool done = check_stop(seq, v.tokens[i], n_output, &event.text, &reason);
            emit(seq, std::move(event));
            if (done) {
                seq->tokens.resize(static_cast<size_t>(seq->n_prompt + n_output));
                finish(seq, reason);
                break;
            }
        }
    }
}

// Stop conditions in order: stop token ids, EOS, stop strings, max tokens (n_output: the output
// length including this token). *text receives the streamable text of this token (plus the
// held-back tail when the request ends here).
bool Engine::Impl::check_stop(Sequence* seq, int32_t token, int64_t n_output, std::string* text, FinishReason* reason) {
    const SamplingParams& p = seq->params;
    const bool stop_id = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end();
    const bool eos = !p.ignore_eos && std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end();
    bool stopped_on_string = false;
    if (seq->text && !stop_id && !eos) *text = seq->stop_matcher.push(seq->text->push(token), &stopped_on_string);
    bool done = true;
    if (stop_id || eos || stopped_on_string) *reason = FinishReason::Stop;
    else if (n_output >= seq->max_tokens) *reason = FinishReason::Length;
    else done = false;
    if (done && seq->text && !stopped_on_string) {
        bool late_stop = false;
        *text += seq->stop_matcher.push(seq->text->flush(), &late_stop);
        if (late_stop) *reason = FinishReason::Stop;
        else *text += seq->stop_matcher.flush();
    }
    return done;
}

void Engine::Impl::emit(Sequence* seq, EngineEvent event) {
    event.id = seq->id;
    if (seq->on_event) {
        seq->on_event(event);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(events_mu);
        events.push_back(std::move(event));
    }
    events_cv.notify_all();
}

void Engine::Impl::finish(Sequence* seq, FinishReason reason, const std::string& error) {
    scheduler->remove(seq);  // frees the blocks now (full ones stay cached)
    const auto now = EngineClock::now();
    RequestStats& st = seq->stats;
    st.n_prompt_tokens = seq->n_prompt;
    st.n_output_tokens = seq->n_output();
    if (seq->was_scheduled) {
        st.queue_seconds = seconds(seq->t_first_scheduled - seq->t_arrival);
        if (seq->n_output() > 0) {
            st.ttft_seconds = seconds(seq->t_first_token - seq->t_arrival);
            st.prefill_seconds = seconds(seq->t_first_token - seq->t_first_scheduled);
            st.decode_seconds = seconds(now - seq->t_first_token);
        }
    }
    EngineEvent event;
    event.kind = EngineEvent::Kind::Finish;
    event.reason = reason;
    event.error = error;
    event.stats = st;
    emit(seq, std::move(event));
    const RequestId id = seq->id;
    seqs.erase(id);
    {
        std::lock_guard<std::mutex> lock(counters_mu);
        ++counters.n_finished;
        counters.n_free_blocks = blocks->n_free();
    }
    std::lock_guard<std::mutex> lock(mu);
    live.erase(id);
}

void Engine::Impl::drain_inbox() {
    std::vector<std::unique_ptr<Sequence>> new_seqs;
    std::vector<RequestId> to_abort;
    {
        std::lock_guard<std::mutex> lock(mu);
        new_seqs.swap(inbox);
        to_abort.swap(aborts);
    }
    for (auto& seq : new_seqs) {
        Sequence* raw = seq.get();
        seqs.emplace(raw->id, std::move(seq));
        scheduler->add(raw);
    }
    for (RequestId id : to_abort) {
        auto it = seqs.find(id);
        if (it != seqs.end()) finish(it->second.get(), FinishReason::Abort);
    }
}

void Engine::Impl::note_scheduled(const SchedulerOutput& plan) {
    const auto now = EngineClock::now();
    for (const ScheduledSequence& s : plan.scheduled)
        if (!s.seq->was_scheduled) {
            s.seq->was_scheduled = true;
            s.seq->t_first_scheduled = now;
        }
}

void Engine::Impl::refresh_occupancy() {
    std::lock_guard<std::mutex> lock(counters_mu);
    counters.n_free_blocks = blocks->n_free();
    counters.n_running = static_cast<int64_t>(scheduler->running().size());
    counters.n_waiting = static_cast<int64_t>(scheduler->waiting().size());
}

std::pair<int64_t, bool> Engine::Impl::update_counters(const SchedulerOutput& plan) {
    std::lock_guard<std::mutex> lock(counters_mu);
    EngineCounters& c = counters;
    ++c.n_steps;
    int64_t n_decode = 0;
    bool decode_only = true;
    for (const ScheduledSequence& s : plan.scheduled) {
        const bool decode = s.n_tokens == 1 && s.seq->n_output() > 0;
        if (decode) n_decode += s.n_tokens + s.n_accepted;  // a verification keeps its accepted drafts
        else c.n_prefill_tokens += s.n_tokens;
        decode_only = decode_only && decode;
    }
    c.n_decode_tokens += n_decode;
    c.n_preemptions += static_cast<int64_t>(plan.preempted.size());
    for (const ScheduledSequence& s : plan.scheduled) {
        const int64_t drafted = static_cast<int64_t>(s.seq->draft.tokens.size());
        c.n_draft_tokens += drafted;
        c.n_draft_accepted += drafted > 0 ? s.n_accepted : 0;
        c.n_spec_steps += drafted > 0;
        // decodes without drafts while speculation is on (probing, backing off, or no room left)
        c.n_fallback_steps += speculator && drafted == 0 && s.sample && s.n_tokens == 1;
    }
    c.max_step_tokens = std::max(c.max_step_tokens, plan.n_tokens);
    c.n_free_blocks = blocks->n_free();
    c.n_total_blocks = blocks->n_total();
    c.n_running = static_cast<int64_t>(scheduler->running().size());
    c.n_waiting = static_cast<int64_t>(scheduler->waiting().size());
    const PrefixCacheStats& p = blocks->stats();
    c.prefix_queries = p.n_queries;
    c.prefix_query_blocks = p.n_query_blocks;
    c.prefix_hit_blocks = p.n_hit_blocks;
    c.prefix_tokens_reused = p.n_tokens_reused;
    c.prefix_evictions = p.n_evictions;
    c.prefix_pending_waits = p.n_pending_waits;
    c.prefix_collisions = p.n_collisions;
    return {n_decode, decode_only};
}

void Engine::Impl::note_step_time(int64_t n_decode, bool decode_only, double step_seconds) {
    std::lock_guard<std::mutex> lock(counters_mu);
    if (decode_only) {
        counters.decode_step_seconds += step_seconds;
        counters.n_decode_step_tokens += n_decode;
    } else {
        counters.prefill_step_seconds += step_seconds;
    }
}

// The warm-up's batch sizes: 1, 2, 4, ... below the most sequences one decode step can hold,
// then that number (a power-of-two bucket of the backend's tuned GEMMs each, and the exact size a
// full batch has). Each size runs b one-token requests for 3 tokens: one prefill step, then two
// decode steps (the first eager, the second recorded), once for each context the backend records
// separately (Backend::warmup_contexts: the CUDA backend's context buckets up to the model's
// length), so that no live decode step records a graph. Longest contexts and largest sizes go
// first: their scratch buffers are the largest, so no later step grows one under a recorded graph.
constexpr int kWarmupTokens = 4;  // a one-token prompt and 3 generated: the KV of 3 tokens

std::vector<int64_t> Engine::Impl::warmup_sizes() const {
    const int64_t blocks_each = (kWarmupTokens - 1 + blocks->block_size() - 1) / blocks->block_size();
    int64_t most = std::min<int64_t>({options.max_seqs, options.max_batched_tokens, blocks->n_free() / blocks_each});
    if (max_model_len < kWarmupTokens) most = 0;  // no room for a throw-away request: no warm-up
    std::vector<int64_t> sizes;
    for (int64_t b = 1; b < most; b *= 2) sizes.push_back(b);
    if (most >= 1) sizes.push_back(most);
    return sizes;
}

Status Engine::Impl::warm_up() {
    const auto t0 = EngineClock::now();
    std::vector<int64_t> sizes = warmup_sizes();
    std::reverse(sizes.begin(), sizes.end());
    const std::vector<int32_t> contexts =
        decoder.backend().warmup_contexts(static_cast<int32_t>(std::min<int64_t>(max_model_len, INT32_MAX)));
    const int64_t n_vocab = decoder.config().n_vocab;
    Status status = Status::ok();
    for (const int32_t context : contexts) {
        decoder.backend().set_warming_up(true, context);
        for (const int64_t b : sizes) {
            for (int64_t i = 0; i < b && status; ++i) {
                Request r;
                r.prompt_ids = {static_cast<int32_t>(i % n_vocab)};
                r.sampling.temperature = 0;
                r.sampling.ignore_eos = true;
                r.sampling.max_tokens = kWarmupTokens - 1;
                auto id = submit(std::move(r), [](const EngineEvent&) {});
                if (!id) status = id.status();
            }
            while (status) {
                {
                    std::lock_guard<std::mutex> lock(mu);
                    if (live.empty()) break;
                }
                if (!step(&status)) break;
            }
            if (!status) break;
        }
        if (!status) break;
    }
    decoder.backend().set_warming_up(false);
    MVLLM_TRY(status);
    {
        std::lock_guard<std::mutex> lock(counters_mu);
        counters = EngineCounters{};
        counters.n_total_blocks = counters.n_free_blocks = blocks->n_total();
    }
    blocks->reset_stats();
    const std::string buckets = contexts.size() > 1 ? ", " + std::to_string(contexts.size()) + " context buckets " +
                                                          std::to_string(contexts.back()) + ".." +
                                                          std::to_string(contexts.front())
                                                    : "";
    warmup_report = sizes.empty() ? "warm-up: skipped (the KV pool or the context has no room for a throw-away request)"
                                  : "warm-up: batch sizes 1.." + std::to_string(sizes.front()) + " (" +
                                        std::to_string(sizes.size()) + " sizes" + buckets + ") in " +
                                        std::to_string(static_cast<int>(1e3 * seconds(EngineClock::now() - t0))) + " ms";
    return Status::ok();
}

Result<RequestId> Engine::Impl::submit(Request request, EventCallback on_event) {
    auto seq = std::make_unique<Sequence>();
    if (request.prompt_ids.empty() && !request.prompt_text.empty()) {
        if (tokenizer == nullptr) return make_error("a text prompt needs a tokenizer (or send token ids)");
        request.prompt_ids = tokenizer->encode(request.prompt_text, request.add_bos, false);
    }
    if (request.prompt_ids.empty()) return make_error("empty prompt");
    const int64_t n_vocab = decoder.config().n_vocab;
    for (int32_t id : request.prompt_ids)
        if (id < 0 || id >= n_vocab) return make_error("prompt token id ", id, " is outside the vocabulary of ", n_vocab);
    MVLLM_TRY(validate_sampling_params(request.sampling));
    normalise_logit_bias(&request.sampling);
    for (const auto& [t, bias] : request.sampling.logit_bias)
        if (t >= n_vocab) return make_error("logit_bias token id ", t, " is outside the vocabulary of ", n_vocab);
    if (!request.sampling.stop.empty() && !text_streams)
        return make_error("stop strings need a tokenizer to turn tokens into text");
    // A sequence of L tokens stores the KV of L - 1 (the last sampled token is never fed back).
    const int64_t pool_tokens = blocks->n_total() * blocks->block_size();
    const int64_t limit = std::min(max_model_len, pool_tokens + 1);
    const int64_t n_prompt = static_cast<int64_t>(request.prompt_ids.size());
    if (n_prompt >= limit)
        return make_error("prompt of ", n_prompt, " tokens can never run: the context holds ", max_model_len,
                          " tokens and the KV pool ", pool_tokens, " (one more token must be generated)");
    const int64_t max_tokens = request.sampling.max_tokens > 0 ? request.sampling.max_tokens : limit - n_prompt;
    if (n_prompt + max_tokens > limit)
        return make_error("prompt of ", n_prompt, " tokens + max_tokens ", max_tokens, " can never fit: the limit is ",
                          limit, " tokens (context ", max_model_len, ", KV pool ", pool_tokens, " + 1)");
    seq->id = next_id.fetch_add(1);
    seq->tokens = std::move(request.prompt_ids);
    seq->n_prompt = n_prompt;
    seq->max_tokens = max_tokens;
    seq->params = std::move(request.sampling);
    seq->on_event = std::move(on_event);
    seq->rng.seed(seq->params.seed >= 0 ? static_cast<uint64_t>(seq->params.seed) : mix_seed(seq->id));
    if (text_streams) seq->text = text_streams();
    seq->stop_matcher = StopStringMatcher(seq->params.stop);
    seq->draft_control = DraftController(options.speculative);
    seq->t_arrival = EngineClock::now();
    const RequestId id = seq->id;
    {
        std::lock_guard<std::mutex> lock(mu);
        seq->arrival = id;
        live.insert(id);
        inbox.push_back(std::move(seq));
    }
    wake.notify_all();
    return id;
}

void Engine::Impl::loop() {
    for (;;) {
        const bool busy = !scheduler->idle();
        {
            std::unique_lock<std::mutex> lock(mu);
            if (stopping) return;
            if (!busy) {
                wake.wait(lock, [&] { return stopping || !inbox.empty() || !aborts.empty(); });
                if (stopping) return;
            }
        }
        step(nullptr);
    }
}

// ---- Engine ------------------------------------------------------------------------------------

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() { stop(); }

Result<std::unique_ptr<Engine>> Engine::create(Decoder& decoder, const EngineOptions& o, const Tokenizer* tokenizer,
                                               TextStreamFactory text_streams) {
    if (o.block_size <= 0) return make_error("--kv-block-size must be positive");
    if (o.max_batched_tokens <= 0) return make_error("--max-batched-tokens must be positive");
    if (o.max_seqs <= 0) return make_error("--max-seqs must be positive");
    if (o.max_prefill_chunk < 0) return make_error("--max-prefill-chunk must be >= 0");
    DType kv_dtype;
    if (!parse_type_name(o.kv_dtype, &kv_dtype) ||
        (kv_dtype != DType::F32 && kv_dtype != DType::F16 && kv_dtype != DType::BF16))
        return make_error("--kv-dtype ", o.kv_dtype, " is not supported (f32, f16, or bf16 on CUDA)");
    if (!text_streams && tokenizer != nullptr) text_streams = incremental_text_streams(*tokenizer);
    auto impl = std::make_unique<Impl>(decoder, tokenizer, std::move(text_streams), o);
    const ModelConfig& mc = decoder.config();
    impl->max_model_len = o.max_model_len > 0 ? o.max_model_len : (mc.n_ctx_train > 0 ? mc.n_ctx_train : 4096);
    const KvCacheConfig geometry = decoder.kv_config(0, o.block_size, kv_dtype);
    KvBudget budget{size_t(-1), ""};
    if (o.kv_cache_blocks <= 0) {
        MVLLM_ASSIGN_OR_RETURN(budget, kv_pool_budget(decoder, o, geometry, impl->max_model_len));
    }
    if (o.speculative.draft != nullptr && o.kv_cache_blocks <= 0) {
        // The draft keeps a block for every block of the pool: the budget pays for both caches.
        const size_t t = kv_block_bytes(geometry);
        const size_t d = kv_block_bytes(o.speculative.draft->kv_config(0, o.block_size, kv_dtype));
        if (t + d > 0) budget.bytes = static_cast<size_t>(static_cast<long double>(budget.bytes) * t / (t + d));
        budget.source += (budget.source.empty() ? "" : ", ") + std::string("the target's share (the draft's KV "
                         "cache takes the rest)");
    }
    MVLLM_ASSIGN_OR_RETURN(impl->plan, plan_kv_pool(geometry, budget.bytes, impl->max_model_len));
    impl->budget_source = budget.source;
    if (o.kv_cache_blocks > 0) impl->plan.n_blocks = o.kv_cache_blocks;
    const bool warms_up = o.warmup == EngineOptions::Warmup::Always ||
                          (o.warmup == EngineOptions::Warmup::Auto && decoder.backend().warms_up());
    const bool pad = o.decode_padding == EngineOptions::DecodePadding::On ||
                     (o.decode_padding == EngineOptions::DecodePadding::Auto && warms_up && decoder.backend().warms_up());
    // With padding the cache holds one block more than the pool: the padding rows' block.
    MVLLM_ASSIGN_OR_RETURN(impl->cache, decoder.backend().create_kv_cache(decoder.kv_config(
                                            impl->plan.n_blocks + (pad ? 1 : 0), o.block_size, kv_dtype)));
    impl->blocks = std::make_unique<BlockManager>(impl->plan.n_blocks, o.block_size, o.enable_prefix_cache);
    SchedulerConfig sc;
    sc.max_batched_tokens = o.max_batched_tokens;
    sc.max_seqs = o.max_seqs;
    sc.max_prefill_chunk = o.max_prefill_chunk;
    sc.policy = o.policy;
    impl->scheduler = std::make_unique<Scheduler>(sc, *impl->blocks);
    if (o.speculative.draft != nullptr) {
        MVLLM_ASSIGN_OR_RETURN(impl->speculator, Speculator::create(o.speculative, decoder, impl->cache->config()));
    }
    if (tokenizer != nullptr) {
        impl->eos_ids = tokenizer->stop_ids;
        if (tokenizer->eos_id >= 0) impl->eos_ids.push_back(tokenizer->eos_id);
    }
    if (mc.eos_token_id >= 0) impl->eos_ids.push_back(mc.eos_token_id);
    impl->counters.n_total_blocks = impl->counters.n_free_blocks = impl->plan.n_blocks;
    if (pad) {
        impl->pad_sizes = impl->warmup_sizes();
        impl->pad_block = static_cast<int32_t>(impl->plan.n_blocks);
    }
    if (warms_up) MVLLM_TRY(impl->warm_up().with_context("engine warm-up"));
    return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Result<RequestId> Engine::submit(Request request, EventCallback on_event) {
    return impl_->submit(std::move(request), std::move(on_event));
}

bool Engine::abort(RequestId id) {
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        if (!impl_->live.count(id)) return false;
        impl_->aborts.push_back(id);
    }
    impl_->wake.notify_all();
    return true;
}

bool Engine::next_event(EngineEvent* event, double timeout_seconds) {
    std::unique_lock<std::mutex> lock(impl_->events_mu);
    if (!impl_->events_cv.wait_for(lock, std::chrono::duration<double>(timeout_seconds),
                                   [&] { return !impl_->events.empty(); }))
        return false;
    *event = std::move(impl_->events.front());
    impl_->events.pop_front();
    return true;
}

void Engine::start() {
    if (impl_->thread.joinable()) return;
    impl_->stopping = false;
    impl_->thread = std::thread([this] { impl_->loop(); });
}

void Engine::stop() {
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        impl_->stopping = true;
    }
    impl_->wake.notify_all();
    if (impl_->thread.joinable()) impl_->thread.join();
}

bool Engine::step(Status* status) { return impl_->step(status); }

void Engine::run_until_idle() {
    // A step with nothing to schedule while requests are live cannot happen by construction
    // (a lone request always fits); stop rather than spin if it ever did.
    while (!idle())
        if (!impl_->step(nullptr) && !idle()) break;
}

bool Engine::idle() const {
    std::lock_guard<std::mutex> lock(impl_->mu);
    return impl_->live.empty();
}

EngineCounters Engine::counters() const {
    std::lock_guard<std::mutex> lock(impl_->counters_mu);
    return impl_->counters;
}

std::string Engine::startup_report() const {
    const std::string& source = impl_->budget_source;
    return impl_->plan.report() + (source.empty() ? "" : "; budget: " + source) +
           (impl_->speculator ? "\n" + impl_->speculator->report() : "") +
           (impl_->warmup_report.empty() ? "" : "\n" + impl_->warmup_report);
}

}  // namespace mvllm
