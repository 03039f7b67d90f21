// Scheduler without a model: a fake step appends a token that depends only on the sequence's
// tokens, so any schedule must give the same outputs. Invariants checked after every step.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <set>

namespace mvllm {
namespace {

struct Sim {
    BlockManager blocks;
    Scheduler scheduler;
    std::vector<std::unique_ptr<Sequence>> seqs;
    std::vector<Sequence*> finished;

    Sim(int64_t n_blocks, int32_t block_size, SchedulerConfig config, bool prefix_cache = true)
        : blocks(n_blocks, block_size, prefix_cache), scheduler(config, blocks) {}

    Sequence* add(std::vector<int32_t> prompt, int64_t max_tokens) {
        auto s = std::make_unique<Sequence>();
        s->id = seqs.size() + 1;
        s->arrival = s->id;
        s->tokens = std::move(prompt);
        s->n_prompt = s->n_tokens();
        s->max_tokens = max_tokens;
        scheduler.add(s.get());
        seqs.push_back(std::move(s));
        return seqs.back().get();
    }
    static int32_t next_token(const Sequence& s) {
        int64_t h = 0;
        for (int32_t t : s.tokens) h = (h * 31 + t) % 1009;
        return static_cast<int32_t>(h % 50);
    }
    std::string consistency() const {
        std::vector<const BlockTable*> tables;
        for (const auto& s : seqs) tables.push_back(&s->blocks);
        return blocks.check_consistency(tables);
    }
    // One step; returns the plan.
    SchedulerOutput step() {
        SchedulerOutput out = scheduler.schedule();
        EXPECT_LE(out.n_tokens, scheduler.config().max_batched_tokens);
        EXPECT_LE(static_cast<int64_t>(scheduler.running().size()), scheduler.config().max_seqs);
        std::set<Sequence*> unique;
        int64_t sum = 0;
        for (const auto& s : out.scheduled) {
            EXPECT_TRUE(unique.insert(s.seq).second) << "scheduled twice";
            EXPECT_GT(s.n_tokens, 0);
            EXPECT_GE(s.seq->blocks.size() * blocks.block_size(), s.seq->n_computed + s.n_tokens);
            sum += s.n_tokens;
        }
        EXPECT_EQ(sum, out.n_tokens);
        scheduler.commit(out);
        for (const auto& s : out.scheduled) {
            if (!s.sample) continue;
            s.seq->tokens.push_back(next_token(*s.seq));
            if (s.seq->n_output() >= s.seq->max_tokens) {
                scheduler.remove(s.seq);
                finished.push_back(s.seq);
            }
        }
        EXPECT_EQ(consistency(), "");
        return out;
    }
    int run(int max_steps = 100000) {
        int n = 0;
        while (!scheduler.idle() && n < max_steps) {
            step();
            ++n;
        }
        return n;
    }
};

SchedulerConfig config(int budget, int max_seqs, int cap, SchedulingPolicy policy = SchedulingPolicy::Fcfs) {
    SchedulerConfig c;
    c.max_batched_tokens = budget;
    c.max_seqs = max_seqs;
    c.max_prefill_chunk = cap;
    c.policy = policy;
    return c;
}

std::vector<int32_t> prompt_of(int n, int salt) {
    std::vector<int32_t> p(n);
    for (int i = 0; i < n; ++i) p[i] = (i * 7 + salt * 13) % 97 + 100;
    return p;
}

TEST(Scheduler, DecodesFirstThenPrefillChunksWithinTheBudget) {
    Sim sim(64, 4, config(10, 8, 6));
    Sequence* a = sim.add(prompt_of(5, 1), 4);
    sim.step();  // a: 5 prompt tokens (cap 6) -> samples
    EXPECT_EQ(a->n_output(), 1);
    Sequence* b = sim.add(prompt_of(20, 2), 4);
    const SchedulerOutput out = sim.step();
    ASSERT_EQ(out.scheduled.size(), 2u);
    EXPECT_EQ(out.scheduled[0].seq, a);  // decode first
    EXPECT_EQ(out.scheduled[0].n_tokens, 1);
    EXPECT_EQ(out.scheduled[1].seq, b);
    EXPECT_EQ(out.scheduled[1].n_tokens, 6);  // the per-request cap, not the 9 left in the budget
    EXPECT_EQ(sim.step().scheduled[1].n_tokens, 6);
}

TEST(Scheduler, PrefillCapLetsAShortRequestIn) {
    Sim sim(256, 4, config(16, 8, 8));
    Sequence* longer = sim.add(prompt_of(100, 1), 2);
    Sequence* shorter = sim.add(prompt_of(3, 2), 2);
    const SchedulerOutput out = sim.step();
    ASSERT_EQ(out.scheduled.size(), 2u);
    EXPECT_EQ(out.scheduled[0].seq, longer);
    EXPECT_EQ(out.scheduled[0].n_tokens, 8);
    EXPECT_EQ(out.scheduled[1].seq, shorter);
    EXPECT_EQ(shorter->n_output(), 1);  // its first token after one step
}

TEST(Scheduler, PoliciesOrderTheWaitingQueue) {
    for (auto policy : {SchedulingPolicy::Fcfs, SchedulingPolicy::ShortestPrefillFirst}) {
        Sim sim(256, 4, config(40, 8, 0, policy));
        Sequence* longer = sim.add(prompt_of(36, 1), 2);
        Sequence* shorter = sim.add(prompt_of(6, 2), 2);
        const SchedulerOutput out = sim.step();
        ASSERT_EQ(out.scheduled.size(), 2u);
        EXPECT_EQ(out.scheduled[0].seq, policy == SchedulingPolicy::Fcfs ? longer : shorter);
        // fcfs: the short one gets what is left (4 tokens) and no token yet; spf: it is done.
        EXPECT_EQ(shorter->n_output(), policy == SchedulingPolicy::Fcfs ? 0 : 1);
        EXPECT_EQ(longer->n_computed, policy == SchedulingPolicy::Fcfs ? 36 : 34);
    }
}

TEST(Scheduler, RoundRobinRotatesTheLeadWhenTheBudgetIsShort) {
    Sim sim(256, 4, config(4, 8, 0, SchedulingPolicy::RoundRobin));
    std::vector<Sequence*> s;
    for (int i = 0; i < 4; ++i) s.push_back(sim.add({1 + i}, 50));
    sim.step();  // all four admitted, each sampled once
    sim.scheduler.mutable_config().max_batched_tokens = 2;
    std::map<Sequence*, int> served;
    for (int i = 0; i < 8; ++i)
        for (const auto& x : sim.step().scheduled) ++served[x.seq];
    for (Sequence* q : s) EXPECT_EQ(served[q], 4) << "fair share of 16 decode slots";
}

TEST(Scheduler, IdenticalPrefixesAreComputedOnce) {
    Sim sim(256, 4, config(64, 8, 8));
    Sequence* first = sim.add(prompt_of(24, 1), 2);
    Sequence* twin = sim.add(prompt_of(24, 1), 2);
    SchedulerOutput out = sim.step();
    ASSERT_EQ(out.scheduled.size(), 1u);  // the twin waits for the first one's pending blocks
    EXPECT_EQ(out.scheduled[0].seq, first);
    sim.run();
    EXPECT_EQ(twin->stats.n_prefix_tokens_reused, 20);  // 5 of its 6 blocks (the last token is run)
    EXPECT_GE(sim.blocks.stats().n_pending_waits, 1);
    EXPECT_EQ(first->tokens, twin->tokens);
}

TEST(Scheduler, PreemptsUnderATinyPoolAndEveryoneFinishes) {
    Sim sim(6, 4, config(32, 8, 8));  // 24 token slots, 8 requests of up to 20 tokens
    for (int i = 0; i < 8; ++i) sim.add(prompt_of(4 + i, i), 8);
    // Reference: each alone.
    std::vector<std::vector<int32_t>> alone;
    for (int i = 0; i < 8; ++i) {
        Sim one(64, 4, config(32, 8, 8));
        one.add(prompt_of(4 + i, i), 8);
        one.run();
        alone.push_back(one.seqs[0]->tokens);
    }
    sim.run(10000);
    ASSERT_EQ(sim.finished.size(), 8u);
    int64_t preemptions = 0;
    for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(sim.seqs[i]->tokens, alone[i]) << i;
        preemptions += sim.seqs[i]->stats.n_preemptions;
    }
    EXPECT_GT(preemptions, 0);
    EXPECT_EQ(sim.blocks.n_free(), 6);
}

TEST(Scheduler, RandomisedSchedulesFinishWithoutLeaks) {
    for (int seed = 0; seed < 200; ++seed) {
        std::mt19937 rng(seed);
        const int block_size = 1 + rng() % 4;
        const int n_blocks = 8 + rng() % 24;
        const auto policy = static_cast<SchedulingPolicy>(rng() % 3);
        Sim sim(n_blocks, block_size, config(1 + rng() % 24, 1 + rng() % 6, rng() % 8, policy), rng() % 2);
        const int n_req = 1 + rng() % 12;
        std::vector<int> removed;
        for (int i = 0; i < n_req; ++i) {
            const int capacity = n_blocks * block_size;
            const int n_prompt = 1 + rng() % std::min(capacity - 1, 20);
            const int n_out = 1 + rng() % std::min(capacity - n_prompt + 1, 12);
            auto p = prompt_of(n_prompt, rng() % 3);  // shared prefixes are common
            sim.add(p, n_out);
        }
        int steps = 0;
        while (!sim.scheduler.idle() && steps < 5000) {
            if (rng() % 17 == 0) {  // cancel a random live request
                auto& s = sim.seqs[rng() % sim.seqs.size()];
                if (std::find(sim.finished.begin(), sim.finished.end(), s.get()) == sim.finished.end()) {
                    sim.scheduler.remove(s.get());
                    sim.finished.push_back(s.get());
                }
            }
            sim.step();
            ++steps;
        }
        ASSERT_TRUE(sim.scheduler.idle()) << "seed " << seed << " stuck after " << steps << " steps";
        ASSERT_EQ(sim.blocks.n_free(), n_blocks) << "seed " << seed;
    }
}

}  // namespace
}  // namespace mvllm
