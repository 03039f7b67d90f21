// Latency benchmarks of the serving engine (BENCHMARKS.md "Serving figures"):
//   bench prefix  time to first token when a prompt's prefix is already in the prefix cache
//                 (0% .. 100% overlap with a cached prompt; the target: >= 95% cut at 100%);
//   bench hol     head-of-line blocking: short requests submitted right behind a long prompt, time to
//                 first token under fcfs, spf and rr without a per-request prefill cap, and fcfs
//                 with one.
// Both run the engine on the calling thread, print a table and write JSON (--json-out).
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "cli/options.h"
#include "engine/engine.h"

#ifndef MVLLM_GIT_COMMIT
#define MVLLM_GIT_COMMIT "unknown"
#endif

namespace mvllm::cli {
namespace {

struct EngineBenchArgs {
    RunOptions run;
    KvPoolArgs kv_pool;
    int max_batched_tokens = 2048;
    int max_seqs = 256;
    int seed = 0;
    int repeat = 5;
    std::string json_out;
};

struct PrefixArgs {
    EngineBenchArgs e;
    int prompt_len = 512;
    std::string overlaps = "0,50,90,100";
};

struct HolArgs {
    HolArgs() { e.max_batched_tokens = 256; }  // below --long-len: the long prompt takes several steps
    EngineBenchArgs e;
    int long_len = 1000;
    int short_len = 16;
    int num_short = 4;
    int capped_chunk = 64;
};

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string utc_now() {
    std::time_t now = std::time(nullptr);
    char date[32];
    std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    return date;
}

double peak_rss_mib() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024.0;
}

Result<EngineOptions> engine_options(const EngineBenchArgs& a, int32_t max_prefill_chunk, SchedulingPolicy policy) {
    EngineOptions eo;
    MVLLM_TRY(apply_kv_pool_options(a.kv_pool, &eo));
    eo.block_size = a.run.kv_block_size;
    eo.kv_dtype = kv_dtype_name(a.run);
    eo.max_batched_tokens = a.max_batched_tokens;
    eo.max_seqs = a.max_seqs;
    eo.max_prefill_chunk = max_prefill_chunk;
    eo.policy = policy;
    return eo;
}

Request greedy(std::vector<int32_t> prompt, int max_tokens) {
    Request r;
    r.prompt_ids = std::move(prompt);
    r.sampling.temperature = 0;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    return r;
}

// Submits the requests (in order, before any step), runs to idle; their finish statistics.
Result<std::vector<RequestStats>> run_batch(Engine& engine, std::vector<Request> requests) {
    std::vector<RequestStats> stats(requests.size());
    std::string error;
    for (size_t i = 0; i < requests.size(); ++i) {
        MVLLM_ASSIGN_OR_RETURN(RequestId id, engine.submit(std::move(requests[i]), [&, i](const EngineEvent& e) {
            if (e.kind != EngineEvent::Kind::Finish) return;
            stats[i] = e.stats;
            if (e.reason == FinishReason::Error) error = e.error;
        }));
        (void)id;
    }
    engine.run_until_idle();
    if (!error.empty()) return make_error("request failed: ", error);
    return stats;
}

nlohmann::json common_json(const char* name, const EngineBenchArgs& a, const Runtime& rt, const Engine& engine) {
    return {{"benchmark", name},
            {"commit", MVLLM_GIT_COMMIT},
            {"date", utc_now()},
            {"device", rt.backend->name()},
            {"model", a.run.model.empty() ? std::string(kDefaultModelName) : a.run.model},
            {"geometry", rt.model->config.summary()},
            {"kv_cache", engine.startup_report()},
            {"max_batched_tokens", a.max_batched_tokens},
            {"max_seqs", a.max_seqs},
            {"repeat", a.repeat},
            {"seed", a.seed}};
}

void write_json(const std::string& path, const nlohmann::json& j) {
    if (!path.empty()) std::ofstream(path) << j.dump(2) << "\n";
}

Result<std::vector<int>> parse_percentages(const std::string& text) {
    std::vector<int> out;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        char* end = nullptr;
        const long v = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || v < 0 || v > 100) return make_error("--overlaps: not a percentage: \"", item, "\"");
        out.push_back(static_cast<int>(v));
    }
    if (out.empty()) return make_error("--overlaps: no percentages given");
    return out;
}

// For each overlap p: a fresh engine caches one prompt of prompt_len tokens (a warm-up request),
// then `repeat` requests, one at a time, send its first p% followed by fresh tokens; each
// generates one token. TTFT includes only the uncached tokens' prefill (plus the last token's,
// which is always recomputed for its logits).
int cmd_bench_prefix(const PrefixArgs& a) {
    auto overlaps = parse_percentages(a.overlaps);
    if (!overlaps) return fail(overlaps.status());
    if (a.prompt_len < 2) return fail(make_error("--prompt-len must be >= 2"));
    auto rt = make_runtime(a.e.run, 1);
    if (!rt) return fail(rt.status());
    const int n_vocab = rt->model->config.n_vocab;
    std::mt19937 rng(a.e.seed);
    auto random_ids = [&](int n) {
        std::vector<int32_t> v(n);
        for (auto& t : v) t = static_cast<int32_t>(rng() % n_vocab);
        return v;
    };
    const std::vector<int32_t> cached = random_ids(a.prompt_len);
    nlohmann::json rows = nlohmann::json::array();
    std::printf("| overlap %% | prompt | TTFT median ms | TTFT min ms | prefix tokens reused | TTFT cut vs 0%% |\n");
    std::printf("|---|---|---|---|---|---|\n");
    double ttft_zero = 0;
    nlohmann::json meta;
    for (int overlap : *overlaps) {
        auto eo = engine_options(a.e, 0, SchedulingPolicy::Fcfs);
        if (!eo) return fail(eo.status());
        auto engine = Engine::create(*rt->decoder, *eo);
        if (!engine) return fail(engine.status());
        if (meta.is_null()) {
            meta = common_json("prefix", a.e, *rt, **engine);
            std::fprintf(stderr, "backend: %s\n%s\n", rt->backend->name().c_str(), (*engine)->startup_report().c_str());
        }
        if (auto warm = run_batch(**engine, {greedy(cached, 1)}); !warm) return fail(warm.status());
        const int n_shared = static_cast<int>(static_cast<int64_t>(a.prompt_len) * overlap / 100);
        std::vector<double> ttft;
        int64_t reused = 0;
        for (int i = 0; i < a.e.repeat; ++i) {
            std::vector<int32_t> prompt(cached.begin(), cached.begin() + n_shared);
            const std::vector<int32_t> tail = random_ids(a.prompt_len - n_shared);
            prompt.insert(prompt.end(), tail.begin(), tail.end());
            auto st = run_batch(**engine, {greedy(std::move(prompt), 1)});
            if (!st) return fail(st.status());
            ttft.push_back((*st)[0].ttft_seconds);
            reused = (*st)[0].n_prefix_tokens_reused;
        }
        const double med = median(ttft);
        if (overlap == 0) ttft_zero = med;
        const double cut = ttft_zero > 0 ? 1.0 - med / ttft_zero : 0.0;
        std::printf("| %d | %d | %.2f | %.2f | %lld | %s |\n", overlap, a.prompt_len, 1e3 * med,
                    1e3 * *std::min_element(ttft.begin(), ttft.end()), (long long)reused,
                    ttft_zero > 0 ? (std::to_string(static_cast<int>(100 * cut + 0.5)) + "%").c_str() : "-");
        rows.push_back({{"overlap_pct", overlap}, {"prompt_len", a.prompt_len}, {"ttft_s", ttft},
                        {"ttft_median_s", med}, {"prefix_tokens_reused", reused},
                        {"ttft_cut_vs_0", ttft_zero > 0 ? nlohmann::json(cut) : nlohmann::json(nullptr)}});
    }
    meta["prompt_len"] = a.prompt_len;
    meta["rows"] = rows;
    meta["peak_rss_mib"] = peak_rss_mib();
    write_json(a.e.json_out, meta);
    return 0;
}

// One long prompt and then num_short short ones are submitted together (all waiting at the first
// step); the short ones' time to first token under each configuration. The engine is warmed up
// with one small request first.
int cmd_bench_hol(const HolArgs& a) {
    if (a.long_len < 1 || a.short_len < 1 || a.num_short < 1) return fail(make_error("lengths and counts must be >= 1"));
    auto rt = make_runtime(a.e.run, 1);
    if (!rt) return fail(rt.status());
    const int n_vocab = rt->model->config.n_vocab;
    struct Config {
        const char* name;
        SchedulingPolicy policy;
        int32_t chunk;
    };
    const Config configs[] = {{"fcfs", SchedulingPolicy::Fcfs, 0},
                              {"spf", SchedulingPolicy::ShortestPrefillFirst, 0},
                              {"rr", SchedulingPolicy::RoundRobin, 0},
                              {"fcfs+chunk", SchedulingPolicy::Fcfs, a.capped_chunk}};
    nlohmann::json rows = nlohmann::json::array();
    nlohmann::json meta;
    std::printf("| policy | max prefill chunk | short TTFT median ms | short TTFT max ms | long TTFT ms | short TTFT cut vs fcfs |\n");
    std::printf("|---|---|---|---|---|---|\n");
    double fcfs_short = 0;
    for (const Config& c : configs) {
        auto eo = engine_options(a.e, c.chunk, c.policy);
        if (!eo) return fail(eo.status());
        eo->enable_prefix_cache = false;  // every repetition computes its prompts
        auto engine = Engine::create(*rt->decoder, *eo);
        if (!engine) return fail(engine.status());
        if (meta.is_null()) {
            meta = common_json("hol", a.e, *rt, **engine);
            std::fprintf(stderr, "backend: %s\n%s\n", rt->backend->name().c_str(), (*engine)->startup_report().c_str());
        }
        std::mt19937 rng(a.e.seed);
        auto random_ids = [&](int n) {
            std::vector<int32_t> v(n);
            for (auto& t : v) t = static_cast<int32_t>(rng() % n_vocab);
            return v;
        };
        if (auto warm = run_batch(**engine, {greedy(random_ids(8), 1)}); !warm) return fail(warm.status());
        std::vector<double> short_ttft, long_ttft;
        for (int rep = 0; rep < a.e.repeat; ++rep) {
            std::vector<Request> requests = {greedy(random_ids(a.long_len), 1)};
            for (int i = 0; i < a.num_short; ++i) requests.push_back(greedy(random_ids(a.short_len), 1));
            auto st = run_batch(**engine, std::move(requests));
            if (!st) return fail(st.status());
            long_ttft.push_back((*st)[0].ttft_seconds);
            for (size_t i = 1; i < st->size(); ++i) short_ttft.push_back((*st)[i].ttft_seconds);
        }
        const double med = median(short_ttft);
        if (c.policy == SchedulingPolicy::Fcfs && c.chunk == 0) fcfs_short = med;
        const double cut = fcfs_short > 0 ? 1.0 - med / fcfs_short : 0.0;
        std::printf("| %s | %s | %.2f | %.2f | %.2f | %d%% |\n", c.name,
                    c.chunk > 0 ? std::to_string(c.chunk).c_str() : "none", 1e3 * med,
                    1e3 * *std::max_element(short_ttft.begin(), short_ttft.end()), 1e3 * median(long_ttft),
                    static_cast<int>(100 * cut + 0.5));
        rows.push_back({{"config", c.name}, {"max_prefill_chunk", c.chunk}, {"short_ttft_s", short_ttft},
                        {"short_ttft_median_s", med}, {"long_ttft_median_s", median(long_ttft)},
                        {"short_ttft_cut_vs_fcfs", cut}});
    }
    meta["long_len"] = a.long_len;
    meta["short_len"] = a.short_len;
    meta["num_short"] = a.num_short;
    meta["rows"] = rows;
    meta["peak_rss_mib"] = peak_rss_mib();
    write_json(a.e.json_out, meta);
    return 0;
}

void add_engine_bench_options(CLI::App* s, EngineBenchArgs* a) {
    add_run_options(s, &a->run);
    add_kv_pool_options(s, &a->kv_pool);
    s->add_option("--max-batched-tokens", a->max_batched_tokens, "tokens per engine step")->check(CLI::Range(1, 1 << 24));
    s->add_option("--max-seqs", a->max_seqs, "running sequences")->check(CLI::Range(1, 1 << 20));
    s->add_option("--seed", a->seed, "seed of the random prompts");
    s->add_option("--repeat", a->repeat, "measurements per row (median reported)")->check(CLI::Range(1, 1000));
    s->add_option("--json-out", a->json_out, "write the result as JSON");
}

}  // namespace

void register_engine_latency_commands(CLI::App& app) {
    static PrefixArgs prefix;
    static HolArgs hol;
    CLI::App* bench = app.get_subcommand("bench");
    CLI::App* p = bench->add_subcommand("prefix", "Prefix-cache reuse: time to first token at 0..100% prefix overlap");
    add_engine_bench_options(p, &prefix.e);
    p->add_option("--prompt-len", prefix.prompt_len, "prompt tokens")->check(CLI::Range(2, 1 << 20));
    p->add_option("--overlaps", prefix.overlaps, "overlaps with the cached prompt, percent, comma-separated");
    p->callback([] { std::exit(cmd_bench_prefix(prefix)); });
    CLI::App* h = bench->add_subcommand("hol", "Head-of-line blocking: short requests behind a long prompt, per policy");
    add_engine_bench_options(h, &hol.e);
    h->add_option("--long-len", hol.long_len, "prompt tokens of the long request")->check(CLI::Range(1, 1 << 24));
    h->add_option("--short-len", hol.short_len, "prompt tokens of each short request")->check(CLI::Range(1, 1 << 20));
    h->add_option("--num-short", hol.num_short, "short requests behind the long one")->check(CLI::Range(1, 4096));
    h->add_option("--capped-chunk", hol.capped_chunk, "max prefill chunk of the fcfs+chunk row")->check(CLI::Range(1, 1 << 24));
    h->callback([] { std::exit(cmd_bench_hol(hol)); });
}

}  // namespace mvllm::cli
