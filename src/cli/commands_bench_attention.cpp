// `mvllm bench attention`: BENCHMARKS.md B1, decode attention per layer on the GPU (naive /
// grouped / fused over a paged KV cache, both Qwen2.5 geometries, contexts 128..32768). The
// benchmark itself lives with the CUDA kernels (src/backend/cuda/attention_bench.cu).
#include <cstdlib>

#include "cli/options.h"
#ifdef MVLLM_HAVE_CUDA
#include "backend/cuda/attention_bench.h"
#endif

namespace mvllm::cli {

void register_bench_attention_command(CLI::App& app) {
    static std::string device = "cuda", json_out;
    static bool quick = false, merge = false, cold_l2 = false;
    static std::vector<int> contexts;
    static std::vector<int> batches = {1, 16};
    CLI::App* b = bench_group(app)->add_subcommand(
        "attention", "Decode attention per layer on the GPU, three variants (B1; JSON with --json-out)");
    b->add_option("--device", device, "cuda (the CPU variant is bench/cpu_attention_bench)")
        ->check(CLI::IsMember({"cuda"}));
    b->add_option("--json-out", json_out, "write the rows as JSON");
    b->add_flag("--quick", quick, "contexts 4096 and 32768, the fused kernel only");
    b->add_flag("--cold-l2", cold_l2,
                "evict the L2 before each timed replay (a read of twice its size, not timed): every "
                "layer's cache then comes from HBM, as in a decode step, at short contexts too");
    b->add_flag("--merge", merge,
                "instead: time the decode kernel's final split merge alone (its paths and loads in flight, "
                "partials in L2 or DRAM; a profiling aid)");
    b->add_option("--contexts", contexts, "only these contexts of the table (e.g. 128,4096; with --quick: fused only)")
        ->delimiter(',')
        ->check(CLI::IsMember({128, 256, 512, 1024, 2048, 4096, 16384, 32768}));
    b->add_option("--batches", batches, "batch sizes (default 1,16; beyond 1 the contexts up to 4096)")
        ->delimiter(',')
        ->check(CLI::Range(1, 512));
    b->callback([] {
#ifdef MVLLM_HAVE_CUDA
        if (merge) std::exit(cuda::run_merge_bench());
        cuda::AttentionBenchOptions o;
        o.json_out = json_out;
        o.quick = quick;
        o.contexts = contexts;
        o.batches = batches;
        o.cold_l2 = cold_l2;
        std::exit(cuda::run_attention_bench(o));
#else
        std::exit(fail(make_error("bench attention needs the CUDA backend (this build has none)")));
#endif
    });
}

}  // namespace mvllm::cli
