// CPU matrix multiplication on weights kept in their stored type.
//
//   out[n_tokens][n_out] f32 = x[n_tokens][n_in] (f32 or f16) . W[n_out][n_in]^T
//
// W may be F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K or Q6_K. For quantised weights the activations
// are quantised once per call, per block (Q8_0 for Q4_0/Q8_0 weights, Q8_K for the K-quants), and
// the dot products run on integers. Kernels: scalar reference, AVX2, AVX-512 (VNNI where present),
// chosen at run time (cpu_isa()). Work is split over the pool's threads by output rows.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace mvllm {

enum class CpuIsa { Scalar, Avx2, Avx512 };
const char* cpu_isa_name(CpuIsa isa);
// The best ISA this CPU supports; MVLLM_CPU_ISA=scalar|avx2|avx512 in the environment caps it.
CpuIsa cpu_isa();
// F16C (half <-> float conversions), read from CPUID: clang 14 has no __builtin_cpu_supports("f16c").
bool cpu_has_f16c();

// Scratch memory reused across calls (the quantised activations).
struct MatmulScratch {
    std::vector<uint8_t> buffer;
};

// out must be F32 with ne = {n_out, n_tokens}; x has ne = {n_in, n_tokens}; w has ne = {n_in, n_out}.
// batch_invariant: every out[t][o] is computed with one reduction order whatever n_tokens is (the
// kernels are chosen so that a token's row never depends on the other rows of the call); the
// default picks the fastest kernel per n_tokens, whose rounding differs between them.
void matmul(ThreadPool& pool, const TensorView& w, const TensorView& x, const TensorView& out,
            MatmulScratch& scratch, CpuIsa isa = cpu_isa(), bool batch_invariant = false);

// The reference: dequantise W rows to f32 and accumulate in double. Used by parity tests.
void matmul_reference(const TensorView& w, const TensorView& x, const TensorView& out);

}  // namespace mvllm
