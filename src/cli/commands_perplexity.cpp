// mvllm perplexity: the perplexity of a model over a text file, measured as llama.cpp's perplexity
// tool does (engine/perplexity.h: windows of --ctx tokens, each window's second half scored).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli/options.h"
#include "engine/engine.h"
#include "engine/perplexity.h"
#include "model/decoder.h"
#include "tokenizer/tokenizer.h"

namespace mvllm::cli {
namespace {

struct PerplexityArgs {
    RunOptions run;
    std::string file;
    bool ids = false;  // the file holds token ids (a model without a tokenizer, e.g. make-model's)
    int64_t ctx = 512;
    int parallel = 4;
    int64_t max_windows = 0;
    std::string json_out;
};

int cmd_perplexity(const PerplexityArgs& a) {
    std::ifstream in(a.file, std::ios::binary);
    if (!in) return fail(make_error("cannot read ", a.file));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto rt = make_runtime(a.run, 1);  // the engine sizes its own KV pool
    if (!rt) return fail(rt.status());
    const Tokenizer* tok = rt->model->tokenizer.get();
    std::vector<int32_t> tokens;
    if (a.ids) {
        auto ids = parse_ids(text);
        if (!ids) return fail(ids.status());
        tokens = std::move(*ids);
    } else {
        if (!tok) return fail(make_error("perplexity of a text needs the model's tokenizer (or --ids): ", rt->model->tokenizer_error));
        tokens = tok->encode(text, /*add_bos=*/false, /*parse_special=*/false);
    }
    if (a.ctx > rt->model->config.n_ctx_train)
        std::fprintf(stderr, "warning: --ctx %lld is beyond the %lld tokens the model was trained on\n",
                     static_cast<long long>(a.ctx), static_cast<long long>(rt->model->config.n_ctx_train));

    // --parallel windows at a time; every scored row's logits come to the host, so a step runs at
    // most 512 rows (~310 MB of logits for a 152K vocabulary) unless --prefill-chunk says otherwise.
    EngineOptions eo;
    eo.block_size = a.run.kv_block_size;
    eo.kv_dtype = kv_dtype_name(a.run);
    eo.max_seqs = a.parallel;
    eo.kv_cache_blocks = a.parallel * ((a.ctx + 1 + eo.block_size - 1) / eo.block_size + 1);
    eo.max_model_len = std::max<int64_t>(a.ctx + 1, rt->model->config.n_ctx_train);
    eo.max_batched_tokens = a.run.prefill_chunk > 0 ? a.run.prefill_chunk : 512;
    eo.max_prefill_chunk = eo.max_batched_tokens;
    eo.warmup = EngineOptions::Warmup::Off;  // no decode steps to record
    auto engine = Engine::create(*rt->decoder, eo, tok);
    if (!engine) return fail(engine.status());

    PerplexityOptions po;
    po.ctx = a.ctx;
    po.bos = tok && tok->add_bos_default ? tok->bos_id : -1;
    po.max_windows = a.max_windows;
    const auto t0 = std::chrono::steady_clock::now();
    auto r = perplexity(**engine, tokens, po, [](int64_t done, int64_t total) {
        std::fprintf(stderr, "\r[%lld/%lld windows]", static_cast<long long>(done), static_cast<long long>(total));
    });
    std::fprintf(stderr, "\n");
    if (!r) return fail(r.status());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double tok_s = static_cast<double>(r->n_windows * a.ctx) / seconds;
    std::printf("%lld window(s) of %lld tokens (%zu in the file), %lld scored: PPL = %.6g +/- %.6g (%.1f tok/s)\n",
                static_cast<long long>(r->n_windows), static_cast<long long>(a.ctx), tokens.size(),
                static_cast<long long>(r->n_scored), r->ppl, r->ppl_error, tok_s);
    if (!a.json_out.empty()) {
        const nlohmann::json j = {{"benchmark", "perplexity"}, {"model", a.run.model.empty() ? kDefaultModelName : a.run.model},
                                  {"file", a.file}, {"ctx", a.ctx}, {"tokens", tokens.size()},
                                  {"windows", r->n_windows}, {"scored", r->n_scored}, {"mean_nll", r->mean_nll},
                                  {"ppl", r->ppl}, {"ppl_error", r->ppl_error}, {"tok_s", tok_s},
                                  {"device", rt->backend->name()}};
        std::ofstream(a.json_out) << j.dump(2) << "\n";
    }
    return 0;
}

}  // namespace

void register_perplexity_command(CLI::App& app) {
    static PerplexityArgs args;
    CLI::App* p = app.add_subcommand("perplexity", "Perplexity over a text file (llama.cpp's method)");
    add_run_options(p, &args.run);
    p->add_option("-f,--file", args.file, "the text (with --ids: token ids, separated by spaces or commas)")->required();
    p->add_flag("--ids", args.ids, "the file holds token ids, not text");
    p->add_option("--ctx", args.ctx, "tokens per window; each window's second half is scored")->check(CLI::Range(4, 1 << 20));
    p->add_option("--parallel", args.parallel, "windows run at once")->check(CLI::Range(1, 1024));
    p->add_option("--max-windows", args.max_windows, "score at most this many windows (0: all)")->check(CLI::NonNegativeNumber);
    p->add_option("--json-out", args.json_out, "write the result as JSON");
    p->callback([] { std::exit(cmd_perplexity(args)); });
}

}  // namespace mvllm::cli
