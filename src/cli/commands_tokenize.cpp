// Tokenizer commands: `mvllm tokenize` (text -> ids and pieces) and `mvllm bench tokenize`
// (encode throughput in MB/s over the test corpus).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/options.h"
#include "tokenizer/tokenizer.h"

namespace mvllm::cli {
namespace {

struct TokenizeArgs {
    std::string model;
    std::string text, text_positional, file;
    bool json = false, add_bos = false, parse_special = false, ids_only = false;
};

int cmd_tokenize(const TokenizeArgs& a) {
    std::string text = !a.text.empty() ? a.text : a.text_positional;
    if (!a.file.empty()) {
        std::ifstream in(a.file, std::ios::binary);
        if (!in) return fail(Status::error(a.file + ": cannot open"));
        std::stringstream ss;
        ss << in.rdbuf();
        text = ss.str();
    }
    auto path = model_path_or_default(a.model);
    if (!path) return fail(path.status());
    auto tok = Tokenizer::from_path(*path);
    if (!tok) return fail(tok.status());
    const std::vector<int32_t> ids = (*tok)->encode(text, a.add_bos, a.parse_special);
    if (a.json) {
        std::printf("%s\n", nlohmann::json(ids).dump().c_str());
    } else if (a.ids_only) {
        for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
        std::printf("\n");
    } else {
        for (int32_t id : ids) {
            const std::string piece = nlohmann::json((*tok)->token_bytes(id)).dump(-1, ' ', false,
                                                                                   nlohmann::json::error_handler_t::replace);
            std::printf("%6d  %s\n", id, piece.c_str());
        }
    }
    return 0;
}

struct BenchTokenizeArgs {
    std::vector<std::string> tokenizers;
    std::string corpus = "tests/data/tokenizer/corpus.jsonl";
    int passes = 100;
};

int cmd_bench_tokenize(const BenchTokenizeArgs& a) {
    std::vector<std::string> lines;
    {
        std::ifstream in(a.corpus);
        if (!in) return fail(Status::error(a.corpus + ": cannot open (run from the repository root or pass --corpus)"));
        std::string line;
        try {
            while (std::getline(in, line))
                if (!line.empty()) lines.push_back(nlohmann::json::parse(line).get<std::string>());
        } catch (const nlohmann::json::exception& e) {
            return fail(Status::error(a.corpus + ": " + e.what()));
        }
    }
    size_t bytes_per_pass = 0;
    for (const auto& l : lines) bytes_per_pass += l.size();
    std::vector<std::string> paths = a.tokenizers;
    if (paths.empty()) paths = {"tests/data/tokenizers/qwen3", "tests/data/tokenizers/llama3"};

    std::printf("corpus: %zu lines, %zu bytes per pass, %d passes\n", lines.size(), bytes_per_pass, a.passes);
    for (const std::string& path : paths) {
        auto t0 = std::chrono::steady_clock::now();
        auto tok = Tokenizer::from_path(path);
        if (!tok) return fail(tok.status());
        const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::vector<double> seconds;
        size_t n_tokens = 0;
        for (int pass = 0; pass < a.passes; ++pass) {
            auto start = std::chrono::steady_clock::now();
            size_t n = 0;
            for (const std::string& l : lines) n += (*tok)->encode(l, false, false).size();
            seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
            n_tokens = n;
        }
        const double cold = seconds[0];
        std::vector<double> warm(seconds.begin() + (seconds.size() > 1 ? 1 : 0), seconds.end());
        std::sort(warm.begin(), warm.end());
        const double median = warm[warm.size() / 2];
        const double mb = bytes_per_pass / 1e6;
        std::printf("%s: load %.2f s | first pass (word cache cold) %.2f MB/s | later passes (median) %.2f MB/s, "
                    "%.2f Mtok/s | %zu tokens per pass\n",
                    path.c_str(), load_s, mb / cold, mb / median, n_tokens / median / 1e6, n_tokens);
    }
    return 0;
}

}  // namespace

void register_tokenize_commands(CLI::App& app) {
    static TokenizeArgs tz;
    CLI::App* t = app.add_subcommand("tokenize", "Print the token ids (and pieces) of a text");
    t->add_option("-m,--model,--tokenizer", tz.model, "GGUF file (vocab-only too) or folder with tokenizer.json (default: the shipped model)");
    t->add_option("input", tz.text_positional, "the text (or use --text / --file)");
    t->add_option("--text", tz.text, "the text");
    t->add_option("--file", tz.file, "read the text from a file");
    t->add_flag("--json", tz.json, "print a JSON array of ids");
    t->add_flag("--ids", tz.ids_only, "print the ids on one line");
    t->add_flag("--add-bos", tz.add_bos, "prepend BOS (when the tokenizer asks for one)");
    t->add_flag("--parse-special", tz.parse_special, "parse special tokens written in the text");
    t->callback([] { std::exit(cmd_tokenize(tz)); });

    CLI::App* bench = bench_group(app);
    static BenchTokenizeArgs bt;
    CLI::App* b = bench->add_subcommand("tokenize", "Encode throughput (MB/s) on the tokenizer test corpus");
    b->add_option("-t,--tokenizer", bt.tokenizers,
                  "GGUF or tokenizer folder, repeatable (default: tests/data/tokenizers/{qwen3,llama3})");
    b->add_option("--corpus", bt.corpus, "JSONL corpus, one string per line");
    b->add_option("--passes", bt.passes, "passes over the corpus")->check(CLI::Range(1, 100000));
    b->callback([] { std::exit(cmd_bench_tokenize(bt)); });
}

}  // namespace mvllm::cli
