// Continuous-batching scheduler (host-only). Each schedule() picks the work of one engine step
// within a token budget and a sequence limit:
//   1. decodes of running sequences (one token each), in running order;
//   2. the next prefill chunk of running sequences still prefilling (capped per request);
//   3. new (or preempted) sequences from the waiting queue, in policy order, taking their cached
//      prefix first; a sequence whose next prefix block is being computed by another one waits.
// When a running sequence needs a block and none is free, the lowest-priority running sequence
// not yet scheduled this step is preempted: its blocks are freed and it goes back to the front of
// the waiting queue to be recomputed later (prompt + output so far). Nothing is ever aborted.
// A decode of a sequence with n_lookahead > 0 also reserves slots for that many draft tokens when
// the budget and free blocks allow (speculation never preempts anyone).
#pragma once

#include <deque>
#include <vector>

#include "engine/sequence.h"
#include "kv/block_manager.h"

namespace mvllm {

struct SchedulerConfig {
    int32_t max_batched_tokens = 2048;
    int32_t max_seqs = 256;
    int32_t max_prefill_chunk = 512;  // 0: no per-request cap
    SchedulingPolicy policy = SchedulingPolicy::Fcfs;
};

struct ScheduledSequence {
    Sequence* seq = nullptr;
    int32_t n_tokens = 0;  // tokens of seq->tokens from seq->n_computed to run this step
    bool sample = false;   // they reach the last token: its logits give the next token
    int32_t n_draft = 0;   // decode of a speculating sequence: draft tokens verified after it
                           // (slots reserved; the budget counts them)
    int32_t n_accepted = 0;  // set after verification: drafts whose KV is kept
};

struct SchedulerOutput {
    std::vector<ScheduledSequence> scheduled;  // decodes first, then prefill chunks
    std::vector<Sequence*> preempted;          // moved back to waiting during this schedule()
    int64_t n_tokens = 0;
    bool empty() const { return scheduled.empty(); }
};

class Scheduler {
public:
    Scheduler(const SchedulerConfig& config, BlockManager& blocks);

    void add(Sequence* seq);     // to the back of the waiting queue
    void remove(Sequence* seq);  // finished or aborted: frees its blocks now
    SchedulerOutput schedule();
    // After the step ran: counts the scheduled tokens (and accepted drafts) as computed and
    // publishes full blocks.
    void commit(const SchedulerOutput& out);

    bool idle() const { return waiting_.empty() && running_.empty(); }
    const std::deque<Sequence*>& waiting() const { return waiting_; }
    const std::deque<Sequence*>& running() const { return running_; }
    const SchedulerConfig& config() const { return config_; }
    SchedulerConfig& mutable_config() { return config_; }  // limits may change between steps

private:
    bool schedule_running(Sequence* seq, bool decode_pass, int64_t* budget, SchedulerOutput* out);
    void admit_waiting(int64_t* budget, SchedulerOutput* out);
    std::vector<Sequence*> waiting_in_policy_order() const;
    Sequence* pick_victim(const Sequence* requester) const;
    void preempt(Sequence* seq, SchedulerOutput* out);
    void register_blocks(Sequence* seq);
    void push(Sequence* seq, int64_t n, int64_t n_draft, int64_t* budget, SchedulerOutput* out);

    SchedulerConfig config_;
    BlockManager& blocks_;
    std::deque<Sequence*> waiting_;
    std::deque<Sequence*> running_;
};

}  // namespace mvllm
