// Decode GEMV: out[t][o] = sum_i x[t][i] * W[o][i] for up to kGemvMaxColumns token columns, each
// weight loaded once (16-byte loads) and dotted with every column (host launchers only).
//
// Quantised weights (Q4_0, Q8_0, Q4_K, Q6_K, in the split layout of weight_layout.h) use integer
// dot products (dp4a) against the activation in the "QX" format below; F32 / F16 / BF16 weights
// use F32 FMA against F32 or F16 activations.
//
// QX, the activation of the integer GEMV: per token row of n_in values (n_in % 32 == 0) and per
// 32-value block b, X = round(x / d) with d = max|x| / 32767, a 16-bit integer stored as two byte
// planes hi = X >> 8 (int8) and lo = X & 255 (uint8), so that X = 256 hi + lo; and a meta record
// {f32 d, i32 s0, i32 s1, unused} with s0 / s1 the sums of X over values 0-15 / 16-31 of the
// block. Two dp4a per four weights keep the activation to 1/65534 of its block's range (the
// int8 activations of llama.cpp's q8_1 would move logits by about 1 %, see bench/NOTES.md).
//
//   hi   [n_rows][n_in] int8      lo   [n_rows][n_in] uint8      meta [n_rows][n_in / 32] int4
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/device_batch.h"
#include "core/tensor.h"

namespace mvllm::cuda {

constexpr int kGemvMaxColumns = 8;

struct QxView {
    int8_t* hi = nullptr;
    uint8_t* lo = nullptr;
    int4* meta = nullptr;
    int64_t n_in = 0;
    int64_t n_rows = 0;
};

// Bytes of a QX buffer for n_rows rows of n_in values, and the view of such a buffer.
size_t qx_bytes(int64_t n_in, int64_t n_rows);
QxView qx_view(void* buffer, int64_t n_in, int64_t n_rows);

// True when the integer GEMV handles this weight type (the quantised ones).
bool gemv_uses_qx(DType weight_type);

// qx = QX(x), x: [n_rows][n_in] F32 / F16 / BF16.
void launch_quantize_qx(const TensorView& x, const QxView& qx, cudaStream_t stream);

// RMSNorm fused with the quantisation of its result: xn = x / rms(x) * weight (rounded to xn's
// type, exactly as launch_rms_norm), and qx = QX(xn). n_in % 32 == 0.
void launch_rms_norm_qx(const TensorView& x, const TensorView& weight, float eps, const TensorView& xn,
                        const QxView& qx, cudaStream_t stream);

// How a GEMV writes its result row o of token t.
enum class GemvEpilogue {
    Store,       // out = acc (+ bias)
    Accumulate,  // out += acc (+ bias): the residual add folded into the matmul
};

// The fused QKV projection (wqkv's q and k rows in RoPE pairs, rope.cuh) with RoPE and the K/V
// store in its epilogue: the result of launch_gemv_qx followed by launch_rope_kv_store, the same
// bits, in one kernel. Quantised weights, 1..4 rows (qkv_rope_gemv_supported). wv: empty when
// wqkv holds the v rows too, or the v rows as a matrix of their own type (then wqkv holds only q
// and k; qkv_stack_gemv_supported's type pairs), in the same launch.
bool qkv_rope_gemv_supported(const TensorView& wqkv, const TensorView& wv, int64_t n_rows);
// The CTAs of that launch for wqkv (and wv) and n_rows rows (its grid, as the launcher computes it).
int64_t qkv_rope_gemv_ctas(const TensorView& wqkv, const TensorView& wv, int64_t n_rows);
void launch_qkv_rope_gemv(const TensorView& wqkv, const TensorView& wv, const QxView& qx, const TensorView& bias,
                          const DeviceBatch& batch, const DeviceKvLayer& kv, int32_t n_heads, const float* inv_freq,
                          const TensorView& q, cudaStream_t stream);
// qk = wqk x and v = wv x (F32, no bias) in one launch, for a QKV projection whose v rows are of
// another type than its q and k rows (a Q4_K_M file: Q4_K q | k and Q6_K v, or Q4_0 and Q8_0
// where rows are not whole super-blocks); 1..kGemvMaxColumns rows.
bool qkv_stack_gemv_supported(const TensorView& wqk, const TensorView& wv, int64_t n_rows);
void launch_qkv_stack_gemv(const TensorView& wqk, const TensorView& wv, const QxView& qx, const TensorView& qk,
                           const TensorView& v, cudaStream_t stream);

// Quantised W [n_out][n_in] against qx (n_tokens = qx.n_rows; launches of <= kGemvMaxColumns
// columns, more than one only in batch-invariant mode); out F32.
// One column (outside batch-invariant mode) may run the streaming GEMV of gemv_stream.cuh.
void launch_gemv_qx(const TensorView& w, const QxView& qx, const TensorView& bias, const TensorView& out,
                    GemvEpilogue epilogue, cudaStream_t stream, bool batch_invariant = false);
// out = silu(W_gate x) * (W_up x) (out: F32 / F16 / BF16), both weights of one quantised type.
void launch_gemv_qx_swiglu(const TensorView& w_gate, const TensorView& w_up, const QxView& qx,
                           const TensorView& out, cudaStream_t stream, bool batch_invariant = false);
// Test hook: the register GEMV's K split (1, 2 or 4; anything else: back to its rule).
void set_gemv_k_split(int ks);
// The warps per row (K split) the register GEMV takes for one token column of a quantised W
// [n_out][n_in] (pair: the gate/up SwiGLU form), by its rule or the hook above.
int gemv_one_column_k_split(DType type, int64_t n_in, int64_t n_out, bool pair);
// F32 / F16 / BF16 W against x (F32 or F16, n_tokens = x.ne[1], sliced likewise); out F32.
void launch_gemv_float(const TensorView& w, const TensorView& x, const TensorView& bias, const TensorView& out,
                       GemvEpilogue epilogue, cudaStream_t stream);

}  // namespace mvllm::cuda
