// The loader rejects models that do not match their config, naming the file and the tensor.
#include <unistd.h>

#include "golden_util.h"
#include "io/gguf.h"

namespace mvllm::test {
namespace {

// Rewrites `src` as a new GGUF, letting `edit` drop or reshape tensors and change metadata.
std::string rewrite(const GgufFile& src, const std::string& name,
                    const std::function<bool(GgufTensorInfo&)>& edit_tensor,
                    const std::function<void(GgufWriter&)>& edit_meta = nullptr) {
    GgufWriter w;
    for (const auto& [key, value] : src.metadata())
        if (key != "general.alignment") w.set(key, value);
    if (edit_meta) edit_meta(w);
    for (GgufTensorInfo info : src.tensors()) {
        const TensorView view = src.view(info);
        if (!edit_tensor(info)) continue;
        const size_t bytes = std::min(view.n_bytes(), row_size(info.type, info.ne[0]) * info.ne[1] * info.ne[2] * info.ne[3]);
        w.add_tensor(info.name, info.type, info.ne, info.n_dims, [view, bytes](void* dst) {
            std::memset(dst, 0, bytes);
            std::memcpy(dst, view.data, bytes);
        });
    }
    const std::string path = temp_path(name);
    EXPECT_TRUE(w.write(path).is_ok());
    return path;
}

class Loader : public ::testing::Test {
protected:
    void SetUp() override {
        auto hf = load_model(std::string(MVLLM_FIXTURE_DIR) + "/tiny-qwen2");
        ASSERT_TRUE(hf.is_ok()) << hf.status().message();
        ThreadPool pool(2);
        base_ = temp_path("loader-base.gguf");
        ASSERT_TRUE(convert_model(**hf, base_, FileType::Q8_0, pool).is_ok());
        auto f = GgufFile::open(base_);
        ASSERT_TRUE(f.is_ok());
        file_ = std::move(f).value();
    }
    void TearDown() override { std::filesystem::remove(base_); }
    void expect_error(const std::string& path, const std::string& text) {
        auto m = load_model(path);
        ASSERT_FALSE(m.is_ok());
        EXPECT_NE(m.status().message().find(path), std::string::npos) << m.status().message();
        EXPECT_NE(m.status().message().find(text), std::string::npos) << m.status().message();
        std::filesystem::remove(path);
    }
    std::string base_;
    std::unique_ptr<GgufFile> file_;
};

TEST_F(Loader, UnchangedRewriteLoads) {
    const std::string path = rewrite(*file_, "same.gguf", [](GgufTensorInfo&) { return true; });
    auto m = load_model(path);
    EXPECT_TRUE(m.is_ok()) << m.status().message();
    std::filesystem::remove(path);
}

TEST_F(Loader, MissingTensor) {
    expect_error(rewrite(*file_, "missing.gguf", [](GgufTensorInfo& t) { return t.name != "blk.1.ffn_up.weight"; }),
                 "missing tensor blk.1.ffn_up.weight");
}

TEST_F(Loader, WrongShape) {
    expect_error(rewrite(*file_, "shape.gguf",
                         [](GgufTensorInfo& t) {
                             if (t.name == "blk.0.attn_k.weight") t.ne[1] = 64;  // kv_dim is 32
                             return true;
                         }),
                 "blk.0.attn_k.weight has shape [224, 64]");
}

TEST_F(Loader, UnsupportedArchitecture) {
    expect_error(rewrite(*file_, "arch.gguf", [](GgufTensorInfo&) { return true; },
                         [](GgufWriter& w) { w.set("general.architecture", GgufValue::str("mamba")); }),
                 "architecture \"mamba\" is not supported");
}

TEST_F(Loader, HeadCountsThatDoNotDivide) {
    expect_error(rewrite(*file_, "heads.gguf", [](GgufTensorInfo&) { return true; },
                         [](GgufWriter& w) { w.set("qwen2.attention.head_count_kv", GgufValue::u32(3)); }),
                 "not a multiple of the KV head count");
}

TEST_F(Loader, MetadataOfTheWrongType) {
    const std::string path = rewrite(*file_, "nokey.gguf", [](GgufTensorInfo&) { return true; },
                                     [](GgufWriter& w) { w.set("qwen2.block_count", GgufValue::str("two")); });
    expect_error(path, "qwen2.block_count");
}

}  // namespace
}  // namespace mvllm::test
