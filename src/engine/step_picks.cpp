#include "engine/step_picks.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "engine/sampler.h"
#include "engine/sequence.h"

namespace mvllm {

PromptRows prompt_rows(const ScheduledSequence& s) {
    const Sequence& q = *s.seq;
    if (!q.wants_prompt_rows()) return {};
    const int64_t first = std::max<int64_t>(q.n_computed, static_cast<int64_t>(q.prompt_logprobs.size()));
    const int64_t last = std::min<int64_t>(q.n_computed + s.n_tokens, q.n_prompt - 1);
    return {first, std::max<int64_t>(0, last - first)};
}

HostScored host_scored(const SchedulerOutput& plan, const Backend& backend) {
    HostScored h;
    h.drawn = std::any_of(plan.scheduled.begin(), plan.scheduled.end(),
                          [](const ScheduledSequence& s) { return s.sample && !is_greedy(s.seq->params); });
    h.targets = !h.drawn && backend.scores_targets();
    return h;
}

bool backend_picks_tokens(const SchedulerOutput& plan, const Backend& backend, int64_t n_vocab,
                          int64_t max_copied_bytes) {
    const HostScored h = host_scored(plan, backend);
    int64_t copied = 0;  // rows copied back (none where the backend scores them itself)
    for (const ScheduledSequence& s : plan.scheduled) {
        const SamplingParams& p = s.seq->params;
        if (h.prompt_row(p)) copied += prompt_rows(s).n;
        if (!s.sample) continue;
        if ((has_penalties(p) && !backend.applies_penalties()) || !s.seq->draft.tokens.empty()) return false;
        copied += h.sampled_row(p);
    }
    return backend.scores_rows() || copied * n_vocab * static_cast<int64_t>(sizeof(float)) <= max_copied_bytes;
}

// picks->penalties: each penalised row's entries from its sequence's counts, brought up to date, in
// row order. A served row lists every distinct token of its context (~1,000 entries at B4(b)'s
// lengths), kept by PenaltyCounts::penalties() from step to step (a decode step changes one), so
// a step of 256 rows mostly copies: on the caller's threads, each sequence's list into its place
// with its row.
static void list_penalties(const std::vector<std::pair<Sequence*, int32_t>>& rows, int64_t n_vocab,
                           const RowRunner& run_rows, std::vector<TokenPenalty>* out) {
    const int64_t n = static_cast<int64_t>(rows.size());
    std::vector<const std::vector<TokenPenalty>*> lists(rows.size());
    run_rows(n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            Sequence* seq = rows[static_cast<size_t>(i)].first;
            seq->penalty_counts.update(seq->tokens, seq->n_prompt);
            lists[static_cast<size_t>(i)] = &seq->penalty_counts.penalties(seq->params, n_vocab);
        }
    });
    std::vector<size_t> at(rows.size() + 1, 0);
    for (size_t i = 0; i < rows.size(); ++i) at[i + 1] = at[i] + lists[i]->size();
    // Resized from the last step's list, not from empty: only the entries past its size are
    // value-initialised (from empty, the whole ~6 MB of a B4(b) step was zeroed on one thread).
    out->resize(at.back());
    run_rows(n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const int32_t row = rows[static_cast<size_t>(i)].second;
            TokenPenalty* dst = out->data() + at[static_cast<size_t>(i)];
            for (const TokenPenalty& e : *lists[static_cast<size_t>(i)]) {
                *dst = e;
                (dst++)->row = row;
            }
        }
    });
}

bool build_picks(const SchedulerOutput& plan, const Backend& backend, int64_t n_vocab, size_t n_logit_rows,
                 const RowRunner& run_rows, TokenPicks* picks) {
    picks->draws.clear();
    picks->targets.clear();
    picks->copies.clear();
    picks->scores.clear();
    const HostScored h = host_scored(plan, backend);
    // A row scored away from the backend's picks: its score asked of the backend, or its copy.
    const bool by_backend = backend.scores_rows();
    const auto score = [&](int32_t row, int32_t token, int32_t n_top) {
        if (by_backend) picks->scores.push_back({row, token, n_top});
        else picks->copies.push_back(row);
    };
    bool device_logprobs = false;
    std::vector<std::pair<Sequence*, int32_t>> penalised;  // (sequence, row)
    int32_t row = 0;
    for (const ScheduledSequence& s : plan.scheduled) {
        Sequence* seq = s.seq;
        const PromptRows pr = prompt_rows(s);
        for (int64_t j = 0; j < pr.n; ++j, ++row) {
            picks->draws.push_back(TokenDraw{});
            if (h.prompt_row(seq->params)) {
                score(row, seq->tokens[pr.first + j + 1], seq->params.prompt_logprobs);
            } else {
                picks->targets.resize(static_cast<size_t>(row), -1);
                picks->targets.push_back(seq->tokens[pr.first + j + 1]);
                device_logprobs = true;
            }
        }
        if (!s.sample) continue;
        const SamplingParams& p = seq->params;
        if (has_penalties(p)) penalised.push_back({seq, row});
        picks->draws.push_back(is_greedy(p) ? TokenDraw{} : token_draw(p, seq->rng()));
        if (h.sampled_row(p)) score(row, -1, p.logprobs);
        else if (p.logprobs == 0) device_logprobs = true;
        ++row;
    }
    if (h.drawn) picks->draws.resize(n_logit_rows);
    else picks->draws.clear();
    if (!picks->targets.empty()) picks->targets.resize(n_logit_rows, -1);
    list_penalties(penalised, n_vocab, run_rows, &picks->penalties);
    return device_logprobs;
}

}  // namespace mvllm
