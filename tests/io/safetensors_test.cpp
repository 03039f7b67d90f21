// safetensors: single files, folders, sharded checkpoints and malformed headers.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/half.h"
#include "io_test_util.h"

namespace mvllm {
namespace {

using test::TempDir;

// u64 header length | header JSON | data. Like the reference writer, the header is padded with
// spaces so that the data starts 8-byte aligned.
std::vector<uint8_t> safetensors_bytes(std::string header, const std::vector<uint8_t>& data) {
    while (header.size() % 8 != 0) header += ' ';
    test::Bytes out;
    out.put<uint64_t>(header.size());
    out.b.insert(out.b.end(), header.begin(), header.end());
    out.raw(data);
    return out.b;
}

std::vector<uint8_t> f32_bytes(std::initializer_list<float> values) {
    std::vector<uint8_t> out(values.size() * 4);
    std::memcpy(out.data(), std::data(values), out.size());
    return out;
}

// Three tensors: w f32 [2, 3] (24 bytes), h f16 [4] (8 bytes), s bf16 scalar (2 bytes).
std::vector<uint8_t> three_tensor_file(std::vector<uint8_t>* data_out = nullptr) {
    const std::string header =
        R"({"__metadata__": {"format": "pt"},
            "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
            "h": {"dtype": "F16", "shape": [4], "data_offsets": [24, 32]},
            "s": {"dtype": "BF16", "shape": [], "data_offsets": [32, 34]}})";
    std::vector<uint8_t> data = f32_bytes({1, 2, 3, 4, 5, 6});
    for (float x : {0.5f, -1.0f, 2.0f, 65504.0f}) {
        const f16_t h = f32_to_f16(x);
        data.push_back(static_cast<uint8_t>(h));
        data.push_back(static_cast<uint8_t>(h >> 8));
    }
    const bf16_t b = f32_to_bf16(3.0f);
    data.push_back(static_cast<uint8_t>(b));
    data.push_back(static_cast<uint8_t>(b >> 8));
    if (data_out) *data_out = data;
    return safetensors_bytes(header, data);
}

void check_three_tensors(const SafetensorsCheckpoint& ckpt, const std::string& file) {
    ASSERT_EQ(ckpt.tensors().size(), 3u);
    const SafetensorInfo* w = ckpt.find("w");
    const SafetensorInfo* h = ckpt.find("h");
    const SafetensorInfo* s = ckpt.find("s");
    ASSERT_TRUE(w && h && s);
    EXPECT_EQ(ckpt.find("__metadata__"), nullptr);
    EXPECT_EQ(ckpt.find("missing"), nullptr);
    // Row-major [2, 3] becomes ne = {3, 2}: ne[0] innermost.
    EXPECT_EQ(w->view.type, DType::F32);
    EXPECT_EQ(w->view.ne, (std::array<int64_t, 4>{3, 2, 1, 1}));
    EXPECT_EQ(w->n_dims, 2);
    EXPECT_EQ(w->file, file);
    const float* wf = w->view.as<float>();
    EXPECT_EQ(wf[0], 1.0f);
    EXPECT_EQ(wf[5], 6.0f);
    EXPECT_EQ(static_cast<const float*>(w->view.row(1))[0], 4.0f);
    EXPECT_EQ(h->view.type, DType::F16);
    EXPECT_EQ(h->view.ne, (std::array<int64_t, 4>{4, 1, 1, 1}));
    EXPECT_EQ(f16_to_f32(h->view.as<f16_t>()[3]), 65504.0f);
    EXPECT_EQ(s->view.type, DType::BF16);
    EXPECT_EQ(s->n_dims, 1);
    EXPECT_EQ(s->view.n_elements(), 1);
    EXPECT_EQ(bf16_to_f32(s->view.as<bf16_t>()[0]), 3.0f);
    // Tensors come in file (offset) order.
    EXPECT_EQ(ckpt.tensors()[0].name, "w");
    EXPECT_EQ(ckpt.tensors()[2].name, "s");
}

std::unique_ptr<SafetensorsCheckpoint> open_ok(const std::string& path) {
    auto r = SafetensorsCheckpoint::open(path);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    if (!r.is_ok()) return nullptr;
    return std::move(r).value();
}

void expect_error(const std::string& path, const std::string& needle, const std::string& names = "") {
    auto r = SafetensorsCheckpoint::open(path);
    ASSERT_FALSE(r.is_ok()) << "expected an error containing '" << needle << "'";
    const std::string& msg = r.status().message();
    EXPECT_NE(msg.find(needle), std::string::npos) << "expected '" << needle << "' in: " << msg;
    EXPECT_NE(msg.find(names.empty() ? path : names), std::string::npos) << msg;
}

TEST(Safetensors, SingleFile) {
    TempDir dir;
    const std::string path = dir.file("x.safetensors");
    test::write_file(path, three_tensor_file());
    auto ckpt = open_ok(path);
    ASSERT_NE(ckpt, nullptr);
    check_three_tensors(*ckpt, path);
}

TEST(Safetensors, FolderWithModelSafetensors) {
    TempDir dir;
    test::write_file(dir.file("model.safetensors"), three_tensor_file());
    auto ckpt = open_ok(dir.path());
    ASSERT_NE(ckpt, nullptr);
    check_three_tensors(*ckpt, dir.file("model.safetensors"));
}

TEST(Safetensors, ShardedWithIndex) {
    TempDir dir;
    test::write_file(dir.file("model-00001-of-00002.safetensors"),
                     safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                           "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                                       f32_bytes({1, 2, 3})));
    test::write_file(dir.file("model-00002-of-00002.safetensors"),
                     safetensors_bytes(R"({"c": {"dtype": "F32", "shape": [1, 1], "data_offsets": [0, 4]}})",
                                       f32_bytes({9})));
    test::write_file(dir.file("model.safetensors.index.json"),
                     std::string_view(R"({"metadata": {"total_size": 16}, "weight_map": {
                         "a": "model-00001-of-00002.safetensors",
                         "b": "model-00001-of-00002.safetensors",
                         "c": "model-00002-of-00002.safetensors"}})"));
    for (const std::string& path : {dir.path(), dir.file("model.safetensors.index.json")}) {
        auto ckpt = open_ok(path);
        ASSERT_NE(ckpt, nullptr);
        ASSERT_EQ(ckpt->tensors().size(), 3u);
        const SafetensorInfo* b = ckpt->find("b");
        const SafetensorInfo* c = ckpt->find("c");
        ASSERT_TRUE(b && c);
        EXPECT_EQ(b->view.as<float>()[0], 3.0f);
        EXPECT_EQ(c->view.as<float>()[0], 9.0f);
        EXPECT_EQ(c->n_dims, 2);
        EXPECT_EQ(b->file, dir.file("model-00001-of-00002.safetensors"));
        EXPECT_EQ(c->file, dir.file("model-00002-of-00002.safetensors"));
    }
}

TEST(Safetensors, ZeroSizedTensorIsAllowed) {
    TempDir dir;
    const std::string path = dir.file("z.safetensors");
    test::write_file(path, safetensors_bytes(R"({"e": {"dtype": "F32", "shape": [0, 4], "data_offsets": [0, 0]},
                                                 "x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                                             f32_bytes({5})));
    auto ckpt = open_ok(path);
    ASSERT_NE(ckpt, nullptr);
    EXPECT_EQ(ckpt->find("e")->view.n_elements(), 0);
    EXPECT_EQ(ckpt->find("x")->view.as<float>()[0], 5.0f);
}

TEST(SafetensorsMalformed, MissingPathAndEmptyFolder) {
    TempDir dir;
    expect_error(dir.file("nope.safetensors"), "cannot open");
    expect_error(dir.path(), "neither");
}

TEST(SafetensorsMalformed, BadHeaderLength) {
    TempDir dir;
    const std::string path = dir.file("x.safetensors");
    std::vector<uint8_t> bytes = three_tensor_file();
    const uint64_t huge = bytes.size();  // one past what follows the length field
    std::memcpy(bytes.data(), &huge, 8);
    test::write_file(path, bytes);
    expect_error(path, "bad header length");
    const uint64_t absurd = ~uint64_t{0};
    std::memcpy(bytes.data(), &absurd, 8);
    test::write_file(path, bytes);
    expect_error(path, "bad header length");
    test::write_file(path, std::vector<uint8_t>{1, 2, 3});
    expect_error(path, "truncated");
    test::write_file(path, std::vector<uint8_t>{});
    expect_error(path, "truncated");
}

TEST(SafetensorsMalformed, TruncatedAtEveryLength) {
    TempDir dir;
    const std::string path = dir.file("x.safetensors");
    const std::vector<uint8_t> full = three_tensor_file();
    for (size_t n = 0; n < full.size(); ++n) {
        test::write_file(path, full.data(), n);
        auto r = SafetensorsCheckpoint::open(path);
        ASSERT_FALSE(r.is_ok()) << "prefix of " << n << " bytes opened";
        EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
    }
}

TEST(SafetensorsMalformed, HeaderNotValidJson) {
    TempDir dir;
    const std::string path = dir.file("x.safetensors");
    test::write_file(path, safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [1], )", f32_bytes({1})));
    expect_error(path, "not valid JSON");
    test::write_file(path, safetensors_bytes(R"([1, 2])", {}));
    expect_error(path, "not an object");
    test::write_file(path, safetensors_bytes(R"({"w": 5})", {}));
    expect_error(path, "tensor 'w'");
    test::write_file(path, safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
                                             f32_bytes({1})));
    expect_error(path, "shape entry 0");
    test::write_file(path, safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})",
                                             f32_bytes({1})));
    expect_error(path, "data_offsets");
    test::write_file(path,
                     safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [1,1,1,1,1], "data_offsets": [0, 4]}})",
                                       f32_bytes({1})));
    expect_error(path, "5 dimensions");
}

TEST(SafetensorsMalformed, OffsetsPastEnd) {
    TempDir dir;
    const std::string path = dir.file("x.safetensors");
    test::write_file(path, safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                                             f32_bytes({1})));
    expect_error(path, "past the end");
    test::write_file(path, safetensors_bytes(
                               R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [18446744073709551612, 0]}})",
                               f32_bytes({1})));
    expect_error(path, "reversed");
}

TEST(SafetensorsMalformed, OffsetsDisagreeWithDtypeTimesShape) {
    TempDir dir;
    const std::string path = dir.file("x.safetensors");
    test::write_file(path, safetensors_bytes(R"({"w": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 16]}})",
                                             f32_bytes({1, 2, 3, 4})));
    expect_error(path, "needs 8");
    test::write_file(path, safetensors_bytes(
                               R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 8], "data_offsets": [0, 4]}})",
                               f32_bytes({1})));
    expect_error(path, "overflows");
}

TEST(SafetensorsMalformed, OverlappingTensors) {
    TempDir dir;
    const std::string path = dir.file("x.safetensors");
    test::write_file(path, safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                                 "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                                             f32_bytes({1, 2})));
    expect_error(path, "overlap");
}

TEST(SafetensorsMalformed, UnsupportedDtypeNamesTensor) {
    TempDir dir;
    const std::string path = dir.file("x.safetensors");
    test::write_file(path, safetensors_bytes(R"({"ids": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})",
                                             f32_bytes({1, 2})));
    expect_error(path, "tensor 'ids': unsupported dtype 'I64'");
}

TEST(SafetensorsMalformed, MissingShardFile) {
    TempDir dir;
    test::write_file(dir.file("s1.safetensors"),
                     safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                                       f32_bytes({1})));
    test::write_file(dir.file("model.safetensors.index.json"),
                     std::string_view(R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})"));
    expect_error(dir.path(), "cannot open", "s2.safetensors");
}

TEST(SafetensorsMalformed, IndexNamesTensorAbsentFromShard) {
    TempDir dir;
    test::write_file(dir.file("s1.safetensors"),
                     safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                                       f32_bytes({1})));
    test::write_file(dir.file("model.safetensors.index.json"),
                     std::string_view(R"({"weight_map": {"a": "s1.safetensors", "ghost": "s1.safetensors"}})"));
    expect_error(dir.path(), "tensor 'ghost'", "s1.safetensors");
}

TEST(SafetensorsMalformed, BadIndex) {
    TempDir dir;
    const std::string index = dir.file("model.safetensors.index.json");
    test::write_file(index, std::string_view("{not json"));
    expect_error(dir.path(), "not valid JSON", index);
    test::write_file(index, std::string_view(R"({"metadata": {}})"));
    expect_error(dir.path(), "weight_map", index);
    test::write_file(index, std::string_view(R"({"weight_map": {"a": "../escape.safetensors"}})"));
    expect_error(dir.path(), "not a relative path", index);
    test::write_file(index, std::string_view(R"({"weight_map": {"a": 3}})"));
    expect_error(dir.path(), "not a file name", index);
}

TEST(SafetensorsMalformed, TensorInTwoShards) {
    TempDir dir;
    const auto shard = safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                                         f32_bytes({1}));
    test::write_file(dir.file("s1.safetensors"), shard);
    test::write_file(dir.file("s2.safetensors"), shard);
    test::write_file(dir.file("model.safetensors.index.json"),
                     std::string_view(R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})"));
    expect_error(dir.path(), "also in", "s2.safetensors");
}

}  // namespace
}  // namespace mvllm
