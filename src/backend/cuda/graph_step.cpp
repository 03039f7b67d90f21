// The CUDA backend's per-step inputs and its recorded decode steps.
//
// begin() packs the batch metadata into pinned host memory and copies it to the device in one
// transfer. A decode step (every sequence one new token, at most kMaxRecordedRows of them, fused
// attention) can instead be a CUDA graph: the kernels of a step only differ between steps in the
// metadata they read (token ids, positions, slots, block tables, context lengths), so the graph
// is recorded with that metadata at a fixed device address and a fixed layout, sized for the batch
// size and a context bucket (the next power of two >= 256 of the longest context; the attention
// split is planned for the bucket, splits past a sequence's end are empty). Each graph is keyed by
// (program, cache storage, block size, batch size, bucket):
//
//   1st step of a key: eager, with the bucket's plan (grows every scratch buffer it needs)
//   2nd step:          eager again, recorded by stream capture, then launched
//   later steps:       one metadata copy + one graph launch; the decoder issues no ops
//
// A graph is dropped (and the key starts over) when a buffer it points at was reallocated since;
// beyond kMaxGraphs graphs the least recently replayed one is dropped.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "backend/cuda/cuda_backend_impl.h"

namespace mvllm {
namespace {

size_t align8(size_t n) { return (n + 7) / 8 * 8; }

// Room reserved per metadata array: the batch's own sizes, or a graph's fixed capacities.
struct MetaCapacity {
    size_t n_tokens = 0, n_seqs = 0, n_block_ids = 0, n_logits = 0;
    size_t bytes() const {
        return align8((n_tokens) * 8) + align8(n_seqs * 8) + 4 * align8(n_tokens * 4) + align8(n_block_ids * 4) +
               5 * align8(n_seqs * 4) + align8(n_logits * 4);
    }
};

MetaCapacity capacity_of(const Batch& b) {
    return {b.token_ids.size(), b.seqs.size(), b.block_tables.size(), b.logit_rows.size()};
}

int32_t context_bucket(int32_t max_context) {
    int32_t c = 256;
    while (c < max_context) c *= 2;
    return c;
}

// Packs b into host at the layout of `cap`; fills db (device pointers relative to `device`).
// Returns the bytes to copy.
size_t pack_batch(const Batch& b, const MetaCapacity& cap, uint8_t* host, void* device, cuda::DeviceBatch* db,
                  const int64_t** seq_ctx_offset, int64_t* total_context, std::vector<int32_t>* query_len_by_row) {
    const size_t n = b.token_ids.size(), n_seqs = b.seqs.size();
    auto* d = static_cast<uint8_t*>(device);
    size_t off = 0;
    auto put = [&](const void* src, size_t count, size_t room, size_t elem) -> const void* {
        MVLLM_CHECK(count <= room) << "batch metadata over its capacity";
        if (count) std::memcpy(host + off, src, count * elem);
        const void* dev = d + off;
        off += align8(room * elem);
        return dev;
    };
    std::vector<int32_t> row_seq(n), sb(n_seqs), st(n_seqs), sn(n_seqs), sc(n_seqs), multi;
    std::vector<int64_t> ctx_off(n_seqs);
    int32_t max_ctx = 0, max_tokens = 0;
    int64_t total = 0;
    for (size_t s = 0; s < n_seqs; ++s) {
        const BatchSequence& q = b.seqs[s];
        for (int32_t i = 0; i < q.n_tokens; ++i) row_seq[q.token_begin + i] = static_cast<int32_t>(s);
        sb[s] = q.block_table_begin;
        st[s] = q.token_begin;
        sn[s] = q.n_tokens;
        sc[s] = q.context_len;
        ctx_off[s] = total;
        total += q.context_len;
        max_ctx = std::max(max_ctx, q.context_len);
        max_tokens = std::max(max_tokens, q.n_tokens);
        if (q.n_tokens > 1) multi.push_back(static_cast<int32_t>(s));
    }
    db->n_tokens = static_cast<int32_t>(n);
    db->n_seqs = static_cast<int32_t>(n_seqs);
    db->n_logit_rows = static_cast<int32_t>(b.logit_rows.size());
    db->block_size = b.block_size;
    db->max_context = max_ctx;
    db->max_seq_tokens = max_tokens;
    db->n_multi_row_seqs = static_cast<int32_t>(multi.size());
    db->slot_mapping = static_cast<const int64_t*>(put(b.slot_mapping.data(), n, cap.n_tokens, 8));
    *seq_ctx_offset = static_cast<const int64_t*>(put(ctx_off.data(), n_seqs, cap.n_seqs, 8));
    db->token_ids = static_cast<const int32_t*>(put(b.token_ids.data(), n, cap.n_tokens, 4));
    db->positions = static_cast<const int32_t*>(put(b.positions.data(), n, cap.n_tokens, 4));
    db->row_seq = static_cast<const int32_t*>(put(row_seq.data(), n, cap.n_tokens, 4));
    db->block_tables = static_cast<const int32_t*>(put(b.block_tables.data(), b.block_tables.size(), cap.n_block_ids, 4));
    db->seq_block_begin = static_cast<const int32_t*>(put(sb.data(), n_seqs, cap.n_seqs, 4));
    db->seq_token_begin = static_cast<const int32_t*>(put(st.data(), n_seqs, cap.n_seqs, 4));
    db->seq_n_tokens = static_cast<const int32_t*>(put(sn.data(), n_seqs, cap.n_seqs, 4));
    db->seq_context_len = static_cast<const int32_t*>(put(sc.data(), n_seqs, cap.n_seqs, 4));
    db->logit_rows = static_cast<const int32_t*>(put(b.logit_rows.data(), b.logit_rows.size(), cap.n_logits, 4));
    db->multi_row_seqs = static_cast<const int32_t*>(put(multi.data(), multi.size(), cap.n_seqs, 4));
    // Rows by their sequence's query-row count: sort the sequences (few), then list their rows.
    // Only read when a sequence has several rows (never in a decode step, recorded or not).
    std::vector<int32_t> rows;
    query_len_by_row->clear();
    if (max_tokens > 1) {
        std::vector<int32_t> seq_order(n_seqs);
        std::iota(seq_order.begin(), seq_order.end(), 0);
        std::stable_sort(seq_order.begin(), seq_order.end(), [&](int32_t x, int32_t y) { return sn[x] < sn[y]; });
        rows.reserve(n);
        for (const int32_t s : seq_order)
            for (int32_t i = 0; i < sn[s]; ++i) {
                rows.push_back(st[s] + i);
                query_len_by_row->push_back(sn[s]);
            }
    }
    db->rows_by_query_len = static_cast<const int32_t*>(put(rows.data(), rows.size(), cap.n_tokens, 4));
    db->host_query_len_by_row = query_len_by_row->data();
    *total_context = total;
    return off;
}

// Decode batches up to this many sequences are recorded (beyond kGemvMaxTokens rows the step's
// matmuls are cuBLAS GEMMs, recorded like any kernel).
constexpr size_t kMaxRecordedRows = 512;

// A decode step a graph can record: every sequence contributes one token that wants logits.
bool recordable(const Batch& b) {
    const size_t n = b.token_ids.size();
    if (n == 0 || n > kMaxRecordedRows || b.seqs.size() != n || b.logit_rows.size() != n) return false;
    for (const BatchSequence& s : b.seqs)
        if (s.n_tokens != 1) return false;
    return true;
}

}  // namespace

void CudaBackend::begin(const Batch& b) {
    Impl& im = *impl_;
    MVLLM_CUDA_OK(cudaEventSynchronize(im.meta_copied));  // the pinned buffer is free again
    const MetaCapacity cap = capacity_of(b);
    im.ensure_meta(cap.bytes());
    const size_t bytes = pack_batch(b, cap, im.meta_host, im.meta_device, &im.batch, &im.seq_ctx_offset,
                                    &im.total_context, &im.query_len_by_row);
    MVLLM_CUDA_OK(cudaMemcpyAsync(im.meta_device, im.meta_host, bytes, cudaMemcpyHostToDevice, im.stream));
    MVLLM_CUDA_OK(cudaEventRecord(im.meta_copied, im.stream));
    im.arena_next = 0;
    im.qx_source = nullptr;
    im.rope_table = nullptr;
    im.mode = StepMode::Eager;
    im.graph_timing.synced = {};  // an eager step: not counted as host time between graph steps
    im.graph_timing.chain_next = false;
}

bool CudaBackend::begin_step(const Batch& b, uint64_t program, KvCache& cache) {
    Impl& im = *impl_;
    if (!im.graphs_enabled || im.options.attention != CudaAttentionVariant::Fused || !recordable(b) ||
        !cache.on_device()) {
        begin(b);
        return false;
    }
    int32_t max_ctx = 0;
    for (const BatchSequence& s : b.seqs) max_ctx = std::max(max_ctx, s.context_len);
    const int32_t bucket = context_bucket(std::max(max_ctx, im.warmup_context));
    const StepKey key{program, cache.layer(0).k, b.block_size, static_cast<int32_t>(b.token_ids.size()), bucket};
    MetaCapacity cap = capacity_of(b);
    cap.n_block_ids = cap.n_seqs * static_cast<size_t>((bucket + b.block_size - 1) / b.block_size);
    if (b.block_tables.size() > cap.n_block_ids) {  // tables longer than the bucket needs: eager
        begin(b);
        return false;
    }

    auto it = im.graphs.find(key);
    if (it != im.graphs.end() && it->second.resources != im.resources()) {
        cudaGraphExecDestroy(it->second.exec);
        if (it->second.graph) cudaGraphDestroy(it->second.graph);
        cudaFree(it->second.meta_device);
        im.graphs.erase(it);
        im.seen.erase(key);
        it = im.graphs.end();
    }
    int& n_seen = im.seen[key];
    if (it == im.graphs.end() && n_seen == 0) {
        // First step of this shape: eager, planned for the bucket as the recording will be.
        n_seen = 1;
        begin(b);
        im.batch.max_context = bucket;
        return false;
    }
    MVLLM_CUDA_OK(cudaEventSynchronize(im.meta_copied));
    im.ensure_meta(cap.bytes());
    StepGraph* g = nullptr;
    if (it == im.graphs.end()) {
        im.evict_graphs(Impl::kMaxGraphs - 1);
        StepGraph fresh;
        const cudaError_t err = cudaMalloc(&fresh.meta_device, cap.bytes());
        MVLLM_CHECK(err == cudaSuccess) << "graph metadata did not fit (" << cuda_memory_report() << ")";
        g = &im.graphs.emplace(key, fresh).first->second;
        im.mode = StepMode::Capture;
    } else {
        g = &it->second;
        im.mode = StepMode::Replay;
    }
    const size_t bytes =
        pack_batch(b, cap, im.meta_host, g->meta_device, &g->batch, &g->seq_ctx_offset, &g->total_context,
                   &im.query_len_by_row);
    g->batch.max_context = bucket;
    MVLLM_CUDA_OK(cudaMemcpyAsync(g->meta_device, im.meta_host, bytes, cudaMemcpyHostToDevice, im.stream));
    MVLLM_CUDA_OK(cudaEventRecord(im.meta_copied, im.stream));
    im.batch = g->batch;
    im.seq_ctx_offset = g->seq_ctx_offset;
    im.total_context = g->total_context;
    im.arena_next = 0;
    im.qx_source = nullptr;
    im.rope_table = nullptr;
    im.step_key = key;
    g->last_use = ++im.step_counter;
    if (im.mode == StepMode::Capture)
        MVLLM_CUDA_OK(cudaStreamBeginCapture(im.stream, cudaStreamCaptureModeThreadLocal));
    return im.mode == StepMode::Replay;
}

void CudaBackend::end_step() {
    Impl& im = *impl_;
    if (im.mode == StepMode::Eager) return;
    StepGraph& g = im.graphs.at(im.step_key);
    if (im.mode == StepMode::Capture) {
        cudaGraph_t graph = nullptr;
        MVLLM_CUDA_OK(cudaStreamEndCapture(im.stream, &graph));
        MVLLM_CUDA_OK(cudaGraphInstantiate(&g.exec, graph, 0));
        if (im.ablation_at > 0) g.graph = graph;
        else cudaGraphDestroy(graph);
        g.resources = im.resources();
    }
    Impl::GraphTiming& t = im.graph_timing;
    const int k = static_cast<int>(t.n_launched % 2);
    if (t.enabled) {
        im.collect_graph_time(1);  // frees events k (the launch before the last)
        t.launched = std::chrono::steady_clock::now();
        if (t.synced != std::chrono::steady_clock::time_point{}) {
            t.host_between_s += std::chrono::duration<double>(t.launched - t.synced).count();
            ++t.n_between;
        }
        t.chained[k] = t.chain_next;
        MVLLM_CUDA_OK(cudaEventRecord(t.start[k], im.stream));
    }
    MVLLM_CUDA_OK(cudaGraphLaunch(g.exec, im.stream));
    if (t.enabled) {
        MVLLM_CUDA_OK(cudaEventRecord(t.stop[k], im.stream));
        ++t.n_launched;
        t.chain_next = true;
    }
    if (g.graph && ++g.n_replays == im.ablation_at) ablate_graph(g.graph, g.exec, im.stream, std::get<3>(im.step_key));
    im.mode = StepMode::Eager;
}

void CudaBackend::Impl::collect_graph_time(int64_t keep) {
    GraphTiming& t = graph_timing;
    while (t.n_launched - t.n_collected > keep) {
        const int64_t j = t.n_collected++;
        const int a = static_cast<int>(j % 2), b = 1 - a;
        float ms = 0;
        MVLLM_CUDA_OK(cudaEventSynchronize(t.stop[a]));
        MVLLM_CUDA_OK(cudaEventElapsedTime(&ms, t.start[a], t.stop[a]));
        t.total_ms += ms;
        ++t.n;
        if (j + 1 < t.n_launched && t.chained[b]) {  // launch j + 1 came right after launch j
            MVLLM_CUDA_OK(cudaEventSynchronize(t.start[b]));
            MVLLM_CUDA_OK(cudaEventElapsedTime(&ms, t.stop[a], t.start[b]));
            t.gap_ms += ms;
            ++t.n_gap;
        }
    }
}

void CudaBackend::Impl::evict_graphs(size_t keep) {
    while (graphs.size() > keep) {
        auto lru = graphs.begin();
        for (auto g = graphs.begin(); g != graphs.end(); ++g)
            if (g->second.last_use < lru->second.last_use) lru = g;
        MVLLM_CUDA_OK(cudaStreamSynchronize(stream));  // a replay may still read its metadata
        if (lru->second.exec) cudaGraphExecDestroy(lru->second.exec);
        if (lru->second.graph) cudaGraphDestroy(lru->second.graph);
        cudaFree(lru->second.meta_device);
        seen.erase(lru->first);
        graphs.erase(lru);
    }
}

bool CudaBackend::warms_up() const { return impl_->graphs_enabled; }

void CudaBackend::set_warming_up(bool on, int32_t context) {
    Impl& im = *impl_;
    im.gemm_tuner->set_tuning(on);
    im.warmup_context = on ? context : 0;
    if (!on && im.graph_timing.enabled) {  // MVLLM_CUDA_STEP_TIMING reports the steps after the warm-up
        im.collect_graph_time();
        Impl::GraphTiming& t = im.graph_timing;
        t.total_ms = t.gap_ms = 0;
        t.n = t.n_gap = 0;
        t.host_between_s = t.launch_to_result_s = 0;
        t.n_between = t.n_launch_to_result = 0;
        t.synced = {};
    }
}

std::vector<int32_t> CudaBackend::warmup_contexts(int32_t max_context) const {
    if (!impl_->graphs_enabled) return {0};
    std::vector<int32_t> contexts;
    for (int32_t c = context_bucket(max_context); c >= 256; c /= 2) contexts.push_back(c);
    return contexts;
}

int32_t CudaBackend::n_graphs() const { return static_cast<int32_t>(impl_->graphs.size()); }

}  // namespace mvllm
