// Malformed GGUF files: each must give an error naming the file and the problem, never a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "io/gguf.h"
#include "io_test_util.h"

namespace mvllm {
namespace {

using test::Bytes;
using test::RawGguf;
using test::TempDir;

class GgufMalformed : public ::testing::Test {
protected:
    // Writes the bytes, opens them and checks for an error that names the file and contains `needle`.
    void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
        std::string name = "bad_";  // (built stepwise: GCC 12 warns falsely on "a" + s + "b")
        name += std::to_string(n_++);
        name += ".gguf";
        const std::string path = dir_.file(name);
        test::write_file(path, bytes);
        auto r = GgufFile::open(path);
        ASSERT_FALSE(r.is_ok()) << "expected an error containing '" << needle << "'";
        const std::string& msg = r.status().message();
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
        EXPECT_NE(msg.find(needle), std::string::npos) << "expected '" << needle << "' in: " << msg;
    }
    void expect_error(const RawGguf& raw, const std::string& needle) { expect_error(raw.build(), needle); }

    TempDir dir_;
    int n_ = 0;
};

TEST_F(GgufMalformed, ValidBaseFileOpens) {
    const std::string path = dir_.file("ok.gguf");
    test::write_file(path, test::small_valid_gguf().build());
    auto r = GgufFile::open(path);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
}

TEST_F(GgufMalformed, MissingAndEmptyFile) {
    auto missing = GgufFile::open(dir_.file("nope.gguf"));
    ASSERT_FALSE(missing.is_ok());
    EXPECT_NE(missing.status().message().find(dir_.file("nope.gguf")), std::string::npos);
    expect_error(std::vector<uint8_t>{}, "truncated");
}

// Every strict prefix of a valid file is an error (the full file has no optional tail).
TEST_F(GgufMalformed, TruncatedAtEveryLength) {
    const std::vector<uint8_t> full = test::small_valid_gguf().build();
    const std::string path = dir_.file("prefix.gguf");
    for (size_t n = 0; n < full.size(); ++n) {
        test::write_file(path, full.data(), n);
        auto r = GgufFile::open(path);
        ASSERT_FALSE(r.is_ok()) << "prefix of " << n << " of " << full.size() << " bytes opened";
        const std::string& msg = r.status().message();
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
        EXPECT_TRUE(msg.find("truncated") != std::string::npos || msg.find("past the end") != std::string::npos)
            << "prefix " << n << ": " << msg;
    }
    test::write_file(path, full);
    EXPECT_TRUE(GgufFile::open(path).is_ok());
}

TEST_F(GgufMalformed, BadMagic) {
    RawGguf g = test::small_valid_gguf();
    g.magic = "GGML";
    expect_error(g, "bad magic");
}

TEST_F(GgufMalformed, UnsupportedVersion) {
    for (uint32_t v : {0u, 1u, 4u, 0xFFFFFFFFu}) {
        RawGguf g = test::small_valid_gguf();
        g.version = v;
        std::string needle = "unsupported GGUF version ";
        needle += std::to_string(v);
        expect_error(g, needle);
    }
}

TEST_F(GgufMalformed, AbsurdCounts) {
    RawGguf g = test::small_valid_gguf();
    g.n_tensors = uint64_t{1} << 60;
    expect_error(g, "absurd tensor count");
    g = test::small_valid_gguf();
    g.n_tensors = ~uint64_t{0};
    expect_error(g, "absurd tensor count");
    g = test::small_valid_gguf();
    g.n_kv = uint64_t{1} << 60;
    expect_error(g, "absurd metadata kv count");
    g = test::small_valid_gguf();
    g.n_kv = ~uint64_t{0};
    expect_error(g, "absurd metadata kv count");
    // A count the bytes could hold in principle: the third tensor info is read from the padding
    // and data bytes and is rejected as nonsense.
    g = test::small_valid_gguf();
    g.n_tensors = 3;
    expect_error(g, "tensor ''");
}

TEST_F(GgufMalformed, AbsurdStringLength) {
    RawGguf g = test::small_valid_gguf();
    g.kvs.push_back(test::raw_kv("s", 8, Bytes().put<uint64_t>(uint64_t{1} << 62).b));
    expect_error(g, "string length");
    g = test::small_valid_gguf();
    g.kvs[0] = Bytes().put<uint64_t>(~uint64_t{0}).b;  // the key itself
    expect_error(g, "string length");
    g = test::small_valid_gguf();
    g.tensors[0].name = "a";
    auto bytes = g.build();
    // Patch tensor "a"'s name length: it follows the kvs.
    size_t at = 24;
    for (const auto& kv : g.kvs) at += kv.size();
    const uint64_t huge = uint64_t{1} << 50;
    std::memcpy(bytes.data() + at, &huge, 8);
    expect_error(bytes, "string length");
}

TEST_F(GgufMalformed, AbsurdArrayLength) {
    for (uint32_t elem : {0u, 6u, 8u, 9u, 12u}) {
        RawGguf g = test::small_valid_gguf();
        g.kvs.push_back(test::raw_kv("arr", 9, Bytes().put<uint32_t>(elem).put<uint64_t>(uint64_t{1} << 61).b));
        expect_error(g, "absurd array length");
    }
    // Nested: an inner array's count.
    RawGguf g = test::small_valid_gguf();
    g.kvs.push_back(test::raw_kv(
        "nested", 9, Bytes().put<uint32_t>(9).put<uint64_t>(1).put<uint32_t>(4).put<uint64_t>(~uint64_t{0}).b));
    expect_error(g, "absurd array length");
}

TEST_F(GgufMalformed, UnknownValueTypes) {
    RawGguf g = test::small_valid_gguf();
    g.kvs.push_back(test::raw_kv("x", 13, Bytes().put<uint32_t>(0).b));
    expect_error(g, "unknown value type 13");
    g = test::small_valid_gguf();
    g.kvs.push_back(test::raw_kv("x", 9, Bytes().put<uint32_t>(77).put<uint64_t>(0).b));
    expect_error(g, "unknown array element type 77");
    g = test::small_valid_gguf();
    g.kvs.push_back(test::raw_kv("flag", 7, Bytes().put<uint8_t>(2).b));
    expect_error(g, "bool value 2");
}

TEST_F(GgufMalformed, ArraysNestedTooDeep) {
    Bytes payload;
    for (int i = 0; i < 100; ++i) payload.put<uint32_t>(9).put<uint64_t>(1);
    payload.put<uint32_t>(0).put<uint64_t>(0);
    RawGguf g = test::small_valid_gguf();
    g.kvs.push_back(test::raw_kv("deep", 9, payload.b));
    expect_error(g, "nested deeper");
}

TEST_F(GgufMalformed, DuplicateKey) {
    RawGguf g = test::small_valid_gguf();
    g.kvs.push_back(test::kv_u32("llama.block_count", 3));
    expect_error(g, "duplicate metadata key 'llama.block_count'");
}

TEST_F(GgufMalformed, BadNDims) {
    RawGguf g = test::small_valid_gguf();
    g.tensors[0] = {"a", 5, {8, 2, 1, 1, 1}, 0, 0};
    expect_error(g, "n_dims 5");
    g = test::small_valid_gguf();
    g.tensors[0] = {"a", 0, {}, 0, 0};
    expect_error(g, "n_dims 0");
    g = test::small_valid_gguf();
    g.tensors[0].n_dims = 0xFFFFFFFFu;
    expect_error(g, "n_dims");
}

TEST_F(GgufMalformed, BadDimensions) {
    RawGguf g = test::small_valid_gguf();
    g.tensors[0].ne = {8, 0};
    expect_error(g, "ne[1] = 0 is not positive");
    g = test::small_valid_gguf();
    g.tensors[0].ne = {~uint64_t{0} - 3, 2};  // -4 as a signed value
    expect_error(g, "ne[0] = -4 is not positive");
    g = test::small_valid_gguf();
    g.tensors[0].n_dims = 4;
    g.tensors[0].ne = {uint64_t{1} << 20, uint64_t{1} << 20, uint64_t{1} << 20, uint64_t{1} << 20};
    expect_error(g, "overflows");
    g = test::small_valid_gguf();
    g.tensors[0].ne = {uint64_t{1} << 61, 2};  // elements fit in int64, bytes do not
    expect_error(g, "overflows the byte size");
}

TEST_F(GgufMalformed, OffsetPastEnd) {
    RawGguf g = test::small_valid_gguf();
    g.tensors[1].offset = 128;
    expect_error(g, "past the end of the file");
    g = test::small_valid_gguf();
    g.tensors[1].offset = ~uint64_t{0} - 31;  // aligned, and offset + size wraps around
    expect_error(g, "past the end of the file");
    g = test::small_valid_gguf();
    g.data_size = 64 + 33;  // last tensor one byte short
    expect_error(g, "past the end of the file");
}

TEST_F(GgufMalformed, MisalignedOffset) {
    RawGguf g = test::small_valid_gguf();
    g.tensors[1].offset = 65;
    g.data_size = 200;
    expect_error(g, "misaligned offset 65");
}

TEST_F(GgufMalformed, OverlappingTensors) {
    RawGguf g = test::small_valid_gguf();
    g.tensors[1].offset = 32;  // inside a's [0, 64)
    expect_error(g, "overlap");
    g = test::small_valid_gguf();
    g.tensors[1].offset = 0;  // same start
    expect_error(g, "overlap");
}

TEST_F(GgufMalformed, UnknownOrUnstorableTensorType) {
    RawGguf g = test::small_valid_gguf();
    g.tensors[0].type = 99;
    expect_error(g, "unknown tensor type id 99");
    g = test::small_valid_gguf();
    g.tensors[0].type = 3;  // a ggml type mvllm does not support (q4_1)
    expect_error(g, "unknown tensor type id 3");
    g = test::small_valid_gguf();
    g.tensors[1] = {"b", 1, {256}, 15, 64};  // q8_K is activation-only
    g.data_size = 64 + 292;
    expect_error(g, "cannot be stored");
}

TEST_F(GgufMalformed, DuplicateTensorName) {
    RawGguf g = test::small_valid_gguf();
    g.tensors[1].name = "a";
    expect_error(g, "duplicate tensor name 'a'");
}

TEST_F(GgufMalformed, ByteSizeNotWholeBlocks) {
    RawGguf g = test::small_valid_gguf();
    g.tensors[1].ne = {33};  // q8_0 needs multiples of 32
    expect_error(g, "not a multiple of the q8_0 block size 32");
    g = test::small_valid_gguf();
    g.tensors[1] = {"b", 2, {128, 1}, 12, 64};  // q4_K needs multiples of 256
    g.data_size = 64 + 144;
    expect_error(g, "block size 256");
}

TEST_F(GgufMalformed, AlignmentKeyProblems) {
    RawGguf g = test::small_valid_gguf();
    g.kvs.push_back(test::kv_str("general.alignment", "64"));
    expect_error(g, "general.alignment has type string, expected u32");
    g = test::small_valid_gguf();
    g.kvs.push_back(test::raw_kv("general.alignment", 10, Bytes().put<uint64_t>(64).b));
    expect_error(g, "general.alignment has type u64");
    g = test::small_valid_gguf();
    g.kvs.push_back(test::kv_u32("general.alignment", 0));
    expect_error(g, "general.alignment = 0 is not a power of 2");
    g = test::small_valid_gguf();
    g.kvs.push_back(test::kv_u32("general.alignment", 48));
    expect_error(g, "general.alignment = 48 is not a power of 2");
}

// Random byte flips of a valid file: open() must return (ok or an error), never crash, and a file
// that opens must have every tensor view inside the mapping.
TEST_F(GgufMalformed, RandomByteFlipsNeverCrash) {
    RawGguf base = test::small_valid_gguf();
    base.kvs.push_back(test::raw_kv(
        "tokens", 9, Bytes().put<uint32_t>(8).put<uint64_t>(2).str("ab").str("cde").b));
    base.kvs.push_back(test::raw_kv(
        "nested", 9, Bytes().put<uint32_t>(9).put<uint64_t>(1).put<uint32_t>(5).put<uint64_t>(1).put<int32_t>(3).b));
    const std::vector<uint8_t> good = base.build();
    const std::string path = dir_.file("fuzz.gguf");
    std::mt19937 rng(12345);
    int opened = 0;
    for (int iter = 0; iter < 5000; ++iter) {
        std::vector<uint8_t> bytes = good;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int i = 0; i < flips; ++i) {
            // Mostly hit the header, where the structure lives.
            const size_t limit = (rng() % 4 == 0) ? bytes.size() : std::min<size_t>(bytes.size(), 200);
            const size_t pos = rng() % limit;
            switch (rng() % 3) {
                case 0: bytes[pos] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
                case 1: bytes[pos] = static_cast<uint8_t>(rng()); break;
                default: bytes[pos] = (rng() % 2) ? 0xFF : 0x00; break;
            }
        }
        if (rng() % 8 == 0) bytes.resize(rng() % bytes.size());
        test::write_file(path, bytes);
        auto r = GgufFile::open(path);
        if (!r.is_ok()) {
            EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
            continue;
        }
        ++opened;
        const GgufFile& f = *r.value();
        for (const GgufTensorInfo& t : f.tensors()) {
            const TensorView v = f.view(t);
            const auto* p = static_cast<const uint8_t*>(v.data);
            ASSERT_EQ(v.n_bytes(), t.n_bytes);
            unsigned sum = 0;
            for (size_t i = 0; i < t.n_bytes; ++i) sum += p[i];  // touches every byte of the view
            (void)sum;
        }
    }
    EXPECT_GT(opened, 0);  // some flips land in data or string bytes and leave the file valid
}

}  // namespace
}  // namespace mvllm
