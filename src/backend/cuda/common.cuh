// Device-side helpers shared by the CUDA kernels of every op family: element loads and stores
// in F32 / F16 / BF16, warp reductions, and the launch-error check. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>
#include <vector>  // the step timeline's host readers

#include "core/status.h"
#include "core/types.h"

namespace mvllm::cuda {

// Always-on check of a CUDA runtime call: internal invariants (a failing launch is a bug).
#define MVLLM_CUDA_CHECK(expr)                                                         \
    do {                                                                               \
        const cudaError_t mvllm_err_ = (expr);                                         \
        MVLLM_CHECK(mvllm_err_ == cudaSuccess) << #expr << ": " << cudaGetErrorString(mvllm_err_); \
    } while (0)
#define MVLLM_CUDA_LAUNCH_CHECK() MVLLM_CUDA_CHECK(cudaGetLastError())

__device__ __forceinline__ float load_f(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_f(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float load_f(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store_f(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_f(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
__device__ __forceinline__ void store_f(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

// A float's order as an unsigned key: a larger float has a larger key; -0 and +0, equal floats,
// have one key (NaN: a key of its own, which the users skip). order_key_value is the inverse.
__device__ __forceinline__ uint32_t order_key(float v) {
    const uint32_t b = __float_as_uint(v == 0.0f ? 0.0f : v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float order_key_value(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

// One element of an F32/F16/BF16 tensor by runtime type (for small, non-hot kernels).
__device__ __forceinline__ float load_any(const void* p, DType t, int64_t i) {
    if (t == DType::F32) return static_cast<const float*>(p)[i];
    if (t == DType::F16) return __half2float(static_cast<const __half*>(p)[i]);
    return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
__device__ __forceinline__ void store_any(void* p, DType t, int64_t i, float v) {
    if (t == DType::F32) static_cast<float*>(p)[i] = v;
    else if (t == DType::F16) static_cast<__half*>(p)[i] = __float2half_rn(v);
    else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over a CTA of up to 1024 threads; every thread gets the result. scratch: >= 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    const int n_warps = (blockDim.x + 31) >> 5;
    v = lane < n_warps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    const int n_warps = (blockDim.x + 31) >> 5;
    v = lane < n_warps ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

// Threads per CTA of the RMSNorm kernels (ops.cu; MVLLM_RMS_THREADS=128|256|512|1024 for A/B
// measurements). Both kernels take the same count: it fixes the reduction order below.
int rms_threads();

// 1 / rms of row x[base .. base + width) plus eps, every thread of the CTA gets it.
// The one reduction order of every RMSNorm kernel: the plain and the QX-writing one must agree
// bit for bit (batch invariance: which one runs depends on the row count).
template <typename XT>
__device__ __forceinline__ float rms_scale(const XT* x, int64_t base, int64_t width, float eps, float* scratch) {
    // Sixteen loads in flight per thread, then summed in index order: a plain loop waited one L2
    // round trip per value (with 256 threads, 14 of the 7B's 3,584 values each, its batch-1 decode
    // went from 516 to 547 tok/s on the H200 with four ahead, which still took four round trips;
    // sixteen take one up to 4,096 values). Out-of-row values count as 0, which leaves the bits.
    constexpr int kAhead = 16;
    float sum = 0.0f;
    for (int64_t i0 = threadIdx.x; i0 < width; i0 += kAhead * static_cast<int64_t>(blockDim.x)) {
        float v[kAhead];
#pragma unroll
        for (int k = 0; k < kAhead; ++k) {
            const int64_t i = i0 + k * static_cast<int64_t>(blockDim.x);
            v[k] = i < width ? load_f(x, base + i) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < kAhead; ++k) sum += v[k] * v[k];
    }
    sum = block_sum(sum, scratch);
    return rsqrtf(sum / static_cast<float>(width) + eps);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- Programmatic dependent launch (PDL) ----------------------------------------------------------
// A kernel launched with launch_pdl may be scheduled while the kernel before it on the stream is
// still running: its CTAs become resident and wait in pdl_wait() until that kernel has finished and
// its writes are visible, so the launch latency and the prologue overlap the previous kernel's
// tail. Every kernel launched with launch_pdl calls pdl_begin() (or pdl_trigger() + pdl_wait())
// before it reads anything an earlier kernel wrote or writes anything an earlier kernel reads;
// only loads of data no kernel of the step writes (weights, the step's metadata) and L2 prefetches
// may come before the wait. pdl_trigger() lets the next kernel launch as soon as every CTA of this
// one is resident; it does not release the next kernel's pdl_wait(), which waits for completion.
// Launched without the attribute (or before sm_90), both are no-ops.
// A build with -DMVLLM_PDL_TRIGGER_AFTER_WAIT=ON (measurements only) moves every trigger to right
// after the kernel's wait: the next kernel then becomes resident only once this one is released,
// so at most one kernel ahead is loading its weights while this one's dependent loads run.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#ifndef MVLLM_PDL_TRIGGER_AFTER_WAIT
    pdl_launch_dependents();
#endif
}
// pdl_trigger once v has arrived: the trigger is predicated on v (skipped, which only delays the
// next kernel to this one's end, if v's bits are 0x7fffffff, a NaN), so it cannot issue before
// the load that produced v has returned. For a kernel whose first loads after its wait are its
// latency: the next kernels' early weight loads then do not compete with them.
__device__ __forceinline__ void pdl_trigger_after(float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(MVLLM_PDL_TRIGGER_AFTER_WAIT)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0x7fffffff;\n@p griddepcontrol.launch_dependents;\n}"
                 ::"r"(__float_as_uint(v)) : "memory");
#endif
}

// ---- The step timeline (a profiling aid: cmake -DMVLLM_STEP_TIMELINE=ON) ----------------------------
// Thread 0 of every CTA stamps %globaltimer when it reaches pdl_wait and when the wait returns
// (every earlier kernel has completed: the release of one kernel is the end of the one before),
// with the wait's call site (file name hash, line), the grid size, its block and SM, into a ring of
// its translation unit; step_timeline_dump (ops.cuh) merges the rings into a CSV for
// scripts/step_timeline.py. The ring's slot is taken before the wait, so only a CTA that arrives
// after its kernel's release pays the atomic's round trip.
// %globaltimer in ns (the step timeline's and the decode attention's timeline stamps).
__device__ __forceinline__ uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#ifdef MVLLM_STEP_TIMELINE
struct StepTimelineRecord {
    uint32_t file, line, grid, block, sm, unused;
    uint64_t enter, release;
};
constexpr uint32_t kStepTimelineCap = 1u << 19;  // per translation unit
// Appends a translation unit's records to out; where its ring wrapped, *oldest = its oldest release.
using StepTimelineReader = size_t (*)(std::vector<StepTimelineRecord>& out, uint64_t* oldest);
int register_step_timeline(StepTimelineReader reader);  // step_timeline.cu
namespace {
__device__ StepTimelineRecord g_step_timeline[kStepTimelineCap];
__device__ unsigned long long g_step_timeline_n;
size_t read_step_timeline(std::vector<StepTimelineRecord>& out, uint64_t* oldest) {
    unsigned long long n = 0;
    if (cudaMemcpyFromSymbol(&n, g_step_timeline_n, sizeof(n)) != cudaSuccess) return 0;
    std::vector<StepTimelineRecord> r(kStepTimelineCap);
    if (cudaMemcpyFromSymbol(r.data(), g_step_timeline, r.size() * sizeof(r[0])) != cudaSuccess) return 0;
    const unsigned long long first = n > kStepTimelineCap ? n - kStepTimelineCap : 0;
    *oldest = 0;
    for (unsigned long long k = first; k < n; ++k) {
        out.push_back(r[k % kStepTimelineCap]);
        if (first > 0 && (*oldest == 0 || out.back().release < *oldest)) *oldest = out.back().release;
    }
    return n - first;
}
[[maybe_unused]] const int g_step_timeline_registered = register_step_timeline(read_step_timeline);
}  // namespace
// FNV-1a of the file name after its last '/'.
__device__ __forceinline__ uint32_t step_timeline_file(const char* path) {
    const char* base = path;
    for (const char* c = path; *c; ++c)
        if (*c == '/') base = c + 1;
    uint32_t h = 2166136261u;
    for (const char* c = base; *c; ++c) h = (h ^ static_cast<uint8_t>(*c)) * 16777619u;
    return h;
}
#define MVLLM_PDL_SITE unsigned site_line = __builtin_LINE(), const char* site_file = __builtin_FILE()
#define MVLLM_PDL_SITE_ARGS site_line, site_file
#else
#define MVLLM_PDL_SITE
#define MVLLM_PDL_SITE_ARGS
#endif

__device__ __forceinline__ void pdl_wait(MVLLM_PDL_SITE) {
#ifdef MVLLM_STEP_TIMELINE
    const bool stamp = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
    unsigned long long slot = 0;
    uint64_t enter = 0;
    if (stamp) {
        slot = atomicAdd(&g_step_timeline_n, 1ull);
        enter = global_ns();
    }
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
#ifdef MVLLM_PDL_TRIGGER_AFTER_WAIT
    pdl_launch_dependents();
#endif
#ifdef MVLLM_STEP_TIMELINE
    if (stamp) {
        StepTimelineRecord& r = g_step_timeline[slot % kStepTimelineCap];
        uint32_t sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        r.release = global_ns();
        r.enter = enter;
        r.file = step_timeline_file(site_file);
        r.line = site_line;
        r.grid = gridDim.x * gridDim.y * gridDim.z;
        r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        r.sm = sm;
        r.unused = 0;
    }
#endif
}
__device__ __forceinline__ void pdl_begin(MVLLM_PDL_SITE) {
    pdl_trigger();
    pdl_wait(MVLLM_PDL_SITE_ARGS);
}
// Brings the 128-byte line of p into L2 (no register result; safe before pdl_wait: L2 is coherent).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
// L2 prefetches of the 128-byte lines that [p, p + bytes) touches, spread over a warp's lanes.
__device__ __forceinline__ void prefetch_l2_range(const void* p, size_t bytes, int lane) {
    const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{127};
    const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
    for (uintptr_t a = first + static_cast<uintptr_t>(lane) * 128; a < end; a += 32 * 128)
        prefetch_l2(reinterpret_cast<const void*>(a));
}

// Grows a device scratch buffer to at least `need` bytes; its contents are not kept (the device
// is synchronised first: the old buffer may still be in use). Out of memory: DeviceOutOfMemory
// (backend.h) naming `what`, the size and the free memory, the buffer left empty.
void grow_device_buffer(void** ptr, size_t* have, size_t need, const char* what);

// Whether launch_pdl sets the attribute (MVLLM_CUDA_PDL=0 turns it off, for A/B measurements).
bool pdl_enabled();
// Which kernels load data no kernel writes before pdl_wait (MVLLM_EARLY_LOADS, default 7, for A/B
// measurements): bit 1, the decode attention copies its first K/V tiles into shared memory (else
// the F16/BF16 kernel prefetches them to L2 and the F32 kernel copies them after the wait); bit 2, the GEMV loads its first weights into registers (else after);
// bit 4, an accumulating integer GEMV loads the value it adds to right after the wait (else in its
// epilogue; the float and streaming GEMVs always load it early).
constexpr int kEarlyAttention = 1, kEarlyGemv = 2, kEarlyResidual = 4;
int early_loads();

// MVLLM_CUDA_CARVEOUT=p (0-100; for A/B measurements): every kernel launched through launch_pdl
// prefers p % of each SM's unified L1 / shared memory as shared memory (set once per kernel).
// Unset: the driver's choice per kernel, except where a kernel sets its own (the decode attention:
// all of it). An SM whose configuration differs from a kernel's must drain before that kernel's
// CTAs can start there, which may be why the 7B's attention CTAs pass their wait up to 3.1 us
// apart in the decode step (after the QKV GEMV) and 0.03 us for the 0.5B (bench/NOTES.md,
// twentieth session); 100 gives every kernel the attention's configuration.
void apply_carveout(const void* kernel);

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch when enabled,
// its CTAs grouped into thread-block clusters of `cluster` CTAs (launch_pdl_clustered).
template <typename... Params, typename... Args>
void launch_pdl_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          dim3 cluster, Args&&... args) {
    apply_carveout(reinterpret_cast<const void*>(kernel));
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
    if (pdl_enabled()) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster.x * cluster.y * cluster.z > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = cluster.x;
        attr[n].val.clusterDim.y = cluster.y;
        attr[n++].val.clusterDim.z = cluster.z;
    }
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = n;
    MVLLM_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
    launch_pdl_clustered(kernel, grid, block, smem, stream, dim3(1, 1, 1), std::forward<Args>(args)...);
}

}  // namespace mvllm::cuda
