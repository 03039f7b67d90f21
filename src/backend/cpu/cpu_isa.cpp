// Run-time ISA detection for the CPU kernels.
#include <cstdlib>
#include <cstring>

#include "backend/cpu/matmul.h"

namespace mvllm {
namespace {

CpuIsa detect_isa() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
        return CpuIsa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
        return CpuIsa::Avx2;
#endif
    return CpuIsa::Scalar;
}

// MVLLM_CPU_ISA=scalar|avx2|avx512 caps the detected ISA (it never raises it).
CpuIsa apply_env_cap(CpuIsa detected) {
    const char* env = std::getenv("MVLLM_CPU_ISA");
    if (env == nullptr || *env == '\0') return detected;
    CpuIsa cap = detected;
    if (std::strcmp(env, "scalar") == 0) cap = CpuIsa::Scalar;
    else if (std::strcmp(env, "avx2") == 0) cap = CpuIsa::Avx2;
    else if (std::strcmp(env, "avx512") == 0) cap = CpuIsa::Avx512;
    return static_cast<int>(cap) < static_cast<int>(detected) ? cap : detected;
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
    switch (isa) {
        case CpuIsa::Scalar: return "scalar";
        case CpuIsa::Avx2: return "avx2";
        case CpuIsa::Avx512: return "avx512";
    }
    return "?";
}

CpuIsa cpu_isa() {
    static const CpuIsa isa = apply_env_cap(detect_isa());
    return isa;
}

}  // namespace mvllm
