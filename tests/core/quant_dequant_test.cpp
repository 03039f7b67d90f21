// Bit-exactness of the block dequantisers on hand-built blocks. Each test places known integer
// levels and scales at the byte/bit positions the GGUF format defines (written out here from the
// format description, independently of src/core) and checks every output value exactly. Scales are
// powers of two and small integers, so every expected value is exact in float.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/quant.h"
#include "core/types.h"

namespace mvllm {
namespace {

constexpr f16_t kHalf = 0x3800;     // 0.5
constexpr f16_t kQuarter = 0x3400;  // 0.25
constexpr f16_t kEighth = 0x3000;   // 0.125
constexpr f16_t kTwo = 0x4000;      // 2.0

TEST(DequantizeTest, Q8_0) {
    BlockQ8_0 b[2];
    b[0].d = kQuarter;
    b[1].d = kTwo;
    for (int j = 0; j < 32; ++j) {
        b[0].qs[j] = static_cast<int8_t>(-128 + 8 * j);  // covers -128 .. 120
        b[1].qs[j] = static_cast<int8_t>(127 - j);
    }
    float y[64];
    dequantize_row_q8_0(b, y, 64);
    for (int j = 0; j < 32; ++j) {
        EXPECT_EQ(y[j], (-128 + 8 * j) * 0.25f) << j;
        EXPECT_EQ(y[32 + j], (127 - j) * 2.0f) << j;
    }
}

TEST(DequantizeTest, Q4_0) {
    BlockQ4_0 b[2];
    b[0].d = kHalf;
    b[1].d = kTwo;
    int level[2][32];
    for (int k = 0; k < 2; ++k) {
        for (int v = 0; v < 32; ++v) level[k][v] = (v * 7 + 3 * k) % 16;
        // value v < 16: low nibble of byte v; value v >= 16: high nibble of byte v - 16
        for (int j = 0; j < 16; ++j) b[k].qs[j] = static_cast<uint8_t>(level[k][j] | (level[k][j + 16] << 4));
    }
    float y[64];
    dequantize_row_q4_0(b, y, 64);
    for (int v = 0; v < 32; ++v) {
        EXPECT_EQ(y[v], (level[0][v] - 8) * 0.5f) << v;
        EXPECT_EQ(y[32 + v], (level[1][v] - 8) * 2.0f) << v;
    }
}

TEST(DequantizeTest, Q8_K) {
    BlockQ8_K b;
    b.d = 0.375f;
    for (int j = 0; j < 256; ++j) b.qs[j] = static_cast<int8_t>(j - 128);
    float y[256];
    dequantize_row_q8_K(&b, y, 256);
    for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], 0.375f * (j - 128)) << j;
}

// The 12-byte scale/min packing of Q4_K and Q5_K, from the format definition: bytes 0-3 hold the
// low 6 bits of scales 0-3 and, in their top 2 bits, bits 4-5 of scales 4-7; bytes 4-7 the same for
// mins; bytes 8-11 hold the low 4 bits of scale 4+i (low nibble) and min 4+i (high nibble).
void pack_scales_for_test(const int* sc, const int* m, uint8_t* q) {
    for (int i = 0; i < 4; ++i) {
        q[i] = static_cast<uint8_t>((sc[i] & 63) | ((sc[i + 4] >> 4) << 6));
        q[i + 4] = static_cast<uint8_t>((m[i] & 63) | ((m[i + 4] >> 4) << 6));
        q[i + 8] = static_cast<uint8_t>((sc[i + 4] & 15) | ((m[i + 4] & 15) << 4));
    }
}

TEST(DequantizeTest, GetScaleMinK4AllValues) {
    // Every 6-bit value in every slot, with the other slots holding different values.
    for (int slot = 0; slot < 8; ++slot) {
        for (int v = 0; v < 64; ++v) {
            int sc[8], m[8];
            for (int j = 0; j < 8; ++j) {
                sc[j] = (j == slot) ? v : (j * 13 + 5) % 64;
                m[j] = (j == slot) ? 63 - v : (j * 29 + 11) % 64;
            }
            uint8_t q[12];
            pack_scales_for_test(sc, m, q);
            for (int j = 0; j < 8; ++j) {
                uint8_t s, mm;
                get_scale_min_k4(j, q, &s, &mm);
                EXPECT_EQ(s, sc[j]) << "slot " << slot << " v " << v << " j " << j;
                EXPECT_EQ(mm, m[j]) << "slot " << slot << " v " << v << " j " << j;
            }
        }
    }
}

// Sub-block scales and mins, with the j >= 4 ones using bits 4-5 (values >= 16 and >= 32).
constexpr int kSc[8] = {1, 7, 15, 63, 17, 33, 48, 62};
constexpr int kMin[8] = {0, 3, 31, 60, 16, 37, 63, 50};

TEST(DequantizeTest, Q4_K) {
    BlockQ4_K b[2];
    std::memset(b, 0, sizeof(b));
    int level[2][256];
    for (int k = 0; k < 2; ++k) {
        b[k].d = k == 0 ? kHalf : kQuarter;
        b[k].dmin = k == 0 ? kEighth : kTwo;
        pack_scales_for_test(kSc, kMin, b[k].scales);
        for (int v = 0; v < 256; ++v) {
            level[k][v] = (v * 5 + k) % 16;
            // 64-value chunk c uses qs[32c .. 32c+31]: its first 32 values in the low nibbles,
            // its last 32 in the high nibbles.
            const int c = v / 64, r = v % 64;
            b[k].qs[32 * c + r % 32] |= static_cast<uint8_t>(level[k][v] << (r < 32 ? 0 : 4));
        }
    }
    float y[512];
    dequantize_row_q4_K(b, y, 512);
    for (int k = 0; k < 2; ++k) {
        const float d = k == 0 ? 0.5f : 0.25f, dmin = k == 0 ? 0.125f : 2.0f;
        for (int v = 0; v < 256; ++v) {
            const int sub = v / 32;
            EXPECT_EQ(y[256 * k + v], d * kSc[sub] * level[k][v] - dmin * kMin[sub]) << k << " " << v;
        }
    }
}

TEST(DequantizeTest, Q5_K) {
    BlockQ5_K b;
    std::memset(&b, 0, sizeof(b));
    b.d = kQuarter;
    b.dmin = kHalf;
    pack_scales_for_test(kSc, kMin, b.scales);
    int level[256];
    for (int v = 0; v < 256; ++v) {
        level[v] = (v * 11 + 7) % 32;
        const int c = v / 64, r = v % 64, l = r % 32, sub = v / 32;
        b.qs[32 * c + l] |= static_cast<uint8_t>((level[v] & 15) << (r < 32 ? 0 : 4));
        // the fifth bit of value l of sub-block s is bit s of qh[l]
        if (level[v] & 16) b.qh[l] |= static_cast<uint8_t>(1u << sub);
    }
    float y[256];
    dequantize_row_q5_K(&b, y, 256);
    for (int v = 0; v < 256; ++v) {
        const int sub = v / 32;
        EXPECT_EQ(y[v], 0.25f * kSc[sub] * level[v] - 0.5f * kMin[sub]) << v;
    }
}

TEST(DequantizeTest, Q6_K) {
    BlockQ6_K b[2];
    std::memset(b, 0, sizeof(b));
    int level[2][256];
    int scale[2][16];
    for (int k = 0; k < 2; ++k) {
        b[k].d = k == 0 ? kQuarter : kTwo;
        for (int j = 0; j < 16; ++j) {
            scale[k][j] = (j % 2 ? -1 : 1) * (j * 8 + k);  // 0, -9, 16, ... up to -127
            if (j == 15) scale[k][j] = -128 + k;
            b[k].scales[j] = static_cast<int8_t>(scale[k][j]);
        }
        for (int v = 0; v < 256; ++v) {
            level[k][v] = (v * 37 + 5 * k) % 64;
            // value v: half h = v / 128, group g = (v % 128) / 32, lane l = v % 32.
            // Low 4 bits: byte ql[64h + l + 32 (g odd)], nibble high when g >= 2.
            // High 2 bits: bits 2g..2g+1 of qh[32h + l].
            const int h = v / 128, g = (v % 128) / 32, l = v % 32;
            b[k].ql[64 * h + l + (g & 1) * 32] |= static_cast<uint8_t>((level[k][v] & 15) << (g >= 2 ? 4 : 0));
            b[k].qh[32 * h + l] |= static_cast<uint8_t>((level[k][v] >> 4) << (2 * g));
        }
    }
    float y[512];
    dequantize_row_q6_K(b, y, 512);
    for (int k = 0; k < 2; ++k) {
        const float d = k == 0 ? 0.25f : 2.0f;
        for (int v = 0; v < 256; ++v) {
            EXPECT_EQ(y[256 * k + v], d * scale[k][v / 16] * (level[k][v] - 32)) << k << " " << v;
        }
    }
}

TEST(DequantizeTest, DispatchMatchesDirectCalls) {
    std::vector<uint8_t> raw(row_size(DType::Q6_K, 512));
    for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint8_t>(i * 131 + 7);
    // keep the f16 d of both blocks finite
    for (int k = 0; k < 2; ++k) std::memcpy(raw.data() + k * sizeof(BlockQ6_K) + 208, &kHalf, 2);
    std::vector<float> a(512), b(512);
    dequantize_row(DType::Q6_K, raw.data(), a.data(), 512);
    dequantize_row_q6_K(raw.data(), b.data(), 512);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), 512 * sizeof(float)), 0);
}

}  // namespace
}  // namespace mvllm
