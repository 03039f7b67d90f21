#include "core/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mvllm {
namespace {
inline void cpu_relax() {
#if defined(__x86_64__)
    _mm_pause();
#endif
}
constexpr int kSpinIterations = 1 << 16;
constexpr int kPauseSpins = 1 << 12;
constexpr uint64_t kClosed = uint64_t{1} << 31;
constexpr uint64_t kJoinOne = uint64_t{1} << 16;
constexpr uint64_t kInsideMask = 0xFFFF;
constexpr uint64_t kJoinedMask = uint64_t{0x7FFF} << 16;
}  // namespace

int ThreadPool::hardware_threads() {
    return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_.store(true);
        generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen = generation_.load(std::memory_order_acquire);
        // Spin with pause first (a decode step's kernels come microseconds apart), then with
        // yield, so an oversubscribed core goes to the thread that has work, then sleep.
        for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
            if (spin < kPauseSpins) cpu_relax();
            else std::this_thread::yield();
            gen = generation_.load(std::memory_order_acquire);
        }
        if (gen == seen) {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return generation_.load() != seen; });
            gen = generation_.load();
        }
        seen = gen;
        if (stop_.load()) return;
        uint64_t s = state_.load(std::memory_order_acquire);
        bool joined = false;
        while ((s >> 32) == (gen & 0xFFFFFFFFu) && !(s & kClosed)) {
            if (state_.compare_exchange_weak(s, s + kJoinOne + 1, std::memory_order_acq_rel)) {
                joined = true;
                break;
            }
        }
        if (!joined) continue;  // a dynamic job that closed before this worker arrived
        (*job_)(index, n_threads_);
        state_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) { run_job(fn, false); }
void ThreadPool::run_dynamic(const std::function<void(int, int)>& fn) { run_job(fn, true); }

void ThreadPool::run_job(const std::function<void(int, int)>& fn, bool dynamic) {
    if (n_threads_ == 1) {
        fn(0, 1);
        return;
    }
    job_ = &fn;
    const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
    state_.store((gen & 0xFFFFFFFFu) << 32, std::memory_order_release);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        generation_.store(gen, std::memory_order_release);
    }
    wake_.notify_all();
    fn(0, n_threads_);
    // Static jobs: wait until every worker has joined and left. Dynamic jobs: close the job (late
    // workers skip it) and wait for those inside. Spin, then yield, so a worker that was
    // descheduled (more threads than free cores) gets the core back.
    const uint64_t all_joined = static_cast<uint64_t>(n_threads_ - 1) * kJoinOne;
    uint64_t s = dynamic ? state_.fetch_or(kClosed, std::memory_order_acq_rel) | kClosed
                         : state_.load(std::memory_order_acquire);
    for (int spin = 0;; ++spin) {
        const bool done = (s & kInsideMask) == 0 && (dynamic || (s & kJoinedMask) == all_joined);
        if (done) break;
        if (spin < 1024) cpu_relax();
        else std::this_thread::yield();
        s = state_.load(std::memory_order_acquire);
    }
    job_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    const int nt = n_threads_;
    const int64_t chunk = (n + nt - 1) / nt;
    std::atomic<int> next{0};
    run_dynamic([&](int, int) {
        for (int i = next.fetch_add(1, std::memory_order_relaxed); i < nt; i = next.fetch_add(1, std::memory_order_relaxed)) {
            const int64_t begin = std::min<int64_t>(n, i * chunk);
            const int64_t end = std::min<int64_t>(n, begin + chunk);
            if (begin < end) fn(begin, end);
        }
    });
}

}  // namespace mvllm
