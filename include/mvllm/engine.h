// The mvllm serving engine, public C++ API. Many requests share one decoder and one paged KV pool;
// each engine step mixes decode tokens of running requests with prefill chunks of new ones
// (continuous batching), reuses cached prefixes, and preempts (recomputes) when blocks run out.
//
//   auto engine = Engine::create(decoder, options, tokenizer).value();   // tokenizer optional
//   engine->start();                                     // one engine thread owns the backend
//   RequestId id = engine->submit(request, [](const EngineEvent& e) { ... }).value();
//   engine->abort(id);                                   // thread-safe, like submit
//
// Events of a request arrive in order on the engine thread (callback) or through the engine's
// thread-safe queue (next_event) when no callback is given: zero or more Token events, then
// exactly one Finish event.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mvllm {

class Decoder;
class Tokenizer;
class Status;
template <typename T> class Result;

struct SamplingParams {
    float temperature = 1.0f;         // 0: greedy
    float top_p = 1.0f;               // nucleus mass kept, (0, 1]
    int32_t top_k = 0;                // 0: all tokens
    float min_p = 0.0f;               // drop tokens with p < min_p * p_max
    float repetition_penalty = 1.0f;  // > 1 discourages tokens of prompt and output (CTRL style)
    float presence_penalty = 0.0f;    // subtracted once from tokens already generated
    float frequency_penalty = 0.0f;   // subtracted per occurrence in the output
    // (token, bias): added to the token's logit before the penalties and everything else (OpenAI's
    // logit_bias; -100 bans a token in practice). A token listed twice keeps its last bias.
    std::vector<std::pair<int32_t, float>> logit_bias;
    int64_t seed = -1;                // -1: a seed derived from the request id
    int32_t max_tokens = -1;          // -1: up to the context or pool capacity
    std::vector<std::string> stop;    // stop strings (excluded from the output text)
    std::vector<int32_t> stop_token_ids;
    bool ignore_eos = false;
    int32_t logprobs = -1;            // -1: none; n >= 0: the sampled token's logprob and n top ones
    // -1: none; n >= 0: each prompt token's logprob given the tokens before it (from the second
    // token on) and the n top ones at its position, over the raw logits (no bias or penalty).
    // Such a request reuses no cached prefix (its positions' logits are needed).
    int32_t prompt_logprobs = -1;
};

struct Request {
    std::vector<int32_t> prompt_ids;  // used when non-empty, otherwise prompt_text is encoded
    std::string prompt_text;
    bool add_bos = true;              // for prompt_text
    SamplingParams sampling;
};

using RequestId = uint64_t;

enum class FinishReason { Stop, Length, Abort, Error };
const char* finish_reason_name(FinishReason reason);

struct TokenLogprob {
    int32_t token = 0;
    float logprob = 0;
    std::vector<std::pair<int32_t, float>> top;  // [top_logprobs] (token, logprob), best first
};

struct RequestStats {
    double queue_seconds = 0;        // arrival -> first scheduled
    double ttft_seconds = 0;         // arrival -> first token
    double prefill_seconds = 0;      // first scheduled -> first token
    double decode_seconds = 0;       // first token -> finish
    int64_t n_prompt_tokens = 0;
    int64_t n_output_tokens = 0;
    int64_t n_prefix_tokens_reused = 0;  // prompt tokens whose KV came from the prefix cache
    int64_t n_preemptions = 0;
    // speculative decoding (all zero without a draft model)
    int64_t n_draft_tokens = 0;          // tokens the draft proposed and the target verified
    int64_t n_draft_accepted = 0;        // of those, accepted
    int64_t n_spec_steps = 0;            // verification steps (each yields accepted + 1 tokens)
    int64_t n_fallback_steps = 0;        // decode steps without drafting (speculation did not pay)
    std::vector<int64_t> accepted_lengths;  // [max draft tokens + 1]: verification steps by drafts accepted
};

struct EngineEvent {
    enum class Kind { Token, Finish };
    Kind kind = Kind::Token;
    RequestId id = 0;
    std::vector<int32_t> token_ids;    // Token: new tokens
    std::string text;                  // Token: the new text (stop-string prefixes held back)
    std::vector<TokenLogprob> logprobs;
    std::vector<TokenLogprob> prompt_logprobs;  // Token: with the first token, the prompt's tokens 1..
    FinishReason reason = FinishReason::Stop;  // Finish
    std::string error;                 // Finish with reason Error
    RequestStats stats;                // Finish
};

using EventCallback = std::function<void(const EngineEvent&)>;

enum class SchedulingPolicy { Fcfs, ShortestPrefillFirst, RoundRobin };
bool parse_scheduling_policy(const std::string& name, SchedulingPolicy* out);  // fcfs | spf | rr

// Draft-length policies of speculative decoding, per sequence: a fixed K; K moved up or down
// within [min, max] when the recent acceptance rate crosses thresholds; K = the rounded moving
// average of accepted lengths + 1, within [min, max].
enum class DraftPolicy { Fixed, AcceptanceRate, AcceptedLength };
bool parse_draft_policy(const std::string& name, DraftPolicy* out);  // fixed | acceptance-rate | accepted-length
const char* draft_policy_name(DraftPolicy policy);

struct SpeculativeOptions {
    Decoder* draft = nullptr;       // the draft model (not owned; outlives the engine); null: off.
                                    // Its vocabulary must be the target's (check_draft_vocabulary).
    int32_t draft_tokens = 4;       // K (fixed), the upper bound and start of the adaptive policies
    int32_t min_draft_tokens = 1;   // lower bound of the adaptive policies
    DraftPolicy policy = DraftPolicy::Fixed;
    bool fallback = true;           // stop drafting for a sequence while it is slower than plain decoding
};

struct EngineOptions {
    size_t kv_cache_memory = size_t(256) << 20;  // bytes of KV pool
    int64_t kv_cache_blocks = 0;                 // > 0: exact block count instead of the budget
    // Pool sized from the device's memory, measured after the weights are loaded and one
    // profiling forward of max_batched_tokens tokens has grown the activation buffers (as vLLM):
    double kv_cache_memory_fraction = 0;  // (0, 1]: this fraction of the free memory (--kv-cache-memory 90%)
    double gpu_memory_utilization = 0;    // (0, 1]: the process may use this fraction of the device's total
                                          // memory; the pool gets what the weights and activations leave
    int32_t block_size = 16;
    std::string kv_dtype = "f32";                // f32 | f16 | bf16 (bf16: CUDA)
    int32_t max_batched_tokens = 2048;           // tokens per step (decodes + prefill chunks)
    int32_t max_seqs = 256;                      // running sequences
    int32_t max_prefill_chunk = 512;             // prefill tokens of one request per step (0: no cap)
    int64_t max_model_len = 0;                   // 0: the model's trained context
    SchedulingPolicy policy = SchedulingPolicy::Fcfs;
    bool enable_prefix_cache = true;
    SpeculativeOptions speculative;
    // Start-up warm-up (as vLLM records its CUDA graphs at start-up): a few throw-away requests
    // for each batch size 1, 2, 4, ... up to max_seqs (as many as the KV pool holds), so that
    // serving never pays for loading kernels, timing GEMM algorithms or recording the first
    // graphs. Counters are reset afterwards. Auto: only on a backend that records steps or tunes
    // kernels on first use (Backend::warms_up); Always: on any backend (tests).
    enum class Warmup { Off, Auto, Always };
    Warmup warmup = Warmup::Off;
    // Greedy decode steps (argmax on the backend) padded to the next warm-up batch size with
    // throw-away rows (as vLLM pads a batch to its next captured size), so that a step of any size
    // replays a recorded graph instead of running eagerly and recording a new one. The rows are
    // one token at position 0 whose K/V go to a block of their own outside the pool; their outputs
    // are dropped. Steps that copy logits to the host (sampling) are not padded. Auto: when the
    // warm-up runs on a backend that records steps; On: always (tests); Off: never.
    enum class DecodePadding { Off, Auto, On };
    DecodePadding decode_padding = DecodePadding::Auto;
    // Sample every token on the host from copied logits, even where the backend could pick it
    // (greedy, or drawn with temperature, top_k, top_p and min_p: core/draw.h): for comparisons.
    bool host_sampling = false;
    // The logits a step whose tokens the backend picks may copy back for the rows scored on the
    // host (top logprobs, a drawn token's logprob, prompt logprobs beyond what the backend
    // scores), in bytes: pinned host memory on CUDA, two steps' worth. A step that needs more
    // copies every row to the host sampler instead (256 MiB: 441 rows of a 151,936-token vocabulary).
    int64_t max_copied_logits_bytes = int64_t{256} << 20;
};

// Text streaming. The engine asks the factory for one decoder per request; without a factory and
// with a tokenizer, it uses the tokenizer's UTF-8-safe IncrementalDecoder (engine/text_stream.h).
class TextStream {
public:
    virtual ~TextStream() = default;
    virtual std::string push(int32_t token) = 0;
    virtual std::string flush() = 0;
};
using TextStreamFactory = std::function<std::unique_ptr<TextStream>()>;

struct EngineCounters {
    int64_t n_steps = 0;
    int64_t n_prefill_tokens = 0;  // computed prompt (and recomputed) tokens
    int64_t n_decode_tokens = 0;
    int64_t n_preemptions = 0;
    int64_t n_finished = 0;
    int64_t max_step_tokens = 0;
    // Wall time of steps (schedule to postprocess), split by kind, for prefill / decode tok/s.
    double prefill_step_seconds = 0;  // steps that ran prompt (or recomputed) tokens
    double decode_step_seconds = 0;   // steps of decode tokens only
    int64_t n_decode_step_tokens = 0; // the decode tokens of those steps
    int64_t n_padding_rows = 0;       // throw-away rows added by decode padding (EngineOptions)
    int64_t n_free_blocks = 0;
    int64_t n_total_blocks = 0;
    int64_t n_running = 0;
    int64_t n_waiting = 0;
    // speculative decoding
    int64_t n_draft_tokens = 0, n_draft_accepted = 0, n_spec_steps = 0, n_fallback_steps = 0;
    // prefix cache telemetry
    int64_t prefix_queries = 0, prefix_query_blocks = 0, prefix_hit_blocks = 0, prefix_tokens_reused = 0,
            prefix_evictions = 0, prefix_pending_waits = 0, prefix_collisions = 0;
};

class Engine {
public:
    // Sizes the KV pool from the options and the decoder's geometry. tokenizer may be null (then
    // requests must carry token ids and events carry no text unless a TextStreamFactory is set).
    static Result<std::unique_ptr<Engine>> create(Decoder& decoder, const EngineOptions& options,
                                                   const Tokenizer* tokenizer = nullptr,
                                                   TextStreamFactory text_streams = nullptr);
    ~Engine();

    // Thread-safe. Errors on a request that can never run (empty, too long for the context or the
    // KV pool, bad parameters). Without a callback, events go to next_event().
    Result<RequestId> submit(Request request, EventCallback on_event = nullptr);
    // Thread-safe. The request finishes with reason Abort and its blocks are freed at the next
    // step boundary. False when the id is unknown or already finished.
    bool abort(RequestId id);
    // Thread-safe: the next event of requests submitted without a callback; false on timeout.
    bool next_event(EngineEvent* event, double timeout_seconds);

    // Runs the step loop on an engine thread until stop() (or destruction).
    void start();
    void stop();
    // Without a thread: one step (false when there was nothing to do), or steps until idle.
    // A forward error finishes the step's requests with reason Error and returns that status.
    bool step(Status* status = nullptr);
    void run_until_idle();

    bool idle() const;
    EngineCounters counters() const;
    // The KV pool: blocks, tokens, full-length sequences, and where its budget came from.
    std::string startup_report() const;

    struct Impl;

private:
    explicit Engine(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace mvllm
