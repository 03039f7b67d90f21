#include "engine/speculative.h"

#include <algorithm>
#include <chrono>

#include "engine/sequence.h"
#include "engine/verify.h"

namespace mvllm {

Status check_draft_vocabulary(const Model& target, const Model& draft) {
    const int64_t nt = target.config.n_vocab, nd = draft.config.n_vocab;
    if (nt != nd)
        return make_error("the draft model ", draft.path, " has a vocabulary of ", nd, " tokens, the target ",
                          target.path, " one of ", nt, ": speculative decoding needs the same vocabulary");
    if (!target.tokenizer || !draft.tokenizer) return Status::ok();  // ids only: sizes agree
    const Tokenizer& a = *target.tokenizer;
    const Tokenizer& b = *draft.tokenizer;
    if (a.n_vocab() != b.n_vocab())
        return make_error("the draft's tokenizer has ", b.n_vocab(), " tokens, the target's ", a.n_vocab());
    for (int32_t id = 0; id < a.n_vocab(); ++id)
        if (a.token_text(id) != b.token_text(id))
            return make_error("the draft model ", draft.path, " has another vocabulary than the target: token ", id,
                              " is \"", b.token_text(id), "\" there and \"", a.token_text(id), "\" in the target");
    return Status::ok();
}

Result<std::unique_ptr<Speculator>> Speculator::create(const SpeculativeOptions& o, const Decoder& target,
                                                       const KvCacheConfig& target_cache) {
    MVLLM_CHECK(o.draft != nullptr);
    if (o.draft_tokens < 1 || o.draft_tokens > 64) return make_error("--draft-tokens must be in [1, 64], got ", o.draft_tokens);
    if (o.min_draft_tokens < 1 || o.min_draft_tokens > o.draft_tokens)
        return make_error("--draft-tokens-min must be in [1, --draft-tokens], got ", o.min_draft_tokens);
    if (o.draft->config().n_vocab != target.config().n_vocab)
        return make_error("the draft model's vocabulary (", o.draft->config().n_vocab, " tokens) differs from the target's (",
                          target.config().n_vocab, ")");
    const KvCacheConfig geometry = o.draft->kv_config(target_cache.n_blocks, target_cache.block_size, target_cache.dtype);
    MVLLM_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, o.draft->backend().create_kv_cache(geometry));
    return std::unique_ptr<Speculator>(new Speculator(o, std::move(cache)));
}

std::string Speculator::report() const {
    const ModelConfig& c = options_.draft->config();
    return "speculative decoding: draft " + c.summary() + ", " + std::to_string(options_.draft_tokens) +
           " draft tokens, policy " + draft_policy_name(options_.policy) + (options_.fallback ? ", fallback on" : "") +
           "; draft KV cache " + std::to_string(cache_->total_bytes() >> 20) + " MiB";
}

void Speculator::plan(const std::deque<Sequence*>& running) const {
    for (Sequence* seq : running) {
        // A draft never runs past max_tokens: k drafts + the target's token must fit.
        const int64_t room = seq->max_tokens - seq->n_output() - 1;
        seq->n_lookahead = static_cast<int32_t>(std::clamp<int64_t>(room, 0, seq->draft_control.next_draft_tokens()));
    }
}

Status Speculator::propose(const SchedulerOutput& plan) {
    const auto t0 = std::chrono::steady_clock::now();
    Decoder& draft = *options_.draft;
    const int64_t n_vocab = draft.config().n_vocab;
    std::vector<const ScheduledSequence*> drafting;
    for (const ScheduledSequence& s : plan.scheduled) {
        s.seq->draft.clear();
        if (s.n_draft > 0) drafting.push_back(&s);
    }
    max_catch_up_ = 0;
    std::vector<int32_t> context;
    for (int32_t step = 0; !drafting.empty(); ++step) {
        Batch batch;
        batch.block_size = cache_->config().block_size;
        std::vector<Sequence*> rows;
        for (const ScheduledSequence* s : drafting) {
            Sequence* seq = s->seq;
            if (step >= s->n_draft) continue;
            if (step == 0) {  // everything the draft has not seen, up to the last token
                seq->n_draft_computed = std::min(seq->n_draft_computed, seq->n_computed);
                const auto begin = seq->tokens.begin() + seq->n_draft_computed;
                batch.add_sequence(std::vector<int32_t>(begin, seq->tokens.end()), static_cast<int32_t>(seq->n_draft_computed),
                                   seq->blocks.blocks, true);
                max_catch_up_ = std::max<int64_t>(max_catch_up_, seq->tokens.end() - begin);
            } else {
                batch.add_sequence({seq->draft.tokens.back()}, static_cast<int32_t>(seq->n_tokens() + step - 1),
                                   seq->blocks.blocks, true);
            }
            rows.push_back(seq);
        }
        if (rows.empty()) break;
        MVLLM_TRY(draft.forward(batch, *cache_, &logits_));
        for (size_t r = 0; r < rows.size(); ++r) {
            Sequence* seq = rows[r];
            context.assign(seq->tokens.begin(), seq->tokens.end());
            context.insert(context.end(), seq->draft.tokens.begin(), seq->draft.tokens.end());
            TokenDistribution q;
            const int32_t token = propose_token(logits_.data() + r * n_vocab, n_vocab, seq->params, context,
                                                seq->n_prompt, seq->rng, &q);
            seq->draft.tokens.push_back(token);
            if (!is_greedy(seq->params)) seq->draft.q.push_back(std::move(q));
        }
    }
    // The draft has now written KV up to its last proposal's input (token n_tokens - 2 + k).
    for (const ScheduledSequence* s : drafting) s->seq->n_draft_computed = s->seq->n_tokens() - 1 + s->n_draft;
    last_propose_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return Status::ok();
}

void Speculator::observe(const SchedulerOutput& plan, double step_seconds) {
    // A step measures decoding only when it ran nothing else: no prefill chunk, no long catch-up.
    bool clean = max_catch_up_ <= 2;
    for (const ScheduledSequence& s : plan.scheduled) clean = clean && s.sample && s.n_tokens == 1;
    for (const ScheduledSequence& s : plan.scheduled) {
        Sequence* seq = s.seq;
        if (!s.sample || seq->n_output() <= static_cast<int64_t>(seq->verified.tokens.size())) continue;  // not a decode
        const int32_t drafted = static_cast<int32_t>(seq->draft.tokens.size());
        const int32_t accepted = seq->verified.n_accepted;
        RequestStats& st = seq->stats;
        if (drafted > 0) {
            st.n_draft_tokens += drafted;
            st.n_draft_accepted += accepted;
            ++st.n_spec_steps;
            if (st.accepted_lengths.size() < static_cast<size_t>(options_.draft_tokens) + 1)
                st.accepted_lengths.resize(static_cast<size_t>(options_.draft_tokens) + 1, 0);
            ++st.accepted_lengths[accepted];
            // Valid draft KV: the accepted drafts it was fed (all but the last proposal).
            seq->n_draft_computed = std::min(seq->n_draft_computed, seq->n_computed);
        } else if (seq->draft_control.falling_back()) {
            ++st.n_fallback_steps;
        }
        seq->draft_control.observe(drafted, accepted, clean ? step_seconds : -1.0);
    }
}

}  // namespace mvllm
