// `mvllm chat`: a multi-turn conversation through the model's chat template. Interactive on a
// terminal ("> " prompts); with piped input each line is one user turn. Earlier turns are reused
// from the engine's prefix cache, so only the new turn is prefilled.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "cli/text_generation.h"

namespace mvllm::cli {
namespace {

struct ChatArgs {
    RunOptions run;
    std::string system;
    int n_predict = 512;
    bool stats = false;
    SamplingFlags sampling;
};

int cmd_chat(const ChatArgs& a) {
    auto rt = make_runtime(a.run, 1);
    if (!rt) return fail(rt.status());
    const Tokenizer* tok = rt->model->tokenizer.get();
    if (!tok) return fail(make_error("chat needs a tokenizer: ", rt->model->tokenizer_error));
    const int64_t context = a.run.ctx_size > 0 ? a.run.ctx_size : std::max<int64_t>(rt->model->config.n_ctx_train, 2048);
    RunOptions engine_opts = a.run;
    engine_opts.ctx_size = context;
    auto engine = make_cli_engine(*rt, engine_opts, context);
    if (!engine) return fail(engine.status());
    const bool interactive = isatty(STDIN_FILENO) == 1;
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
    std::string line;
    for (;;) {
        if (interactive) {
            std::fputs("> ", stdout);
            std::fflush(stdout);
        }
        if (!std::getline(std::cin, line)) break;
        if (line.empty()) continue;
        if (interactive && (line == "/exit" || line == "/quit")) break;
        messages.push_back({{"role", "user"}, {"content", line}});
        auto ids = encode_chat(*tok, messages);
        if (!ids) return fail(ids.status());
        if (static_cast<int64_t>(ids->size()) >= context) {
            std::fprintf(stderr, "error: the conversation (%zu tokens) no longer fits the context (%lld)\n",
                         ids->size(), (long long)context);
            return 1;
        }
        Request req;
        req.prompt_ids = *ids;
        req.sampling = to_sampling_params(a.sampling, false,
                                          static_cast<int>(std::min<int64_t>(a.n_predict, context - ids->size())));
        auto result = run_request(**engine, std::move(req), [](const EngineEvent& e) {
            std::fwrite(e.text.data(), 1, e.text.size(), stdout);
            std::fflush(stdout);
        });
        std::fputc('\n', stdout);
        std::fflush(stdout);
        if (!result) return fail(result.status());
        if (a.stats || interactive) std::fprintf(stderr, "[%s]\n", stats_line(result->stats).c_str());
        messages.push_back({{"role", "assistant"}, {"content", result->text}});
    }
    return 0;
}

}  // namespace

void register_chat_commands(CLI::App& app) {
    static ChatArgs c;
    CLI::App* cmd = app.add_subcommand("chat", "Multi-turn chat through the model's chat template (stdin lines are turns)");
    add_run_options(cmd, &c.run);
    add_draft_options(cmd, &c.run);
    cmd->add_option("--system", c.system, "system message");
    cmd->add_option("-n,--n-predict", c.n_predict, "maximum tokens per reply")->check(CLI::Range(1, 1 << 20));
    cmd->add_flag("--stats", c.stats, "print a statistics line after each reply (always on a terminal)");
    add_sampling_flags(cmd, &c.sampling);
    cmd->callback([] { std::exit(cmd_chat(c)); });
}

}  // namespace mvllm::cli
