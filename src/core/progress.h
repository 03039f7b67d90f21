// A one-line progress bar on stderr, drawn only when stderr is a terminal (never in logs/pipes).
#pragma once

#include <cstdint>
#include <string>

namespace mvllm {

class ProgressBar {
public:
    ProgressBar(std::string label, int64_t total);
    ~ProgressBar();  // finishes the line
    void advance(int64_t n = 1);

private:
    void draw();
    std::string label_;
    int64_t total_, done_ = 0;
    int last_percent_ = -1;
    bool enabled_;
};

}  // namespace mvllm
