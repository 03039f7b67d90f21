#include "core/progress.h"

#include <unistd.h>

#include <cstdio>

namespace mvllm {

ProgressBar::ProgressBar(std::string label, int64_t total)
    : label_(std::move(label)), total_(total > 0 ? total : 1), enabled_(isatty(STDERR_FILENO) == 1) {
    draw();
}

ProgressBar::~ProgressBar() {
    if (!enabled_) return;
    done_ = total_;
    draw();
    std::fputc('\n', stderr);
}

void ProgressBar::advance(int64_t n) {
    done_ += n;
    draw();
}

void ProgressBar::draw() {
    if (!enabled_) return;
    const int percent = static_cast<int>(100 * (done_ > total_ ? total_ : done_) / total_);
    if (percent == last_percent_) return;
    last_percent_ = percent;
    constexpr int kWidth = 30;
    const int filled = percent * kWidth / 100;
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%%", label_.c_str(), filled, "##############################",
                 kWidth - filled, "", percent);
    std::fflush(stderr);
}

}  // namespace mvllm
