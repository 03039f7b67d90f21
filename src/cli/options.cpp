#include "cli/options.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "engine/speculative.h"
#include "kv/block_manager.h"

#ifdef MVLLM_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace mvllm::cli {

int fail(const Status& status) {
    std::fprintf(stderr, "error: %s\n", status.message().c_str());
    return 1;
}

std::vector<std::string> default_model_candidates() {
    namespace fs = std::filesystem;
    std::vector<std::string> out;
    if (const char* env = std::getenv("MVLLM_DEFAULT_MODEL"); env && *env) out.emplace_back(env);
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        const fs::path dir = exe.parent_path();  // build/bin/mvllm -> the repository's models/
        for (const fs::path& rel : {fs::path("../../models"), fs::path("../models"), fs::path("../share/mvllm/models"),
                                    fs::path("models")})
            out.push_back((dir / rel / kDefaultModelName).lexically_normal().string());
    }
#ifdef MVLLM_SOURCE_DIR
    out.push_back((fs::path(MVLLM_SOURCE_DIR) / "models" / kDefaultModelName).lexically_normal().string());
#endif
    return out;
}

Result<std::string> model_path_or_default(const std::string& path) {
    if (!path.empty()) return path;
    return default_model_path();
}

Result<std::string> default_model_path() {
    const std::vector<std::string> candidates = default_model_candidates();
    std::string looked;
    for (const std::string& c : candidates) {
        std::error_code ec;
        if (std::filesystem::is_regular_file(c, ec)) return c;
        looked += (looked.empty() ? "" : ", ") + c;
    }
    return make_error("no --model given and the default model ", kDefaultModelName, " was not found (looked in: ",
                      looked, "); pass -m FILE.gguf or set MVLLM_DEFAULT_MODEL");
}

void add_run_options(CLI::App* cmd, RunOptions* o) {
    cmd->add_option("-m,--model", o->model,
                    std::string("GGUF file or Hugging Face checkpoint folder (default: the shipped models/") +
                        kDefaultModelName + ")");
    cmd->add_option("--device", o->device, "cpu | cuda (cuda when built with the CUDA backend)")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    cmd->add_option("-t,--threads", o->threads, "CPU threads (0: all)");
    cmd->add_option("--attention", o->attention, "naive | grouped | fused")
        ->check(CLI::IsMember({"naive", "grouped", "fused"}));
    cmd->add_option("--activation-dtype", o->activation_dtype, "f32 | f16")->check(CLI::IsMember({"f32", "f16"}));
    cmd->add_option("--kv-dtype", o->kv_dtype,
                    "f32 | f16 | bf16 (bf16: cuda only; default: f16 on cuda, the activation dtype on cpu)")
        ->check(CLI::IsMember({"f32", "f16", "bf16"}));
    cmd->add_option("--kv-block-size", o->kv_block_size, "tokens per KV block")->check(CLI::Range(1, 1 << 20));
    cmd->add_option("-c,--ctx-size", o->ctx_size, "KV cache capacity in tokens (0: what the run needs)");
    cmd->add_option("--prefill-chunk", o->prefill_chunk, "prompt tokens per forward call (0: all)");
    cmd->add_flag("--batch-invariant", o->batch_invariant,
                  "batch-invariant kernels: a request's greedy output never depends on what shares its batches "
                  "(fixed reduction orders; slower)");
}

std::string kv_dtype_name(const RunOptions& o) {
    if (!o.kv_dtype.empty()) return o.kv_dtype;
    return o.device == "cuda" ? "f16" : o.activation_dtype;
}

void add_kv_pool_options(CLI::App* cmd, KvPoolArgs* a) {
    cmd->add_option("--kv-cache-memory", a->kv_cache_memory,
                    "KV pool size: bytes (512MiB, 2GiB, ...) or N% of the device memory free after loading the "
                    "model and a profiling forward (default 1GiB)");
    cmd->add_option("--gpu-memory-utilization", a->gpu_memory_utilization,
                    "as vLLM: the fraction (0, 1] of the device's memory this process may use; the KV pool gets "
                    "what the weights and activations leave of it");
    cmd->add_flag("--no-warmup", a->no_warmup,
                  "skip the start-up warm-up (CUDA: a few throw-away steps per batch size 1, 2, 4, ... max-seqs "
                  "and context bucket that load kernels, time GEMM algorithms and record the decode graphs)");
    cmd->add_flag("--host-sampling", a->host_sampling,
                  "pick every token on the host from copied logits, also those the device could pick (greedy, "
                  "temperature, top_k, top_p, min_p): for comparisons");
    cmd->add_flag("--no-decode-padding", a->no_decode_padding,
                  "do not pad decode steps to the next warm-up batch size (with padding, a step of any size "
                  "replays a recorded graph; the padding rows' outputs are dropped)");
}

Status apply_kv_pool_options(const KvPoolArgs& a, EngineOptions* eo) {
    eo->warmup = a.no_warmup ? EngineOptions::Warmup::Off : EngineOptions::Warmup::Auto;
    eo->decode_padding = a.no_decode_padding ? EngineOptions::DecodePadding::Off : EngineOptions::DecodePadding::Auto;
    eo->host_sampling = a.host_sampling;
    if (a.gpu_memory_utilization != 0) {
        if (!a.kv_cache_memory.empty())
            return make_error("give --kv-cache-memory or --gpu-memory-utilization, not both");
        if (!(a.gpu_memory_utilization > 0 && a.gpu_memory_utilization <= 1))
            return make_error("--gpu-memory-utilization must be in (0, 1], got ", a.gpu_memory_utilization);
        eo->gpu_memory_utilization = a.gpu_memory_utilization;
        return Status::ok();
    }
    const std::string text = a.kv_cache_memory.empty() ? "1GiB" : a.kv_cache_memory;
    if (text.back() == '%') {
        char* end = nullptr;
        const double pct = std::strtod(text.c_str(), &end);
        if (end != text.c_str() + text.size() - 1 || !(pct > 0 && pct <= 100))
            return make_error("--kv-cache-memory: not a percentage in (0, 100]: \"", text, "\"");
        eo->kv_cache_memory_fraction = pct / 100.0;
        return Status::ok();
    }
    auto bytes = parse_memory_size(text);
    if (!bytes) return bytes.status().with_context("--kv-cache-memory");
    eo->kv_cache_memory = *bytes;
    return Status::ok();
}

void add_draft_options(CLI::App* cmd, RunOptions* o) {
    cmd->add_option("--draft-model", o->draft_model,
                    "speculative decoding: a smaller model with the same vocabulary proposes tokens (GGUF or HF folder)");
    cmd->add_option("--draft-tokens", o->draft_tokens, "tokens the draft proposes per step (the adaptive policies' maximum)")
        ->check(CLI::Range(1, 64));
    cmd->add_option("--draft-tokens-min", o->draft_tokens_min, "the adaptive policies' minimum")->check(CLI::Range(1, 64));
    cmd->add_option("--draft-policy", o->draft_policy, "fixed | acceptance-rate | accepted-length")
        ->check(CLI::IsMember({"fixed", "acceptance-rate", "accepted-length"}));
    cmd->add_flag("--no-spec-fallback", o->no_spec_fallback,
                  "keep drafting even when measured slower than plain decoding");
}

Status load_draft(const RunOptions& o, const DecoderOptions& dopt, Runtime* rt) {
    MVLLM_ASSIGN_OR_RETURN(rt->draft_model, load_model(o.draft_model));
    MVLLM_TRY(check_draft_vocabulary(*rt->model, *rt->draft_model));
    MVLLM_ASSIGN_OR_RETURN(rt->draft_decoder, Decoder::create(*rt->draft_model, *rt->backend, dopt));
    if (o.draft_tokens_min > o.draft_tokens)
        return make_error("--draft-tokens-min ", o.draft_tokens_min, " exceeds --draft-tokens ", o.draft_tokens);
    SpeculativeOptions& s = rt->speculative;
    s.draft = rt->draft_decoder.get();
    s.draft_tokens = o.draft_tokens;
    s.min_draft_tokens = o.draft_tokens_min;
    if (!parse_draft_policy(o.draft_policy, &s.policy)) return make_error("unknown --draft-policy ", o.draft_policy);
    s.fallback = !o.no_spec_fallback;
    return Status::ok();
}

Result<Runtime> make_runtime(const RunOptions& o, int64_t n_tokens) {
#ifndef MVLLM_HAVE_CUDA
    if (o.device != "cpu")
        return make_error("--device ", o.device, " is not available in this build (only cpu)");
#endif
    Runtime rt;
    std::string model_path = o.model;
    if (model_path.empty()) {
        MVLLM_ASSIGN_OR_RETURN(model_path, default_model_path());
    }
    MVLLM_ASSIGN_OR_RETURN(rt.model, load_model(model_path));
    AttentionVariant variant = AttentionVariant::Fused;
    parse_attention_variant(o.attention, &variant);
#ifdef MVLLM_HAVE_CUDA
    if (o.device == "cuda") {
        CudaBackendOptions cuda;
        cuda.attention = variant == AttentionVariant::Naive     ? CudaAttentionVariant::Naive
                         : variant == AttentionVariant::Grouped ? CudaAttentionVariant::Grouped
                                                                : CudaAttentionVariant::Fused;
        cuda.batch_invariant = o.batch_invariant;
        MVLLM_ASSIGN_OR_RETURN(rt.backend, CudaBackend::create(cuda));
    }
#endif
    if (!rt.backend) {
        CpuBackendOptions cpu;
        cpu.n_threads = o.threads;
        cpu.attention = variant;
        cpu.batch_invariant = o.batch_invariant;
        rt.backend = std::make_unique<CpuBackend>(cpu);
    }
    DecoderOptions dopt;
    parse_type_name(o.activation_dtype, &dopt.activation_dtype);
    MVLLM_ASSIGN_OR_RETURN(rt.decoder, Decoder::create(*rt.model, *rt.backend, dopt));
    if (!o.draft_model.empty()) MVLLM_TRY(load_draft(o, dopt, &rt).with_context("--draft-model"));
    DType kv_dtype = dopt.activation_dtype;
    parse_type_name(kv_dtype_name(o), &kv_dtype);
    const int64_t capacity = std::max<int64_t>(o.ctx_size, n_tokens);
    const int64_t n_blocks = (capacity + o.kv_block_size - 1) / o.kv_block_size;
    MVLLM_ASSIGN_OR_RETURN(rt.cache, rt.backend->create_kv_cache(rt.decoder->kv_config(n_blocks, o.kv_block_size, kv_dtype)));
    return rt;
}

Result<std::vector<int32_t>> parse_ids(const std::string& text) {
    std::vector<int32_t> ids;
    std::string token;
    std::string cleaned = text;
    for (char& ch : cleaned)
        if (ch == ',' || ch == '[' || ch == ']') ch = ' ';
    std::istringstream in(cleaned);
    while (in >> token) {
        char* end = nullptr;
        const long long v = std::strtoll(token.c_str(), &end, 10);
        if (*end != '\0' || v < 0 || v > INT32_MAX) return make_error("not a token id: \"", token, "\"");
        ids.push_back(static_cast<int32_t>(v));
    }
    if (ids.empty()) return make_error("no token ids given");
    return ids;
}

CLI::App* bench_group(CLI::App& app) {
    for (CLI::App* sub : app.get_subcommands([](CLI::App* s) { return s->get_name() == "bench"; })) return sub;
    CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
    bench->require_subcommand(1);
    return bench;
}

}  // namespace mvllm::cli
