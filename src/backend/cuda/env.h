// The CUDA backend's switches from the environment (A/B measurements and profiling aids; each
// caller reads its own once). Plain host header.
#pragma once

#include <cstdlib>
#include <cstring>

namespace mvllm::cuda {

// A switch that is on by default: false only when the variable is "0".
inline bool env_on(const char* name) {
    const char* e = std::getenv(name);
    return !(e && std::strcmp(e, "0") == 0);
}

// The variable as an integer, or `fallback` when it is unset.
inline int env_int(const char* name, int fallback) {
    const char* e = std::getenv(name);
    return e ? std::atoi(e) : fallback;
}

}  // namespace mvllm::cuda
