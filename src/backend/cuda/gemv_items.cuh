// The quantised GEMV's building blocks (device code, shared by gemv.cu and gemv_stream.cu): dp4a
// with explicit signedness, the QX activation block, and per weight type the "item", one lane's
// unit of work: its weight registers (loaded from global memory, or from shared memory where a
// kernel staged the rows by bulk copies), the QX values it needs, and their scaled dot product.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/dequant.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/mma_ptx.cuh"

namespace mvllm::cuda {

// dp4a with the signedness of each operand spelled out (a: 4 bytes, b: 4 bytes, c: accumulator).
__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ int dp4a_uu(uint32_t a, uint32_t b, int c) {
    int d;
    asm("dp4a.u32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ int dp4a_ss(uint32_t a, uint32_t b, int c) {
    int d;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// Weights are read once: streamed past L1 with an evict-first hint for L2.
__device__ __forceinline__ uint4 load_weight16(const uint8_t* p) { return __ldcs(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ uint4 load_x16(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ uint32_t word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// Shared-memory loads for the items of rows staged by bulk copies (gemv_stream.cu). Volatile, so
// they stay after the mbarrier wait that says the bytes have landed.
__device__ __forceinline__ uint4 lds16(uint32_t a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}
__device__ __forceinline__ float lds_half(uint32_t a) {
    unsigned short h;
    asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(h) : "r"(a));
    return __half2float(__ushort_as_half(h));
}

// One 32-value QX block of one token: hi and lo bytes (2 x 16 B each) and the meta record.
struct XBlock {
    uint4 h0, h1, l0, l1;
    int4 meta;
};
__device__ __forceinline__ XBlock load_x_block(const QxView& x, int t, int64_t chunk) {
    const int64_t off = t * x.n_in + chunk * 32;
    XBlock b;
    b.h0 = load_x16(x.hi + off);
    b.h1 = load_x16(x.hi + off + 16);
    b.l0 = load_x16(x.lo + off);
    b.l1 = load_x16(x.lo + off + 16);
    b.meta = __ldg(x.meta + t * (x.n_in / 32) + chunk);
    return b;
}

// sum_k q[k] * X[k] over 16 unsigned weight bytes q (4 words) and 16 values of X (hi, lo words).
__device__ __forceinline__ int dot16_u(const uint32_t (&q)[4], const uint4& h, const uint4& l) {
    int a = 0, b = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        a = dp4a_us(q[j], word(h, j), a);
        b = dp4a_uu(q[j], word(l, j), b);
    }
    return a * 256 + b;
}

// The work unit of one lane for each weight type ("item"): its weight registers, the QX values it
// needs, and their dot product (f32, scaled).
template <DType T> struct Item;

// Q4_0: one block (32 values): 16 B of nibbles (value k low, k + 16 high) and d.
template <>
struct Item<DType::Q4_0> {
    static constexpr int kValues = 32, kParts = 1;
    using X = XBlock;
    uint4 q;
    float d;
    __device__ __forceinline__ void load(const QuantMatrix& m, int64_t row, int64_t it) {
        const int64_t i = row * m.blocks_per_row + it;
        q = load_weight16(m.body + i * 16);
        d = load_half_bits(m.scales + 2 * i);
    }
    // body / scales: shared addresses of the row's first block body and scale.
    __device__ __forceinline__ void load_shared(uint32_t body, uint32_t scales, int it) {
        q = lds16(body + it * 16);
        d = lds_half(scales + it * 2);
    }
    static __device__ __forceinline__ X load_x(const QxView& x, int t, int64_t it, int) { return load_x_block(x, t, it); }
    __device__ __forceinline__ float dot(const X& x, int) const {
        const uint32_t lo[4] = {q.x & 0x0F0F0F0Fu, q.y & 0x0F0F0F0Fu, q.z & 0x0F0F0F0Fu, q.w & 0x0F0F0F0Fu};
        const uint32_t hi[4] = {(q.x >> 4) & 0x0F0F0F0Fu, (q.y >> 4) & 0x0F0F0F0Fu, (q.z >> 4) & 0x0F0F0F0Fu,
                                (q.w >> 4) & 0x0F0F0F0Fu};
        const int s = dot16_u(lo, x.h0, x.l0) + dot16_u(hi, x.h1, x.l1) - 8 * (x.meta.y + x.meta.z);
        return d * __int_as_float(x.meta.x) * static_cast<float>(s);
    }
};

// Q8_0: one block (32 values): 32 signed bytes and d.
template <>
struct Item<DType::Q8_0> {
    static constexpr int kValues = 32, kParts = 1;
    using X = XBlock;
    uint4 q0, q1;
    float d;
    __device__ __forceinline__ void load(const QuantMatrix& m, int64_t row, int64_t it) {
        const int64_t i = row * m.blocks_per_row + it;
        q0 = load_weight16(m.body + i * 32);
        q1 = load_weight16(m.body + i * 32 + 16);
        d = load_half_bits(m.scales + 2 * i);
    }
    __device__ __forceinline__ void load_shared(uint32_t body, uint32_t scales, int it) {
        q0 = lds16(body + it * 32);
        q1 = lds16(body + it * 32 + 16);
        d = lds_half(scales + it * 2);
    }
    static __device__ __forceinline__ X load_x(const QxView& x, int t, int64_t it, int) { return load_x_block(x, t, it); }
    __device__ __forceinline__ float dot(const X& x, int) const {
        int a = 0, b = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            a = dp4a_ss(word(q0, j), word(x.h0, j), a);
            a = dp4a_ss(word(q1, j), word(x.h1, j), a);
            b = dp4a_us(word(x.l0, j), word(q0, j), b);
            b = dp4a_us(word(x.l1, j), word(q1, j), b);
        }
        return d * __int_as_float(x.meta.x) * static_cast<float>(a * 256 + b);
    }
};

// Q4_K: two sub-blocks (2g, 2g + 1) of a super-block: its 16-byte scale record (d, dmin, 12 bytes
// of 6-bit scales and mins; shared by the super-block's 4 lanes) and the 32 bytes of nibbles the
// two sub-blocks share (2g low, 2g + 1 high), whose halves the device body keeps 64 bytes apart:
// the 4 lanes of a super-block read its 128-byte body line with each of their two loads.
template <>
struct Item<DType::Q4_K> {
    static constexpr int kValues = 64, kParts = 2;  // part p: sub-block 2g + p
    using X = XBlock;
    uint4 head, q0, q1;
    int g;
    __device__ __forceinline__ void load(const QuantMatrix& m, int64_t row, int64_t it) {
        const int64_t i = row * m.blocks_per_row + (it >> 2);
        g = static_cast<int>(it & 3);
        head = __ldg(reinterpret_cast<const uint4*>(m.scales + i * 16));  // via L1
        q0 = load_weight16(m.body + i * 128 + 16 * g);
        q1 = load_weight16(m.body + i * 128 + 64 + 16 * g);
    }
    __device__ __forceinline__ void load_shared(uint32_t body, uint32_t scales, int it) {
        const uint32_t b = body + (it >> 2) * 128;
        g = it & 3;
        head = lds16(scales + (it >> 2) * 16);
        q0 = lds16(b + 16 * g);
        q1 = lds16(b + 64 + 16 * g);
    }
    static __device__ __forceinline__ void prefetch(const QuantMatrix& m, int64_t row, int64_t it) {
        const int64_t i = row * m.blocks_per_row + (it >> 2);
        prefetch_l2(m.body + i * 128);
        prefetch_l2(m.scales + i * 16);
    }
    static __device__ __forceinline__ X load_x(const QxView& x, int t, int64_t it, int p) {
        return load_x_block(x, t, (it >> 2) * 8 + 2 * (it & 3) + p);
    }
    // Scale and min of sub-block j from the 12 packed bytes s[0..11] (head bytes 4..15).
    __device__ __forceinline__ void scale_min(int j, int* sc, int* mn) const {
        const uint32_t w[3] = {head.y, head.z, head.w};
        auto byte = [&](int k) { return static_cast<int>((w[k >> 2] >> (8 * (k & 3))) & 0xFF); };
        if (j < 4) {
            *sc = byte(j) & 63;
            *mn = byte(j + 4) & 63;
        } else {
            *sc = (byte(j + 4) & 0xF) | ((byte(j - 4) >> 6) << 4);
            *mn = (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4);
        }
    }
    __device__ __forceinline__ float dot(const X& x, int p) const {
        const float d = __half2float(__ushort_as_half(static_cast<uint16_t>(head.x & 0xFFFF)));
        const float dmin = __half2float(__ushort_as_half(static_cast<uint16_t>(head.x >> 16)));
        int sc, mn;
        scale_min(2 * g + p, &sc, &mn);
        const int shift = 4 * p;  // sub-block 2g: low nibbles, 2g + 1: high nibbles
        uint32_t a[4], b[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            a[j] = (word(q0, j) >> shift) & 0x0F0F0F0Fu;
            b[j] = (word(q1, j) >> shift) & 0x0F0F0F0Fu;
        }
        const int s = dot16_u(a, x.h0, x.l0) + dot16_u(b, x.h1, x.l1);
        const float sum = static_cast<float>(x.meta.y + x.meta.z);
        return __int_as_float(x.meta.x) * (d * sc * static_cast<float>(s) - dmin * mn * sum);
    }
};

// Q6_K: a quarter of a super-block: half h = (it & 3) >> 1, positions l0 .. l0 + 15 with
// l0 = 16 (it & 1), i.e. four groups of 16 values (128 h + 32 k + l0 + i, k = 0..3), each with
// its own int8 scale. Loads ql (2 x 16 B), qh (16 B), the 16 scales, d.
template <>
struct Item<DType::Q6_K> {
    static constexpr int kValues = 64, kParts = 4;  // part k: the 16 values 128 h + 32 k + l0 + i
    struct X {
        uint4 h, l;
        int sum;
        float d;
    };
    uint4 ql0, ql1, qh, sc;
    float d;
    int h, l16;
    __device__ __forceinline__ void load(const QuantMatrix& m, int64_t row, int64_t it) {
        const int64_t i = row * m.blocks_per_row + (it >> 2);
        const uint8_t* b = m.body + i * 208;
        h = static_cast<int>((it & 3) >> 1);
        l16 = static_cast<int>(it & 1);
        ql0 = load_weight16(b + 64 * h + 16 * l16);
        ql1 = load_weight16(b + 64 * h + 32 + 16 * l16);
        qh = load_weight16(b + 128 + 32 * h + 16 * l16);
        sc = __ldg(reinterpret_cast<const uint4*>(b + 192));  // shared by the super-block's 4 lanes
        d = load_half_bits(m.scales + 2 * i);
    }
    __device__ __forceinline__ void load_shared(uint32_t body, uint32_t scales, int it) {
        const uint32_t b = body + (it >> 2) * 208;
        h = (it & 3) >> 1;
        l16 = it & 1;
        ql0 = lds16(b + 64 * h + 16 * l16);
        ql1 = lds16(b + 64 * h + 32 + 16 * l16);
        qh = lds16(b + 128 + 32 * h + 16 * l16);
        sc = lds16(b + 192);
        d = lds_half(scales + (it >> 2) * 2);
    }
    static __device__ __forceinline__ void prefetch(const QuantMatrix& m, int64_t row, int64_t it) {
        const int64_t i = row * m.blocks_per_row + (it >> 2);
        const uint8_t* b = m.body + i * 208;
        const int hh = static_cast<int>((it & 3) >> 1), ll = static_cast<int>(it & 1);
        prefetch_l2(b + 64 * hh + 16 * ll);
        prefetch_l2(b + 128 + 32 * hh + 16 * ll);
        prefetch_l2(m.scales + 2 * i);
    }
    static __device__ __forceinline__ X load_x(const QxView& x, int t, int64_t it, int k) {
        const int hh = static_cast<int>((it & 3) >> 1), ll = static_cast<int>(it & 1);
        const int64_t chunk = (it >> 2) * 8 + 4 * hh + k;
        const int64_t off = t * x.n_in + chunk * 32 + 16 * ll;
        X v;
        v.h = load_x16(x.hi + off);
        v.l = load_x16(x.lo + off);
        const int4 meta = __ldg(x.meta + t * (x.n_in / 32) + chunk);
        v.sum = ll ? meta.z : meta.y;
        v.d = __int_as_float(meta.x);
        return v;
    }
    __device__ __forceinline__ float dot(const X& x, int k) const {
        const uint4& ql = (k & 1) ? ql1 : ql0;
        const int lshift = (k >> 1) * 4;
        uint32_t q[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
            q[j] = ((word(ql, j) >> lshift) & 0x0F0F0F0Fu) | (((word(qh, j) >> (2 * k)) & 0x03030303u) << 4);
        const int s = dot16_u(q, x.h, x.l) - 32 * x.sum;
        const int si = 8 * h + l16 + 2 * k;  // scale index: 16-value group of the super-block
        const int8_t scale = static_cast<int8_t>((word(sc, si >> 2) >> (8 * (si & 3))) & 0xFF);
        return d * x.d * static_cast<float>(scale) * static_cast<float>(s);
    }
};


// The SwiGLU gate (both GEMV kernels use this one, so their outputs agree bit for bit).
__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

}  // namespace mvllm::cuda
