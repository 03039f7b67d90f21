// `mvllm bench attention` (BENCHMARKS.md B1) on the CUDA backend: plain header, no CUDA types.
#pragma once

#include <string>
#include <vector>

namespace mvllm::cuda {

struct AttentionBenchOptions {
    std::string json_out;  // empty: table on stdout only
    bool quick = false;    // contexts 4096 and 32768, the fused kernel only
    std::vector<int> contexts;  // only these contexts (empty: all of the table's; with quick: the fused kernel only)
    std::vector<int> batches = {1, 16};  // batch sizes (beyond 1: contexts up to 4096)
    bool cold_l2 = false;  // read a buffer twice the L2's size before each replay (not timed)
};

// Runs the benchmark on device 0, printing a table; 0 on success.
int run_attention_bench(const AttentionBenchOptions& options);

// `bench attention --merge` (attention_merge_bench.cu): the final split merge alone, its paths
// and loads in flight, on partials in L2 or in DRAM; 0 when every path agrees with the chunked one.
int run_merge_bench();

}  // namespace mvllm::cuda
