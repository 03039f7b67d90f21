// Run-time ISA detection for the CPU kernels.
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

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
        cpu_has_f16c())
        return CpuIsa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c())
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

bool cpu_has_f16c() {
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
#else
    return false;
#endif
}

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
