// CUDA attention over the paged KV cache, three ways (host launchers only; --attention):
//
//  * naive:   K and V of every sequence repeated to the query-head count into a dense scratch
//             [sum of context][n_heads][head_dim] (the write-up's "repeat_kv"), then three kernels:
//             scores = Q K^T, softmax, out = P V, each query head reading its own copy.
//  * grouped: the same three kernels reading K/V in place from the paged blocks; one CTA scores a
//             tile of context tokens for all query heads of a KV group (each K row loaded once).
//  * fused:   one paged flash-decoding kernel per step. F16/BF16 KV: the tensor-core kernel of
//             attention_mma.cuh (cp.async pipeline, mma.sync; up to 8 splits form a thread-block
//             cluster and merge through its shared memory, more are merged by the last CTA).
//             F32 KV: one CTA per (query row, KV head, context split) holding up to 8 query heads
//             of the group in registers, online softmax (base 2, f32), each K/V vector loaded
//             once for the group; a merge kernel combines the splits.
//             F16/BF16 prefill chunks (a sequence with at least 64 / group query rows): the
//             tiled causal flash-attention kernel of attention_prefill.cuh, the chunk's rows
//             sharing each K/V tile of the prefix and of the chunk itself. Other prefill rows
//             (and every row of F32 KV) run the decode kernels, one query row per CTA (causal:
//             row i sees positions 0..positions[i]).
//
// q: [n_tokens][n_heads][head_dim] f32 with RoPE applied; out: same shape, F32/F16/BF16. The KV
// cache already holds the batch's new tokens (launch_kv_store).
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/device_batch.h"
#include "backend/cuda/gemv.cuh"
#include "core/tensor.h"

namespace mvllm::cuda {

enum class CudaAttention { Naive, Grouped, Fused };

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMaxGroupThreeOps = 16;  // query heads per KV head in the naive / grouped kernels

// Device scratch of the attention variants, grown on demand (growth synchronises the device).
struct AttentionScratch {
    void* scores = nullptr;  // naive/grouped: [n_tokens][n_heads][max_context] f32
    size_t scores_bytes = 0;
    void* repeated = nullptr;  // naive: K then V, [sum of context][n_heads][head_dim] cache dtype
    size_t repeated_bytes = 0;
    void* partial = nullptr;  // fused: o [n_tokens][n_heads][n_splits][head_dim] f32, then (m, l) pairs
    size_t partial_bytes = 0;
    void* counters = nullptr;  // fused F16/BF16: [n_tokens][n_kv_heads * head tiles] splits done, kept at 0
    size_t counters_bytes = 0;
    void* rope_table = nullptr;  // RawQkv::rot: [n_tokens][head_dim / 2] float2
    size_t rope_table_bytes = 0;
    ~AttentionScratch();
};

// Head dims and KV dtypes the kernels are compiled for; anything else is refused at load.
bool cuda_attention_supported(int32_t head_dim, DType kv_dtype);

// The context split of the fused kernel for a batch (host rule, depends on the batch's shape
// and the device's SM count only). Exposed for the benchmark and the tests.
struct FusedSplit {
    int32_t n_splits = 1;
    int32_t split_tokens = 0;
};
// batch_invariant: splits of kInvariantSplitTokens at fixed positions (a row's partial softmaxes and
// their merge order then depend on its own context only; empty splits merge as exact zeros).
constexpr int32_t kInvariantSplitTokens = 512;
FusedSplit fused_split(int32_t n_rows, int32_t n_kv_heads, int32_t n_head_tiles, int32_t max_context,
                       int32_t n_sms, bool batch_invariant = false, int32_t min_split_tokens = 16);

// The split of the tensor-core kernel (F16/BF16 KV): n_ctas_per_row CTAs per query row and split,
// n_slots CTAs resident at once on the device, at least min_split_tokens per split, and beyond
// `granule` splits a multiple of it (whole thread-block clusters).
FusedSplit mma_split(int32_t n_rows, int32_t n_ctas_per_row, int32_t max_context, int32_t n_slots,
                     int32_t min_split_tokens, int32_t granule = 1);

// The decode kernel's plan (F16/BF16 KV): its splits, and how many consecutive splits form a
// thread-block cluster that merges through shared memory (1: none; n_splits is a multiple of it).
// n_slots: CTAs resident at once; cluster_slots: CTAs resident at once in clusters of
// kMaxDecodeCluster (0: none); short_split: the longest split that clusters take (two tiles per
// warp); mode: MVLLM_ATTN_CLUSTER (0 never, 1 one level, 2 the default, 3 any plan);
// one_cluster_tokens: with mode 2, the longest split of a plan that lengthens its splits to keep a
// row in one cluster (0: never). Host rule, no GPU needed.
constexpr int32_t kMaxDecodeCluster = 8;
// The most splits of a plan without clusters (plan_decode): one chunk of the split merge
// (attention_merge.cuh's kMergeChunk).
constexpr int32_t kMaxPlainSplits = 64;
struct DecodePlan {
    FusedSplit split;
    int32_t cluster = 1;
};
DecodePlan plan_decode(int32_t n_rows, int32_t n_ctas_per_row, int32_t max_context, int32_t n_slots,
                       int32_t cluster_slots, int32_t short_split, int32_t min_split_tokens, int mode,
                       bool batch_invariant, int32_t one_cluster_tokens = 0);
// plan_decode's one_cluster_tokens for the decode kernel: MVLLM_ATTN_ONE_CLUSTER_TOKENS, default
// 1,024 (0: off). force_one_cluster_tokens(n >= 0) overrides it (tests), -1 restores it.
int32_t one_cluster_tokens();
void force_one_cluster_tokens(int32_t tokens);
// Whether the decode kernel's split merge of 16-64 parts is spread over the row's last CTAs, a
// head each (mma_decode::kSpreadMerge): where the plan has a split merge (n_parts > 1) whose CTAs
// fit one wave (the mergers wait for the rest of their row) and the kernel keeps two CTAs an SM
// (F16 KV at head_dim 64). There the 0.5B gained 1.7-3.1 % after 16K / 32K tokens on the H100
// and H200; with one CTA an SM (the 7B, BF16 KV) the spread merge lost 0.9-1.4 % of the 7B's decode
// and up to 8 % of B1 BF16 (bench/NOTES.md, thirty-eighth session). MVLLM_ATTN_SPREAD_MERGE=0 / 1:
// never / wherever the plan allows it; force_spread_merge(0 / 1) overrides both (tests), -1
// restores them. Host rule, no GPU needed.
bool spread_merge(int32_t n_parts, bool one_wave, int ctas_per_sm);
void force_spread_merge(int on);
// Warps per CTA of the decode kernel (F16/BF16 KV, not batch-invariant): 4 (two CTAs per SM at
// head_dim 128) when the batch's (row, KV head) pairs alone fill the SMs and the contexts are
// short, else 8 (one CTA per SM). Measured on the H200 (bench attention --batches 64, bench/NOTES.md,
// tenth session): 64 7B rows take 23.4 / 41.5 / 78.9 us with 4 warps at 512 / 1024 / 2048 tokens
// against 28.7 / 47.3 / 82.9 with 8, and the 7B 64-sequence decode step ~2 % less graph time; at
// 4096 tokens 4 warps take twice as long (306 against 158 us, cause not established), hence the
// context bound. Also 4 for one row of head_dim <= 64 at the shortest context bucket (kShortBucket):
// there the kernel is its chain (Q after the wait, a tile a warp, the warps' merge, the cluster's
// merge), and four splits of 4 warps in a cluster of 4 beat two of 8 in a cluster of 2: batch-1
// decode of the 0.5B q4_0 after 128 tokens +2.7 / +3.6 % on an H100 (two calls), -0.5 % at the 1K
// bucket and -2.3 % at 4K (bench/NOTES.md, forty-fifth session). MVLLM_ATTN_WARPS=4|8 forces either;
// MVLLM_ATTN_SHORT=0 turns the one-row rules at the shortest bucket off. Host rule, no GPU needed.
constexpr int32_t kFourWarpsMaxContext = 2048;
// The shortest context bucket of the step graphs (graph_step.cpp): contexts up to 256 tokens.
constexpr int32_t kShortBucket = 256;
int decode_warps(int32_t n_rows, int32_t n_kv_heads, int32_t max_context, int32_t head_dim, int32_t n_sms);
// One split (one CTA per (row, KV head), no cluster, no split merge) at the shortest bucket: for
// one row at head_dim >= 128 (one row of head_dim <= 64 takes decode_warps' 4-warp cluster
// instead), and for any batch of two rows or more. plan_decode gives those two or more splits,
// merged through a cluster or in global memory, unless the (row, KV head) pairs fill the SMs. One 7B
// row: batch-1 decode after 128 tokens +1.3 / +1.4 % on an H100 (two calls), -1.5 % at the 512
// bucket (forty-fifth session). Batches at 256 tokens (B1, an H100, fiftieth session), F16, us a
// layer against the split plans: 7B 2 rows 5.59 -> 4.63, 16 rows 7.99 -> 5.10 (at 32 and 64 rows
// its plan timed the same as one split forced); 0.5B 2 rows 4.23 -> 3.63, 16 rows 4.69 -> 3.69, 64 rows 7.48 -> 4.62;
// 16 requests decoding in the bucket (bench throughput) +2.1-2.6 % (0.5B) and +2.6-2.7 % (7B)
// output tok/s in two rounds; 32 requests +2.4 % (0.5B) and +0.3 % (7B).
// MVLLM_ATTN_SHORT=0 turns the rule off; MVLLM_ATTN_SHORT_BATCH=0 keeps it to the one-row case
// (the earlier rule, for A/B measurements). Host rule, no GPU needed.
bool decode_one_split(int32_t n_rows, int32_t max_context, int32_t head_dim);
// What the stream runs after an attention launch, for the decode kernel's trigger rule: the model's
// output projection (a matmul: the default), or another attention launch (`bench attention`, B1).
enum class AttentionNext { Matmul, Attention };
// Where the decode kernel lets the next kernel launch, as a mode of MVLLM_ATTN_TRIGGER (0 on entry,
// 1 after Q, 2 after the tiles, 3 after the warp merge, 4 at exit), which overrides the rule. After
// Q where the matmuls are GEMVs (up to kGemvMaxColumns rows: batch 1 +3.5 % on the H200, NOTES,
// thirty-third session), except for a plan with a split merge whose kernel holds one CTA an SM and
// whose next kernel is a matmul: there after the warp merge (the 7B after 32K tokens +3.2-3.9 % in
// three runs, after 16K +0.8 %; the 0.5B, two CTAs an SM, lost 2 % with it; thirty-eighth and
// thirty-ninth sessions). Before another attention launch (B1) the late trigger lost 5-8 % at 16K
// and 32K (the next launch's CTAs start their early tile loads as this one's CTAs leave; thirty-
// ninth session), so there it stays after Q. Larger batches, not measured with a later trigger,
// trigger on entry. Host rule, no GPU needed.
int decode_trigger_mode(int32_t n_rows, int32_t n_parts, int ctas_per_sm, AttentionNext next);

// Whether the fused F16/BF16 path sends the batch's prefill chunks to the tiled prefill kernel:
// a sequence of the batch has at least 64 / group query rows, not batch-invariant, and
// MVLLM_CUDA_TILED_PREFILL is not 0 (for A/B measurements).
bool use_tiled_prefill(int32_t max_seq_tokens, int32_t group, bool batch_invariant);

// The step's fused QKV rows before RoPE (rope_kv_store's input, in rope.cuh's pairs; ops.cuh's
// QkvPlanes), for the decode kernel that applies RoPE to q and to the new tokens' K, and stores
// their K/V in the cache, itself (launch_attention's `raw`): one kernel of the decode step fewer.
struct RawQkv {
    const float* qk = nullptr;    // row r's q | k part at qk + r * qk_width
    const float* v = nullptr;     // row r's v part at v + r * v_width
    int64_t qk_width = 0, v_width = 0;
    const float* bias = nullptr;  // [(n_heads + 2 n_kv_heads) * head_dim] f32, or null
    const float2* rot = nullptr;  // [n_tokens][head_dim / 2] (cos, sin) of each row's position (launch_rope_table)
};

// The (cos, sin) of every row's position at each of the head_dim / 2 frequencies, as the RoPE
// kernels compute them (rope.cuh), into scratch.rope_table (grown on demand: growth synchronises
// the device); returns it. One small kernel per step: the rotation is the same in every layer, so
// the decode kernel (RawQkv) reads it after its wait instead of computing it per CTA and layer.
const float2* launch_rope_table(const DeviceBatch& batch, const float* inv_freq, int32_t head_dim,
                                AttentionScratch& scratch, cudaStream_t stream);

// The kernels on the CUDA cores (attention_simt.cu), for launch_attention: naive / grouped over
// any KV type, and the fused kernel of an F32 cache. split_partials: the split kernels' scratch,
// unnormalised o [rows][heads][splits][head_dim] then (max, sum) [rows][heads][splits][2], grown
// as needed.
void launch_three_ops(CudaAttention variant, const DeviceBatch& batch, const int64_t* seq_ctx_offset,
                      int64_t total_context, const DeviceKvLayer& kv, const TensorView& q, const TensorView& out,
                      int32_t n_heads, float scale, AttentionScratch& scratch, int32_t n_sms, cudaStream_t stream);
void launch_fused_f32(const DeviceBatch& batch, const DeviceKvLayer& kv, const TensorView& q, const TensorView& out,
                      int32_t n_heads, float scale, AttentionScratch& scratch, int32_t n_sms, cudaStream_t stream,
                      bool batch_invariant);
// One of AttentionScratch's buffers (*ptr, *have bytes) grown to at least `need` bytes; `what` names
// it in the out-of-memory error.
void grow_attention_scratch(void** ptr, size_t* have, size_t need, const char* what);
void split_partials(AttentionScratch& scratch, int32_t n_rows, int32_t n_heads, int32_t n_splits, int32_t head_dim,
                    float** part_o, float** part_ml);

// seq_ctx_offset: [n_seqs] prefix sums of context_len (naive's dense offsets). With `qx`
// ([n_tokens][n_heads * head_dim]), the fused F16/BF16 decode kernel also writes the output in the
// GEMV's QX activation format (gemv.cuh), as launch_quantize_qx would from `out`, when it takes every
// row and head_dim % 32 == 0; returns whether it did.
bool launch_attention(CudaAttention variant, const DeviceBatch& batch, const int64_t* seq_ctx_offset,
                      int64_t total_context, const DeviceKvLayer& kv, const TensorView& q,
                      const TensorView& out, int32_t n_heads, float scale, AttentionScratch& scratch,
                      int32_t n_sms, cudaStream_t stream, bool batch_invariant = false,
                      const QxView* qx = nullptr, const RawQkv* raw = nullptr,
                      AttentionNext next = AttentionNext::Matmul);

// Whether the attention of this batch can take `raw` (RoPE and the K/V store folded into the
// decode kernel): the fused variant over an F16/BF16 cache, one new token per
// sequence, and MVLLM_ATTN_ROPE not 0 (for A/B measurements). With raw, launch_attention's q is
// neither read nor written, and the cache slots of the batch's tokens are written by it.
bool attention_folds_rope(CudaAttention variant, const DeviceBatch& batch, const DeviceKvLayer& kv);

// Tests: whether the F16/BF16 decode kernel takes its K/V tiles by tensor copies (TMA) where the
// cache allows: 1 yes, 0 no (cp.async), -1 the default again (yes on sm_90, unless MVLLM_ATTN_TMA=0).
void force_attention_tma(int mode);
// Tests: whether the F32 cache's fused kernel copies its next tiles' K/V into shared memory ahead
// (attention_simt.cu): 1 yes, 0 no (each tile loads its values itself), -1 the default again (yes,
// unless MVLLM_ATTN_F32_PIPE=0).
void force_f32_pipeline(int mode);

// How many CTAs of the F16 decode kernel (head_dim 64 or 128, 4 or 8 warps) can be resident at once
// in thread-block clusters of `size` (the occupancy API's count of clusters x size; 0: none).
int decode_cluster_slots_f16(int head_dim, int warps, int size);

// The decode kernel's timeline (cmake -DMVLLM_ATTN_TIMELINE=ON; otherwise both do nothing):
// clear the record ring, or write its records (the last 65536) as CSV; returns how many.
void attention_timeline_reset();
size_t attention_timeline_dump(const char* path);

}  // namespace mvllm::cuda
