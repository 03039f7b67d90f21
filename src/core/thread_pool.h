// A persistent pool of worker threads. run(fn) calls fn(thread_index, n_threads) once on every
// thread (the caller is thread 0) and returns when all have finished. Workers spin briefly between
// jobs (pause, then yield), then sleep, so back-to-back kernels of a decode step do not pay a
// wake-up each.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mvllm {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }
    void run(const std::function<void(int thread_index, int n_threads)>& fn);

    // Like run(), but fn runs on the caller and only on the workers that arrive before the caller's
    // fn returns; fn must share its work out itself (an atomic counter) and must not rely on every
    // thread index being called. A descheduled worker then costs nothing instead of a time slice
    // (more threads than free cores). thread_index is still unique per call, < n_threads.
    void run_dynamic(const std::function<void(int thread_index, int n_threads)>& fn);

    // Splits [0, n) into contiguous ranges, one per thread: fn(begin, end). The ranges are claimed
    // through a counter (run_dynamic), so any thread may run any range, each exactly once.
    void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

    // Number of hardware threads, at least 1.
    static int hardware_threads();

private:
    void worker(int index);
    void run_job(const std::function<void(int, int)>& fn, bool dynamic);

    int n_threads_;
    std::vector<std::thread> threads_;
    const std::function<void(int, int)>* job_ = nullptr;
    std::atomic<uint64_t> generation_{0};
    // The current job: (generation << 32) | kClosed | joined workers << 16 | workers inside fn.
    // A worker joins by CAS while the generation matches and the job is open.
    std::atomic<uint64_t> state_{0};
    std::atomic<bool> stop_{false};
    std::mutex mutex_;
    std::condition_variable wake_;
};

}  // namespace mvllm
