#include "backend/cuda/gemm_tuned.cuh"

#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/status.h"

namespace mvllm::cuda {
namespace {

#define MVLLM_LT_OK(expr)                                                                          \
    do {                                                                                           \
        const cublasStatus_t mvllm_st_ = (expr);                                                   \
        MVLLM_CHECK(mvllm_st_ == CUBLAS_STATUS_SUCCESS) << #expr << ": cuBLAS status " << static_cast<int>(mvllm_st_); \
    } while (0)
#define MVLLM_RT_OK(expr)                                                                          \
    do {                                                                                           \
        const cudaError_t mvllm_err_ = (expr);                                                     \
        MVLLM_CHECK(mvllm_err_ == cudaSuccess) << #expr << ": " << cudaGetErrorString(mvllm_err_); \
    } while (0)

// MVLLM_GEMM_TUNE: "1" always tunes, "0" never, unset: while set_tuning(true) (the warm-up).
int tuning_override() {
    static const int v = [] {
        const char* e = std::getenv("MVLLM_GEMM_TUNE");
        return e ? (std::string(e) == "1" ? 1 : std::string(e) == "0" ? 0 : -1) : -1;
    }();
    return v;
}

// A tuned candidate must beat the heuristic's first choice by this much (timings of one
// process differ by a few per cent; a near tie keeps cuBLAS's own pick, so runs agree).
constexpr float kMinGain = 0.97f;
constexpr int kCandidates = 8;  // from the heuristic
constexpr int kSplitVariants = 3;  // of the first few of them, the forced K splits
constexpr int kReps = 2;

std::tuple<int64_t, int64_t, int64_t, bool> bucket_key(const std::tuple<int64_t, int64_t, int64_t, bool>& k) {
    int64_t m = 16;
    while (m < std::get<2>(k)) m *= 2;
    return {std::get<0>(k), std::get<1>(k), m, std::get<3>(k)};
}

}  // namespace

struct GemmTuner::Impl {
    using Key = std::tuple<int64_t, int64_t, int64_t, bool>;  // n_out, n_in, n_tokens, accumulate
    struct Plan {
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
        cublasLtMatmulAlgo_t algo{};
        bool tuned = false;
    };
    cublasLtHandle_t lt = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    std::map<Key, Plan> plans;
    // The tuned algorithm of a row-count bucket (n_tokens rounded up to a power of two): later
    // shapes of the bucket reuse it when cuBLASLt accepts it for them, so a server whose batch
    // size wanders tunes each matrix a handful of times, not once per batch size.
    std::map<Key, cublasLtMatmulAlgo_t> bucket_algos;
    float* scratch = nullptr;  // timing output
    size_t scratch_bytes = 0;
    cudaEvent_t t0 = nullptr, t1 = nullptr;
    bool tuning = false;  // set_tuning

    bool tuning_enabled() const { return tuning_override() >= 0 ? tuning_override() == 1 : tuning; }

    ~Impl() {
        for (auto& [key, p] : plans) {
            cublasLtMatrixLayoutDestroy(p.a);
            cublasLtMatrixLayoutDestroy(p.b);
            cublasLtMatrixLayoutDestroy(p.c);
            cublasLtMatmulDescDestroy(p.op);
        }
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (lt) cublasLtDestroy(lt);
        if (scratch) cudaFree(scratch);
        if (t0) cudaEventDestroy(t0);
        if (t1) cudaEventDestroy(t1);
    }

    cublasStatus_t run(const Plan& p, const cublasLtMatmulAlgo_t& algo, const void* w, const void* x, float* out,
                       bool accumulate, cudaStream_t stream) const {
        const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
        return cublasLtMatmul(lt, p.op, &alpha, w, p.a, x, p.b, &beta, out, p.c, out, p.c, &algo, workspace,
                              workspace_bytes, stream);
    }

    // The best of kReps runs (after one warm-up), in ms; infinity on failure. A shape's tuning
    // costs a few ms (about 20 candidates), once per power-of-two row bucket.
    float time(const Plan& p, const cublasLtMatmulAlgo_t& algo, const void* w, const void* x, bool accumulate,
               cudaStream_t stream) {
        if (run(p, algo, w, x, scratch, accumulate, stream) != CUBLAS_STATUS_SUCCESS) return INFINITY;
        float best = INFINITY;
        for (int r = 0; r < kReps; ++r) {
            MVLLM_RT_OK(cudaEventRecord(t0, stream));
            if (run(p, algo, w, x, scratch, accumulate, stream) != CUBLAS_STATUS_SUCCESS) return INFINITY;
            MVLLM_RT_OK(cudaEventRecord(t1, stream));
            MVLLM_RT_OK(cudaEventSynchronize(t1));
            float ms = 0;
            MVLLM_RT_OK(cudaEventElapsedTime(&ms, t0, t1));
            best = std::min(best, ms);
        }
        return best;
    }
};

GemmTuner::GemmTuner(void* workspace, size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
    MVLLM_LT_OK(cublasLtCreate(&impl_->lt));
    MVLLM_LT_OK(cublasLtMatmulPreferenceCreate(&impl_->pref));
    uint64_t ws = workspace_bytes;
    MVLLM_LT_OK(cublasLtMatmulPreferenceSetAttribute(impl_->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                     sizeof(ws)));
    impl_->workspace = workspace;
    impl_->workspace_bytes = workspace_bytes;
    MVLLM_RT_OK(cudaEventCreate(&impl_->t0));
    MVLLM_RT_OK(cudaEventCreate(&impl_->t1));
}

GemmTuner::~GemmTuner() = default;

void GemmTuner::set_tuning(bool on) { impl_->tuning = on; }

bool GemmTuner::gemm(const void* w_f16, const void* x_f16, float* out, int64_t n_out, int64_t n_in,
                     int64_t n_tokens, bool accumulate, cudaStream_t stream) {
    Impl& im = *impl_;
    const Impl::Key key{n_out, n_in, n_tokens, accumulate};
    auto it = im.plans.find(key);
    if (it == im.plans.end()) {
        // Column-major views: A = W as [n_in x n_out] (op T), B = X as [n_in x n_tokens], C [n_out x n_tokens].
        Impl::Plan p;
        MVLLM_LT_OK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        MVLLM_LT_OK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
        MVLLM_LT_OK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
        MVLLM_LT_OK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16F, n_in, n_out, n_in));
        MVLLM_LT_OK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16F, n_in, n_tokens, n_in));
        MVLLM_LT_OK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, n_out, n_tokens, n_out));
        cublasLtMatmulHeuristicResult_t first{};
        int n_found = 0;
        if (cublasLtMatmulAlgoGetHeuristic(im.lt, p.op, p.a, p.b, p.c, p.c, im.pref, 1, &first, &n_found) !=
                CUBLAS_STATUS_SUCCESS ||
            n_found == 0) {
            cublasLtMatrixLayoutDestroy(p.a);
            cublasLtMatrixLayoutDestroy(p.b);
            cublasLtMatrixLayoutDestroy(p.c);
            cublasLtMatmulDescDestroy(p.op);
            return false;
        }
        p.algo = first.algo;
        p.tuned = n_tokens > kTunedMaxTokens;  // nothing to time
        const auto b = im.bucket_algos.find(bucket_key(key));
        cublasLtMatmulHeuristicResult_t check{};
        if (!p.tuned && b != im.bucket_algos.end() &&
            cublasLtMatmulAlgoCheck(im.lt, p.op, p.a, p.b, p.c, p.c, &b->second, &check) == CUBLAS_STATUS_SUCCESS &&
            check.workspaceSize <= im.workspace_bytes) {
            p.algo = b->second;
            p.tuned = true;
        }
        if (!im.tuning_enabled()) p.tuned = true;  // the heuristic's pick, untimed
        it = im.plans.emplace(key, p).first;
    }
    Impl::Plan& p = it->second;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    MVLLM_RT_OK(cudaStreamIsCapturing(stream, &capture));
    if (!p.tuned && capture == cudaStreamCaptureStatusNone && im.tuning_enabled()) {
        cublasLtMatmulHeuristicResult_t found[kCandidates];
        int n_found = 0;
        MVLLM_LT_OK(cublasLtMatmulAlgoGetHeuristic(im.lt, p.op, p.a, p.b, p.c, p.c, im.pref, kCandidates, found,
                                                   &n_found));
        const size_t need = static_cast<size_t>(n_out * n_tokens) * sizeof(float);
        if (im.scratch_bytes < need) {
            MVLLM_RT_OK(cudaStreamSynchronize(stream));
            if (im.scratch) MVLLM_RT_OK(cudaFree(im.scratch));
            im.scratch = nullptr;
            im.scratch_bytes = 0;
            if (cudaMalloc(&im.scratch, need) == cudaSuccess) im.scratch_bytes = need;
            else cudaGetLastError();
        }
        // The heuristic's candidates, and each with its K split forced to 1, 2, 4 or 8 (reduced
        // in the output or through the workspace): a few dozen rows against a long matrix leave
        // most SMs idle without a split, and cuBLAS's own split count is often not the best.
        std::vector<cublasLtMatmulAlgo_t> candidates;
        for (int i = 0; i < n_found; ++i) {
            candidates.push_back(found[i].algo);
            if (i >= kSplitVariants) continue;
            for (int32_t split : {1, 2, 4, 8}) {
                for (uint32_t scheme : {CUBLASLT_REDUCTION_SCHEME_INPLACE, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE}) {
                    cublasLtMatmulAlgo_t a = found[i].algo;
                    const uint32_t sch = split == 1 ? CUBLASLT_REDUCTION_SCHEME_NONE : scheme;
                    if (split == 1 && scheme != CUBLASLT_REDUCTION_SCHEME_INPLACE) continue;
                    cublasLtMatmulHeuristicResult_t check{};
                    if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof(split)) !=
                            CUBLAS_STATUS_SUCCESS ||
                        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &sch,
                                                             sizeof(sch)) != CUBLAS_STATUS_SUCCESS ||
                        cublasLtMatmulAlgoCheck(im.lt, p.op, p.a, p.b, p.c, p.c, &a, &check) != CUBLAS_STATUS_SUCCESS ||
                        check.workspaceSize > im.workspace_bytes)
                        continue;
                    candidates.push_back(a);
                }
            }
        }
        if (im.scratch && candidates.size() > 1) {
            const float base = im.time(p, p.algo, w_f16, x_f16, accumulate, stream);
            float best = base * kMinGain;
            for (size_t i = 1; i < candidates.size(); ++i) {
                const float t = im.time(p, candidates[i], w_f16, x_f16, accumulate, stream);
                if (t < best) {
                    best = t;
                    p.algo = candidates[i];
                }
            }
        }
        p.tuned = true;
        im.bucket_algos[bucket_key(key)] = p.algo;
    }
    return im.run(p, p.algo, w_f16, x_f16, out, accumulate, stream) == CUBLAS_STATUS_SUCCESS;
}

}  // namespace mvllm::cuda
