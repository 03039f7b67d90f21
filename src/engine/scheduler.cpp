#include "engine/scheduler.h"

#include <algorithm>

namespace mvllm {

Scheduler::Scheduler(const SchedulerConfig& config, BlockManager& blocks) : config_(config), blocks_(blocks) {
    MVLLM_CHECK(config.max_batched_tokens > 0 && config.max_seqs > 0);
}

void Scheduler::add(Sequence* seq) { waiting_.push_back(seq); }

void Scheduler::remove(Sequence* seq) {
    auto drop = [seq](std::deque<Sequence*>& q) {
        q.erase(std::remove(q.begin(), q.end(), seq), q.end());
    };
    drop(waiting_);
    drop(running_);
    blocks_.release(&seq->blocks);
}

void Scheduler::register_blocks(Sequence* seq) {
    // Every full block whose tokens are known is indexed (pending until computed), so that an
    // identical prefix arriving now waits for it instead of computing it again.
    blocks_.commit(&seq->blocks, seq->tokens.data(), seq->n_tokens(), seq->n_computed);
}

void Scheduler::preempt(Sequence* seq, SchedulerOutput* out) {
    running_.erase(std::find(running_.begin(), running_.end(), seq));
    blocks_.release(&seq->blocks);
    seq->n_computed = 0;
    seq->n_draft_computed = 0;
    ++seq->stats.n_preemptions;
    waiting_.push_front(seq);
    out->preempted.push_back(seq);
}

Sequence* Scheduler::pick_victim(const Sequence* requester) const {
    for (auto it = running_.rbegin(); it != running_.rend(); ++it)
        if (*it != requester && !(*it)->scheduled) return *it;
    return nullptr;
}

bool Scheduler::schedule_running(Sequence* seq, bool decode_pass, int64_t* budget, SchedulerOutput* out) {
    int64_t n = std::min<int64_t>(seq->n_uncomputed(), *budget);
    if (!decode_pass && config_.max_prefill_chunk > 0) n = std::min<int64_t>(n, config_.max_prefill_chunk);
    // Draft slots only from blocks no running sequence may need for its own next token.
    int64_t n_draft = decode_pass ? std::min<int64_t>(seq->n_lookahead, *budget - n) : 0;
    if (n_draft > 0 && (blocks_.blocks_needed(seq->blocks, seq->n_computed + n + n_draft) +
                            static_cast<int64_t>(running_.size()) > blocks_.n_free() ||
                        !blocks_.allocate(&seq->blocks, seq->n_computed + n + n_draft)))
        n_draft = 0;
    while (!blocks_.allocate(&seq->blocks, seq->n_computed + n)) {
        Sequence* victim = pick_victim(seq);
        if (victim != nullptr) {
            preempt(victim, out);
            continue;
        }
        if (decode_pass) {  // nobody left to make room: recompute this one later
            preempt(seq, out);
            return false;
        }
        // A prefill chunk shrinks to the blocks there are; the decodes of this step free more.
        n = std::min(n, (seq->blocks.size() + blocks_.n_free()) * blocks_.block_size() - seq->n_computed);
        if (n <= 0 || !blocks_.allocate(&seq->blocks, seq->n_computed + n)) return false;
        break;
    }
    push(seq, n, n_draft, budget, out);
    return true;
}

void Scheduler::push(Sequence* seq, int64_t n, int64_t n_draft, int64_t* budget, SchedulerOutput* out) {
    register_blocks(seq);
    seq->scheduled = true;
    ScheduledSequence s;
    s.seq = seq;
    s.n_tokens = static_cast<int32_t>(n);
    s.sample = seq->n_computed + n == seq->n_tokens();
    s.n_draft = static_cast<int32_t>(n_draft);
    out->scheduled.push_back(s);
    out->n_tokens += n + n_draft;
    *budget -= n + n_draft;
}

std::vector<Sequence*> Scheduler::waiting_in_policy_order() const {
    std::vector<Sequence*> order(waiting_.begin(), waiting_.end());
    if (config_.policy == SchedulingPolicy::ShortestPrefillFirst) {
        std::stable_sort(order.begin(), order.end(), [](const Sequence* a, const Sequence* b) {
            return a->n_uncomputed() < b->n_uncomputed();
        });
    }
    return order;  // fcfs and rr: arrival order, preempted sequences first
}

void Scheduler::admit_waiting(int64_t* budget, SchedulerOutput* out) {
    const int32_t block_size = blocks_.block_size();
    for (Sequence* seq : waiting_in_policy_order()) {
        if (*budget <= 0 || static_cast<int64_t>(running_.size()) >= config_.max_seqs) break;
        // The last token is always computed: its logits give the next token. A request that wants
        // its prompt's logprobs computes every position whose logits it still needs.
        const int64_t n_lookup = seq->wants_prompt_rows() ? 0 : seq->n_tokens() - 1;
        const PrefixMatch match = blocks_.match(seq->tokens.data(), n_lookup);
        if (match.pending) {
            blocks_.note_pending_wait();
            continue;
        }
        const int64_t n_cached = match.n_blocks * block_size;
        int64_t n = std::min<int64_t>(seq->n_tokens() - n_cached, *budget);
        if (config_.max_prefill_chunk > 0) n = std::min<int64_t>(n, config_.max_prefill_chunk);
        const int64_t need = (n_cached + n + block_size - 1) / block_size - match.n_blocks + match.n_evictable;
        if (need > blocks_.n_free()) break;  // the pool is full; running sequences free it
        const int64_t reused = blocks_.acquire_prefix(&seq->blocks, seq->tokens.data(), n_lookup);
        MVLLM_CHECK(reused == n_cached) << reused << " != " << n_cached;
        MVLLM_CHECK(blocks_.allocate(&seq->blocks, n_cached + n));
        seq->n_computed = n_cached;
        if (seq->stats.n_preemptions == 0) seq->stats.n_prefix_tokens_reused = n_cached;
        waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq));
        running_.push_back(seq);
        push(seq, n, 0, budget, out);
    }
}

SchedulerOutput Scheduler::schedule() {
    SchedulerOutput out;
    int64_t budget = config_.max_batched_tokens;
    if (config_.policy == SchedulingPolicy::RoundRobin && running_.size() > 1)
        std::rotate(running_.begin(), running_.begin() + 1, running_.end());
    for (Sequence* s : running_) s->scheduled = false;
    for (bool decode_pass : {true, false}) {
        // Indexing by position: preemption removes entries behind (or at) the current one.
        for (size_t i = 0; i < running_.size() && budget > 0;) {
            Sequence* seq = running_[i];
            const bool is_decode = seq->n_uncomputed() == 1 && seq->n_output() > 0;
            if (seq->scheduled || is_decode != decode_pass) {
                ++i;
                continue;
            }
            schedule_running(seq, decode_pass, &budget, &out);
            auto it = std::find(running_.begin(), running_.end(), seq);
            i = it == running_.end() ? i : static_cast<size_t>(it - running_.begin()) + 1;
        }
    }
    if (out.preempted.empty()) admit_waiting(&budget, &out);
    for (auto& s : out.scheduled) s.seq->scheduled = false;
    return out;
}

void Scheduler::commit(const SchedulerOutput& out) {
    for (const ScheduledSequence& s : out.scheduled) {
        s.seq->n_computed += s.n_tokens + s.n_accepted;
        register_blocks(s.seq);
    }
}

}  // namespace mvllm
