// mvllm bench spec: speculative decoding against target-only decoding, on a prompt that continues
// a passage of the training corpus (high acceptance) and on a free-form prompt (low acceptance):
// decode tok/s of the target alone, then of each draft-length policy (cost-aware fallback on),
// acceptance rates and accepted lengths, and the overhead ceiling: the target as its own draft
// (everything accepted) with the fallback off. One request at a time, greedy, EOS ignored; each
// configuration runs --repeat times on a fresh engine and the median is reported. Beside wall-clock
// decode tok/s, the process's CPU time per request gives tokens per CPU-second (prompt included),
// which the other jobs of a shared machine disturb much less (use -t 1: idle pool threads spin).
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/options.h"
#include "cli/text_generation.h"

#ifndef MVLLM_GIT_COMMIT
#define MVLLM_GIT_COMMIT "unknown"
#endif

namespace mvllm::cli {
namespace {

// Pride and Prejudice, chapter 1 (in the training text of the shipped models).
constexpr const char* kCorpusPrompt =
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be "
    "in want of a wife.\n\nHowever little known the feelings or views of such a man may be on his first "
    "entering a neighbourhood, this truth is so well fixed in the minds of the surrounding families, that";
// Nothing like the corpus.
constexpr const char* kFreeFormPrompt =
    "Kernel 6.1 boot log: PCIe link up at 16 GT/s x16; NVMe controller reset; GPU firmware 535.104 loaded;";

struct BenchSpecArgs {
    RunOptions run;
    int n_predict = 128;
    int repeat = 3;
    std::string corpus_prompt = kCorpusPrompt;
    std::string free_prompt = kFreeFormPrompt;
    bool no_self_draft = false;
    std::string json_out;
};

struct Config {
    std::string name;
    bool speculate = false;
    bool self_draft = false;
    DraftPolicy policy = DraftPolicy::Fixed;
    bool fallback = true;
};

double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct RunResult {
    RequestStats stats;
    double cpu_seconds = 0;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

int cmd_bench_spec(BenchSpecArgs& a) {
    if (a.run.draft_model.empty()) return fail(make_error("bench spec needs --draft-model"));
    auto rt = make_runtime(a.run, 1);
    if (!rt) return fail(rt.status());
    const Tokenizer* tok = rt->model->tokenizer.get();
    if (!tok) return fail(make_error("bench spec needs a target with a tokenizer: ", rt->model->tokenizer_error));
    std::fprintf(stderr, "target: %s\ndraft: %s\nbackend: %s\n", rt->model->config.summary().c_str(),
                 rt->draft_model->config.summary().c_str(), rt->backend->name().c_str());
    std::vector<Config> configs = {{"target only", false},
                                   {"fixed", true, false, DraftPolicy::Fixed},
                                   {"acceptance-rate", true, false, DraftPolicy::AcceptanceRate},
                                   {"accepted-length", true, false, DraftPolicy::AcceptedLength},
                                   {"fixed, no fallback", true, false, DraftPolicy::Fixed, false}};
    if (!a.no_self_draft) configs.push_back({"self draft (ceiling)", true, true, DraftPolicy::Fixed, false});
    const SpeculativeOptions base = rt->speculative;
    nlohmann::json rows = nlohmann::json::array();
    std::printf("| prompt | configuration | decode tok/s | speed-up | tok/CPU-s | CPU speed-up | acceptance | "
                "tokens/verification | plain steps/run |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    // One greedy request on a fresh engine (fresh controllers, no prefix reuse between runs).
    auto run_once = [&](const Config& cfg, const std::vector<int32_t>& prompt) -> Result<RunResult> {
        rt->speculative = base;
        rt->speculative.draft = !cfg.speculate ? nullptr : cfg.self_draft ? rt->decoder.get() : base.draft;
        rt->speculative.policy = cfg.policy;
        rt->speculative.fallback = cfg.fallback;
        MVLLM_ASSIGN_OR_RETURN(auto engine, make_cli_engine(*rt, a.run, static_cast<int64_t>(prompt.size()) + a.n_predict));
        Request req;
        req.prompt_ids = prompt;
        req.sampling.temperature = 0;
        req.sampling.max_tokens = a.n_predict;
        req.sampling.ignore_eos = true;
        const double cpu0 = cpu_seconds();
        MVLLM_ASSIGN_OR_RETURN(GenerationResult result, run_request(*engine, std::move(req), nullptr));
        return RunResult{result.stats, cpu_seconds() - cpu0};
    };
    for (const auto& [prompt_name, text] : {std::pair<std::string, std::string>{"corpus", a.corpus_prompt},
                                            {"free-form", a.free_prompt}}) {
        const std::vector<int32_t> prompt = tok->encode(text, tok->add_bos_default, false);
        // Repeats go round the configurations, so that a noisy machine's load falls on all alike.
        std::vector<std::vector<RunResult>> stats(configs.size());
        for (int r = 0; r < a.repeat; ++r)
            for (size_t c = 0; c < configs.size(); ++c) {
                auto st = run_once(configs[c], prompt);
                if (!st) return fail(st.status());
                stats[c].push_back(*st);
            }
        double baseline = 0, cpu_baseline = 0;
        for (size_t c = 0; c < configs.size(); ++c) {
            const Config& cfg = configs[c];
            std::vector<double> tps, cpu_tps;
            int64_t drafted = 0, accepted = 0, verifications = 0, plain_steps = 0;
            nlohmann::json runs = nlohmann::json::array();
            for (const RunResult& run : stats[c]) {
                const RequestStats& st = run.stats;
                tps.push_back(st.decode_seconds > 0 ? (st.n_output_tokens - 1) / st.decode_seconds : 0);
                cpu_tps.push_back(run.cpu_seconds > 0 ? st.n_output_tokens / run.cpu_seconds : 0);
                drafted += st.n_draft_tokens, accepted += st.n_draft_accepted, verifications += st.n_spec_steps,
                    plain_steps += st.n_fallback_steps;
                runs.push_back({{"decode_tok_s", tps.back()}, {"tok_per_cpu_s", cpu_tps.back()},
                                {"drafted", st.n_draft_tokens},
                                {"accepted", st.n_draft_accepted}, {"verifications", st.n_spec_steps},
                                {"plain_steps", st.n_fallback_steps}, {"accepted_lengths", st.accepted_lengths}});
            }
            const double tok_s = median(tps), cpu_tok_s = median(cpu_tps);
            if (!cfg.speculate) baseline = tok_s, cpu_baseline = cpu_tok_s;
            const double acceptance = drafted ? double(accepted) / drafted : 0;
            const double per_verification = verifications ? double(accepted + verifications) / verifications : 1.0;
            char accept_text[32] = "-";
            if (cfg.speculate) std::snprintf(accept_text, sizeof(accept_text), "%.1f%%", 100 * acceptance);
            std::printf("| %s | %s | %.1f | %.2fx | %.1f | %.2fx | %s | %.2f | %.1f |\n", prompt_name.c_str(),
                        cfg.name.c_str(), tok_s, baseline > 0 ? tok_s / baseline : 0.0, cpu_tok_s,
                        cpu_baseline > 0 ? cpu_tok_s / cpu_baseline : 0.0, accept_text, per_verification,
                        double(plain_steps) / a.repeat);
            rows.push_back({{"prompt", prompt_name}, {"prompt_tokens", prompt.size()}, {"configuration", cfg.name},
                            {"speculate", cfg.speculate}, {"self_draft", cfg.self_draft},
                            {"policy", cfg.speculate ? draft_policy_name(cfg.policy) : "none"},
                            {"fallback", cfg.speculate && cfg.fallback}, {"decode_tok_s_median", tok_s},
                            {"speedup", baseline > 0 ? tok_s / baseline : 0.0}, {"tok_per_cpu_s_median", cpu_tok_s},
                            {"cpu_speedup", cpu_baseline > 0 ? cpu_tok_s / cpu_baseline : 0.0},
                            {"acceptance_rate", acceptance},
                            {"tokens_per_verification", per_verification},
                            {"plain_steps_per_run", double(plain_steps) / a.repeat}, {"runs", runs}});
        }
        std::fflush(stdout);
    }
    if (!a.json_out.empty()) {
        std::time_t now = std::time(nullptr);
        char date[32];
        std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
        nlohmann::json j = {
            {"benchmark", "spec"}, {"commit", MVLLM_GIT_COMMIT}, {"date", date}, {"device", rt->backend->name()},
            {"target", rt->model->path}, {"target_geometry", rt->model->config.summary()},
            {"draft", rt->draft_model->path}, {"draft_geometry", rt->draft_model->config.summary()},
            {"draft_tokens", base.draft_tokens}, {"draft_tokens_min", base.min_draft_tokens},
            {"n_predict", a.n_predict}, {"repeat", a.repeat}, {"threads", a.run.threads},
            {"corpus_prompt", a.corpus_prompt}, {"free_form_prompt", a.free_prompt}, {"results", rows}};
        std::ofstream(a.json_out) << j.dump(2) << "\n";
    }
    return 0;
}

}  // namespace

void register_spec_commands(CLI::App& app) {
    static BenchSpecArgs a;
    CLI::App* bench = bench_group(app);
    CLI::App* s = bench->add_subcommand("spec", "Speculative decoding: target-only vs each draft policy (greedy, tok/s)");
    add_run_options(s, &a.run);
    add_draft_options(s, &a.run);
    s->add_option("-n,--n-predict", a.n_predict, "tokens generated per run")->check(CLI::Range(2, 1 << 16));
    s->add_option("--repeat", a.repeat, "runs per configuration (median reported)")->check(CLI::Range(1, 100));
    s->add_option("--corpus-prompt", a.corpus_prompt, "the high-acceptance prompt (default: Pride and Prejudice's opening)");
    s->add_option("--free-prompt", a.free_prompt, "the low-acceptance prompt");
    s->add_flag("--no-self-draft", a.no_self_draft, "skip the target-as-its-own-draft ceiling");
    s->add_option("--json-out", a.json_out, "write the results as JSON");
    s->callback([] { std::exit(cmd_bench_spec(a)); });
}

}  // namespace mvllm::cli
