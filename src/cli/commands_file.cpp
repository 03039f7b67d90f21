// Commands on model files: inspect, convert, make-model.
#include <cstdio>

#include "cli/options.h"
#include "io/gguf.h"
#include "model/export.h"

namespace mvllm::cli {
namespace {

std::string value_string(const GgufValue& v) {
    if (const std::string* s = v.as_string()) {
        std::string out = "\"" + s->substr(0, 80) + (s->size() > 80 ? "...\"" : "\"");
        for (char& ch : out)
            if (ch == '\n') ch = ' ';
        return out;
    }
    if (const GgufArray* arr = v.as_array()) {
        std::string out = std::string("[") + gguf_type_name(arr->elem_type) + " x " +
                          std::to_string(arr->items.size()) + "]";
        for (size_t i = 0; i < std::min<size_t>(arr->items.size(), 4); ++i)
            out += (i ? ", " : " ") + value_string(arr->items[i]);
        return out + (arr->items.size() > 4 ? ", ..." : "");
    }
    if (v.type == GgufType::BOOL) return *v.as_bool() ? "true" : "false";
    if (v.is_float()) return std::to_string(*v.as_float());
    return std::to_string(*v.as_int());
}

int cmd_inspect(const std::string& path) {
    auto f = GgufFile::open(path);
    if (!f) return fail(f.status());
    const GgufFile& g = **f;
    std::printf("%s: GGUF v%u, %zu metadata keys, %zu tensors, alignment %llu, %zu bytes\n\n",
                path.c_str(), g.version(), g.metadata().size(), g.tensors().size(),
                (unsigned long long)g.alignment(), g.file_size());
    for (const auto& [key, value] : g.metadata())
        std::printf("  %-48s %-8s %s\n", key.c_str(), gguf_type_name(value.type), value_string(value).c_str());
    std::printf("\n  %-40s %-6s %-22s %14s %12s\n", "tensor", "type", "shape", "offset", "bytes");
    size_t total = 0;
    for (const GgufTensorInfo& t : g.tensors()) {
        std::printf("  %-40s %-6s %-22s %14llu %12zu\n", t.name.c_str(), type_name(t.type),
                    shape_string(t.ne).c_str(), (unsigned long long)t.offset, t.n_bytes);
        total += t.n_bytes;
    }
    std::printf("\n  %zu tensors, %.2f MiB of tensor data\n", g.tensors().size(), total / 1048576.0);
    if (auto c = config_from_gguf(g)) std::printf("  %s\n", c->summary().c_str());
    else std::printf("  (not a loadable model: %s)\n", c.status().message().c_str());
    return 0;
}

struct ConvertArgs {
    std::string input, output, type = "f16";
    int threads = 0;
};

int cmd_convert(const ConvertArgs& a) {
    FileType ft;
    if (!parse_file_type(a.type, &ft)) return fail(make_error("unknown --type ", a.type));
    auto model = load_model(a.input);
    if (!model) return fail(model.status());
    ThreadPool pool(a.threads > 0 ? a.threads : ThreadPool::hardware_threads());
    if (Status st = convert_model(**model, a.output, ft, pool); !st) return fail(st);
    std::fprintf(stderr, "wrote %s (%s, %s)\n", a.output.c_str(), file_type_name(ft),
                 (*model)->config.summary().c_str());
    return 0;
}

struct MakeModelArgs {
    std::string preset, output, type = "q4_0";
    uint64_t seed = 1;
    int threads = 0;
};

int cmd_make_model(const MakeModelArgs& a) {
    FileType ft;
    if (!parse_file_type(a.type, &ft)) return fail(make_error("unknown --type ", a.type));
    auto config = preset_config(a.preset);
    if (!config) return fail(config.status());
    ThreadPool pool(a.threads > 0 ? a.threads : ThreadPool::hardware_threads());
    if (Status st = make_random_model(*config, a.output, ft, a.seed, pool); !st) return fail(st);
    std::fprintf(stderr, "wrote %s (%s, random weights, %s)\n", a.output.c_str(), file_type_name(ft),
                 config->summary().c_str());
    return 0;
}

}  // namespace

void register_file_commands(CLI::App& app) {
    static std::string inspect_path;
    CLI::App* i = app.add_subcommand("inspect", "Print a GGUF file's metadata and tensor table");
    i->add_option("file", inspect_path, "GGUF file")->required();
    i->callback([] { std::exit(cmd_inspect(inspect_path)); });

    static ConvertArgs conv;
    CLI::App* c = app.add_subcommand("convert", "Convert a checkpoint (HF folder or GGUF) to GGUF");
    c->add_option("input", conv.input, "Hugging Face checkpoint folder or GGUF file")->required();
    c->add_option("output", conv.output, "output .gguf")->required();
    c->add_option("--type", conv.type, "f32 | f16 | bf16 | q8_0 | q4_0 | q4_k_m");
    c->add_option("-t,--threads", conv.threads, "threads (0: all)");
    c->callback([] { std::exit(cmd_convert(conv)); });

    static MakeModelArgs mk;
    std::string presets;
    for (const auto& p : preset_names()) presets += (presets.empty() ? "" : " | ") + p;
    CLI::App* m = app.add_subcommand("make-model", "Write a random-weight model in a real geometry");
    m->add_option("output", mk.output, "output .gguf")->required();
    m->add_option("--preset", mk.preset, presets)->required();
    m->add_option("--type", mk.type, "f32 | f16 | bf16 | q8_0 | q4_0 | q4_k_m");
    m->add_option("--seed", mk.seed, "random seed");
    m->add_option("-t,--threads", mk.threads, "threads (0: all)");
    m->callback([] { std::exit(cmd_make_model(mk)); });
}

}  // namespace mvllm::cli
