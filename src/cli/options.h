// Options shared by every `mvllm` subcommand that runs a model, and the code that turns them into
// a loaded model, a backend, a decoder and a KV cache.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "model/decoder.h"
#include "model/model.h"

namespace mvllm::cli {

// The model every model-running command uses when -m/--model is not given: trained by
// scripts/train_default_model.py, shipped in the repository's models/ (see models/README.md).
inline constexpr const char* kDefaultModelName = "mvllm-austen-q8_0.gguf";

// Where the default model is looked for, in order: $MVLLM_DEFAULT_MODEL; beside the executable
// (<exe dir>/../../models for build/bin/mvllm, <exe dir>/../models, <exe dir>/../share/mvllm/models,
// <exe dir>/models); the source tree the executable was built from (MVLLM_SOURCE_DIR/models).
std::vector<std::string> default_model_candidates();
// The first candidate that exists, or an error naming every place looked in.
Result<std::string> default_model_path();
// `path`, or the default model when it is empty.
Result<std::string> model_path_or_default(const std::string& path);

struct RunOptions {
    std::string model;  // empty: default_model_path()
    std::string device = "cpu";
    int threads = 0;
    std::string attention = "fused";
    std::string activation_dtype = "f32";
    std::string kv_dtype;  // empty: kv_dtype_name()'s default
    int kv_block_size = 16;
    int64_t ctx_size = 0;  // KV capacity in tokens (0: prompt + generation)
    int prefill_chunk = 0;
    bool batch_invariant = false;  // a row's result never depends on the rest of its batch
    // speculative decoding (commands that run the engine: add_draft_options)
    std::string draft_model;  // empty: off
    int draft_tokens = 4;
    int draft_tokens_min = 1;
    std::string draft_policy = "fixed";
    bool no_spec_fallback = false;
};

void add_run_options(CLI::App* cmd, RunOptions* o);
// The KV cache's type: --kv-dtype, else f16 on CUDA (llama.cpp's and vLLM's default: half the
// bytes the decode attention reads), else the activation dtype.
std::string kv_dtype_name(const RunOptions& o);
// --draft-model, --draft-tokens, --draft-tokens-min, --draft-policy, --no-spec-fallback.
void add_draft_options(CLI::App* cmd, RunOptions* o);

// Everything needed to run a model, built from RunOptions.
struct Runtime {
    std::unique_ptr<Model> model;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Decoder> decoder;
    std::unique_ptr<KvCache> cache;
    // with --draft-model: the draft on the same backend, and the engine's speculative options
    std::unique_ptr<Model> draft_model;
    std::unique_ptr<Decoder> draft_decoder;
    SpeculativeOptions speculative;
};

// Loads the model (and the draft model, checking that it shares the vocabulary) and creates the
// backend, decoder(s) and a KV cache of at least n_tokens tokens.
Result<Runtime> make_runtime(const RunOptions& o, int64_t n_tokens);

// The KV pool options of serve and the engine benchmarks: --kv-cache-memory as bytes ("2GiB") or
// as a percentage of the device memory free after loading ("90%"), or --gpu-memory-utilization F
// (vLLM's rule). Empty and 0: 1 GiB. Also --no-warmup (EngineOptions::warmup, on by default).
struct KvPoolArgs {
    std::string kv_cache_memory;
    double gpu_memory_utilization = 0;
    bool no_warmup = false;
    bool no_decode_padding = false;
    bool host_sampling = false;
};
void add_kv_pool_options(CLI::App* cmd, KvPoolArgs* a);
Status apply_kv_pool_options(const KvPoolArgs& a, EngineOptions* eo);

// "1 2 3" or "1,2,3" -> ids.
Result<std::vector<int32_t>> parse_ids(const std::string& text);

// Registration of each command group (each defined in its own file).
void register_file_commands(CLI::App& app);   // inspect, convert, make-model
void register_model_commands(CLI::App& app);  // logits, generate, bench decode
void register_template_commands(CLI::App& app);  // template
void register_chat_commands(CLI::App& app);  // chat
void register_engine_commands(CLI::App& app);  // bench throughput
void register_engine_latency_commands(CLI::App& app);  // bench prefix, bench hol (after the above)
void register_tokenize_commands(CLI::App& app);  // tokenize, bench tokenize (after model commands)
void register_serve_commands(CLI::App& app);     // serve
void register_bench_serve_command(CLI::App& app);  // bench serve
void register_spec_commands(CLI::App& app);      // bench spec (after model commands)
void register_perplexity_command(CLI::App& app);  // perplexity

void register_bench_attention_command(CLI::App& app);  // bench attention (CUDA builds run it)
void register_kernel_commands(CLI::App& app);  // bench kernels (CUDA builds run it)

// The `bench` command group, created by the first command file that needs it.
CLI::App* bench_group(CLI::App& app);

// Prints "error: <message>" and returns exit code 1.
int fail(const Status& status);

}  // namespace mvllm::cli
