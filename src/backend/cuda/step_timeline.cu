// The step timeline's host side (common.cuh; a build with -DMVLLM_STEP_TIMELINE=ON): every
// translation unit registers a reader of its device ring; the dump merges them by release time.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.cuh"

namespace mvllm::cuda {

#ifdef MVLLM_STEP_TIMELINE
namespace {
std::vector<StepTimelineReader>& readers() {
    static std::vector<StepTimelineReader> r;
    return r;
}
}  // namespace

int register_step_timeline(StepTimelineReader reader) {
    readers().push_back(reader);
    return static_cast<int>(readers().size());
}
#endif

size_t step_timeline_dump(const char* path) {
#ifdef MVLLM_STEP_TIMELINE
    if (cudaDeviceSynchronize() != cudaSuccess) return 0;
    // Rings of different translation units wrap at different times: records older than the
    // newest "oldest record" of a wrapped ring are dropped, so every kept step is complete.
    std::vector<StepTimelineRecord> all;
    uint64_t cutoff = 0;
    for (StepTimelineReader read : readers()) {
        uint64_t oldest = 0;
        read(all, &oldest);
        cutoff = std::max(cutoff, oldest);
    }
    std::erase_if(all, [&](const StepTimelineRecord& r) { return r.release < cutoff; });
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.release < b.release; });
    FILE* f = std::fopen(path, "w");
    if (!f) return 0;
    std::fprintf(f, "file,line,grid,block,sm,enter,release\n");
    for (const StepTimelineRecord& r : all)
        std::fprintf(f, "%u,%u,%u,%u,%u,%llu,%llu\n", r.file, r.line, r.grid, r.block, r.sm,
                     static_cast<unsigned long long>(r.enter), static_cast<unsigned long long>(r.release));
    std::fclose(f);
    return all.size();
#else
    (void)path;
    return 0;
#endif
}

}  // namespace mvllm::cuda
