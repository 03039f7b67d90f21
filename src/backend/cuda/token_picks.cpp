// The CUDA backend's token picks (Backend::argmax_enqueue and its results): the argmax or the
// draw of each logit row after its penalties, the greedy and target logprobs, the rows scored or
// copied back for the host, all staged in two slots (ticket % 2) of pinned and mapped host memory
// so that a step's results stay readable while the next step is queued.
#include <algorithm>
#include <bit>
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/ops.cuh"

namespace mvllm {

void CudaBackend::Impl::ensure_argmax(size_t rows) {
    if (argmax_capacity > 0 && rows <= argmax_capacity) return;
    // At least the largest recorded decode batch, so that recorded steps keep their fed pointer.
    const size_t cap = std::max<size_t>(rows, 512), old = argmax_capacity;
    MVLLM_CUDA_OK(cudaStreamSynchronize(stream));  // no kernel writes the old buffers any more
    int32_t* out = nullptr;
    float* logprob = nullptr;
    int32_t* fed = nullptr;
    unsigned long long* keys = nullptr;
    MVLLM_CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&out), 2 * cap * sizeof(int32_t), cudaHostAllocMapped));
    MVLLM_CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&logprob), 2 * cap * sizeof(float), cudaHostAllocMapped));
    MVLLM_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&fed), cap * sizeof(int32_t)));
    MVLLM_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&keys), cap * sizeof(unsigned long long)));
    MVLLM_CUDA_OK(cudaMemset(keys, 0, cap * sizeof(unsigned long long)));
    if (old > 0) {  // both slots' results and the fed tokens may still be read
        for (size_t s = 0; s < 2; ++s) {
            std::memcpy(out + s * cap, argmax_out + s * old, old * sizeof(int32_t));
            std::memcpy(logprob + s * cap, argmax_logprob + s * old, old * sizeof(float));
        }
        MVLLM_CUDA_OK(cudaMemcpy(fed, argmax_fed, old * sizeof(int32_t), cudaMemcpyDeviceToDevice));
        cudaFreeHost(argmax_out);
        cudaFreeHost(argmax_logprob);
        cudaFree(argmax_fed);
        cudaFree(argmax_keys);
    }
    argmax_out = out;
    argmax_logprob = logprob;
    MVLLM_CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&argmax_out_dev), out, 0));
    MVLLM_CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&argmax_logprob_dev), logprob, 0));
    argmax_fed = fed;
    argmax_keys = keys;
    argmax_capacity = cap;
}

void CudaBackend::Impl::ensure_draws(size_t rows, int64_t parts) {
    if (rows <= draw_rows && parts <= draw_parts) return;
    const size_t cap = std::max({rows, draw_rows, size_t{64}});
    const int64_t p = std::max(parts, draw_parts);
    MVLLM_CUDA_OK(cudaStreamSynchronize(stream));  // no kernel reads the old buffers any more
    TokenDraw* host = nullptr;
    MVLLM_CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&host), 2 * cap * sizeof(TokenDraw), cudaHostAllocDefault));
    if (draws_host) cudaFreeHost(draws_host);
    if (draws_dev) cudaFree(draws_dev);
    if (draw_cuts) cudaFree(draw_cuts);
    if (draw_binned) cudaFree(draw_binned), draw_binned = nullptr;
    if (draw_score) cudaFree(draw_score);
    if (draw_index) cudaFree(draw_index);
    draws_host = host;
    MVLLM_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&draws_dev), 2 * cap * sizeof(TokenDraw)));
    MVLLM_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&draw_cuts), cap * sizeof(cuda::DrawCut)));
    if (options.binned_cut) {  // zeroed: the kernels leave it so
        const size_t bytes = static_cast<size_t>(cuda::binned_cut_bytes(static_cast<int64_t>(cap)));
        MVLLM_CUDA_OK(cudaMalloc(&draw_binned, bytes));
        MVLLM_CUDA_OK(cudaMemset(draw_binned, 0, bytes));
    }
    MVLLM_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&draw_score), cap * p * sizeof(double)));
    MVLLM_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&draw_index), cap * p * sizeof(int32_t)));
    draw_rows = cap;
    draw_parts = p;
}

void CudaBackend::Impl::ensure_penalties(size_t n) {
    if (n <= penalty_capacity) return;
    const size_t cap = std::max({n + n / 2, size_t{4096}});
    MVLLM_CUDA_OK(cudaStreamSynchronize(stream));  // no copy or kernel reads the old buffers any more
    TokenPenalty* host = nullptr;
    MVLLM_CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&host), 2 * cap * sizeof(TokenPenalty), cudaHostAllocDefault));
    if (penalties_host) cudaFreeHost(penalties_host);
    if (penalties_dev) cudaFree(penalties_dev);
    penalties_host = host;
    MVLLM_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&penalties_dev), 2 * cap * sizeof(TokenPenalty)));
    penalty_capacity = cap;
}

void CudaBackend::Impl::ensure_targets(size_t rows) {
    if (rows > targets.capacity) targets.grow(std::max<size_t>(rows, 512), stream);
}

void CudaBackend::Impl::ensure_copies(size_t n) {
    if (n <= copy_capacity) return;
    const size_t cap = std::max(n, copy_capacity * 2), old = copy_capacity;
    MVLLM_CUDA_OK(cudaStreamSynchronize(stream));  // no copy writes the old buffer any more
    float* host = nullptr;
    MVLLM_CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&host), 2 * cap * sizeof(float), cudaHostAllocDefault));
    if (old > 0) {  // both slots' rows may still be read
        for (size_t s = 0; s < 2; ++s) std::memcpy(host + s * cap, copies_host + s * old, old * sizeof(float));
        cudaFreeHost(copies_host);
    }
    copies_host = host;
    copy_capacity = cap;
}

void CudaBackend::Impl::ensure_scores(size_t n) {
    if (n <= scores.capacity) return;
    scores.grow(std::max(n, scores.capacity * 2), stream);
    if (!score_parts)
        MVLLM_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&score_parts),
                                 static_cast<size_t>(n_sms) * cuda::kRowScoreWords * sizeof(int32_t)));
}

uint64_t CudaBackend::argmax_enqueue(const TensorView& x, bool logprob, const TokenPicks& picks) {
    Impl& im = *impl_;
    const size_t rows = static_cast<size_t>(x.ne[1]);
    const TokenDraw* draws = picks.draws.empty() ? nullptr : picks.draws.data();
    MVLLM_CHECK(draws == nullptr || picks.draws.size() == rows) << picks.draws.size() << " draws for " << rows << " rows";
    bool drawn = false, any_min_p = false, any_cut = false;
    for (size_t r = 0; draws && r < rows; ++r) {
        if (!(draws[r].temperature > 0.0f)) continue;
        drawn = true;
        any_min_p |= draws[r].min_p > 0.0f;
        any_cut |= truncates(draws[r], x.ne[0]);
    }
    MVLLM_CHECK(!(drawn && logprob)) << "a drawn token has no greedy logprob";
    const bool targets = !picks.targets.empty();
    MVLLM_CHECK(!targets || (logprob && picks.targets.size() == rows)) << "targets need logprobs, one per row";
    im.ensure_argmax(rows);
    if (targets) im.ensure_targets(rows);
    if (drawn) im.ensure_draws(rows, cuda::draw_parts(x.ne[0]));
    const size_t n_penalties = picks.penalties.size();
    if (n_penalties > 0) im.ensure_penalties(n_penalties);
    const size_t n_scores = picks.scores.size();
    if (n_scores > 0) im.ensure_scores(n_scores);
    const uint64_t ticket = next_argmax_ticket();
    const size_t s = ticket % 2;
    Impl::ArgmaxSlot& slot = im.argmax_slots[s];
    // Slot s's staging was last copied for ticket - 2, whose results the caller has read; its
    // device copies were last read by ticket - 2's kernels, which copy_stream waits for (slot.done).
    bool staging = false;
    auto stage = [&](auto* dev, auto* host, const auto* src, size_t n) {
        if (!staging) MVLLM_CUDA_OK(cudaStreamWaitEvent(im.copy_stream, slot.done, 0));
        staging = true;
        std::memcpy(host, src, n * sizeof(*src));
        MVLLM_CUDA_OK(cudaMemcpyAsync(dev, host, n * sizeof(*src), cudaMemcpyHostToDevice, im.copy_stream));
    };
    const TokenPenalty* penalties = im.penalties_dev + s * im.penalty_capacity;
    if (n_penalties > 0)
        stage(im.penalties_dev + s * im.penalty_capacity, im.penalties_host + s * im.penalty_capacity,
              picks.penalties.data(), n_penalties);
    const bool drawn_rows = rows > 0 && drawn;
    // One copy per step: with the draws in mapped host memory every CTA (37 per row) read them over
    // the bus, and 256 drawn rows cost B4(b) 5-7 % (bench/NOTES.md, twenty-sixth session).
    if (drawn_rows) stage(im.draws_dev + s * im.draw_rows, im.draws_host + s * im.draw_rows, draws, rows);
    const bool target_rows = rows > 0 && !drawn && targets;
    if (target_rows)
        stage(im.targets.dev_slot(s), im.targets.host_slot(s), picks.targets.data(), rows);
    if (n_scores > 0)
        stage(im.scores.dev_slot(s), im.scores.host_slot(s), picks.scores.data(), n_scores);
    if (staging) {  // the pass (already queued on stream) runs while they copy
        MVLLM_CUDA_OK(cudaEventRecord(im.staged[s], im.copy_stream));
        MVLLM_CUDA_OK(cudaStreamWaitEvent(im.stream, im.staged[s], 0));
    }
    if (n_penalties > 0) cuda::launch_penalties(x, penalties, static_cast<int64_t>(n_penalties), im.stream);
    const size_t width = static_cast<size_t>(x.ne[0]), copied = picks.copies.size() * width;
    if (copied > 0) {  // the penalised rows, before the draw (which reads x and leaves it)
        im.ensure_copies(copied);
        float* host = im.copies_host + s * im.copy_capacity;
        const float* rows_dev = static_cast<const float*>(x.data);
        for (size_t i = 0, j = 0; i < picks.copies.size(); i = j) {  // one copy per run of consecutive rows
            for (j = i + 1; j < picks.copies.size() && picks.copies[j] == picks.copies[j - 1] + 1;) ++j;
            MVLLM_CUDA_OK(cudaMemcpyAsync(host + i * width, rows_dev + static_cast<size_t>(picks.copies[i]) * width,
                                          (j - i) * width * sizeof(float), cudaMemcpyDeviceToHost, im.stream));
        }
    }
    slot.ticket = ticket;
    slot.rows = rows;
    slot.logprob = logprob;
    slot.targets = targets;
    slot.copied = copied;
    slot.scored = n_scores;
    if (drawn_rows) {
        const cuda::DrawScratch scratch{im.argmax_keys, im.draw_cuts, im.draw_binned, im.draw_score,
                                        im.draw_index, im.n_sms, im.options.draw_score_outlined};
        cuda::launch_draw(x, im.draws_dev + s * im.draw_rows, any_min_p, any_cut, scratch,
                          im.argmax_out_dev + s * im.argmax_capacity, im.argmax_fed, im.stream);
    } else if (rows > 0) {
        cuda::launch_argmax(x, im.argmax_keys, im.argmax_out_dev + s * im.argmax_capacity, im.argmax_fed, im.stream);
        if (logprob) cuda::launch_max_logprob(x, im.argmax_logprob_dev + s * im.argmax_capacity, im.stream);
        if (target_rows)
            cuda::launch_target_logprob(x, im.targets.dev_slot(s),
                                        im.argmax_out_dev + s * im.argmax_capacity,
                                        im.argmax_logprob_dev + s * im.argmax_capacity,
                                        im.targets.out_dev_slot(s), im.stream);
    }
    if (n_scores > 0)  // after the picks, whose tokens (argmax_fed) the rows without one score
        cuda::launch_row_scores(x, im.scores.dev_slot(s), static_cast<int64_t>(n_scores), im.argmax_fed,
                                im.scores.out_dev_slot(s), im.score_parts,
                                im.n_sms, im.stream);
    MVLLM_CUDA_OK(cudaEventRecord(slot.done, im.stream));
    return ticket;
}

void CudaBackend::argmax_result(uint64_t ticket, int32_t* dst, float* logprob, float* target_logprob) {
    Impl& im = *impl_;
    const size_t s = ticket % 2;
    const Impl::ArgmaxSlot& slot = im.argmax_slots[s];
    MVLLM_CHECK(ticket != 0 && slot.ticket == ticket) << "greedy result " << ticket << " is no longer kept";
    MVLLM_CHECK(!logprob || slot.logprob) << "greedy result " << ticket << " has no logprobs";
    MVLLM_CHECK(!target_logprob || slot.targets) << "greedy result " << ticket << " has no target logprobs";
    MVLLM_CUDA_OK(cudaEventSynchronize(slot.done));  // the kernels' writes to mapped memory are visible now
    std::memcpy(dst, im.argmax_out + s * im.argmax_capacity, slot.rows * sizeof(int32_t));
    if (logprob) std::memcpy(logprob, im.argmax_logprob + s * im.argmax_capacity, slot.rows * sizeof(float));
    if (target_logprob) std::memcpy(target_logprob, im.targets.out_slot(s), slot.rows * sizeof(float));
    Impl::ArgmaxSlot& kept = im.argmax_slots[s];
    kept.scores.resize(slot.scored);
    for (size_t i = 0; i < slot.scored; ++i) {  // the packed scores (cuda::launch_row_scores)
        const int32_t* w = im.scores.out_slot(s) + i * cuda::kRowScoreWords;
        RowScore& r = kept.scores[i];
        r.log_z = std::bit_cast<float>(w[0]);
        r.token = w[1];
        r.logit = std::bit_cast<float>(w[2]);
        r.top.resize(static_cast<size_t>(w[3]));
        for (size_t j = 0; j < r.top.size(); ++j)
            r.top[j] = {w[cuda::kRowScoreHeader + 2 * j], std::bit_cast<float>(w[cuda::kRowScoreHeader + 2 * j + 1])};
    }
    // A step's result read before the next step is queued: the host's turn between two steps.
    Impl::GraphTiming& t = im.graph_timing;
    if (t.enabled && ticket == last_argmax_ticket() && t.launched != std::chrono::steady_clock::time_point{}) {
        t.synced = std::chrono::steady_clock::now();
        t.launch_to_result_s += std::chrono::duration<double>(t.synced - t.launched).count();
        ++t.n_launch_to_result;
        t.launched = {};
    }
}

void CudaBackend::argmax_rows(const TensorView& x, int32_t* dst, float* logprob, const TokenPicks& picks,
                              float* target_logprob, float* copied, RowScore* scores) {
    const uint64_t ticket = argmax_enqueue(x, logprob != nullptr, picks);
    argmax_result(ticket, dst, logprob, target_logprob);
    if (copied) std::memcpy(copied, copied_rows(ticket), impl_->argmax_slots[ticket % 2].copied * sizeof(float));
    if (scores) std::copy_n(row_scores(ticket), picks.scores.size(), scores);
}

bool CudaBackend::scores_targets() const { return impl_->options.scores_targets; }

bool CudaBackend::scores_rows() const { return impl_->options.scores_rows; }

const RowScore* CudaBackend::row_scores(uint64_t ticket) const {
    const Impl& im = *impl_;
    const size_t s = ticket % 2;
    MVLLM_CHECK(ticket != 0 && im.argmax_slots[s].ticket == ticket) << "greedy result " << ticket << " is no longer kept";
    return im.argmax_slots[s].scores.data();
}

const float* CudaBackend::copied_rows(uint64_t ticket) const {
    const Impl& im = *impl_;
    const size_t s = ticket % 2;
    MVLLM_CHECK(ticket != 0 && im.argmax_slots[s].ticket == ticket) << "greedy result " << ticket << " is no longer kept";
    // Complete once the slot's event is (argmax_result waited for it): the copies precede it.
    return im.copies_host + s * im.copy_capacity;
}

std::pair<uint64_t, uint64_t> CudaBackend::binned_cut_rows() {
    Impl& im = *impl_;
    if (!im.draw_binned) return {0, 0};
    cuda::BinnedCutStats stats{};
    MVLLM_CUDA_OK(cudaStreamSynchronize(im.stream));
    MVLLM_CUDA_OK(cudaMemcpy(&stats, im.draw_binned, sizeof stats, cudaMemcpyDeviceToHost));
    MVLLM_CUDA_OK(cudaMemset(im.draw_binned, 0, sizeof stats));
    return {stats.binned, stats.whole};
}

bool CudaBackend::applies_penalties() const { return impl_->options.penalties_on_device; }

bool CudaBackend::embeds_fed_tokens() const { return impl_->options.fed_tokens_on_device; }

}  // namespace mvllm
