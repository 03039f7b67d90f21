// CPU attention over the paged KV cache: kv_store, the three variants (naive repeat-KV, grouped-Q
// three-pass, fused online softmax), the double-precision reference and the scalar row kernels.
//
// Work items. Grouped and fused: one item per (sequence, KV head, chunk of up to kChunkTokens
// query tokens); its rows are the chunk's tokens times the group's query heads, row r = t * group
// + g, so every K/V block of that head is read once for all of them. When there are fewer items
// than threads (single-sequence decode on a wide pool), the fused path also splits an item's
// context into ranges of blocks and merges the partial softmaxes afterwards; batch-invariant, it
// splits every item at fixed positions instead. Naive: per sequence,
// the repeated K/V are materialised first, then one item per (query head, chunk).
// Items are taken from a shared counter by the pool's threads; each thread has its own region of
// AttentionScratch::buffer.
#include "backend/cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/matmul.h"
#include "core/half.h"

namespace mvllm {

// ---- scalar row kernels (the reference implementation of attention_kernels.h) -------------------
namespace {

void f16_to_f32_scalar(const uint16_t* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void f32_to_f16_scalar(const float* src, uint16_t* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

void scores_scalar(const float* q, int64_t n_q, int64_t d, const float* k, int64_t k_stride,
                   int64_t n_k, float* s, int64_t s_stride) {
    for (int64_t r = 0; r < n_q; ++r) {
        for (int64_t j = 0; j < n_k; ++j) {
            const float* kj = k + j * k_stride;
            float acc = 0.0f;
            for (int64_t i = 0; i < d; ++i) acc += q[r * d + i] * kj[i];
            s[r * s_stride + j] = acc;
        }
    }
}

float max_scalar(const float* s, int64_t n) {
    float m = s[0];
    for (int64_t i = 1; i < n; ++i) m = std::max(m, s[i]);
    return m;
}

float exp_sum_scalar(float* s, int64_t n, float m) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        s[i] = std::exp(s[i] - m);
        sum += s[i];
    }
    return sum;
}

void pv_scalar(const float* p, int64_t n_k, const float* v, int64_t v_stride, int64_t d, float* o) {
    for (int64_t j = 0; j < n_k; ++j) {
        const float* vj = v + j * v_stride;
        for (int64_t i = 0; i < d; ++i) o[i] += p[j] * vj[i];
    }
}

void scale_scalar(float* x, int64_t n, float a) {
    for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

const AttentionKernels kScalar = {
    "scalar", f16_to_f32_scalar, f32_to_f16_scalar, scores_scalar, max_scalar, exp_sum_scalar,
    pv_scalar, scale_scalar,
};

}  // namespace

const AttentionKernels& attention_kernels_scalar() { return kScalar; }

// ---- names ----------------------------------------------------------------------------------------

const char* attention_variant_name(AttentionVariant v) {
    switch (v) {
        case AttentionVariant::Naive: return "naive";
        case AttentionVariant::Grouped: return "grouped";
        case AttentionVariant::Fused: return "fused";
    }
    return "?";
}

bool parse_attention_variant(const std::string& name, AttentionVariant* out) {
    std::string s = name;
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (s == "naive") *out = AttentionVariant::Naive;
    else if (s == "grouped") *out = AttentionVariant::Grouped;
    else if (s == "fused") *out = AttentionVariant::Fused;
    else return false;
    return true;
}

namespace {

constexpr int32_t kChunkTokens = 16;      // query tokens per work item
constexpr int32_t kNaiveTile = 16;        // context rows per tile of the repeated K/V
constexpr int64_t kMinTilesPerSplit = 8;  // fused split-context: blocks per range, at least
constexpr int64_t kFusedSpanTokens = 64;  // fused: context positions per softmax update
constexpr int64_t kMaxSpan = kFusedSpanTokens;
constexpr int64_t kPrefetchTokens = 64;   // K/V positions requested ahead of use

int64_t align16(int64_t n) { return (n + 15) & ~int64_t{15}; }
size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }

bool avx2_usable() {
#if defined(__x86_64__)
    static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    return ok;
#else
    return false;
#endif
}

// The kernel table for this CPU and head_dim; MVLLM_CPU_ISA=scalar forces the scalar kernels
// (read on every call so that tests can compare both).
const AttentionKernels& pick_kernels(int64_t head_dim) {
    const char* env = std::getenv("MVLLM_CPU_ISA");
    const bool scalar_only = env != nullptr && std::strcmp(env, "scalar") == 0;
    if (!scalar_only && head_dim % 8 == 0 && avx2_usable()) {
        if (const AttentionKernels* k = attention_kernels_avx2()) return *k;
    }
    return attention_kernels_scalar();
}

// Where the K/V rows of one KV head come from, as tiles of `tile` consecutive context positions:
// paged (tile b is block table[b]) or linear (tile b at b * tile_stride, the naive path's copy).
struct KvSource {
    const uint8_t* k = nullptr;
    const uint8_t* v = nullptr;
    DType dtype = DType::F32;
    const int32_t* table = nullptr;  // block ids; nullptr: linear
    size_t tile_stride = 0;          // bytes between tiles (whole blocks, all heads)
    size_t head_offset = 0;          // bytes from a tile's start to this head's first row
    int64_t row_stride = 0;          // elements between consecutive context rows
    int32_t tile = 16;               // context rows per tile

    size_t tile_offset(int64_t b) const {
        const int64_t id = table != nullptr ? table[b] : b;
        return static_cast<size_t>(id) * tile_stride + head_offset;
    }
};

struct Call {
    const Batch* batch;
    const TensorView* q;
    const TensorView* out;
    int32_t n_heads;
    int64_t d;
    float scale;
    const AttentionKernels* kr;
};

// The query rows of one work item: flat-batch tokens [token0, token0 + n_tok) times query heads
// [head0, head0 + n_group); row r = t * n_group + g. Positions increase with r / n_group.
struct RowSet {
    int64_t token0;
    int32_t n_tok;
    int32_t head0;
    int32_t n_group;

    int64_t rows() const { return static_cast<int64_t>(n_tok) * n_group; }
};

int64_t row_pos(const Call& c, const RowSet& rs, int64_t r) {
    return c.batch->positions[rs.token0 + r / rs.n_group];
}

size_t qrow_offset(const Call& c, const RowSet& rs, int64_t r, DType t) {
    const int64_t token = rs.token0 + r / rs.n_group;
    const int64_t head = rs.head0 + r % rs.n_group;
    return static_cast<size_t>((token * c.n_heads + head) * c.d) * dtype_size(t);
}

// Q [rows][d] f32 = q rows * scale.
void load_q(const Call& c, const RowSet& rs, float* Q) {
    const DType t = c.q->type;
    for (int64_t r = 0; r < rs.rows(); ++r) {
        const uint8_t* src = static_cast<const uint8_t*>(c.q->data) + qrow_offset(c, rs, r, t);
        float* dst = Q + r * c.d;
        if (t == DType::F32) {
            std::memcpy(dst, src, static_cast<size_t>(c.d) * 4);
        } else {
            c.kr->f16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, c.d);
        }
        c.kr->scale(dst, c.d, c.scale);
    }
}

// out rows = O rows / l (l == nullptr: divide by 1), converted to the output dtype. O is scaled
// in place.
void store_out(const Call& c, const RowSet& rs, float* O, const float* l) {
    const DType t = c.out->type;
    for (int64_t r = 0; r < rs.rows(); ++r) {
        float* o = O + r * c.d;
        if (l != nullptr) c.kr->scale(o, c.d, l[r] > 0.0f ? 1.0f / l[r] : 0.0f);
        uint8_t* dst = static_cast<uint8_t*>(c.out->data) + qrow_offset(c, rs, r, t);
        if (t == DType::F32) {
            std::memcpy(dst, o, static_cast<size_t>(c.d) * 4);
        } else {
            c.kr->f32_to_f16(o, reinterpret_cast<uint16_t*>(dst), c.d);
        }
    }
}

// n context rows at src (cache dtype, row_stride elements apart) as f32: F32 in place, F16
// converted into buf [n][d]. *stride receives the row stride of the result.
const float* rows_f32(const Call& c, const uint8_t* src, DType dtype, int64_t row_stride,
                      int64_t n, float* buf, int64_t* stride) {
    if (dtype == DType::F32) {
        *stride = row_stride;
        return reinterpret_cast<const float*>(src);
    }
    const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) c.kr->f16_to_f32(h + i * row_stride, buf + i * c.d, c.d);
    *stride = c.d;
    return buf;
}

// First row whose position reaches context position j0 (rows are sorted by position).
int64_t first_row_at(const Call& c, const RowSet& rs, int64_t j0) {
    int64_t r = 0;
    while (r < rs.rows() && row_pos(c, rs, r) < j0) r += rs.n_group;
    return r;
}

// Tiles to prefetch ahead of the one being processed: about kPrefetchTokens positions (distances
// from 16 to 512 positions measured the same on the benchmark machine, within its noise).
int64_t prefetch_ahead(int64_t tile) { return std::max<int64_t>(1, kPrefetchTokens / tile); }

// Asks the memory system for the K and V rows of tiles [b_begin, b_end) ahead of their use: the
// blocks of a sequence are scattered, so the hardware prefetchers cannot follow them.
void prefetch_tiles(const Call& c, const KvSource& src, int64_t b_begin, int64_t b_end,
                    int64_t ctx_end, bool want_k = true, bool want_v = true) {
    const size_t elem = dtype_size(src.dtype);
    for (int64_t b = b_begin; b < b_end; ++b) {
        const int64_t n = std::min<int64_t>(src.tile, ctx_end - b * src.tile);
        if (n <= 0) return;
        const size_t bytes = src.row_stride == c.d ? static_cast<size_t>(n * c.d) * elem
                                                   : static_cast<size_t>(c.d) * elem;
        const uint8_t* k = src.k + src.tile_offset(b);
        const uint8_t* v = src.v + src.tile_offset(b);
        for (size_t i = 0; i < bytes; i += 64) {
            if (want_k) __builtin_prefetch(k + i, 0, 3);
            if (want_v) __builtin_prefetch(v + i, 0, 3);
        }
    }
}

// ---- fused: one pass, online softmax ---------------------------------------------------------------

// Context tiles per step of the fused loop: the softmax bookkeeping (max, rescale) runs once per
// span of about kFusedSpanTokens positions instead of once per block.
int64_t fused_span(int64_t tile) { return std::max<int64_t>(1, kFusedSpanTokens / tile); }

int64_t fused_scratch_floats(int64_t rows, int64_t d, int64_t tile) {
    const int64_t st = fused_span(tile) * tile;
    return 2 * align16(rows * d) + 2 * align16(rows) + align16(rows * st) + 2 * align16(st * d);
}

struct FusedState {
    float* O;  // [rows][d] unnormalised output
    float* m;  // [rows] running max of the scores
    float* l;  // [rows] running sum of exp(score - m)
};

// Runs context tiles [b0, b1) for the rows of rs, a span of tiles at a time. Each K and V tile is
// read (and, for F16, converted) once for all rows. Scratch: fused_scratch_floats(rows, d, tile).
FusedState fused_run(const Call& c, const KvSource& src, const RowSet& rs, int64_t b0, int64_t b1,
                     float* ws) {
    const int64_t R = rs.rows(), d = c.d, T = src.tile;
    const int64_t span = fused_span(T), ST = span * T;
    float* Q = ws;
    float* O = Q + align16(R * d);
    float* m = O + align16(R * d);
    float* l = m + align16(R);
    float* S = l + align16(R);      // [R][ST] scores, then probabilities
    float* kbuf = S + align16(R * ST);  // [ST][d] converted K rows (F16 cache)
    float* vbuf = kbuf + align16(ST * d);
    load_q(c, rs, Q);
    std::fill(O, O + R * d, 0.0f);
    std::fill(m, m + R, -std::numeric_limits<float>::infinity());
    std::fill(l, l + R, 0.0f);

    const int64_t ctx_end = row_pos(c, rs, R - 1) + 1;
    b1 = std::min(b1, (ctx_end + T - 1) / T);
    const float* V[kMaxSpan];
    int64_t vs[kMaxSpan];
    const int64_t ahead = prefetch_ahead(T);
    prefetch_tiles(c, src, b0, std::min(b1, b0 + ahead), ctx_end);
    for (int64_t b = b0; b < b1; b += span) {
        const int64_t nb = std::min(span, b1 - b);
        const int64_t j0 = b * T;
        const int64_t n = std::min(nb * T, ctx_end - j0);  // positions in this span
        prefetch_tiles(c, src, b + ahead, std::min(b1, b + nb + ahead), ctx_end);
        const int64_t r0 = first_row_at(c, rs, j0);
        for (int64_t t = 0; t < nb; ++t) {
            const int64_t nt = std::min(T, n - t * T);
            const size_t off = src.tile_offset(b + t);
            int64_t ks = 0;
            const float* K =
                rows_f32(c, src.k + off, src.dtype, src.row_stride, nt, kbuf + t * T * d, &ks);
            c.kr->scores(Q + r0 * d, R - r0, d, K, ks, nt, S + r0 * ST + t * T, ST);
            V[t] = rows_f32(c, src.v + off, src.dtype, src.row_stride, nt, vbuf + t * T * d, &vs[t]);
        }
        for (int64_t r = r0; r < R; ++r) {
            const int64_t nv = std::min<int64_t>(n, row_pos(c, rs, r) + 1 - j0);
            float* s = S + r * ST;
            const float m_new = std::max(m[r], c.kr->max(s, nv));
            const float alpha = std::exp(m[r] - m_new);  // 0 on the first span (m = -inf)
            const float sum = c.kr->exp_sum(s, nv, m_new);
            if (alpha != 1.0f) c.kr->scale(O + r * d, d, alpha);
            l[r] = l[r] * alpha + sum;
            m[r] = m_new;
            for (int64_t t = 0; t * T < nv; ++t) {
                c.kr->pv(s + t * T, std::min(T, nv - t * T), V[t], vs[t], d, O + r * d);
            }
        }
    }
    return {O, m, l};
}

// ---- grouped / naive: three passes (scores, softmax, P V) ------------------------------------------

int64_t three_pass_scratch_floats(int64_t rows, int64_t d, int64_t tile, int64_t ctx) {
    return 2 * align16(rows * d) + rows * align16(ctx + tile) + 2 * align16(tile * d);
}

// S = Q K^T over the whole causal context (materialised, [rows][ctx]), row softmax, O = P V.
void three_pass_run(const Call& c, const KvSource& src, const RowSet& rs, float* ws) {
    const int64_t R = rs.rows(), d = c.d, T = src.tile;
    const int64_t ctx_end = row_pos(c, rs, R - 1) + 1;
    const int64_t n_tiles = (ctx_end + T - 1) / T;
    const int64_t ld = align16(ctx_end + T);
    float* Q = ws;
    float* O = Q + align16(R * d);
    float* S = O + align16(R * d);
    float* kbuf = S + R * ld;
    float* vbuf = kbuf + align16(T * d);
    load_q(c, rs, Q);
    const int64_t ahead = prefetch_ahead(T);
    prefetch_tiles(c, src, 0, std::min(ahead, n_tiles), ctx_end, true, false);
    for (int64_t b = 0; b < n_tiles; ++b) {  // pass 1: scores
        prefetch_tiles(c, src, b + ahead, std::min(b + 1 + ahead, n_tiles), ctx_end, true, false);
        const int64_t j0 = b * T;
        const int64_t n = std::min<int64_t>(T, ctx_end - j0);
        const int64_t r0 = first_row_at(c, rs, j0);
        int64_t ks = 0;
        const float* K =
            rows_f32(c, src.k + src.tile_offset(b), src.dtype, src.row_stride, n, kbuf, &ks);
        c.kr->scores(Q + r0 * d, R - r0, d, K, ks, n, S + r0 * ld + j0, ld);
    }
    for (int64_t r = 0; r < R; ++r) {  // pass 2: causal softmax, normalised
        const int64_t nv = row_pos(c, rs, r) + 1;
        float* s = S + r * ld;
        const float sum = c.kr->exp_sum(s, nv, c.kr->max(s, nv));
        c.kr->scale(s, nv, 1.0f / sum);
    }
    std::fill(O, O + R * d, 0.0f);
    prefetch_tiles(c, src, 0, std::min(ahead, n_tiles), ctx_end, false, true);
    for (int64_t b = 0; b < n_tiles; ++b) {  // pass 3: P V
        prefetch_tiles(c, src, b + ahead, std::min(b + 1 + ahead, n_tiles), ctx_end, false, true);
        const int64_t j0 = b * T;
        const int64_t n = std::min<int64_t>(T, ctx_end - j0);
        const int64_t r0 = first_row_at(c, rs, j0);
        int64_t vs = 0;
        const float* V =
            rows_f32(c, src.v + src.tile_offset(b), src.dtype, src.row_stride, n, vbuf, &vs);
        for (int64_t r = r0; r < R; ++r) {
            const int64_t nv = std::min<int64_t>(n, row_pos(c, rs, r) + 1 - j0);
            c.kr->pv(S + r * ld + j0, nv, V, vs, d, O + r * d);
        }
    }
    store_out(c, rs, O, nullptr);
}

// ---- driving the pool ------------------------------------------------------------------------------

struct Item {
    int32_t seq;
    int32_t head;       // KV head (grouped, fused) or query head (naive)
    int32_t tok_begin;  // first query token, relative to the sequence
    int32_t n_tok;
    int64_t b0, b1;     // context tiles (fused)
    int64_t partial;    // fused split: index of its partial slot; -1 writes the output
    int64_t cost;       // rows * context, for ordering
};

struct Merge {
    Item item;          // the unsplit item
    int64_t first_slot;
    int64_t n_slots;
};

KvSource paged_source(const KvLayerView& kv, const Batch& batch, const BatchSequence& s,
                      int32_t kv_head) {
    KvSource src;
    src.k = static_cast<const uint8_t*>(kv.k);
    src.v = static_cast<const uint8_t*>(kv.v);
    src.dtype = kv.dtype;
    src.table = batch.block_table(s);
    src.tile_stride = kv.offset(1, 0, 0);
    src.head_offset = kv.offset(0, kv_head, 0);
    src.row_stride = kv.head_dim;
    src.tile = kv.block_size;
    return src;
}

RowSet item_rows(const Batch& batch, const Item& it, int32_t group, bool naive) {
    const BatchSequence& s = batch.seqs[it.seq];
    return RowSet{s.token_begin + it.tok_begin, it.n_tok, naive ? it.head : it.head * group,
                  naive ? 1 : group};
}

// Calls fn(thread_index, item_index) for every item, items taken in order from a shared counter.
template <typename Fn>
void run_items(ThreadPool& pool, size_t n_items, Fn&& fn) {
    std::atomic<size_t> next{0};
    pool.run([&](int ti, int) {
        for (size_t i = next.fetch_add(1); i < n_items; i = next.fetch_add(1)) fn(ti, i);
    });
}

float* ensure_scratch(AttentionScratch& scratch, int64_t shared, int64_t per_thread, int n_threads) {
    const size_t need = static_cast<size_t>(align16(shared) + per_thread * n_threads + 16);
    if (scratch.buffer.size() < need) scratch.buffer.resize(need);
    return scratch.buffer.data();
}

// Splits item into context ranges of [p * tiles, (p + 1) * tiles) (tiles a multiple of the fused
// span, so each part walks the same spans as the unsplit loop would) and records their merge.
void split_item(const Item& it, int64_t tiles, std::vector<Item>* out, std::vector<Merge>* merges,
                int64_t* n_slots) {
    const int64_t parts = (it.b1 + tiles - 1) / tiles;
    if (parts < 2) {
        out->push_back(it);
        return;
    }
    merges->push_back({it, *n_slots, parts});
    for (int64_t p = 0; p < parts; ++p) {
        Item part = it;
        part.b0 = p * tiles;
        part.b1 = std::min(it.b1, (p + 1) * tiles);
        part.partial = (*n_slots)++;
        out->push_back(part);
    }
}

void run_grouped_or_fused(ThreadPool& pool, bool fused, const Call& c, const KvLayerView& kv,
                          AttentionScratch& scratch, bool batch_invariant) {
    const Batch& batch = *c.batch;
    const int32_t group = c.n_heads / kv.n_kv_heads;
    const int64_t T = kv.block_size;
    std::vector<Item> items;
    for (int32_t si = 0; si < static_cast<int32_t>(batch.seqs.size()); ++si) {
        const BatchSequence& s = batch.seqs[si];
        for (int32_t h = 0; h < kv.n_kv_heads; ++h) {
            for (int32_t t = 0; t < s.n_tokens; t += kChunkTokens) {
                const int32_t nt = std::min(kChunkTokens, s.n_tokens - t);
                const int64_t ctx_end = batch.positions[s.token_begin + t + nt - 1] + 1;
                items.push_back({si, h, t, nt, 0, (ctx_end + T - 1) / T, -1,
                                 static_cast<int64_t>(nt) * group * ctx_end});
            }
        }
    }
    std::stable_sort(items.begin(), items.end(),
                     [](const Item& a, const Item& b) { return a.cost > b.cost; });

    // Split the context of fused items when there are fewer items than threads.
    const int n_threads = pool.size();
    std::vector<Merge> merges;
    int64_t n_slots = 0, max_rows = 0, max_ctx = 0;
    for (const Item& it : items) {
        max_rows = std::max<int64_t>(max_rows, static_cast<int64_t>(it.n_tok) * group);
        max_ctx = std::max(max_ctx, it.b1 * T);
    }
    if (fused && batch_invariant) {
        // Fixed split points: a row's partial softmaxes and their merge order depend only on its
        // position, never on how many other items share the call.
        const int64_t span = fused_span(T);
        const int64_t tiles = span * std::max<int64_t>(1, kInvariantSplitTokens / (span * T));
        std::vector<Item> split;
        for (const Item& it : items) split_item(it, tiles, &split, &merges, &n_slots);
        items.swap(split);
    } else if (fused && static_cast<int64_t>(items.size()) < n_threads) {
        const int64_t want = (n_threads + static_cast<int64_t>(items.size()) - 1) /
                             static_cast<int64_t>(items.size());
        std::vector<Item> split;
        for (const Item& it : items) {
            const int64_t parts = std::min(want, it.b1 / kMinTilesPerSplit);
            if (parts < 2) {
                split.push_back(it);
                continue;
            }
            merges.push_back({it, n_slots, parts});
            for (int64_t p = 0; p < parts; ++p) {
                Item part = it;
                part.b0 = it.b1 * p / parts;
                part.b1 = it.b1 * (p + 1) / parts;
                part.partial = n_slots++;
                split.push_back(part);
            }
        }
        items.swap(split);
    }

    const int64_t slot_floats = align16(2 * max_rows + max_rows * c.d);
    const int64_t per_thread =
        align16(fused ? fused_scratch_floats(max_rows, c.d, T)
                      : three_pass_scratch_floats(max_rows, c.d, T, max_ctx));
    float* base = ensure_scratch(scratch, n_slots * slot_floats, per_thread, n_threads);
    float* thread_base = base + align16(n_slots * slot_floats);

    run_items(pool, items.size(), [&](int ti, size_t i) {
        const Item& it = items[i];
        float* ws = thread_base + per_thread * ti;
        const RowSet rs = item_rows(batch, it, group, false);
        const KvSource src = paged_source(kv, batch, batch.seqs[it.seq], it.head);
        if (!fused) {
            three_pass_run(c, src, rs, ws);
            return;
        }
        const FusedState st = fused_run(c, src, rs, it.b0, it.b1, ws);
        if (it.partial < 0) {
            store_out(c, rs, st.O, st.l);
            return;
        }
        const int64_t R = rs.rows();
        float* slot = base + it.partial * slot_floats;  // m [R], l [R], O [R][d]
        std::memcpy(slot, st.m, R * sizeof(float));
        std::memcpy(slot + R, st.l, R * sizeof(float));
        std::memcpy(slot + 2 * R, st.O, R * c.d * sizeof(float));
    });

    // Merge the partial softmaxes of split items: O = sum_p O_p e^(m_p - M), l likewise.
    run_items(pool, merges.size(), [&](int ti, size_t i) {
        const Merge& mg = merges[i];
        const RowSet rs = item_rows(batch, mg.item, group, false);
        const int64_t R = rs.rows(), d = c.d;
        float* O = thread_base + per_thread * ti;
        float* l = O + align16(R * d);
        for (int64_t r = 0; r < R; ++r) {
            float M = -std::numeric_limits<float>::infinity();
            for (int64_t p = 0; p < mg.n_slots; ++p) M = std::max(M, base[(mg.first_slot + p) * slot_floats + r]);
            float* o = O + r * d;
            std::fill(o, o + d, 0.0f);
            l[r] = 0.0f;
            for (int64_t p = 0; p < mg.n_slots; ++p) {
                const float* slot = base + (mg.first_slot + p) * slot_floats;
                const float w = std::exp(slot[r] - M);
                if (w == 0.0f) continue;
                l[r] += w * slot[R + r];
                const float* op = slot + 2 * R + r * d;
                for (int64_t k = 0; k < d; ++k) o[k] += w * op[k];
            }
        }
        store_out(c, rs, O, l);
    });
}

// Naive: per sequence, K and V repeated to [ctx][n_heads][head_dim] in the cache dtype (written
// every call, as reference decoders do), then per query head S = Q K^T, softmax, P V.
void run_naive(ThreadPool& pool, const Call& c, const KvLayerView& kv, AttentionScratch& scratch) {
    const Batch& batch = *c.batch;
    const int32_t H = c.n_heads, group = c.n_heads / kv.n_kv_heads;
    const size_t elem = dtype_size(kv.dtype);
    const size_t row_bytes = static_cast<size_t>(c.d) * elem;
    int64_t max_ctx = 0;
    for (const BatchSequence& s : batch.seqs) max_ctx = std::max<int64_t>(max_ctx, s.context_len);
    const int64_t rep_floats = align16(static_cast<int64_t>(
        (static_cast<size_t>(max_ctx) * H * row_bytes + 3) / 4));
    const int64_t per_thread =
        align16(three_pass_scratch_floats(kChunkTokens, c.d, kNaiveTile, max_ctx));
    const int n_threads = pool.size();
    float* base = ensure_scratch(scratch, 2 * rep_floats, per_thread, n_threads);
    uint8_t* rep_k = reinterpret_cast<uint8_t*>(base);
    uint8_t* rep_v = reinterpret_cast<uint8_t*>(base + rep_floats);
    float* thread_base = base + 2 * rep_floats;

    std::vector<Item> items;
    for (int32_t si = 0; si < static_cast<int32_t>(batch.seqs.size()); ++si) {
        const BatchSequence& s = batch.seqs[si];
        const int32_t* table = batch.block_table(s);
        const int64_t ctx = s.context_len;
        pool.run([&](int ti, int nt) {  // repeat_kv
            const int64_t j_begin = ctx * ti / nt, j_end = ctx * (ti + 1) / nt;
            for (int64_t j = j_begin; j < j_end; ++j) {
                const int64_t block = table[j / kv.block_size];
                const int32_t off = static_cast<int32_t>(j % kv.block_size);
                for (int32_t h = 0; h < H; ++h) {
                    const size_t src = kv.offset(block, h / group, off);
                    const size_t dst = (static_cast<size_t>(j) * H + h) * row_bytes;
                    std::memcpy(rep_k + dst, static_cast<const uint8_t*>(kv.k) + src, row_bytes);
                    std::memcpy(rep_v + dst, static_cast<const uint8_t*>(kv.v) + src, row_bytes);
                }
            }
        });
        items.clear();
        for (int32_t h = 0; h < H; ++h) {
            for (int32_t t = 0; t < s.n_tokens; t += kChunkTokens) {
                items.push_back({si, h, t, std::min(kChunkTokens, s.n_tokens - t), 0, 0, -1, 0});
            }
        }
        run_items(pool, items.size(), [&](int ti, size_t i) {
            const Item& it = items[i];
            KvSource src;
            src.k = rep_k;
            src.v = rep_v;
            src.dtype = kv.dtype;
            src.tile = kNaiveTile;
            src.row_stride = static_cast<int64_t>(H) * c.d;
            src.tile_stride = static_cast<size_t>(kNaiveTile) * H * row_bytes;
            src.head_offset = static_cast<size_t>(it.head) * row_bytes;
            three_pass_run(c, src, item_rows(batch, it, group, true),
                           thread_base + per_thread * ti);
        });
    }
}

void check_qkv(const TensorView& t, const char* what, int64_t d, int64_t heads, int64_t tokens) {
    MVLLM_CHECK(t.type == DType::F32 || t.type == DType::F16)
        << what << " must be f32 or f16, not " << type_name(t.type);
    MVLLM_CHECK(t.ne[0] == d && t.ne[1] == heads && t.ne[2] == tokens && t.ne[3] == 1)
        << what << " shape " << shape_string(t.ne) << ", expected [" << d << ", " << heads << ", "
        << tokens << "]";
}

}  // namespace

void kv_store(const Batch& batch, const TensorView& k, const TensorView& v, const KvLayerView& kv) {
    MVLLM_CHECK(kv.dtype == DType::F32 || kv.dtype == DType::F16) << "KV cache dtype";
    check_qkv(k, "k", kv.head_dim, kv.n_kv_heads, batch.n_tokens());
    check_qkv(v, "v", kv.head_dim, kv.n_kv_heads, batch.n_tokens());
    MVLLM_CHECK(batch.block_size == kv.block_size)
        << "batch block_size " << batch.block_size << " vs cache " << kv.block_size;
    const AttentionKernels& kr = pick_kernels(8);  // conversions only: any head_dim
    const int64_t d = kv.head_dim;
    for (int64_t i = 0; i < batch.n_tokens(); ++i) {
        const int64_t slot = batch.slot_mapping[i];
        if (slot < 0) continue;  // padding row: no cache slot
        const int64_t block = slot / kv.block_size;
        const int32_t off = static_cast<int32_t>(slot % kv.block_size);
        for (int32_t h = 0; h < kv.n_kv_heads; ++h) {
            const int64_t src_row = i * kv.n_kv_heads + h;
            const size_t dst = kv.offset(block, h, off);
            for (int which = 0; which < 2; ++which) {
                const TensorView& t = which == 0 ? k : v;
                uint8_t* out = static_cast<uint8_t*>(which == 0 ? kv.k : kv.v) + dst;
                const uint8_t* in = static_cast<const uint8_t*>(t.data) +
                                    static_cast<size_t>(src_row * d) * dtype_size(t.type);
                if (t.type == kv.dtype) {
                    std::memcpy(out, in, static_cast<size_t>(d) * dtype_size(t.type));
                } else if (kv.dtype == DType::F16) {
                    kr.f32_to_f16(reinterpret_cast<const float*>(in),
                                  reinterpret_cast<uint16_t*>(out), d);
                } else {
                    kr.f16_to_f32(reinterpret_cast<const uint16_t*>(in),
                                  reinterpret_cast<float*>(out), d);
                }
            }
        }
    }
}

void attention(ThreadPool& pool, AttentionVariant variant, const Batch& batch,
               const KvLayerView& kv, const TensorView& q, const TensorView& out, int32_t n_heads,
               float scale, AttentionScratch& scratch, bool batch_invariant) {
    MVLLM_CHECK(kv.dtype == DType::F32 || kv.dtype == DType::F16)
        << "KV cache dtype " << type_name(kv.dtype);
    MVLLM_CHECK(kv.n_kv_heads > 0 && n_heads % kv.n_kv_heads == 0)
        << n_heads << " query heads over " << kv.n_kv_heads << " KV heads";
    MVLLM_CHECK(batch.block_size == kv.block_size)
        << "batch block_size " << batch.block_size << " vs cache " << kv.block_size;
    check_qkv(q, "q", kv.head_dim, n_heads, batch.n_tokens());
    check_qkv(out, "out", kv.head_dim, n_heads, batch.n_tokens());
    if (batch.n_tokens() == 0) return;
    const Call c{&batch, &q, &out, n_heads, kv.head_dim, scale, &pick_kernels(kv.head_dim)};
    switch (variant) {
        case AttentionVariant::Naive: run_naive(pool, c, kv, scratch); break;
        case AttentionVariant::Grouped: run_grouped_or_fused(pool, false, c, kv, scratch, batch_invariant); break;
        case AttentionVariant::Fused: run_grouped_or_fused(pool, true, c, kv, scratch, batch_invariant); break;
    }
}

void attention_reference(const Batch& batch, const KvLayerView& kv, const TensorView& q,
                         const TensorView& out, int32_t n_heads, float scale) {
    check_qkv(q, "q", kv.head_dim, n_heads, batch.n_tokens());
    check_qkv(out, "out", kv.head_dim, n_heads, batch.n_tokens());
    const int64_t d = kv.head_dim;
    const int32_t group = n_heads / kv.n_kv_heads;
    auto load = [](const void* base, DType t, size_t index) -> double {
        if (t == DType::F32) return static_cast<const float*>(base)[index];
        return f16_to_f32(static_cast<const uint16_t*>(base)[index]);
    };
    std::vector<double> qd(d), o(d), p;
    for (const BatchSequence& s : batch.seqs) {
        const int32_t* table = batch.block_table(s);
        for (int64_t row = s.token_begin; row < s.token_begin + s.n_tokens; ++row) {
            const int64_t pos = batch.positions[row];
            p.assign(pos + 1, 0.0);
            for (int32_t h = 0; h < n_heads; ++h) {
                const size_t qbase = static_cast<size_t>((row * n_heads + h) * d);
                for (int64_t i = 0; i < d; ++i) qd[i] = load(q.data, q.type, qbase + i);
                double mx = -std::numeric_limits<double>::infinity();
                for (int64_t j = 0; j <= pos; ++j) {
                    const size_t kb = kv.offset(table[j / kv.block_size], h / group,
                                                static_cast<int32_t>(j % kv.block_size)) /
                                      kv.elem_size();
                    double acc = 0.0;
                    for (int64_t i = 0; i < d; ++i) acc += qd[i] * load(kv.k, kv.dtype, kb + i);
                    p[j] = acc * scale;
                    mx = std::max(mx, p[j]);
                }
                double sum = 0.0;
                for (int64_t j = 0; j <= pos; ++j) sum += (p[j] = std::exp(p[j] - mx));
                std::fill(o.begin(), o.end(), 0.0);
                for (int64_t j = 0; j <= pos; ++j) {
                    const size_t vb = kv.offset(table[j / kv.block_size], h / group,
                                                static_cast<int32_t>(j % kv.block_size)) /
                                      kv.elem_size();
                    for (int64_t i = 0; i < d; ++i) o[i] += p[j] / sum * load(kv.v, kv.dtype, vb + i);
                }
                for (int64_t i = 0; i < d; ++i) {
                    if (out.type == DType::F32) {
                        static_cast<float*>(out.data)[qbase + i] = static_cast<float>(o[i]);
                    } else {
                        static_cast<uint16_t*>(out.data)[qbase + i] =
                            f32_to_f16(static_cast<float>(o[i]));
                    }
                }
            }
        }
    }
}

}  // namespace mvllm
