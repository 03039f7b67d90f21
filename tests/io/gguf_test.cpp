// GGUF reading of valid files, writer -> reader round trips, alignment and mapped tensor data.
#include "io/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "io_test_util.h"

namespace mvllm {
namespace {

using test::RawGguf;
using test::TempDir;

std::unique_ptr<GgufFile> open_ok(const std::string& path) {
    auto r = GgufFile::open(path);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    if (!r.is_ok()) return nullptr;
    return std::move(r).value();
}

void check_small_valid(const GgufFile& f, uint32_t version, const RawGguf& raw) {
    EXPECT_EQ(f.version(), version);
    EXPECT_EQ(f.alignment(), 32u);
    ASSERT_EQ(f.metadata().size(), 2u);
    auto arch = f.get_string("general.architecture");
    ASSERT_TRUE(arch.is_ok()) << arch.status().message();
    EXPECT_EQ(arch.value(), "llama");
    auto blocks = f.get_int("llama.block_count");
    ASSERT_TRUE(blocks.is_ok());
    EXPECT_EQ(blocks.value(), 2);
    EXPECT_EQ(f.find("llama.block_count")->type, GgufType::UINT32);

    ASSERT_EQ(f.tensors().size(), 2u);
    const GgufTensorInfo* a = f.find_tensor("a");
    const GgufTensorInfo* b = f.find_tensor("b");
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(f.find_tensor("c"), nullptr);
    EXPECT_EQ(a->type, DType::F32);
    EXPECT_EQ(a->n_dims, 2);
    EXPECT_EQ(a->ne, (std::array<int64_t, 4>{8, 2, 1, 1}));
    EXPECT_EQ(a->n_bytes, 64u);
    EXPECT_EQ(b->type, DType::Q8_0);
    EXPECT_EQ(b->n_dims, 1);
    EXPECT_EQ(b->n_bytes, 34u);
    EXPECT_EQ(b->offset, 64u);

    // The tensor data is the filler appended after the padded header.
    const std::vector<uint8_t> bytes = raw.build();
    const size_t data_start = bytes.size() - raw.data_size;
    TensorView va = f.view(*a);
    TensorView vb = f.view(*b);
    EXPECT_EQ(va.n_bytes(), 64u);
    EXPECT_EQ(std::memcmp(va.data, bytes.data() + data_start, 64), 0);
    EXPECT_EQ(std::memcmp(vb.data, bytes.data() + data_start + 64, 34), 0);
}

TEST(GgufRead, Version3) {
    TempDir dir;
    RawGguf raw = test::small_valid_gguf();
    raw.version = 3;
    test::write_file(dir.file("v3.gguf"), raw.build());
    auto f = open_ok(dir.file("v3.gguf"));
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->path(), dir.file("v3.gguf"));
    EXPECT_EQ(f->file_size(), raw.build().size());
    check_small_valid(*f, 3, raw);
}

TEST(GgufRead, Version2) {
    TempDir dir;
    RawGguf raw = test::small_valid_gguf();
    raw.version = 2;
    test::write_file(dir.file("v2.gguf"), raw.build());
    auto f = open_ok(dir.file("v2.gguf"));
    ASSERT_NE(f, nullptr);
    check_small_valid(*f, 2, raw);
}

TEST(GgufRead, NoTensorsNoMetadata) {
    TempDir dir;
    RawGguf raw;
    test::write_file(dir.file("empty.gguf"), raw.build());
    auto f = open_ok(dir.file("empty.gguf"));
    ASSERT_NE(f, nullptr);
    EXPECT_TRUE(f->metadata().empty());
    EXPECT_TRUE(f->tensors().empty());
}

// Every scalar type written raw, then checked through the typed accessors.
TEST(GgufRead, EveryScalarTypeFromRawBytes) {
    using test::Bytes;
    using test::raw_kv;
    TempDir dir;
    RawGguf raw;
    raw.kvs = {
        raw_kv("u8", 0, Bytes().put<uint8_t>(200).b),
        raw_kv("i8", 1, Bytes().put<int8_t>(-100).b),
        raw_kv("u16", 2, Bytes().put<uint16_t>(60000).b),
        raw_kv("i16", 3, Bytes().put<int16_t>(-30000).b),
        raw_kv("u32", 4, Bytes().put<uint32_t>(4000000000u).b),
        raw_kv("i32", 5, Bytes().put<int32_t>(-2000000000).b),
        raw_kv("f32", 6, Bytes().put<float>(1.5f).b),
        raw_kv("bool", 7, Bytes().put<uint8_t>(1).b),
        raw_kv("string", 8, Bytes().str("hello").b),
        raw_kv("array", 9, Bytes().put<uint32_t>(5).put<uint64_t>(2).put<int32_t>(-1).put<int32_t>(7).b),
        raw_kv("u64", 10, Bytes().put<uint64_t>(~uint64_t{0}).b),
        raw_kv("i64", 11, Bytes().put<int64_t>(std::numeric_limits<int64_t>::min()).b),
        raw_kv("f64", 12, Bytes().put<double>(-2.25).b),
    };
    test::write_file(dir.file("types.gguf"), raw.build());
    auto f = open_ok(dir.file("types.gguf"));
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->get_int("u8").value(), 200);
    EXPECT_EQ(f->get_int("i8").value(), -100);
    EXPECT_EQ(f->get_int("u16").value(), 60000);
    EXPECT_EQ(f->get_int("i16").value(), -30000);
    EXPECT_EQ(f->get_int("u32").value(), 4000000000LL);
    EXPECT_EQ(f->get_int("i32").value(), -2000000000);
    EXPECT_EQ(f->get_float("f32").value(), 1.5);
    EXPECT_EQ(f->get_bool_or("bool", false).value(), true);
    EXPECT_EQ(f->get_string("string").value(), "hello");
    const GgufArray* arr = f->find("array")->as_array();
    ASSERT_NE(arr, nullptr);
    EXPECT_EQ(arr->elem_type, GgufType::INT32);
    ASSERT_EQ(arr->items.size(), 2u);
    EXPECT_EQ(arr->items[0].as_int(), -1);
    EXPECT_EQ(arr->items[1].as_int(), 7);
    EXPECT_EQ(std::get<uint64_t>(f->find("u64")->v), ~uint64_t{0});
    EXPECT_FALSE(f->get_int("u64").is_ok());  // does not fit in int64
    EXPECT_EQ(f->get_int("i64").value(), std::numeric_limits<int64_t>::min());
    EXPECT_EQ(f->get_float("f64").value(), -2.25);
    EXPECT_EQ(f->get_float("i32").value(), -2000000000.0);  // integers convert to float
}

GgufValue typed(GgufType t, uint64_t u) { return {t, u}; }
GgufValue typed_signed(GgufType t, int64_t i) { return {t, i}; }

void expect_same_value(const GgufValue& a, const GgufValue& b, const std::string& where) {
    ASSERT_EQ(a.type, b.type) << where;
    if (a.type == GgufType::FLOAT32 || a.type == GgufType::FLOAT64) {
        EXPECT_EQ(std::get<double>(a.v), std::get<double>(b.v)) << where;
    } else if (a.type == GgufType::ARRAY) {
        const GgufArray& x = std::get<GgufArray>(a.v);
        const GgufArray& y = std::get<GgufArray>(b.v);
        ASSERT_EQ(x.elem_type, y.elem_type) << where;
        ASSERT_EQ(x.items.size(), y.items.size()) << where;
        for (size_t i = 0; i < x.items.size(); ++i)
            expect_same_value(x.items[i], y.items[i], where + "[" + std::to_string(i) + "]");
    } else if (a.type == GgufType::STRING) {
        EXPECT_EQ(std::get<std::string>(a.v), std::get<std::string>(b.v)) << where;
    } else if (a.type == GgufType::BOOL) {
        EXPECT_EQ(std::get<bool>(a.v), std::get<bool>(b.v)) << where;
    } else {
        EXPECT_EQ(a.v.index(), b.v.index()) << where;  // signed types as int64, unsigned as uint64
        EXPECT_EQ(a.as_int(), b.as_int()) << where;
        if (std::holds_alternative<uint64_t>(a.v) && std::holds_alternative<uint64_t>(b.v)) {
            EXPECT_EQ(std::get<uint64_t>(a.v), std::get<uint64_t>(b.v)) << where;
        }
    }
}

TEST(GgufRoundTrip, AllValueTypesIncludingNestedArrays) {
    TempDir dir;
    std::vector<std::pair<std::string, GgufValue>> values = {
        {"t.u8", typed(GgufType::UINT8, 255)},
        {"t.i8", typed_signed(GgufType::INT8, -128)},
        {"t.u16", typed(GgufType::UINT16, 65535)},
        {"t.i16", typed_signed(GgufType::INT16, -32768)},
        {"t.u32", GgufValue::u32(4294967295u)},
        {"t.i32", GgufValue::i32(-2147483647 - 1)},
        {"t.f32", GgufValue::f32(3.25f)},
        {"t.bool.true", GgufValue::boolean(true)},
        {"t.bool.false", GgufValue::boolean(false)},
        {"t.string", GgufValue::str("héllo wörld")},
        {"t.string.empty", GgufValue::str("")},
        {"t.u64", GgufValue::u64(~uint64_t{0})},
        {"t.i64", typed_signed(GgufType::INT64, std::numeric_limits<int64_t>::min())},
        {"t.f64", {GgufType::FLOAT64, 1e300}},
        {"t.array.strings", GgufValue::string_array({"a", "", "bc"})},
        {"t.array.empty", GgufValue::array(GgufType::FLOAT32, {})},
        {"t.array.f32", GgufValue::array(GgufType::FLOAT32, {GgufValue::f32(-1.0f), GgufValue::f32(0.5f)})},
        {"t.array.bool", GgufValue::array(GgufType::BOOL, {GgufValue::boolean(true), GgufValue::boolean(false)})},
        {"t.array.i8", GgufValue::array(GgufType::INT8, {typed_signed(GgufType::INT8, -3)})},
        {"t.array.u64", GgufValue::array(GgufType::UINT64, {GgufValue::u64(1), GgufValue::u64(1ull << 63)})},
        {"t.array.nested",
         GgufValue::array(GgufType::ARRAY,
                          {GgufValue::array(GgufType::INT32, {GgufValue::i32(1), GgufValue::i32(2)}),
                           GgufValue::array(GgufType::STRING, {GgufValue::str("x")}),
                           GgufValue::array(GgufType::ARRAY,
                                            {GgufValue::array(GgufType::FLOAT64, {{GgufType::FLOAT64, 0.125}})}),
                           GgufValue::array(GgufType::UINT8, {})})},
    };
    GgufWriter w;
    for (const auto& [k, v] : values) w.set(k, v);
    w.set("t.replaced", GgufValue::u32(1));
    w.set("t.replaced", GgufValue::str("second"));
    ASSERT_TRUE(w.write(dir.file("rt.gguf")).is_ok());

    auto f = open_ok(dir.file("rt.gguf"));
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->version(), 3u);
    ASSERT_EQ(f->metadata().size(), values.size() + 1);
    for (size_t i = 0; i < values.size(); ++i) {
        EXPECT_EQ(f->metadata()[i].first, values[i].first);  // order preserved
        expect_same_value(f->metadata()[i].second, values[i].second, values[i].first);
    }
    EXPECT_EQ(f->get_string("t.replaced").value(), "second");
    EXPECT_EQ(f->find("t.u8")->as_int(), 255);
    EXPECT_EQ(f->find("t.array.nested")->as_array()->items[2].as_array()->items[0].as_array()->items[0].as_float(),
              0.125);
}

TEST(GgufRoundTrip, TypedGetterErrorsNameTheKey) {
    TempDir dir;
    GgufWriter w;
    w.set("a.string", GgufValue::str("s"));
    w.set("a.int", GgufValue::u32(7));
    w.set("a.bool", GgufValue::boolean(true));
    ASSERT_TRUE(w.write(dir.file("g.gguf")).is_ok());
    auto f = open_ok(dir.file("g.gguf"));
    ASSERT_NE(f, nullptr);

    auto missing = f->get_string("a.missing");
    ASSERT_FALSE(missing.is_ok());
    EXPECT_NE(missing.status().message().find("a.missing"), std::string::npos);
    auto wrong = f->get_int("a.string");
    ASSERT_FALSE(wrong.is_ok());
    EXPECT_NE(wrong.status().message().find("a.string"), std::string::npos);
    EXPECT_FALSE(f->get_string("a.int").is_ok());
    EXPECT_FALSE(f->get_float("a.bool").is_ok());
    EXPECT_EQ(f->get_int_or("a.missing", 42).value(), 42);
    EXPECT_EQ(f->get_int_or("a.int", 42).value(), 7);
    EXPECT_FALSE(f->get_int_or("a.string", 42).is_ok());
    EXPECT_EQ(f->get_float_or("a.missing", 0.5).value(), 0.5);
    EXPECT_EQ(f->get_float_or("a.int", 0.5).value(), 7.0);
    EXPECT_FALSE(f->get_float_or("a.string", 0.5).is_ok());
    EXPECT_EQ(f->get_bool_or("a.missing", false).value(), false);
    EXPECT_EQ(f->get_bool_or("a.bool", false).value(), true);
    EXPECT_FALSE(f->get_bool_or("a.int", false).is_ok());
}

std::string tensor_name(size_t i) {
    std::string name = "t";  // (appended: GCC 12 warns falsely on "t" + std::to_string(i))
    name += std::to_string(i);
    return name;
}

struct TensorCase {
    DType type;
    std::array<int64_t, 4> ne;
    int n_dims;
};

// Writes tensors of several types (arbitrary bytes, sized by row_size) and checks the mapped views.
void round_trip_tensors(uint64_t alignment) {
    TempDir dir;
    const TensorCase cases[] = {
        {DType::F32, {7, 3, 1, 1}, 2},      {DType::F16, {5, 1, 1, 1}, 1},   {DType::BF16, {3, 2, 2, 1}, 3},
        {DType::Q4_0, {64, 3, 1, 1}, 2},    {DType::Q8_0, {32, 5, 1, 1}, 2}, {DType::Q4_K, {256, 2, 1, 1}, 2},
        {DType::Q5_K, {512, 1, 1, 1}, 1},   {DType::Q6_K, {256, 3, 1, 1}, 2}, {DType::F32, {2, 2, 2, 2}, 4},
    };
    GgufWriter w;
    w.alignment = alignment;
    std::vector<std::vector<uint8_t>> expected;
    expected.reserve(std::size(cases));  // the fill callbacks hold pointers into it
    for (size_t i = 0; i < std::size(cases); ++i) {
        const TensorCase& c = cases[i];
        const size_t n = row_size(c.type, c.ne[0]) * static_cast<size_t>(c.ne[1] * c.ne[2] * c.ne[3]);
        expected.push_back(test::pattern_bytes(n, static_cast<uint32_t>(i + 1)));
        const std::vector<uint8_t>* bytes = &expected.back();
        if (i % 2 == 0) {
            w.add_tensor(tensor_name(i), c.type, c.ne, c.n_dims,
                         [bytes](void* dst) { std::memcpy(dst, bytes->data(), bytes->size()); });
        } else {
            TensorView v;
            v.type = c.type;
            v.ne = c.ne;
            v.data = const_cast<uint8_t*>(bytes->data());
            w.add_tensor_copy(tensor_name(i), v, c.n_dims);
        }
    }
    ASSERT_TRUE(w.write(dir.file("t.gguf")).is_ok());
    auto f = open_ok(dir.file("t.gguf"));
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->alignment(), alignment);
    EXPECT_EQ(f->get_int_or("general.alignment", 32).value(), static_cast<int64_t>(alignment));
    ASSERT_EQ(f->tensors().size(), std::size(cases));
    for (size_t i = 0; i < std::size(cases); ++i) {
        const GgufTensorInfo& t = f->tensors()[i];
        SCOPED_TRACE(t.name);
        EXPECT_EQ(t.name, tensor_name(i));
        EXPECT_EQ(t.type, cases[i].type);
        EXPECT_EQ(t.ne, cases[i].ne);
        EXPECT_EQ(t.n_dims, cases[i].n_dims);
        EXPECT_EQ(t.n_bytes, expected[i].size());
        EXPECT_EQ(t.offset % alignment, 0u);
        TensorView v = f->view(t);
        EXPECT_EQ(v.type, cases[i].type);
        EXPECT_EQ(v.n_bytes(), expected[i].size());
        // The mapping is page aligned, so the data pointer itself honours the alignment.
        EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % alignment, 0u);
        EXPECT_EQ(std::memcmp(v.data, expected[i].data(), expected[i].size()), 0);
    }
}

TEST(GgufTensors, MappedDataMatchesWrittenDefaultAlignment) { round_trip_tensors(32); }
TEST(GgufTensors, MappedDataMatchesWrittenAlignment64) { round_trip_tensors(64); }
TEST(GgufTensors, MappedDataMatchesWrittenAlignment4096) { round_trip_tensors(4096); }

// A raw file with general.alignment = 64: padding and offsets follow 64, not the default 32.
TEST(GgufTensors, RawAlignment64Honoured) {
    TempDir dir;
    RawGguf raw;
    raw.alignment = 64;
    raw.kvs.push_back(test::kv_u32("general.alignment", 64));
    raw.tensors.push_back({"x", 1, {16}, 0, 0});   // 64 bytes
    raw.tensors.push_back({"y", 1, {8}, 0, 64});   // 32 bytes
    raw.data_size = 128;
    const auto bytes = raw.build();
    test::write_file(dir.file("a64.gguf"), bytes);
    auto f = open_ok(dir.file("a64.gguf"));
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->alignment(), 64u);
    const size_t data_start = bytes.size() - raw.data_size;
    EXPECT_EQ(data_start % 64, 0u);
    EXPECT_EQ(std::memcmp(f->view(*f->find_tensor("y")).data, bytes.data() + data_start + 64, 32), 0);

    // An offset that would do for the default alignment is rejected under 64.
    raw.tensors[1].offset = 96;
    test::write_file(dir.file("mis.gguf"), raw.build());
    auto mis = GgufFile::open(dir.file("mis.gguf"));
    ASSERT_FALSE(mis.is_ok());
    EXPECT_NE(mis.status().message().find("misaligned"), std::string::npos) << mis.status().message();
}

TEST(GgufWriter, WritesAlignmentKeyOnlyWhenNotDefault) {
    TempDir dir;
    GgufWriter w;
    w.set("general.alignment", GgufValue::u32(128));  // the writer's alignment field wins
    w.alignment = 32;
    ASSERT_TRUE(w.write(dir.file("a.gguf")).is_ok());
    auto f = open_ok(dir.file("a.gguf"));
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->get_int("general.alignment").value(), 32);

    GgufWriter w2;
    ASSERT_TRUE(w2.write(dir.file("b.gguf")).is_ok());
    auto f2 = open_ok(dir.file("b.gguf"));
    ASSERT_NE(f2, nullptr);
    EXPECT_EQ(f2->find("general.alignment"), nullptr);
}

TEST(GgufWriter, RejectsInvalidInputWithAnError) {
    TempDir dir;
    const auto expect_fail = [&](const GgufWriter& w, const std::string& needle) {
        Status st = w.write(dir.file("w.gguf"));
        ASSERT_FALSE(st.is_ok()) << needle;
        EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
        EXPECT_NE(st.message().find(dir.file("w.gguf")), std::string::npos) << st.message();
        EXPECT_FALSE(std::filesystem::exists(dir.file("w.gguf")));
        EXPECT_FALSE(std::filesystem::exists(dir.file("w.gguf.tmp")));
    };
    const auto nop = [](void*) {};
    {
        GgufWriter w;
        w.add_tensor("x", DType::F32, {4, 1, 1, 1}, 1, nop);
        w.add_tensor("x", DType::F32, {4, 1, 1, 1}, 1, nop);
        expect_fail(w, "duplicate tensor name");
    }
    {
        GgufWriter w;
        w.add_tensor("q", DType::Q4_0, {33, 1, 1, 1}, 1, nop);
        expect_fail(w, "block size");
    }
    {
        GgufWriter w;
        TensorView v;
        v.type = DType::Q8_0;
        v.ne = {31, 1, 1, 1};
        w.add_tensor_copy("q", v, 1);  // must not abort on the bad shape
        expect_fail(w, "block size");
    }
    {
        GgufWriter w;
        w.add_tensor("z", DType::F32, {0, 1, 1, 1}, 1, nop);
        expect_fail(w, "not positive");
    }
    {
        GgufWriter w;
        w.add_tensor("k", DType::Q8_K, {256, 1, 1, 1}, 1, nop);
        expect_fail(w, "cannot be stored");
    }
    {
        GgufWriter w;
        w.set("bad", {GgufType::UINT8, uint64_t{300}});
        expect_fail(w, "does not fit");
    }
    {
        GgufWriter w;
        w.set("bad", {GgufType::STRING, uint64_t{1}});
        expect_fail(w, "does not hold a string");
    }
    {
        GgufWriter w;
        w.set("bad", GgufValue::array(GgufType::INT32, {GgufValue::str("x")}));
        expect_fail(w, "array item 0");
    }
    {
        GgufWriter w;
        w.alignment = 48;
        expect_fail(w, "power of 2");
    }
}

TEST(GgufValues, ConversionsAndNames) {
    EXPECT_STREQ(gguf_type_name(GgufType::UINT8), "u8");
    EXPECT_STREQ(gguf_type_name(GgufType::ARRAY), "array");
    EXPECT_STREQ(gguf_type_name(GgufType::FLOAT64), "f64");
    EXPECT_TRUE(GgufValue::u32(1).is_integer());
    EXPECT_FALSE(GgufValue::f32(1).is_integer());
    EXPECT_TRUE(GgufValue::f32(1).is_float());
    EXPECT_EQ(GgufValue::i32(-5).as_int(), -5);
    EXPECT_EQ(GgufValue::u64(~uint64_t{0}).as_int(), std::nullopt);
    EXPECT_EQ(GgufValue::str("x").as_int(), std::nullopt);
    EXPECT_EQ(GgufValue::u32(3).as_float(), 3.0);
    EXPECT_EQ(GgufValue::boolean(true).as_bool(), true);
    EXPECT_EQ(GgufValue::u32(1).as_bool(), std::nullopt);
    EXPECT_EQ(*GgufValue::str("x").as_string(), "x");
    EXPECT_EQ(GgufValue::u32(1).as_string(), nullptr);
    EXPECT_EQ(GgufValue::string_array({"a", "b"}).as_array()->items.size(), 2u);
    EXPECT_EQ(GgufValue::u32(1).as_array(), nullptr);
}

}  // namespace
}  // namespace mvllm
