// A probe of the decode attention's cluster merge (bench/NOTES.md, fifty-third session): how long
// its steps take on their own, in SM clock cycles, for the 0.5B's shape (a cluster of 4 CTAs of
// 128 threads, 7 heads x 64 dims of o per CTA, one item a thread).
//   pull-full    cluster.sync, then every thread loads its item's (max, sum, o) from all 4 CTAs
//                (12 remote loads), merges, stores; cluster.sync before leaving (the earlier form)
//   pull-fenced  the same with main's entry (release fence restricted to shared::cta, relaxed
//                arrival, acquire fence) and its relaxed exit
//   chain        thread 0 alone: 16 dependent remote loads after the barrier (the round trip)
//   chain-local  the same chain in its own shared memory
//   push         each CTA but rank 0 sends its o and (max, sum) into rank 0's shared memory with
//                st.async, completing on rank 0's mbarrier; rank 0 waits on it, merges all 448
//                items locally and stores them; the others leave once their stores are issued
// Then (written after session 53's call 3, for the next one: the kernel's merge takes 1.2-1.9 us
// where the probe's takes 0.22) the pull with main's fences in the kernel's surroundings:
//   stagger      rank r spins r x 400 cycles before the merge (the splits' tiles end apart)
//   noise        a kernel on another stream keeps one CTA on every SM streaming global memory
//                (as the next kernels' early weight loads do beside the attention in the step)
// Build: nvcc -O3 -std=c++20 -arch=sm_90 bench/probes/cluster_merge_probe.cu -o cluster_merge_probe
// Run:   ./cluster_merge_probe [clusters]   (medians over 2,000 launches, rank 0 and rank 1)
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda/ptx>
#include <vector>

namespace cg = cooperative_groups;

constexpr int kThreads = 128, kSize = 4, kHeads = 7, kHd = 64, kItems = kHeads * kHd;
constexpr int kMl = 16;  // floats after a sender's o in the push buffer: (max, sum) of 7 heads, padded
enum Mode { kPullFull, kPullFenced, kChain, kChainLocal, kPush, kModes };
const char* kNames[kModes] = {"pull-full", "pull-fenced", "chain", "chain-local", "push"};

// Per CTA, thread 0's clock at: before the merge's entry, after it, its values back, after the exit.
struct Rec {
    long long t[4];
};

__device__ __forceinline__ long long clock_after(float v) {  // clock64 once v has arrived
    long long c = 0;
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %1, 0x7fffffff;\n@p mov.u64 %0, %%clock64;\n}"
                 : "+l"(c) : "r"(__float_as_uint(v)));
    return c;
}

// One item's merge over the splits' (max, sum, o), in the kernel's order.
__device__ __forceinline__ float merge_item(const float (&ms)[kSize], const float (&ls)[kSize], const float (&os)[kSize]) {
    float mx = -INFINITY, sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int s = 0; s < kSize; ++s) mx = fmaxf(mx, ms[s]);
#pragma unroll
    for (int s = 0; s < kSize; ++s) {
        const float c = exp2f(ms[s] - mx);
        sum += ls[s] * c;
        acc += os[s] * c;
    }
    return acc / sum;
}

template <int M>
__global__ void __cluster_dims__(kSize, 1, 1) __launch_bounds__(kThreads) probe(float* out, Rec* rec, int stagger) {
    __shared__ float o[kItems], s_max[8], s_sum[8];
    __shared__ __align__(16) float recv[kSize][kItems + kMl];
    __shared__ __align__(8) uint64_t bar;
    cg::cluster_group cl = cg::this_cluster();
    const int rank = static_cast<int>(cl.block_rank()), tid = threadIdx.x;
    if constexpr (M == kPush) {
        if (rank == 0 && tid == 0) {
            cuda::ptx::mbarrier_init(&bar, 1);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    }
    // This CTA's partial result (the kernel's warp merge leaves it in shared memory).
    for (int i = tid; i < kItems; i += kThreads) o[i] = 0.001f * (i + 1) * (rank + 1);
    if (tid < kHeads) s_max[tid] = 0.1f * rank + tid, s_sum[tid] = 1.0f + rank;
    if (stagger > 0) {
        const long long until = clock64() + static_cast<long long>(stagger) * rank;
        while (clock64() < until) {
        }
    }
    __syncthreads();
    long long t[4] = {clock64(), 0, 0, 0};
    if constexpr (M == kPullFull || M == kPullFenced || M == kChain || M == kChainLocal) {
        if constexpr (M == kPullFenced) {
            asm volatile("fence.release.sync_restrict::shared::cta.cluster;" ::: "memory");
            asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
            asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
            asm volatile("fence.acquire.sync_restrict::shared::cluster.cluster;" ::: "memory");
        } else {
            cl.sync();
        }
        t[1] = clock64();
        float acc = 0.0f;
        if constexpr (M == kChain || M == kChainLocal) {
            if (tid == 0) {
                int i = 0;
                for (int k = 0; k < 16; ++k) {
                    const int r = M == kChain ? (rank + 1 + k % 3) % kSize : rank;
                    const float v = *cl.map_shared_rank(o + i, r);
                    i = static_cast<int>(v * 1e-6f);  // 0: a dependent address
                    acc += v;
                }
            }
        } else {
            const int head = tid / kHd;
            float ms[kSize], ls[kSize], os[kSize];
#pragma unroll
            for (int s = 0; s < kSize; ++s) {
                ms[s] = *cl.map_shared_rank(s_max + head, s);
                ls[s] = *cl.map_shared_rank(s_sum + head, s);
                os[s] = *cl.map_shared_rank(o + tid, s);
            }
            acc = merge_item(ms, ls, os);
        }
        t[2] = clock_after(acc);
        out[blockIdx.x * kThreads + tid] = acc;
        if constexpr (M == kPullFull) {
            cl.sync();
        } else {
            asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
            asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
        }
        t[3] = clock64();
    } else {  // push
        asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // rank 0's mbarrier is initialised
        t[1] = clock64();
        constexpr uint32_t kBytes = (kSize - 1) * (kItems + kMl) * sizeof(float);
        if (rank != 0) {
            float* dst = cl.map_shared_rank(&recv[rank][0], 0);
            uint64_t* rbar = cl.map_shared_rank(&bar, 0);
            for (int i = tid; i < kItems; i += kThreads) cuda::ptx::st_async(dst + i, o[i], rbar);
            if (tid < kMl / 2)
                cuda::ptx::st_async(reinterpret_cast<uint64_t*>(dst + kItems) + tid,
                                    (static_cast<uint64_t>(__float_as_uint(tid < kHeads ? s_sum[tid] : 0.0f)) << 32) |
                                        __float_as_uint(tid < kHeads ? s_max[tid] : 0.0f),
                                    reinterpret_cast<uint64_t*>(rbar));
            t[2] = t[3] = clock64();
        } else {
            if (tid == 0)
                (void)cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta,
                                                           cuda::ptx::space_shared, &bar, kBytes);
            while (!cuda::ptx::mbarrier_try_wait_parity(cuda::ptx::sem_acquire, cuda::ptx::scope_cluster, &bar, 0u)) {
            }
            t[2] = clock64();
            for (int i = tid; i < kItems; i += kThreads) {
                const int head = i / kHd;
                float ms[kSize], ls[kSize], os[kSize];
                ms[0] = s_max[head], ls[0] = s_sum[head], os[0] = o[i];
#pragma unroll
                for (int s = 1; s < kSize; ++s) {
                    ms[s] = recv[s][kItems + 2 * head], ls[s] = recv[s][kItems + 2 * head + 1], os[s] = recv[s][i];
                }
                out[blockIdx.x * kItems + i] = merge_item(ms, ls, os);
            }
            t[3] = clock64();
        }
    }
    if (tid == 0) {
        Rec& r = rec[blockIdx.x];
        for (int k = 0; k < 4; ++k) r.t[k] = t[k];
    }
}

// One CTA an SM streams `buf` (float4s) with L2-only loads until `ns` nanoseconds have passed.
__global__ void __launch_bounds__(512) noise(const float4* buf, size_t n, float* sink, unsigned long long ns) {
    unsigned long long t0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    float acc = 0.0f;
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x;; i += gridDim.x * blockDim.x) {
        if (i >= n) i %= gridDim.x * blockDim.x;
        const float4 v = __ldcg(buf + i);
        acc += v.x + v.w;
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > ns) break;
    }
    if (acc == 1.2345f) *sink = acc;
}

template <int M>
void run(int clusters, int launches, float* out, Rec* rec, int stagger = 0, const char* tag = "") {
    const int n = clusters * kSize;
    std::vector<Rec> h(n);
    std::vector<long long> d[2][3];
    for (int l = 0; l < launches; ++l) {
        probe<M><<<n, kThreads>>>(out, rec, stagger);
        cudaMemcpy(h.data(), rec, n * sizeof(Rec), cudaMemcpyDeviceToHost);
        if (l < 20) continue;  // warm-up
        for (int b = 0; b < n; ++b) {
            const int which = b % kSize == 0 ? 0 : 1;
            if (b % kSize > 1) continue;
            for (int k = 0; k < 3; ++k) d[which][k].push_back(h[b].t[k + 1] - h[b].t[k]);
        }
    }
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
        std::printf("%s: %s\n", kNames[M], cudaGetErrorString(e));
        std::exit(1);
    }
    auto med = [](std::vector<long long>& v) {
        std::sort(v.begin(), v.end());
        return v.empty() ? -1LL : v[v.size() / 2];
    };
    std::printf("%-12s%-14s clusters %3d | rank 0: entry %5lld  values %5lld  exit %5lld | rank 1: entry %5lld  values %5lld  exit %5lld cycles\n",
                kNames[M], tag, clusters, med(d[0][0]), med(d[0][1]), med(d[0][2]), med(d[1][0]), med(d[1][1]), med(d[1][2]));
}

int main(int argc, char** argv) {
    float* out;
    Rec* rec;
    cudaMalloc(&out, 1 << 22);
    cudaMalloc(&rec, 1024 * sizeof(Rec));
    int clock_khz = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
    std::printf("SM clock %.0f MHz (cycles / %.2f = ns)\n", clock_khz / 1e3, clock_khz / 1e6);
    for (int clusters : {1, argc > 1 ? std::atoi(argv[1]) : 33}) {
        run<kPullFull>(clusters, 2000, out, rec);
        run<kPullFenced>(clusters, 2000, out, rec);
        run<kChain>(clusters, 2000, out, rec);
        run<kChainLocal>(clusters, 2000, out, rec);
        run<kPush>(clusters, 2000, out, rec);
        run<kPullFenced>(clusters, 2000, out, rec, 400, " stagger");
    }
    // The same beside a kernel that streams global memory from every SM (another stream, so the
    // probe's launches and copies on the legacy stream do not wait for it).
    int n_sms = 0;
    cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, 0);
    const size_t n4 = (size_t{1} << 30) / sizeof(float4);
    float4* buf;
    cudaMalloc(&buf, n4 * sizeof(float4));
    cudaMemset(buf, 0, n4 * sizeof(float4));
    cudaStream_t side;
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    for (int clusters : {1, argc > 1 ? std::atoi(argv[1]) : 33}) {
        noise<<<n_sms, 512, 0, side>>>(buf, n4, out, 400'000'000ull);
        run<kPullFenced>(clusters, 2000, out, rec, 0, " noise");
        run<kPullFenced>(clusters, 2000, out, rec, 400, " noise+stagger");
        run<kPush>(clusters, 2000, out, rec, 0, " noise");
        cudaStreamSynchronize(side);
    }
    return 0;
}
