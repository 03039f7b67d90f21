// The types table: GGUF ids, block geometry, names, row sizes.
#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "core/types.h"

namespace mvllm {
namespace {

struct Expected {
    DType type;
    uint32_t id;
    const char* name;
    int64_t block_size;
    size_t type_size;
    bool quantized;
    bool storable;
};

constexpr Expected kExpected[] = {
    {DType::F32, 0, "f32", 1, 4, false, true},       {DType::F16, 1, "f16", 1, 2, false, true},
    {DType::BF16, 30, "bf16", 1, 2, false, true},    {DType::Q8_0, 8, "q8_0", 32, 34, true, true},
    {DType::Q4_0, 2, "q4_0", 32, 18, true, true},    {DType::Q4_K, 12, "q4_K", 256, 144, true, true},
    {DType::Q5_K, 13, "q5_K", 256, 176, true, true}, {DType::Q6_K, 14, "q6_K", 256, 210, true, true},
    {DType::Q8_K, 15, "q8_K", 256, 292, true, false},
};

TEST(TypesTest, TraitsMatchGgufDefinitions) {
    for (const Expected& e : kExpected) {
        const TypeTraits* t = find_type_traits(e.id);
        ASSERT_NE(t, nullptr) << e.name;
        EXPECT_EQ(static_cast<uint32_t>(t->type), e.id);
        EXPECT_EQ(t->type, e.type);
        EXPECT_STREQ(t->name, e.name);
        EXPECT_EQ(t->block_size, e.block_size) << e.name;
        EXPECT_EQ(t->type_size, e.type_size) << e.name;
        EXPECT_EQ(t->is_quantized, e.quantized) << e.name;
        EXPECT_EQ(t->storable, e.storable) << e.name;
        EXPECT_NE(t->dequantize_row, nullptr) << e.name;
        EXPECT_NE(t->quantize_row, nullptr) << e.name;
        EXPECT_EQ(&type_traits(e.type), t);
    }
}

TEST(TypesTest, UnknownIdsHaveNoTraits) {
    for (uint32_t id : {3u, 6u, 7u, 9u, 10u, 11u, 16u, 29u, 31u, 1000u, 0xffffffffu}) {
        EXPECT_EQ(find_type_traits(id), nullptr) << id;
    }
}

TEST(TypesTest, RowSize) {
    EXPECT_EQ(row_size(DType::F32, 0), 0u);
    EXPECT_EQ(row_size(DType::F32, 3), 12u);
    EXPECT_EQ(row_size(DType::F16, 7), 14u);
    EXPECT_EQ(row_size(DType::BF16, 4096), 8192u);
    EXPECT_EQ(row_size(DType::Q8_0, 64), 68u);
    EXPECT_EQ(row_size(DType::Q4_0, 4096), 128u * 18u);
    EXPECT_EQ(row_size(DType::Q4_K, 512), 288u);
    EXPECT_EQ(row_size(DType::Q5_K, 4096), 16u * 176u);
    EXPECT_EQ(row_size(DType::Q6_K, 256), 210u);
    EXPECT_EQ(row_size(DType::Q8_K, 768), 3u * 292u);
    EXPECT_EQ(row_size(DType::Q4_K, int64_t(1) << 32), (size_t(1) << 24) * 144u);  // no overflow
}

TEST(TypesTest, RowSizeRejectsPartialBlocks) {
    EXPECT_DEATH(row_size(DType::Q4_K, 100), "q4_K row of 100");
}

TEST(TypesTest, NamesRoundTrip) {
    for (const Expected& e : kExpected) {
        EXPECT_STREQ(type_name(e.type), e.name);
        DType parsed = DType::F32;
        ASSERT_TRUE(parse_type_name(type_name(e.type), &parsed)) << e.name;
        EXPECT_EQ(parsed, e.type);
        // case-insensitive
        std::string upper = e.name;
        for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        parsed = DType::F32;
        ASSERT_TRUE(parse_type_name(upper, &parsed)) << upper;
        EXPECT_EQ(parsed, e.type);
    }
    DType untouched = DType::Q6_K;
    for (const char* bad : {"", "q3_k", "f64", "q4", "q4_K ", "q8_0x", "int8"}) {
        EXPECT_FALSE(parse_type_name(bad, &untouched)) << bad;
    }
    EXPECT_EQ(untouched, DType::Q6_K);
}

}  // namespace
}  // namespace mvllm
