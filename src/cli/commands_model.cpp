// Commands that run a model: logits, generate, bench decode.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/options.h"
#include "cli/text_generation.h"
#include "model/generate.h"

#ifndef MVLLM_GIT_COMMIT
#define MVLLM_GIT_COMMIT "unknown"
#endif

namespace mvllm::cli {
namespace {

struct LogitsArgs {
    RunOptions run;
    std::string prompt_ids;
    bool json = false;
    bool all_positions = false;
};

int cmd_logits(const LogitsArgs& a) {
    auto ids = parse_ids(a.prompt_ids);
    if (!ids) return fail(ids.status());
    auto rt = make_runtime(a.run, static_cast<int64_t>(ids->size()));
    if (!rt) return fail(rt.status());
    SequenceRunner runner(*rt->decoder, *rt->cache, a.run.prefill_chunk);
    std::vector<float> logits;
    if (Status st = runner.prefill(*ids, &logits, a.all_positions); !st) return fail(st);
    const int64_t n_vocab = rt->model->config.n_vocab;
    const int64_t n_rows = static_cast<int64_t>(logits.size()) / n_vocab;
    std::string out;
    out.reserve(logits.size() * 14);
    char buf[32];
    if (a.all_positions) out += "[";
    for (int64_t r = 0; r < n_rows; ++r) {
        out += r ? ",[" : "[";
        for (int64_t i = 0; i < n_vocab; ++i) {
            std::snprintf(buf, sizeof(buf), i ? ",%.9g" : "%.9g", logits[r * n_vocab + i]);
            out += buf;
        }
        out += "]";
    }
    if (a.all_positions) out += "]";
    std::printf("%s\n", out.c_str());
    return 0;
}

struct GenerateArgs {
    RunOptions run;
    std::string prompt_ids, prompt, system;
    int n_predict = 128;
    bool ids_out = false;
    bool chat = false;
    SamplingFlags sampling;
};

// Streams text (or ids) to stdout and a statistics line to stderr.
int cmd_generate(const GenerateArgs& a) {
    if (a.prompt_ids.empty() == a.prompt.empty()) return fail(make_error("give exactly one of --prompt and --prompt-ids"));
    Request req;
    const bool from_ids = !a.prompt_ids.empty();
    if (from_ids) {
        auto ids = parse_ids(a.prompt_ids);
        if (!ids) return fail(ids.status());
        req.prompt_ids = *ids;
    }
    auto rt = make_runtime(a.run, 1);
    if (!rt) return fail(rt.status());
    const Tokenizer* tok = rt->model->tokenizer.get();
    if (!from_ids) {
        if (!tok) return fail(make_error("--prompt needs a tokenizer: ", rt->model->tokenizer_error));
        if (a.chat) {
            nlohmann::ordered_json messages = nlohmann::ordered_json::array();
            if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
            messages.push_back({{"role", "user"}, {"content", a.prompt}});
            auto ids = encode_chat(*tok, messages);
            if (!ids) return fail(ids.status());
            req.prompt_ids = *ids;
        } else {
            req.prompt_ids = tok->encode(a.prompt, tok->add_bos_default, /*parse_special=*/false);
        }
    }
    req.sampling = to_sampling_params(a.sampling, from_ids, a.n_predict);
    auto engine = make_cli_engine(*rt, a.run, static_cast<int64_t>(req.prompt_ids.size()) + a.n_predict);
    if (!engine) return fail(engine.status());
    const bool print_ids = a.ids_out || !tok;
    bool first = true;
    auto result = run_request(**engine, std::move(req), [&](const EngineEvent& e) {
        if (print_ids) {
            for (int32_t id : e.token_ids) {
                std::printf(first ? "%d" : " %d", id);
                first = false;
            }
        } else {
            std::fwrite(e.text.data(), 1, e.text.size(), stdout);
        }
        std::fflush(stdout);
    });
    std::printf("\n");
    std::fflush(stdout);  // the text's last line before the statistics line on stderr
    if (!result) return fail(result.status());
    std::fprintf(stderr, "%s, finish: %s\n", stats_line(result->stats).c_str(), finish_reason_name(result->reason));
    return 0;
}

struct BenchDecodeArgs {
    RunOptions run;
    int prompt_len = 128;
    int n_predict = 127;
    int repeat = 1;
    int warmup = 1;
    std::string json_out;
};

double peak_rss_mib() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024.0;
}

int cmd_bench_decode(const BenchDecodeArgs& a) {
    auto rt = make_runtime(a.run, static_cast<int64_t>(a.prompt_len) + a.n_predict + 1);
    if (!rt) return fail(rt.status());
    const ModelConfig& c = rt->model->config;
    std::mt19937 rng(1234);
    std::vector<int32_t> prompt(a.prompt_len);
    for (auto& id : prompt) id = static_cast<int32_t>(rng() % c.n_vocab);
    // Warm-up: one token touches every weight page, so RSS growth below is what the runs add
    // (attention scratch, activations), not the model being paged in.
    {
        SequenceRunner warm(*rt->decoder, *rt->cache, a.run.prefill_chunk);
        std::vector<float> logits;
        if (Status st = warm.prefill({prompt[0]}, &logits); !st) return fail(st);
    }
    const double rss_loaded = peak_rss_mib();
    std::fprintf(stderr, "model: %s\nbackend: %s\n", c.summary().c_str(), rt->backend->name().c_str());
    nlohmann::json runs = nlohmann::json::array(), warmup_runs = nlohmann::json::array();
    std::vector<double> prefill_tps, decode_tps;
    // The first `warmup` runs are the same work, untimed (as llama-bench's warm-up run): on the GPU
    // they record the step graphs of each context bucket and time cuBLASLt's algorithms, which a
    // first run would otherwise count (on the H200, 1-5 % of a B3 decode figure and 9-30x of a pp512
    // one: bench/NOTES.md, fifty-fourth session).
    for (int r = 0; r < a.warmup + a.repeat; ++r) {
        SequenceRunner runner(*rt->decoder, *rt->cache, a.run.prefill_chunk);
        std::vector<int32_t> out;
        GenerationTimings t;
        // n_predict decode steps: the greedy loop runs n + 1 tokens (the first comes from prefill).
        if (Status st = runner.greedy(prompt, a.n_predict + 1, &out, &t); !st) return fail(st);
        const double prefill = t.n_prompt / t.prefill_seconds, decode = t.n_decoded / t.decode_seconds;
        (r < a.warmup ? warmup_runs : runs).push_back({{"prefill_tok_s", prefill}, {"decode_tok_s", decode}});
        if (r < a.warmup) continue;
        prefill_tps.push_back(prefill);
        decode_tps.push_back(decode);
    }
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    const double rss_peak = peak_rss_mib();
    std::printf("| model | prompt | decode steps | threads | attention | act | kv | prefill tok/s | decode tok/s | peak RSS MiB | RSS growth MiB |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    const std::string kv = kv_dtype_name(a.run);
    std::printf("| %s | %d | %d | %d | %s | %s | %s/%d | %.1f | %.1f | %.0f | %.1f |\n", a.run.model.c_str(),
                a.prompt_len, a.n_predict, a.run.threads, a.run.attention.c_str(),
                a.run.activation_dtype.c_str(), kv.c_str(), a.run.kv_block_size, median(prefill_tps),
                median(decode_tps), rss_peak, rss_peak - rss_loaded);
    if (!a.json_out.empty()) {
        std::time_t now = std::time(nullptr);
        char date[32];
        std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
        nlohmann::json j = {
            {"benchmark", "decode"}, {"commit", MVLLM_GIT_COMMIT}, {"date", date},
            {"device", rt->backend->name()}, {"model", a.run.model}, {"geometry", c.summary()},
            {"weight_bytes", rt->model->weight_bytes()}, {"prompt_len", a.prompt_len},
            {"decode_steps", a.n_predict}, {"threads", a.run.threads}, {"attention", a.run.attention},
            {"activation_dtype", a.run.activation_dtype}, {"kv_dtype", kv},
            {"kv_block_size", a.run.kv_block_size}, {"fed_tokens_on_device", rt->backend->embeds_fed_tokens()},
            {"warmup_runs", warmup_runs}, {"runs", runs},
            {"prefill_tok_s_median", median(prefill_tps)}, {"decode_tok_s_median", median(decode_tps)},
            {"peak_rss_mib", rss_peak}, {"rss_growth_mib", rss_peak - rss_loaded}};
        std::ofstream(a.json_out) << j.dump(2) << "\n";
    }
    return 0;
}

}  // namespace

void register_model_commands(CLI::App& app) {
    static LogitsArgs logits;
    CLI::App* l = app.add_subcommand("logits", "Print the logits of the prompt's last position as JSON");
    add_run_options(l, &logits.run);
    l->add_option("--prompt-ids", logits.prompt_ids, "token ids, e.g. \"1 2 3\"")->required();
    l->add_flag("--json", logits.json, "JSON array output (the only format)");
    l->add_flag("--all-positions", logits.all_positions, "one row per prompt position");
    l->callback([] { std::exit(cmd_logits(logits)); });

    static GenerateArgs gen;
    CLI::App* g = app.add_subcommand("generate", "Continue a prompt (text or token ids), streaming to stdout");
    add_run_options(g, &gen.run);
    add_draft_options(g, &gen.run);
    g->add_option("-p,--prompt", gen.prompt, "prompt text");
    g->add_option("--prompt-ids", gen.prompt_ids, "prompt token ids, e.g. \"1 2 3\" (greedy unless --temperature)");
    g->add_option("-n,--n-predict", gen.n_predict, "tokens to generate")->check(CLI::Range(1, 1 << 24));
    g->add_flag("--ids-out", gen.ids_out, "print generated token ids instead of text");
    g->add_flag("--chat", gen.chat, "wrap the prompt as a user message in the model's chat template");
    g->add_option("--system", gen.system, "system message (with --chat)");
    add_sampling_flags(g, &gen.sampling);
    g->callback([] { std::exit(cmd_generate(gen)); });

    static BenchDecodeArgs bench;
    CLI::App* b = bench_group(app);
    CLI::App* bd = b->add_subcommand("decode", "Prefill and decode tok/s on a random prompt");
    add_run_options(bd, &bench.run);
    bd->add_option("--prompt-len", bench.prompt_len, "prompt tokens")->check(CLI::Range(1, 1 << 20));
    bd->add_option("-n,--n-predict", bench.n_predict, "decode steps")->check(CLI::Range(1, 1 << 20));
    bd->add_option("--repeat", bench.repeat, "timed runs (median reported)")->check(CLI::Range(1, 100));
    bd->add_option("--warmup", bench.warmup, "untimed runs of the same work first")->check(CLI::Range(0, 10));
    bd->add_option("--json-out", bench.json_out, "write the result as JSON");
    bd->callback([] { std::exit(cmd_bench_decode(bench)); });
}

}  // namespace mvllm::cli
