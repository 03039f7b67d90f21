#include "engine/stop_strings.h"

#include <algorithm>

namespace mvllm {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) {
    for (auto& s : stops)
        if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopStringMatcher::push(const std::string& text, bool* stopped) {
    *stopped = false;
    if (stops_.empty()) return text;
    held_ += text;
    size_t first = std::string::npos;
    for (const std::string& s : stops_) first = std::min(first, held_.find(s));
    if (first != std::string::npos) {
        *stopped = true;
        std::string out = held_.substr(0, first);
        held_.clear();
        return out;
    }
    // Hold back the longest tail of held_ that is a proper prefix of some stop string.
    size_t keep = 0;
    for (const std::string& s : stops_) {
        for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n)
            if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
                keep = n;
                break;
            }
    }
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string StopStringMatcher::flush() {
    std::string out;
    out.swap(held_);
    return out;
}

}  // namespace mvllm
