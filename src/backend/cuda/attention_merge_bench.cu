// `mvllm bench attention --merge`: the decode attention's final split merge alone (a profiling
// aid). Inside the decode step the last CTA of a row merged 33-63 parts, ~110-120 KB of partials,
// in 4.4-5.6 us (~20-25 GB/s), and more loads in flight made it slower, not faster
// (bench/NOTES.md, twentieth session). This times merge_parts' paths on partials that every SM
// has just written (in L2), or after a 256 MB scrub (from DRAM): the chunked path, the warp merge
// with 4..32 loads in flight per lane, and the heads spread over one CTA each. The time is
// %globaltimer inside the kernel, from the first CTA's start to the last CTA's end (launch
// latency excluded), median of 50 launches; each variant's output is checked against the chunked
// path's.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "backend/cuda/attention_bench.h"
#include "backend/cuda/attention_merge.cuh"

namespace mvllm::cuda {
namespace {

#define MK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

__device__ __forceinline__ float hash_unit(uint64_t i, uint32_t seed) {  // [0, 1)
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return (h & 0xffffff) / 16777216.0f;
}

// Partials as the decode kernel leaves them, written by CTAs spread over every SM: o in [-1, 1),
// each part's base-2 maximum in [0, 8) and sum in [1, 2).
__global__ void write_partials_kernel(float* part_o, float* part_ml, int64_t n_o, int64_t n_pairs, uint32_t seed) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n_o; i += stride)
        part_o[i] = 2.0f * hash_unit(i, seed) - 1.0f;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n_pairs; i += stride) {
        part_ml[2 * i] = 8.0f * hash_unit(i, seed ^ 0x9e3779b9u);
        part_ml[2 * i + 1] = 1.0f + hash_unit(i, seed ^ 0x7f4a7c15u);
    }
}

enum Variant { kChunked, kWarp, kWarpPerHead };

// One launch of a merge path over the heads [0, n_g) of row 0 (kWarpPerHead: CTA h merges head h).
template <int HD, int G, int V>
__global__ void __launch_bounds__(256) merge_probe_kernel(const float* part_o, const float* part_ml, int32_t n_parts,
                                                          int32_t n_g, float* out, unsigned long long* stamps) {
    __shared__ float smem[2 * mma_decode::kHeadTile * mma_decode::kMergeChunk];
    __shared__ float s_max[mma_decode::kHeadTile], s_sum[mma_decode::kHeadTile];
    __shared__ unsigned long long s_t0;  // not a register held across the merge
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long t0;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        s_t0 = t0;
    }
    const QxView no_qx{};
    if constexpr (V == kChunked)
        mma_decode::merge_parts<HD, 8>(part_o, part_ml, n_parts, n_parts, n_g, 0, smem, s_max, s_sum, out, DType::F32,
                                       no_qx, mma_decode::kMergeChunked);
    else if constexpr (V == kWarp)
        mma_decode::merge_parts_warp<HD, 8, G>(part_o, part_ml, n_parts, n_parts, n_g, 0, out, DType::F32, no_qx);
    else
        mma_decode::merge_parts_warp<HD, 8, G>(part_o, part_ml, n_parts, n_parts, 1, blockIdx.x, out, DType::F32, no_qx);
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long t1;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
        stamps[2 * blockIdx.x] = s_t0;
        stamps[2 * blockIdx.x + 1] = t1;
    }
}

struct Case {
    int hd, n_g, n_parts;
};

struct Probe {
    const char* name;
    int variant, group;
};

template <int HD>
void launch_probe(const Probe& p, const float* part_o, const float* part_ml, const Case& c, float* out,
                  unsigned long long* stamps) {
    const unsigned grid = p.variant == kWarpPerHead ? static_cast<unsigned>(c.n_g) : 1u;
    auto go = [&](auto kernel) { kernel<<<grid, 256>>>(part_o, part_ml, c.n_parts, c.n_g, out, stamps); };
    if (p.variant == kChunked) go(merge_probe_kernel<HD, 8, kChunked>);
    else if (p.variant == kWarpPerHead) go(merge_probe_kernel<HD, 8, kWarpPerHead>);
    else if (p.group == 4) go(merge_probe_kernel<HD, 4, kWarp>);
    else if (p.group == 8) go(merge_probe_kernel<HD, 8, kWarp>);
    else if (p.group == 16) go(merge_probe_kernel<HD, 16, kWarp>);
    else go(merge_probe_kernel<HD, 32, kWarp>);
}

}  // namespace

int run_merge_bench() {
    cudaDeviceProp prop{};
    MK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device %s, %d SMs, L2 %d MB: the final split merge alone (in-kernel ns, median of 50)\n", prop.name,
                prop.multiProcessorCount, prop.l2CacheSize >> 20);
    const Case cases[] = {{128, 7, 33}, {128, 7, 16}, {64, 7, 63}, {64, 7, 33}};
    const Probe probes[] = {{"chunked", kChunked, 0},     {"warp x4", kWarp, 4},   {"warp x8", kWarp, 8},
                            {"warp x16", kWarp, 16},      {"warp x32", kWarp, 32}, {"warp x8, CTA per head", kWarpPerHead, 8}};
    const size_t scrub_bytes = size_t(256) << 20;
    float *part_o = nullptr, *part_ml = nullptr, *out = nullptr;
    void* scrub = nullptr;
    unsigned long long* stamps = nullptr;
    const size_t max_o = static_cast<size_t>(mma_decode::kHeadTile) * mma_decode::kMergeChunk * 128;
    MK(cudaMalloc(&part_o, max_o * sizeof(float)));
    MK(cudaMalloc(&part_ml, 2 * mma_decode::kHeadTile * mma_decode::kMergeChunk * sizeof(float)));
    MK(cudaMalloc(&out, mma_decode::kHeadTile * 128 * sizeof(float)));
    MK(cudaMalloc(&scrub, scrub_bytes));
    MK(cudaMalloc(&stamps, 2 * mma_decode::kHeadTile * sizeof(unsigned long long)));
    std::printf("%-4s %-5s %-5s %-8s %-9s %-22s %9s %8s %14s\n", "hd", "heads", "parts", "KB", "partials", "variant",
                "ns", "GB/s", "rel vs chunked");
    int status = 0;
    for (const Case& c : cases) {
        const int64_t n_pairs = static_cast<int64_t>(c.n_g) * c.n_parts;
        const double kb = (n_pairs * c.hd + n_pairs * 2) * sizeof(float) / 1024.0;
        for (const bool cold : {false, true}) {
            std::vector<float> reference;
            for (const Probe& p : probes) {
                std::vector<double> ns;
                std::vector<unsigned long long> st(2 * c.n_g);
                for (int rep = 0; rep < 55; ++rep) {
                    write_partials_kernel<<<prop.multiProcessorCount, 256>>>(part_o, part_ml, n_pairs * c.hd, n_pairs,
                                                                             1234u);
                    if (cold) MK(cudaMemsetAsync(scrub, rep & 0xff, scrub_bytes));
                    if (c.hd == 128) launch_probe<128>(p, part_o, part_ml, c, out, stamps);
                    else launch_probe<64>(p, part_o, part_ml, c, out, stamps);
                    MK(cudaGetLastError());
                    MK(cudaDeviceSynchronize());
                    const int n_ctas = p.variant == kWarpPerHead ? c.n_g : 1;
                    MK(cudaMemcpy(st.data(), stamps, 2 * n_ctas * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
                    unsigned long long first = st[0], last = st[1];
                    for (int i = 1; i < n_ctas; ++i) first = std::min(first, st[2 * i]), last = std::max(last, st[2 * i + 1]);
                    if (rep >= 5) ns.push_back(static_cast<double>(last - first));
                }
                std::sort(ns.begin(), ns.end());
                const double med = ns[ns.size() / 2];
                std::vector<float> o(static_cast<size_t>(c.n_g) * c.hd);
                MK(cudaMemcpy(o.data(), out, o.size() * sizeof(float), cudaMemcpyDeviceToHost));
                double err = 0, ref = 0;
                if (reference.empty()) reference = o;
                for (size_t i = 0; i < o.size(); ++i) {
                    err = std::max(err, static_cast<double>(std::fabs(o[i] - reference[i])));
                    ref = std::max(ref, static_cast<double>(std::fabs(reference[i])));
                }
                const double rel = ref > 0 ? err / ref : (err > 0 ? INFINITY : 0.0);
                if (!(rel <= 1e-5)) status = 1;
                std::printf("%-4d %-5d %-5d %-8.1f %-9s %-22s %9.0f %8.1f %14.1e\n", c.hd, c.n_g, c.n_parts, kb,
                            cold ? "DRAM" : "L2", p.name, med, kb * 1024.0 / med, rel);
            }
        }
    }
    cudaFree(part_o);
    cudaFree(part_ml);
    cudaFree(out);
    cudaFree(scrub);
    cudaFree(stamps);
    if (status) std::fprintf(stderr, "error: a merge path disagrees with the chunked path beyond 1e-5\n");
    return status;
}

}  // namespace mvllm::cuda
