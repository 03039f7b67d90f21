// `mvllm bench kernels --device cuda`: the decode GEMV kernels (gemv.cuh) timed per weight type,
// shape and token count, against the copy and read bandwidth of the same device measured in the
// same run (DESIGN.md decision 7). Plain header (no CUDA types); the CLI prints and writes JSON.
//
// Method: the weight matrix is replicated until the copies together exceed 400 MB (at least 2),
// so that each launch reads its weights from HBM, not from the 50 MB L2; one CUDA graph launches
// the GEMV once per copy; after warm-up replays, the median of timed replays divided by the copy
// count is the time per GEMV (it includes the launch gap inside a graph, ~1 us). Weights are
// random bytes with sane scales (never zeros), the activation random normal values.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/types.h"

namespace mvllm::cuda {

struct GemvBenchCase {
    DType type = DType::Q4_0;
    int64_t n_in = 0, n_out = 0;
    int n_tokens = 1;
    double us = 0;            // median time per GEMV
    double weight_bytes = 0;  // bytes of the matrix
    double bytes = 0;         // weight + activation + output bytes moved
    double gbps = 0;          // bytes / us
    double pct_of_copy = 0;   // gbps / the measured copy bandwidth
};

// One (weight type, shape, token count, kernel) of the GEMM comparison: the quantised tile GEMM
// (gemm_tiles.cuh, each variant) against cuBLAS on the F16 copy of the same weights.
struct GemmBenchCase {
    DType type = DType::Q4_0;
    int64_t n_in = 0, n_out = 0;
    int n_tokens = 0;
    std::string kernel;     // "cublas-f16" or the tile variant's name
    double us = 0;          // median time per GEMM (split-K sum included)
    double tflops = 0;      // 2 n_in n_out n_tokens / time
    double weight_gbps = 0;  // bytes of the weights the kernel reads (F16 copy or quantised) / time
    double rel_err = 0;     // max |out - cuBLAS out| / max |cuBLAS out| (0 for cuBLAS itself)
};

struct KernelBenchReport {
    std::string device;
    int32_t n_sms = 0;
    double copy_gbps = 0;  // device-to-device copy of 1 GiB, read + write bytes counted
    double read_gbps = 0;  // a read-only kernel over 1 GiB (16-byte loads)
    std::vector<GemvBenchCase> cases;
    std::vector<GemmBenchCase> gemm_cases;
};

struct KernelBenchOptions {
    std::vector<DType> types = {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16, DType::BF16};
    std::vector<std::pair<int64_t, int64_t>> shapes;  // (n_in, n_out)
    std::vector<int> n_tokens = {1, 2, 4, 8};
    int replays = 20;
    std::vector<int> gemm_tokens;  // token counts of the GEMM comparison (empty: none)
    std::vector<DType> gemm_types = {DType::Q4_0, DType::Q8_0};
};

Result<KernelBenchReport> run_kernel_bench(const KernelBenchOptions& options);

}  // namespace mvllm::cuda
