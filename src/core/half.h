// IEEE binary16 (F16) and bfloat16 (BF16) conversions, scalar and exact (round to nearest even).
#pragma once

#include <cstdint>
#include <cstring>

namespace mvllm {

using f16_t = uint16_t;   // raw IEEE binary16 bits
using bf16_t = uint16_t;  // raw bfloat16 bits

inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float f16_to_f32(f16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (mant << 13));  // inf / nan
    if (exp != 0) return bits_to_float(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0) return bits_to_float(sign);
    // subnormal: normalise
    int e = -1;
    do { mant <<= 1; ++e; } while ((mant & 0x400) == 0);
    return bits_to_float(sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ff) << 13));
}

inline f16_t f32_to_f16(float f) {
    const uint32_t x = float_to_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000;
    const uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) return (f16_t)(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0));
    if (abs >= 0x477ff000u) return (f16_t)(sign | 0x7c00);  // rounds to >= 65520: overflow
    if (abs < 0x38800000u) {                                // below the smallest normal F16
        if (abs < 0x33000000u) return (f16_t)sign;          // rounds to zero
        const uint32_t e = abs >> 23;
        const uint32_t m = (abs & 0x7fffff) | 0x800000;
        const uint32_t shift = 126 - e;                    // 14..24
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) ++r;
        return (f16_t)(sign | r);
    }
    uint32_t r = ((abs - 0x38000000u) >> 13);
    const uint32_t rem = abs & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
    return (f16_t)(sign | r);
}

inline float bf16_to_f32(bf16_t h) { return bits_to_float((uint32_t)h << 16); }

inline bf16_t f32_to_bf16(float f) {
    uint32_t x = float_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((x >> 16) | 0x40);  // quiet nan
    x += 0x7fff + ((x >> 16) & 1);
    return (bf16_t)(x >> 16);
}

}  // namespace mvllm
