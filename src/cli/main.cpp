// mvllm: the command-line front end. Each subcommand lives in a commands_*.cpp file.
#include <CLI/CLI.hpp>

#include "cli/options.h"

int main(int argc, char** argv) {
    CLI::App app{"mvllm: a small, fast LLM inference engine (Llama and Qwen2 families)"};
    app.require_subcommand(1);
    mvllm::cli::register_file_commands(app);
    mvllm::cli::register_model_commands(app);
    mvllm::cli::register_template_commands(app);
    mvllm::cli::register_chat_commands(app);
    mvllm::cli::register_engine_commands(app);
    mvllm::cli::register_engine_latency_commands(app);
    mvllm::cli::register_tokenize_commands(app);
    mvllm::cli::register_serve_commands(app);
    mvllm::cli::register_bench_attention_command(app);
    mvllm::cli::register_bench_serve_command(app);
    mvllm::cli::register_kernel_commands(app);
    mvllm::cli::register_spec_commands(app);
    mvllm::cli::register_perplexity_command(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    return 0;
}
