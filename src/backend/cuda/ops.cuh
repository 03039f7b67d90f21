// Element-wise and per-row CUDA ops of the decoder (host launchers only). Activations are rows
// (ne = {width, n_rows}) of F32, F16 or BF16; math is always f32. All launches are asynchronous
// on `stream`; pointers are device pointers.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/device_batch.h"
#include "core/draw.h"
#include "core/race.h"
#include "core/tensor.h"

namespace mvllm::cuda {

// The step timeline (a build with -DMVLLM_STEP_TIMELINE=ON, common.cuh): every CTA's arrival at
// and release from the PDL wait, as CSV (scripts/step_timeline.py); the records written; 0 in
// other builds.
size_t step_timeline_dump(const char* path);

// out[i] = table[ids[i]], dequantised (table: any weight type; out: F32/F16/BF16). A negative
// id is fed_token(r) (kv/batch.h): the id is fed[r] (device, the last argmax's tokens).
void launch_embed(const TensorView& table, const int32_t* ids, const int32_t* fed, const TensorView& out,
                  cudaStream_t stream);
// out = x / rms(x) * weight, per row (weight F32/F16/BF16).
void launch_rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& out,
                     cudaStream_t stream);
// In place, half-split pairing; positions[n_rows], inv_freq[head_dim / 2] f32.
void launch_rope(const TensorView& x, int32_t n_heads, int32_t head_dim, const int32_t* positions,
                 const float* inv_freq, cudaStream_t stream);
// out = silu(gate) * up.
void launch_silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out, cudaStream_t stream);
// out [n_rows][n_ff] = silu(gate) * up from gate_up [n_rows][2 n_ff] f32 (one GEMM of stacked weights).
void launch_silu_mul_stacked(const TensorView& gate_up, const TensorView& out, cudaStream_t stream);
// acc += x (acc F32).
void launch_add(const TensorView& acc, const TensorView& x, cudaStream_t stream);
// x[r][i] += bias[i] (x F32).
void launch_add_bias(const TensorView& x, const TensorView& bias, cudaStream_t stream);
// out[j] = x[rows[j]] for j < out.ne[1] (same dtype).
void launch_gather_rows(const TensorView& x, const int32_t* rows, const TensorView& out, cudaStream_t stream);
// Element-wise type conversion between F32 / F16 / BF16 tensors of equal shape.
void launch_convert(const TensorView& src, const TensorView& dst, cudaStream_t stream);
// out[r] = argmax of row r of x (F32; first index wins ties). keys: [n_rows] device scratch, zero
// on entry and left zero. Many CTAs per row merge (value, index) keys with one 64-bit atomicMax
// each. out may be mapped host memory (the tokens then need no copy after the kernels); fed
// (device, or null) receives them too, for the embedding of a step queued after this one.
void launch_argmax(const TensorView& x, unsigned long long* keys, int32_t* out, int32_t* fed, cudaStream_t stream);
// x[p.row][p.token] = penalised(x[p.row][p.token], p.repetition, p.subtract) for each of the n
// penalties (device memory; each (row, token) once, core/draw.h), in place on x [n_rows][width] f32.
void launch_penalties(const TensorView& x, const TokenPenalty* penalties, int64_t n, cudaStream_t stream);
// A row's kept head as a cut in the order (logit descending, token id ascending): the tokens whose
// logit's order key is above `key`, and those at it with id <= last.
struct DrawCut {
    uint32_t key;
    int32_t last;
    // Whether the token of order key k and id i is in the cut.
    __host__ __device__ bool keeps(uint32_t k, int64_t i) const { return k > key || (k == key && i <= last); }
};
// out[r] = row r's token by draws[r] (core/draw.h's draw_row; draws in device memory): the argmax
// when its temperature is 0, otherwise the race over the tokens top_k, top_p and min_p keep,
// computed in log space (the same winner up to rounding ties). keys as launch_argmax (used when
// any_max: a row has min_p, top_k or top_p; the rows' maxima); the cuts are used when any_cut (a
// row has top_k or top_p). out and fed as launch_argmax.
struct DrawScratch {
    unsigned long long* keys = nullptr;  // [rows], as launch_argmax's
    DrawCut* cuts = nullptr;             // [rows]
    void* binned = nullptr;              // launch_draw_cut's binned scratch, or null
    double* part_score = nullptr;        // [rows][draw_parts(width)]
    int32_t* part_index = nullptr;
    int n_sms = 0;
    bool outlined_score = false;         // the race's score out of line (CudaBackendOptions::draw_score_outlined)
};
int64_t draw_parts(int64_t width);
void launch_draw(const TensorView& x, const TokenDraw* draws, bool any_max, bool any_cut, const DrawScratch& scratch,
                 int32_t* out, int32_t* fed, cudaStream_t stream);
// cuts[r] for the rows whose draw truncates (top_k, top_p; draw_cut.cu), from x [n_rows][width] f32
// and the rows' maxima in keys. binned (or null: one CTA per row reads the whole row): zeroed device
// scratch of binned_cut_bytes(n_rows) for the binned first step, which narrows each row to the
// values of one histogram bin with many CTAs per row (n_sms: the device's SM count).
int64_t binned_cut_bytes(int64_t n_rows);
// At the start of that scratch: how many truncating rows the binned step narrowed, and how many
// the selection read whole (too many candidates, or no bin reached the target).
struct BinnedCutStats {
    unsigned long long binned, whole;
};
void launch_draw_cut(const float* x, int64_t width, int64_t n_rows, const TokenDraw* draws,
                     const unsigned long long* keys, DrawCut* cuts, void* binned, int n_sms, cudaStream_t stream);
// out[r] = the log-softmax of row r's maximum, -log sum_i exp(x[r][i] - max_r) (F32 x). One CTA
// per row, one pass (running maximum and rescaled sum per thread, merged at the end).
void launch_max_logprob(const TensorView& x, float* out, cudaStream_t stream);
// Scores of the rows asks names (TokenPicks::scores) of F32 x: per ask, kRowScoreWords 32-bit
// words at out + i * kRowScoreWords: log sum_j exp(x[row][j]) (float), the scored token (the ask's,
// or picked[row] for -1: the draw's or argmax's device result), its logit (float), how many
// alternatives follow (n_top, fewer where the row has fewer non-NaN values), then (id, logit
// (float)) pairs in (logit descending, id ascending) order. One CTA per ask, or, for few asks,
// row_score_parts(...) CTAs per ask over parts of the row, merged by a second kernel through parts
// (device scratch of at least n_sms * kRowScoreWords words); out may be mapped host memory.
constexpr int kRowScoreHeader = 4, kRowScoreWords = kRowScoreHeader + 2 * kMaxTopLogprobs;
int64_t row_score_parts(int64_t width, int64_t n_asks, int32_t n_sms);
void launch_row_scores(const TensorView& x, const ScoreAsk* asks, int64_t n_asks, const int32_t* picked, int32_t* out,
                       int32_t* parts, int32_t n_sms, cudaStream_t stream);
// out[r] = x[r][targets[r]]'s log-softmax for the rows with a target (>= 0), from the row's argmax
// (argmax[r]) and its log-softmax (max_logprob[r]): x[r][t] - (x[r][argmax] - max_logprob[r]). One
// thread per row; argmax, max_logprob and out may be mapped host memory.
void launch_target_logprob(const TensorView& x, const int32_t* targets, const int32_t* argmax,
                           const float* max_logprob, float* out, cudaStream_t stream);
// The fused QKV rows of n_tokens tokens (f32; q and k rows in RoPE pairs, rope.cuh): one [q_dim |
// kv_dim | kv_dim] row a token, or, where V is a matrix of its own (v_apart: a Q4_K_M file's Q6_K V
// beside its stacked Q4_K q | k), the q | k rows [n_tokens][q_dim + kv_dim] followed by the v rows
// [n_tokens][kv_dim]: the same buffer, as a matmul by each matrix writes it.
struct QkvPlanes {
    const float* qk;  // token t's q | k part at qk + t * qk_width
    const float* v;   // its v part at v + t * v_width
    int64_t qk_width, v_width;
};
inline QkvPlanes qkv_planes(const float* qkv, int64_t q_dim, int64_t kv_dim, int64_t n_tokens, bool v_apart) {
    if (!v_apart) return {qkv, qkv + q_dim + kv_dim, q_dim + 2 * kv_dim, q_dim + 2 * kv_dim};
    return {qkv, qkv + n_tokens * (q_dim + kv_dim), q_dim + kv_dim, kv_dim};
}

// From qkv (the fused QKV rows of n_tokens tokens, f32; qkv_planes) plus bias (f32 [q_dim + 2
// kv_dim], or none): q = RoPE(q part) (q: [n_tokens][q_dim] f32); RoPE(k part) and the v part
// written to the tokens' cache slots. inv_freq [head_dim / 2] f32.
void launch_rope_kv_store(const DeviceBatch& batch, const DeviceKvLayer& kv, const TensorView& qkv,
                          const TensorView& bias, int32_t n_heads, const float* inv_freq, const TensorView& q,
                          bool v_apart, cudaStream_t stream);
// The same from the unfused projections q [n_tokens][q_dim], k and v [n_tokens][kv_dim] f32 (head-dim
// order, no bias): q rotated in place, RoPE(k) and v written to the tokens' cache slots (k itself
// is left as it was).
void launch_rope_qk_kv_store(const DeviceBatch& batch, const DeviceKvLayer& kv, const TensorView& q,
                             const TensorView& k, const TensorView& v, int32_t n_heads, const float* inv_freq,
                             cudaStream_t stream);
// Writes K and V rows ([n_tokens][n_kv_heads * head_dim], F32/F16/BF16) into the cache slots.
void launch_kv_store(const DeviceBatch& batch, const DeviceKvLayer& kv, const TensorView& k,
                     const TensorView& v, cudaStream_t stream);

}  // namespace mvllm::cuda
