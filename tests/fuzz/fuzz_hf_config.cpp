// Fuzz target: a Hugging Face config.json from arbitrary bytes (both RoPE dialects). A config the
// parser accepts and validate() passes must give a usable RoPE table.
#include <cmath>

#include "fuzz_util.h"
#include "model/config.h"

using namespace mvllm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    auto config = config_from_hf_json_text(text, "config.json");
    if (!config) {
        FUZZ_REQUIRE(!config.status().message().empty(), "an error has a message");
        return 0;
    }
    (void)config->summary();
    if (!config->validate()) return 0;
    FUZZ_REQUIRE(config->n_heads > 0 && config->n_kv_heads > 0 && config->head_dim > 0, "validated sizes are positive");
    FUZZ_REQUIRE(config->n_heads % config->n_kv_heads == 0, "validated GQA ratio is whole");
    if (config->head_dim <= 4096) {
        const std::vector<float> inv_freq = rope_inv_freq(*config);
        FUZZ_REQUIRE(inv_freq.size() == static_cast<size_t>(config->head_dim / 2), "one frequency per pair");
    }
    return 0;
}
