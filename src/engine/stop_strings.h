// Stop strings over streamed text. Text is released as it arrives except for a held-back tail
// that could still grow into a stop string; when a stop string completes, the text before it is
// released and the rest (the stop string included) is dropped.
#pragma once

#include <string>
#include <vector>

namespace mvllm {

class StopStringMatcher {
public:
    StopStringMatcher() = default;
    explicit StopStringMatcher(std::vector<std::string> stops);
    bool empty() const { return stops_.empty(); }
    // Appends text; returns what can be streamed now. *stopped becomes true when a stop string
    // completed (then nothing more should be pushed).
    std::string push(const std::string& text, bool* stopped);
    // The held-back tail, at the end of a request that did not stop on a string.
    std::string flush();

private:
    std::vector<std::string> stops_;
    std::string held_;
};

}  // namespace mvllm
