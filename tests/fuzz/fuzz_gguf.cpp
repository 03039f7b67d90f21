// Fuzz target: a GGUF file from arbitrary bytes. The reader must validate it or refuse it with a
// Status; what it accepts must be safe to use: every tensor's bytes lie inside the mapping, and
// the model loader (config from metadata, tokenizer.ggml.*, weight schema) runs on it too.
#include <memory>

#include "fuzz_util.h"
#include "io/gguf.h"
#include "model/config.h"
#include "model/model.h"

using namespace mvllm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static fuzz::MemFile file;
    const std::string& path = file.write(data, size);

    auto gguf = GgufFile::open(path);
    if (!gguf) {
        FUZZ_REQUIRE(!gguf.status().message().empty(), "an error has a message");
        return 0;
    }
    const GgufFile& g = **gguf;
    // Every accepted tensor is readable from its first to its last byte (ASan sees an overrun).
    volatile uint8_t sink = 0;
    for (const GgufTensorInfo& info : g.tensors()) {
        const TensorView view = g.view(info);
        FUZZ_REQUIRE(view.n_bytes() == info.n_bytes, "view size matches the tensor info");
        if (info.n_bytes == 0) continue;
        const auto* bytes = static_cast<const uint8_t*>(view.data);
        sink = sink + bytes[0] + bytes[info.n_bytes - 1];
    }
    for (const auto& [key, value] : g.metadata()) {
        (void)value.as_int();
        (void)value.as_float();
        (void)value.as_string();
    }
    auto config = config_from_gguf(g);
    if (config) (void)config->validate();

    // The whole loader: config, tokenizer and weight schema; a refusal is fine, a crash is not.
    auto model = load_model(path);
    if (model && (*model)->tokenizer) {
        const Tokenizer& tok = *(*model)->tokenizer;
        const std::vector<int32_t> ids = tok.encode("Mr. Darcy <|im_end|> caf\xc3\xa9", true, true);
        for (int32_t id : ids) FUZZ_REQUIRE(id >= 0 && id < tok.n_vocab(), "encode returns vocabulary ids");
        (void)tok.decode(ids);
    }
    return 0;
}
