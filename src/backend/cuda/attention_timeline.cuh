// The decode kernel's timeline (attention_mma.cuh), a profiling aid: with
// cmake -DMVLLM_ATTN_TIMELINE=ON thread 0 of every CTA stamps its progress into a device ring;
// otherwise every mark compiles to nothing.
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"

namespace mvllm::cuda::mma_decode {

// ---- timeline (a profiling aid: cmake -DMVLLM_ATTN_TIMELINE=ON) --------------------------------------
// Thread 0 of every CTA that has work stamps %globaltimer and clock64 at kTimelineMarks points of
// the kernel and appends them to a device ring (attention_timeline_dump writes it out): when the
// CTAs start, wait and finish relative to one another and to the previous kernel, which neither a
// per-kernel profiler nor the graph ablation can show.
#ifdef MVLLM_ATTN_TIMELINE
constexpr int kTimelineMarks = 14;  // entry, metadata, early loads issued, wait over, Q ready, tiles done,
                                    // partials stored, split counted, merged, the tiles after the wait
                                    // issued, the first Q value back, then in the cluster merge its
                                    // first barrier passed, its items stored (12) and, before
                                    // that, thread 0's remote values back (13)
struct TimelineRecord {
    uint64_t kc;  // the layer's K cache (tells launches apart)
    uint32_t sm, x, y, z;
    uint64_t ns[kTimelineMarks], clk[kTimelineMarks];
};
constexpr uint32_t kTimelineCap = 1u << 16;
__device__ TimelineRecord g_timeline[kTimelineCap];
__device__ unsigned long long g_timeline_n;
struct Timeline {
    uint64_t ns[kTimelineMarks] = {}, clk[kTimelineMarks] = {};
    __device__ __forceinline__ void mark(int i) {
        if (threadIdx.x != 0) return;
        ns[i] = global_ns();
        clk[i] = clock64();
    }
    // mark(i) once v has arrived (the timer read is predicated on v, so it waits for v's load).
    __device__ __forceinline__ void mark_after(int i, float v) {
        if (threadIdx.x != 0) return;
        uint64_t t = 0, c = 0;
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0x7fffffff;\n@p mov.u64 %0, %%globaltimer;\n"
                     "@p mov.u64 %1, %%clock64;\n}" : "+l"(t), "+l"(c) : "r"(__float_as_uint(v)));
        ns[i] = t;
        clk[i] = c;
    }
    __device__ __forceinline__ void flush(const void* kc) {
        if (threadIdx.x != 0) return;
        uint32_t sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        TimelineRecord& r = g_timeline[atomicAdd(&g_timeline_n, 1ull) % kTimelineCap];
        r.kc = reinterpret_cast<uint64_t>(kc);
        r.sm = sm, r.x = blockIdx.x, r.y = blockIdx.y, r.z = blockIdx.z;
        for (int i = 0; i < kTimelineMarks; ++i) r.ns[i] = ns[i], r.clk[i] = clk[i];
    }
};
#else
struct Timeline {
    __device__ __forceinline__ void mark(int) {}
    __device__ __forceinline__ void mark_after(int, float) {}
    __device__ __forceinline__ void flush(const void*) {}
};
#endif

}  // namespace mvllm::cuda::mma_decode
