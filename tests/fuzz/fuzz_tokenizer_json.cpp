// Fuzz target: tokenizer.json + tokenizer_config.json from arbitrary bytes, loaded the way a
// Hugging Face checkpoint folder is. Input: tokenizer.json [kSeparator tokenizer_config.json]
// (no separator: the folder has no tokenizer_config.json). A tokenizer that loads must encode and
// decode, and its special ids lie inside the vocabulary.
#include <cstdio>
#include <filesystem>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

using namespace mvllm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string dir = [] {
        const std::string d = fuzz::scratch_dir() + "/tokenizer-json";
        std::filesystem::create_directories(d);
        return d;
    }();
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const size_t at = input.find(fuzz::kSeparator);
    const std::string config_path = dir + "/tokenizer_config.json";
    fuzz::write_file(dir + "/tokenizer.json", input.substr(0, at));
    if (at == std::string_view::npos) std::remove(config_path.c_str());
    else fuzz::write_file(config_path, input.substr(at + fuzz::kSeparator.size()));

    auto tok = Tokenizer::from_hf_dir(dir);
    if (!tok) {
        FUZZ_REQUIRE(!tok.status().message().empty(), "an error has a message");
        return 0;
    }
    const Tokenizer& t = **tok;
    const int32_t n = t.n_vocab();
    FUZZ_REQUIRE(n > 0, "a loaded vocabulary is not empty");
    for (int32_t id : {t.bos_id, t.eos_id}) FUZZ_REQUIRE(id >= -1 && id < n, "special ids inside the vocabulary");
    for (int32_t id : t.stop_ids) FUZZ_REQUIRE(id >= 0 && id < n, "stop ids inside the vocabulary");
    for (const char* text : {"Hello world", " caf\xc3\xa9 123 <|im_end|>\n\n", "\xff\xfe ok"}) {
        for (bool special : {false, true}) {
            const std::vector<int32_t> ids = t.encode(text, true, special);
            for (int32_t id : ids) FUZZ_REQUIRE(id >= 0 && id < n, "encode returns vocabulary ids");
            (void)t.decode(ids, special);
        }
    }
    return 0;
}
