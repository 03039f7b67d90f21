// The state behind CudaBackend (shared by cuda_backend.cpp, the ops, and graph_step.cpp, the
// batch metadata and the recorded decode steps). Internal to the CUDA backend.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_batch.h"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/ops.cuh"

namespace mvllm {

#define MVLLM_CUDA_OK(expr)                                                                  \
    do {                                                                                     \
        const cudaError_t mvllm_err_ = (expr);                                               \
        MVLLM_CHECK(mvllm_err_ == cudaSuccess) << #expr << ": " << cudaGetErrorString(mvllm_err_); \
    } while (0)

std::string cuda_memory_report();

// Two slots (argmax tickets alternate between them) of a step's staged input rows (pinned host
// memory, copied to the device on the copy stream) and of their results (mapped host memory that
// the kernels write and the host reads), kOut results a row.
template <typename In, typename Out, size_t kOut = 1>
struct StagedRows {
    In* host = nullptr;      // [2][capacity], pinned
    In* dev = nullptr;       // [2][capacity], device
    Out* out = nullptr;      // [2][capacity][kOut], mapped
    Out* out_dev = nullptr;  // its device address
    size_t capacity = 0;     // rows a slot

    In* host_slot(size_t s) const { return host + s * capacity; }
    In* dev_slot(size_t s) const { return dev + s * capacity; }
    Out* out_slot(size_t s) const { return out + s * capacity * kOut; }
    Out* out_dev_slot(size_t s) const { return out_dev + s * capacity * kOut; }

    // Grows to `cap` rows a slot once `stream` no longer uses the old buffers, keeping both slots'
    // results (the one not being refilled may still be read).
    void grow(size_t cap, cudaStream_t stream) {
        MVLLM_CUDA_OK(cudaStreamSynchronize(stream));
        In* h = nullptr;
        Out* o = nullptr;
        MVLLM_CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&h), 2 * cap * sizeof(In), cudaHostAllocDefault));
        MVLLM_CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&o), 2 * cap * kOut * sizeof(Out), cudaHostAllocMapped));
        for (size_t s = 0; s < 2 && capacity > 0; ++s)
            std::memcpy(o + s * cap * kOut, out_slot(s), capacity * kOut * sizeof(Out));
        release();
        host = h;
        out = o;
        MVLLM_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dev), 2 * cap * sizeof(In)));
        MVLLM_CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&out_dev), o, 0));
        capacity = cap;
    }
    void release() {
        if (host) cudaFreeHost(host);
        if (dev) cudaFree(dev);
        if (out) cudaFreeHost(out);
        host = dev = nullptr;
        out = out_dev = nullptr;
        capacity = 0;
    }
    ~StagedRows() { release(); }
};

// What recorded kernels point at besides weights and the cache (scratch buffers grow by
// reallocation): the arena generation and the scratch pointers.
using StepResources = std::tuple<uint64_t, const void*, const void*, const void*, const void*, const void*,
                                 const void*, const void*, const void*, const void*>;

// A recorded decode step: its graph and the fixed device buffer its kernels read the step's
// inputs from.
struct StepGraph {
    cudaGraphExec_t exec = nullptr;
    void* meta_device = nullptr;  // the batch metadata at a fixed layout (graph_step.cpp)
    cuda::DeviceBatch batch;      // pointers into meta_device; host figures of the recording
    const int64_t* seq_ctx_offset = nullptr;
    int64_t total_context = 0;
    // What the recorded kernels point at besides weights and the cache: a replay is valid only
    // while these are unchanged (scratch buffers grow by reallocation).
    StepResources resources;
    uint64_t last_use = 0;  // the step counter at its last replay (least recently used goes first)
    cudaGraph_t graph = nullptr;  // kept only for MVLLM_CUDA_GRAPH_ABLATION (graph_ablation.cpp)
    int64_t n_replays = 0;
};

// graph_ablation.cpp: each kernel's cost inside a recorded step (a profiling aid).
void ablate_graph(cudaGraph_t graph, cudaGraphExec_t exec, cudaStream_t stream, int32_t batch_size);

// (program, cache storage, block size, batch size, context bucket).
using StepKey = std::tuple<uint64_t, const void*, int32_t, int32_t, int32_t>;

enum class StepMode { Eager, Capture, Replay };

struct CudaBackend::Impl {
    CudaBackendOptions options;
    cudaStream_t stream = nullptr;
    cublasHandle_t cublas = nullptr;
    static constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;
    void* cublas_workspace = nullptr;
    int32_t n_sms = 0;
    std::string device_name;
    std::vector<void*> weights;  // device allocations of upload_weight
    std::map<const void*, const void*> f16_copies;  // quantised weight -> its F16 copy
    size_t f16_copy_bytes = 0;
    // Drops the least recently used graphs until at most `keep` remain.
    void evict_graphs(size_t keep);
    // Host -> device copy ordered on `stream` (every kernel's stream); returns when it landed.
    void copy_to_device(void* dst, const void* src, size_t bytes);
    // Makes the F16 copy of a just-uploaded quantised weight when the options and memory allow.
    void add_f16_copy(const TensorView& w);
    // The F16 copies of gate and up as one [gate rows; up rows] matrix (moved together at the
    // first eager call), or nullptr when they have no copies or cannot be moved now.
    const void* stacked_f16_copies(const TensorView& gate, const TensorView& up);
    const void* f16_copy(const TensorView& w) const {
        const auto it = f16_copies.find(w.data);
        return it == f16_copies.end() ? nullptr : it->second;
    }

    // The activation arena: slot i is reused by the i-th alloc() of every forward.
    struct Slot {
        void* ptr = nullptr;
        size_t bytes = 0;
    };
    std::vector<Slot> arena;
    size_t arena_next = 0;
    uint64_t arena_generation = 0;  // bumped whenever a slot is reallocated

    // Batch metadata: packed on the host (pinned), one copy to the device per step.
    uint8_t* meta_host = nullptr;
    void* meta_device = nullptr;
    size_t meta_capacity = 0;
    cudaEvent_t meta_copied = nullptr;
    cuda::DeviceBatch batch;
    const int64_t* seq_ctx_offset = nullptr;  // [n_seqs] device
    int64_t total_context = 0;
    std::vector<int32_t> query_len_by_row;  // host side of batch.rows_by_query_len (see DeviceBatch)

    float* inv_freq = nullptr;  // [head_dim / 2] device copy of RopeParams::inv_freq
    // This step's RoPE table (launch_rope_table, at its first folded attention), or null.
    const float2* rope_table = nullptr;
    std::vector<float> inv_freq_host;
    // Greedy sampling's results land in mapped pinned host memory (written by the kernels over
    // the bus: no copy is queued after them), in two slots (ticket % 2: a step's tokens stay
    // readable while the next step is queued), and in a device copy that fed tokens read; the
    // keys are device scratch the kernel re-zeroes.
    int32_t* argmax_out = nullptr;          // [2][argmax_capacity], host (mapped)
    float* argmax_logprob = nullptr;        // [2][argmax_capacity], host (mapped): the token's log-softmax
    int32_t* argmax_out_dev = nullptr;      // the device's addresses of argmax_out, argmax_logprob
    float* argmax_logprob_dev = nullptr;
    int32_t* argmax_fed = nullptr;          // [argmax_capacity], device: the last enqueued argmax
    unsigned long long* argmax_keys = nullptr;
    size_t argmax_capacity = 0;
    struct ArgmaxSlot {
        uint64_t ticket = 0;
        size_t rows = 0;
        bool logprob = false;
        bool targets = false;
        size_t copied = 0;           // floats of copied rows (TokenPicks::copies) in copies_host
        size_t scored = 0;           // rows scored (TokenPicks::scores) into scores.out
        std::vector<RowScore> scores;  // unpacked by argmax_result
        cudaEvent_t done = nullptr;  // recorded after the slot's kernels
    };
    ArgmaxSlot argmax_slots[2];
    // argmax_enqueue copies a step's staged inputs (penalties, draws, targets, asks) to the device
    // on copy_stream, so that they overlap the step's pass, queued before them on `stream`, which
    // waits for them (staged[ticket % 2]) only at its first pick kernel: on `stream` the ~6 MB of
    // 256 penalised rows' lists cost B4(b) ~0.2 ms a step (bench/NOTES.md, thirty-first session).
    cudaStream_t copy_stream = nullptr;
    cudaEvent_t staged[2] = {};
    // Grows the argmax buffers to at least `rows` (keeping both slots and the fed copy).
    void ensure_argmax(size_t rows);
    // Sampled draws (argmax_enqueue with TokenDraws): the rows' draws staged in pinned host memory
    // and copied to the device (two slots, as the results); the cuts (top_k, top_p) and partial
    // (score, index) scratch of launch_draw.
    TokenDraw* draws_host = nullptr;  // [2][draw_rows], host (pinned)
    TokenDraw* draws_dev = nullptr;   // [2][draw_rows], device
    cuda::DrawCut* draw_cuts = nullptr;  // [draw_rows], device
    void* draw_binned = nullptr;      // [draw_rows] rows of the binned cut's scratch (options.binned_cut)
    double* draw_score = nullptr;     // [draw_rows * draw_parts], device
    int32_t* draw_index = nullptr;
    size_t draw_rows = 0;
    int64_t draw_parts = 0;
    // Grows the draw buffers to at least `rows` rows of `parts` partials.
    void ensure_draws(size_t rows, int64_t parts);
    // A step's penalties (argmax_enqueue with TokenPicks::penalties), staged and copied as the
    // draws are, two slots of penalty_capacity entries each.
    TokenPenalty* penalties_host = nullptr;  // [2][penalty_capacity], host (pinned)
    TokenPenalty* penalties_dev = nullptr;   // [2][penalty_capacity], device
    size_t penalty_capacity = 0;
    // Grows the penalty buffers to at least n entries a slot.
    void ensure_penalties(size_t n);
    // A step's targets (TokenPicks::targets) staged and copied per slot, and their log-softmax in
    // mapped host memory per slot, as the argmax's results.
    StagedRows<int32_t, float> targets;
    // Grows the target buffers to at least `rows` a slot (keeping both slots' results).
    void ensure_targets(size_t rows);
    // The rows a step copies back (TokenPicks::copies), penalised, per slot in pinned host memory.
    float* copies_host = nullptr;  // [2][copy_capacity]
    size_t copy_capacity = 0;      // floats a slot
    // Grows the copy buffers to at least n floats a slot (keeping both slots' rows).
    void ensure_copies(size_t n);
    // A step's scored rows (TokenPicks::scores) staged and copied per slot, and their packed scores
    // (cuda::launch_row_scores) in mapped host memory per slot.
    StagedRows<ScoreAsk, int32_t, cuda::kRowScoreWords> scores;
    int32_t* score_parts = nullptr;  // [n_sms][kRowScoreWords], device: few rows' parts (launch_row_scores)
    // Grows the score buffers to at least n rows a slot (keeping both slots' packed scores).
    void ensure_scores(size_t n);

    cuda::MatmulScratch matmul_scratch;
    std::unique_ptr<cuda::GemmTuner> gemm_tuner;  // matmul_scratch.tuner
    cuda::AttentionScratch attention_scratch;
    // The activation whose QX (gemv.cuh) matmul_scratch.qx holds, or nullptr.
    const void* qx_source = nullptr;
    int64_t qx_n_in = 0, qx_rows = 0;

    // Recorded decode steps.
    bool graphs_enabled = true;
    int64_t ablation_at = 0;  // MVLLM_CUDA_GRAPH_ABLATION: the replay of each graph that is ablated (0: none)
    StepMode mode = StepMode::Eager;
    StepKey step_key;
    // At most kMaxGraphs, least recently used dropped. A warm-up records one per batch size and
    // context bucket: 8 buckets (256 .. 32768) x 10 sizes (1 .. 512) fit.
    std::map<StepKey, StepGraph> graphs;
    static constexpr size_t kMaxGraphs = 128;
    int32_t warmup_context = 0;  // set_warming_up: the shortest context a warm-up step is recorded for
    uint64_t step_counter = 0;
    std::map<StepKey, int> seen;
    // MVLLM_CUDA_STEP_TIMING=1: the device time of every recorded step, from its graph's start to
    // its end (gaps between the step's kernels included, the host's time between steps not); the
    // device's time from one graph's end to the next one's start when no eager step came between
    // (the argmax, the metadata copy, the launch, and whatever the host made the device wait);
    // and on the host the time from a step's argmax result to the next graph launch (the engine's
    // own work, while the device idles) and from a graph launch to its argmax result (both only
    // for results read before the next step is queued); reported on stderr at exit, over the
    // steps after the engine's warm-up. Against the wall time of a step they say where a step's
    // time goes. Launch k records events k % 2, so that timing does not wait for the graph before.
    struct GraphTiming {
        bool enabled = false;
        cudaEvent_t start[2] = {}, stop[2] = {};
        bool chained[2] = {};  // launch k % 2 followed the previous launch with no eager step between
        bool chain_next = false;
        int64_t n_launched = 0, n_collected = 0;
        double total_ms = 0, gap_ms = 0;
        int64_t n = 0, n_gap = 0;
        std::chrono::steady_clock::time_point launched{}, synced{};
        double host_between_s = 0, launch_to_result_s = 0;
        int64_t n_between = 0, n_launch_to_result = 0;
    } graph_timing;
    // Adds up the timed launches until at most `keep` are left uncollected.
    void collect_graph_time(int64_t keep = 0);

    ~Impl();
    void ensure_meta(size_t bytes);
    void set_inv_freq(const RopeParams& rope);
    cuda::CudaAttention attention_variant() const;
    // CudaBackend::attention, with `raw`: RoPE and the K/V store folded in (attention_folds_rope).
    void attention(const cuda::DeviceKvLayer& kv, const TensorView& q, const TensorView& out, int32_t n_heads,
                   float scale, const cuda::RawQkv* raw);
    // Whether the QKV GEMV applies RoPE and stores the K/V in its epilogue (options.qkv_rope_epilogue).
    bool gemv_takes_rope(const TensorView& wqkv, const TensorView& wv, const TensorView& x) const;
    // Forgets a QX copy of the tensor an op is about to write.
    void wrote(const TensorView& t) {
        if (t.data == qx_source) qx_source = nullptr;
    }
    // The QX of x for a GEMV (computed unless the last producer of x left it), or nullptr when w
    // does not take the integer GEMV for this many rows.
    const cuda::QxView* qx_for(const TensorView& w, const TensorView& x, cuda::QxView* storage);
    StepResources resources() const {
        return {arena_generation, attention_scratch.partial, attention_scratch.counters, attention_scratch.rope_table, matmul_scratch.qx,
                matmul_scratch.input, matmul_scratch.weight, matmul_scratch.partial, inv_freq, argmax_fed};
    }
};

}  // namespace mvllm
