// ThreadPool: every thread index runs once per job; parallel_for covers [0, n) exactly once;
// many back-to-back jobs neither deadlock nor lose work.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "core/thread_pool.h"

namespace mvllm {
namespace {

// Repetitions for a pool of `size` threads. A pool with at least as many threads as the machine
// has cores can pay a scheduler time slice per job (the caller spin-waits for descheduled workers:
// ~10 ms a job with 3-4 threads on a busy 2-core machine), so such pools get a short run that still
// checks correctness.
int reps_for(int size, int full) {
    return size < ThreadPool::hardware_threads() ? full : std::max(20, full / 100);
}

TEST(ThreadPoolTest, RunCallsEveryThreadIndexOnce) {
    for (int size = 1; size <= 4; ++size) {
        ThreadPool pool(size);
        ASSERT_EQ(pool.size(), size);
        for (int rep = 0; rep < reps_for(size, 100); ++rep) {
            std::vector<std::atomic<int>> calls(size);
            std::atomic<int> bad_n{0};
            pool.run([&](int index, int n) {
                if (n != size || index < 0 || index >= n) {
                    bad_n.fetch_add(1);
                    return;
                }
                calls[index].fetch_add(1);
            });
            EXPECT_EQ(bad_n.load(), 0);
            for (int i = 0; i < size; ++i) ASSERT_EQ(calls[i].load(), 1) << "size " << size << " i " << i;
        }
    }
}

TEST(ThreadPoolTest, NonPositiveSizeMeansOneThread) {
    ThreadPool pool(0);
    EXPECT_EQ(pool.size(), 1);
    int calls = 0;
    pool.run([&](int index, int n) { calls += (index == 0 && n == 1); });
    EXPECT_EQ(calls, 1);
}

void expect_exact_cover(ThreadPool& pool, int64_t n) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> bad{0};
    pool.parallel_for(n, [&](int64_t begin, int64_t end) {
        if (begin < 0 || begin >= end || end > n) {
            bad.fetch_add(1);
            return;
        }
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
    });
    ASSERT_EQ(bad.load(), 0) << "n " << n;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " i " << i;
}

TEST(ThreadPoolTest, ParallelForCoversRangeExactlyOnce) {
    for (int size = 1; size <= 4; ++size) {
        ThreadPool pool(size);
        for (int64_t n : {0, 1, 2, 3, 4, 5, 7, 8, 9, 31, 100, 1000, 4097}) expect_exact_cover(pool, n);
    }
}

TEST(ThreadPoolTest, ParallelForNegativeCallsNothing) {
    ThreadPool pool(3);
    int calls = 0;
    pool.parallel_for(-5, [&](int64_t, int64_t) { ++calls; });
    EXPECT_EQ(calls, 0);
}

TEST(ThreadPoolTest, ManyBackToBackJobs) {
    // Small jobs back to back, the pattern of a decode step: must not deadlock or drop work.
    for (int size = 1; size <= 4; ++size) {
        ThreadPool pool(size);
        std::atomic<int64_t> total{0};
        int64_t expected = 0;
        for (int rep = 0; rep < reps_for(size, 10000); ++rep) {
            const int64_t n = rep % 7;  // includes 0 and n < threads
            expected += n * (n - 1) / 2;
            pool.parallel_for(n, [&](int64_t begin, int64_t end) {
                int64_t s = 0;
                for (int64_t i = begin; i < end; ++i) s += i;
                total.fetch_add(s, std::memory_order_relaxed);
            });
        }
        EXPECT_EQ(total.load(), expected) << "size " << size;
    }
}

TEST(ThreadPoolTest, PoolsCanBeCreatedAndDestroyedRepeatedly) {
    for (int rep = 0; rep < 50; ++rep) {
        auto pool = std::make_unique<ThreadPool>(1 + rep % 4);
        std::atomic<int> calls{0};
        pool->run([&](int, int) { calls.fetch_add(1); });
        EXPECT_EQ(calls.load(), pool->size());
    }
}

TEST(ThreadPoolTest, HardwareThreadsIsPositive) { EXPECT_GE(ThreadPool::hardware_threads(), 1); }

}  // namespace
}  // namespace mvllm
