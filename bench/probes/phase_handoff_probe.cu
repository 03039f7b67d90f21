// A probe for the structural option of bench/NOTES.md (a persistent decode kernel): what it costs
// to hand a vector from one phase of the step to the next, as a kernel boundary under programmatic
// dependent launch (today's step) and as a barrier inside one persistent kernel (fifty-fourth
// session). Each phase is the skeleton of a batch-1 GEMV: every CTA reads the whole 896-value
// vector the previous phase wrote (from L2), reduces it across its warps, and writes its 7 values
// of the next vector. The arithmetic is the same in every mode, so every mode must end with the
// same bits (a wrong barrier shows up as a mismatch).
//   graph        one kernel a phase, captured in a CUDA graph, plain stream order
//   graph-pdl    the same with programmatic dependent launch: the next kernel is released at the
//                top of this one and waits (griddepcontrol.wait) before it reads the vector
//   pdl-late     the same, but each kernel releases the next one only after its stores
//   cg-sync      one cooperative kernel, cooperative_groups' grid.sync() between phases
//   counter      one cooperative kernel, one arrival counter and a generation word (release add,
//                acquire spin by thread 0 of each CTA)
//   flags        one cooperative kernel, one flag word a CTA: a CTA publishes its phase with a
//                release store; thread t of every CTA polls CTA t's flag (acquire), so a CTA waits
//                one round trip after the last writer, with no atomic queue on one address
// Each mode runs with the work (read, reduce, write) and empty (the hand-off alone). Printed: µs a
// phase (median of 7 timings of 2,000 phases).
// Build: nvcc -O3 -std=c++20 -arch=sm_90 bench/probes/phase_handoff_probe.cu -o phase_handoff_probe
// Run:   ./phase_handoff_probe [ctas_per_sm]
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

namespace cg = cooperative_groups;

constexpr int kHidden = 896, kThreads = 128, kPerCta = 7, kPhases = 2000;
enum Mode { kGraph, kGraphPdl, kGraphPdlLate, kCgSync, kCounter, kFlags };
const char* kNames[] = {"graph", "graph-pdl", "pdl-late", "cg-sync", "counter", "flags"};

struct Sync {
    unsigned* count;  // arrivals of the current phase
    unsigned* gen;    // phases completed
    unsigned* flags;  // one word a CTA, 32 words apart: the last phase it finished
};

// One phase: the CTA reads all of `in`, sums it (fixed order), and writes its slice of `out`.
template <bool Work>
__device__ void phase(const float* in, float* out) {
    if constexpr (Work) {
        __shared__ float part[kThreads / 32];
        float s = 0.0f;
        for (int i = threadIdx.x; i < kHidden; i += kThreads) s += __ldcg(in + i);
        for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
        __syncthreads();
        const float total = part[0] + part[1] + part[2] + part[3];
        const int i = blockIdx.x * kPerCta + threadIdx.x;
        if (threadIdx.x < kPerCta && i < kHidden) {  // bounded and chaotic, so a stale input shows
            const float v = __ldcg(in + i) * 1.7f + total * 0.013f;
            out[i] = v - floorf(v);
        }
        __syncthreads();  // part[] is reused by the next phase
    }
}

// trigger: 0 plain stream order, 1 release the next kernel on entry, 2 after the stores.
template <bool Work>
__global__ void phase_kernel(const float* in, float* out, int trigger) {
    if (trigger == 1) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (trigger) asm volatile("griddepcontrol.wait;" ::: "memory");
    phase<Work>(in, out);
    if (trigger == 2) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned add_acq_rel(unsigned* p, unsigned v) {
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

template <Mode M>
__device__ void barrier(Sync s, unsigned phase_no) {
    if constexpr (M == kCgSync) {
        cg::this_grid().sync();
    } else if constexpr (M == kCounter) {
        __syncthreads();
        if (threadIdx.x == 0) {
            if (add_acq_rel(s.count, 1) == gridDim.x - 1) {
                atomicExch(s.count, 0u);  // nobody adds to it again until gen moves
                st_release(s.gen, phase_no + 1);
            } else {
                while (ld_acquire(s.gen) <= phase_no) {
                }
            }
        }
        __syncthreads();
    } else {  // kFlags
        __syncthreads();
        if (threadIdx.x == 0) st_release(s.flags + 32 * blockIdx.x, phase_no + 1);
        for (unsigned c = threadIdx.x; c < gridDim.x; c += blockDim.x)
            while (ld_acquire(s.flags + 32 * c) <= phase_no) {
            }
        __syncthreads();
    }
}

template <Mode M, bool Work>
__global__ void persistent_kernel(float* a, float* b, Sync s, unsigned phases) {
    for (unsigned p = 0; p < phases; ++p) {
        phase<Work>(p % 2 ? b : a, p % 2 ? a : b);
        barrier<M>(s, p);
    }
}

#define CHECK(x)                                                                         \
    do {                                                                                 \
        cudaError_t e_ = (x);                                                            \
        if (e_ != cudaSuccess) {                                                         \
            std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            std::exit(1);                                                                \
        }                                                                                \
    } while (0)

struct Bufs {
    float *a, *b;
    Sync s;
};

void reset(Bufs& u, int ctas) {
    std::vector<float> x(kHidden);
    for (int i = 0; i < kHidden; ++i) x[i] = 0.001f * (i % 997);
    CHECK(cudaMemcpy(u.a, x.data(), kHidden * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(u.b, 0, kHidden * sizeof(float)));
    CHECK(cudaMemset(u.s.count, 0, sizeof(unsigned)));
    CHECK(cudaMemset(u.s.gen, 0, sizeof(unsigned)));
    CHECK(cudaMemset(u.s.flags, 0, 32 * sizeof(unsigned) * ctas));
}

// Runs kPhases phases once in mode M; returns the time in ms.
template <Mode M, bool Work>
float run_once(Bufs& u, int ctas, cudaStream_t st, cudaGraphExec_t* graph) {
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    CHECK(cudaEventRecord(e0, st));
    if constexpr (M <= kGraphPdlLate) {
        CHECK(cudaGraphLaunch(*graph, st));
    } else {
        unsigned phases = kPhases;
        void* args[] = {&u.a, &u.b, &u.s, &phases};
        CHECK(cudaLaunchCooperativeKernel((void*)persistent_kernel<M, Work>, ctas, kThreads, args, 0, st));
    }
    CHECK(cudaEventRecord(e1, st));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
    return ms;
}

template <bool Work>
cudaGraphExec_t capture(Bufs& u, int ctas, cudaStream_t st, int trigger) {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int p = 0; p < kPhases; ++p) {
        cudaLaunchConfig_t cfg{};
        cfg.gridDim = ctas;
        cfg.blockDim = kThreads;
        cfg.stream = st;
        cudaLaunchAttribute attr{};
        attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr.val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = &attr;
        cfg.numAttrs = trigger ? 1 : 0;
        const float* in = p % 2 ? u.b : u.a;
        float* out = p % 2 ? u.a : u.b;
        CHECK(cudaLaunchKernelEx(&cfg, phase_kernel<Work>, in, out, trigger));
    }
    CHECK(cudaStreamEndCapture(st, &g));
    cudaGraphExec_t ex;
    CHECK(cudaGraphInstantiate(&ex, g, 0));
    CHECK(cudaGraphDestroy(g));
    return ex;
}

template <Mode M, bool Work>
void measure(Bufs& u, int ctas, cudaStream_t st, std::vector<float>& result) {
    cudaGraphExec_t graph{};
    if constexpr (M <= kGraphPdlLate) graph = capture<Work>(u, ctas, st, int(M));
    std::vector<float> t;
    for (int r = 0; r < 8; ++r) {
        reset(u, ctas);
        const float ms = run_once<M, Work>(u, ctas, st, &graph);
        if (r > 0) t.push_back(ms);  // the first is a warm-up
    }
    std::sort(t.begin(), t.end());
    std::vector<float> out(kHidden);
    CHECK(cudaMemcpy(out.data(), kPhases % 2 ? u.b : u.a, kHidden * sizeof(float), cudaMemcpyDeviceToHost));
    const char* check = "";
    if (Work) {
        if (result.empty()) result = out;
        check = std::memcmp(out.data(), result.data(), kHidden * sizeof(float)) == 0 ? "bits equal to graph" : "MISMATCH";
    }
    std::printf("%-10s %-6s ctas %4d | %6.3f us a phase (min %6.3f) %s\n", kNames[M], Work ? "work" : "empty", ctas,
                t[t.size() / 2] * 1e3f / kPhases, t.front() * 1e3f / kPhases, check);
    if (graph) CHECK(cudaGraphExecDestroy(graph));
}

template <bool Work>
void all_modes(Bufs& u, int ctas, cudaStream_t st) {
    std::vector<float> result;
    measure<kGraph, Work>(u, ctas, st, result);
    measure<kGraphPdl, Work>(u, ctas, st, result);
    measure<kGraphPdlLate, Work>(u, ctas, st, result);
    measure<kCgSync, Work>(u, ctas, st, result);
    measure<kCounter, Work>(u, ctas, st, result);
    measure<kFlags, Work>(u, ctas, st, result);
}

int main(int argc, char** argv) {
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp prop{};
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s, %d SMs; %d phases a timing\n", prop.name, sms, kPhases);
    Bufs u;
    const int max_ctas = 4 * sms;
    CHECK(cudaMalloc(&u.a, kHidden * sizeof(float)));
    CHECK(cudaMalloc(&u.b, kHidden * sizeof(float)));
    CHECK(cudaMalloc(&u.s.count, 256));
    CHECK(cudaMalloc(&u.s.gen, 256));
    CHECK(cudaMalloc(&u.s.flags, 32 * sizeof(unsigned) * max_ctas));
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const int per_sm = argc > 1 ? std::max(1, std::min(4, std::atoi(argv[1]))) : 1;
    // 128 CTAs: every value of the vector has a writer and no CTA idles; then every SM once (or more).
    for (int ctas : {kHidden / kPerCta, per_sm * sms}) {
        all_modes<true>(u, ctas, st);
        all_modes<false>(u, ctas, st);
    }
    return 0;
}
