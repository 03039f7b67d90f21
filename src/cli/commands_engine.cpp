// Commands on the serving engine: bench throughput (BENCHMARKS.md B4(b), the nano-vllm shape: N
// requests with input and output lengths uniform in MIN..MAX, all submitted at once, EOS ignored).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sys/resource.h>

#include "cli/options.h"
#include "cli/text_generation.h"
#include "engine/engine.h"
#include "kv/block_manager.h"

#ifndef MVLLM_GIT_COMMIT
#define MVLLM_GIT_COMMIT "unknown"
#endif

namespace mvllm::cli {
namespace {

struct BenchServeArgs {
    RunOptions run;
    int num_requests = 256;
    std::string input_len = "100:1024";
    std::string output_len = "100:1024";
    int seed = 0;
    KvPoolArgs kv_pool;
    int max_batched_tokens = 2048;
    int max_seqs = 256;
    int max_prefill_chunk = 512;
    std::string policy = "fcfs";
    bool no_prefix_cache = false;
    float temperature = 0.0f, top_p = 1.0f, min_p = 0.0f;  // greedy unless a temperature is given
    int top_k = 0;
    float repeat_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
    int logprobs = -1;  // -1: none; n: the chosen token's and the top n
    std::string json_out;
};

Result<std::pair<int, int>> parse_range(const std::string& text) {
    int lo = 0, hi = 0;
    char extra = 0;
    if (std::sscanf(text.c_str(), "%d:%d%c", &lo, &hi, &extra) == 2 && lo >= 1 && hi >= lo) return std::make_pair(lo, hi);
    if (std::sscanf(text.c_str(), "%d%c", &lo, &extra) == 1 && lo >= 1) return std::make_pair(lo, lo);
    return make_error("not a length range: \"", text, "\" (MIN:MAX or N, >= 1)");
}

double percentile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

int cmd_bench_serve(const BenchServeArgs& a) {
    auto in_range = parse_range(a.input_len);
    if (!in_range) return fail(in_range.status());
    auto out_range = parse_range(a.output_len);
    if (!out_range) return fail(out_range.status());
    EngineOptions eo;
    if (Status st = apply_kv_pool_options(a.kv_pool, &eo); !st) return fail(st);
    eo.block_size = a.run.kv_block_size;
    eo.kv_dtype = kv_dtype_name(a.run);
    eo.max_batched_tokens = a.max_batched_tokens;
    eo.max_seqs = a.max_seqs;
    eo.max_prefill_chunk = a.max_prefill_chunk;
    eo.enable_prefix_cache = !a.no_prefix_cache;
    if (!parse_scheduling_policy(a.policy, &eo.policy)) return fail(make_error("unknown --scheduling-policy ", a.policy));
    auto rt = make_runtime(a.run, 1);  // the engine sizes its own KV pool
    if (!rt) return fail(rt.status());
    eo.speculative = rt->speculative;
    auto engine = Engine::create(*rt->decoder, eo);
    if (!engine) return fail(engine.status());
    std::fprintf(stderr, "model: %s\nbackend: %s\n%s\n", rt->model->config.summary().c_str(),
                 rt->backend->name().c_str(), (*engine)->startup_report().c_str());

    std::mt19937 rng(a.seed);
    const int n_vocab = rt->model->config.n_vocab;
    std::vector<Request> requests(a.num_requests);
    int64_t n_in = 0;
    for (Request& r : requests) {
        const int n = in_range->first + static_cast<int>(rng() % (in_range->second - in_range->first + 1));
        r.prompt_ids.resize(n);
        for (auto& t : r.prompt_ids) t = static_cast<int32_t>(rng() % n_vocab);
        r.sampling.temperature = a.temperature;
        r.sampling.top_p = a.top_p;
        r.sampling.top_k = a.top_k;
        r.sampling.min_p = a.min_p;
        r.sampling.repetition_penalty = a.repeat_penalty;
        r.sampling.presence_penalty = a.presence_penalty;
        r.sampling.frequency_penalty = a.frequency_penalty;
        r.sampling.logprobs = a.logprobs;
        r.sampling.seed = static_cast<int64_t>(&r - requests.data());
        r.sampling.ignore_eos = true;
        r.sampling.max_tokens = out_range->first + static_cast<int>(rng() % (out_range->second - out_range->first + 1));
        n_in += n;
    }
    std::vector<double> ttft;
    int64_t n_out = 0, n_failed = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (Request& r : requests) {
        auto id = (*engine)->submit(std::move(r), [&](const EngineEvent& e) {
            if (e.kind != EngineEvent::Kind::Finish) return;
            if (e.reason == FinishReason::Error) ++n_failed;
            ttft.push_back(e.stats.ttft_seconds);
            n_out += e.stats.n_output_tokens;
        });
        if (!id) return fail(id.status());
    }
    (*engine)->run_until_idle();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const EngineCounters c = (*engine)->counters();
    // Prefill tok/s: prompt tokens over the wall time of the steps that ran any; decode tok/s:
    // tokens of decode-only steps over their time (llama-batched-bench's split, B4(a)).
    const double prefill_tps = c.prefill_step_seconds > 0 ? c.n_prefill_tokens / c.prefill_step_seconds : 0;
    const double decode_tps = c.decode_step_seconds > 0 ? c.n_decode_step_tokens / c.decode_step_seconds : 0;
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const double peak_rss_mib = usage.ru_maxrss / 1024.0;
    std::printf("| model | requests | input | output | policy | max batched | max seqs | output tok/s | total tok/s | "
                "prefill tok/s | decode tok/s | TTFT p50 s | TTFT p99 s | preemptions | peak RSS MiB | elapsed s |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    std::printf("| %s | %d | %s | %s | %s | %d | %d | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f | %lld | %.0f | %.2f |\n",
                a.run.model.empty() ? kDefaultModelName : a.run.model.c_str(), a.num_requests, a.input_len.c_str(),
                a.output_len.c_str(), a.policy.c_str(), a.max_batched_tokens, a.max_seqs, n_out / elapsed,
                (n_in + n_out) / elapsed, prefill_tps, decode_tps, percentile(ttft, 0.5), percentile(ttft, 0.99),
                (long long)c.n_preemptions, peak_rss_mib, elapsed);
    if (!a.json_out.empty()) {
        std::time_t now = std::time(nullptr);
        char date[32];
        std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
        nlohmann::json j = {
            {"benchmark", "throughput"}, {"batch_invariant", a.run.batch_invariant}, {"commit", MVLLM_GIT_COMMIT}, {"date", date}, {"device", rt->backend->name()},
            {"model", a.run.model}, {"geometry", rt->model->config.summary()}, {"num_requests", a.num_requests},
            {"input_len", a.input_len}, {"output_len", a.output_len}, {"seed", a.seed}, {"policy", a.policy},
            {"temperature", a.temperature}, {"top_p", a.top_p}, {"top_k", a.top_k}, {"min_p", a.min_p},
            {"repeat_penalty", a.repeat_penalty}, {"presence_penalty", a.presence_penalty},
            {"frequency_penalty", a.frequency_penalty}, {"logprobs", a.logprobs},
            {"max_batched_tokens", a.max_batched_tokens}, {"max_seqs", a.max_seqs},
            {"max_prefill_chunk", a.max_prefill_chunk}, {"kv_cache", (*engine)->startup_report()},
            {"input_tokens", n_in}, {"output_tokens", n_out}, {"failed", n_failed}, {"elapsed_s", elapsed},
            {"output_tok_s", n_out / elapsed}, {"total_tok_s", (n_in + n_out) / elapsed},
            {"prefill_tok_s", prefill_tps}, {"decode_tok_s", decode_tps}, {"peak_rss_mib", peak_rss_mib},
            {"ttft_p50_s", percentile(ttft, 0.5)}, {"ttft_p99_s", percentile(ttft, 0.99)},
            {"steps", c.n_steps}, {"preemptions", c.n_preemptions},
            {"prefix_tokens_reused", c.prefix_tokens_reused}};
        std::ofstream(a.json_out) << j.dump(2) << "\n";
    }
    return n_failed ? 1 : 0;
}

}  // namespace

void register_engine_commands(CLI::App& app) {
    static BenchServeArgs serve;
    CLI::App* bench = bench_group(app);
    CLI::App* s = bench->add_subcommand("throughput", "Engine throughput: N requests submitted at once (B4(b))");
    add_run_options(s, &serve.run);
    add_draft_options(s, &serve.run);
    s->add_option("--num-requests", serve.num_requests, "requests")->check(CLI::Range(1, 1 << 20));
    s->add_option("--input-len", serve.input_len, "prompt tokens, MIN:MAX (uniform) or N");
    s->add_option("--output-len", serve.output_len, "generated tokens, MIN:MAX (uniform) or N");
    s->add_option("--seed", serve.seed, "seed of the lengths and prompts");
    add_kv_pool_options(s, &serve.kv_pool);
    s->add_option("--max-batched-tokens", serve.max_batched_tokens, "tokens per engine step")->check(CLI::Range(1, 1 << 24));
    s->add_option("--max-seqs", serve.max_seqs, "running sequences")->check(CLI::Range(1, 1 << 20));
    s->add_option("--max-prefill-chunk", serve.max_prefill_chunk, "prefill tokens of one request per step (0: no cap)")
        ->check(CLI::Range(0, 1 << 24));
    s->add_option("--scheduling-policy", serve.policy, "fcfs | spf | rr")->check(CLI::IsMember({"fcfs", "spf", "rr"}));
    s->add_flag("--no-prefix-cache", serve.no_prefix_cache, "disable prefix caching");
    s->add_option("--temperature", serve.temperature, "sampling temperature (default 0: greedy; nano-vllm's bench uses 0.6)")
        ->check(CLI::Range(0.0, 10.0));
    s->add_option("--top-p", serve.top_p, "nucleus mass kept (1: all)")->check(CLI::Range(0.0, 1.0));
    s->add_option("--top-k", serve.top_k, "tokens kept (0: all)")->check(CLI::NonNegativeNumber);
    s->add_option("--min-p", serve.min_p, "drop tokens below min_p x the top probability")->check(CLI::Range(0.0, 1.0));
    add_penalty_flags(s, &serve.repeat_penalty, &serve.presence_penalty, &serve.frequency_penalty);
    s->add_option("--logprobs", serve.logprobs, "each token's logprob and the top N (-1: none)")->check(CLI::Range(-1, 20));
    s->add_option("--json-out", serve.json_out, "write the result as JSON");
    s->callback([] { std::exit(cmd_bench_serve(serve)); });
}

}  // namespace mvllm::cli
