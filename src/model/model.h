// A loaded model: its config and canonical weights, plus whatever keeps the weight memory alive
// (the mapped GGUF or safetensors files, and tensors the loader had to rewrite).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace mvllm {

struct Model {
    std::string path;
    CheckpointFormat format = CheckpointFormat::Gguf;
    ModelConfig config;
    ModelWeights weights;  // host views: into the mapped files or into `owned`

    std::unique_ptr<GgufFile> gguf;                     // when loaded from GGUF
    std::unique_ptr<SafetensorsCheckpoint> safetensors; // when loaded from a HF folder
    std::vector<std::vector<uint8_t>> owned;            // rewritten tensors

    // The vocabulary, when the checkpoint carries one (GGUF tokenizer.ggml.*, or tokenizer.json
    // in the folder). Models written by make-model carry a placeholder and have none; a
    // tokenizer that fails to load leaves the reason in tokenizer_error (token ids still work).
    std::unique_ptr<Tokenizer> tokenizer;
    std::string tokenizer_error;

    // Total bytes of the weights (the embedding table counted once when tied).
    size_t weight_bytes() const;
};

// `path` is a GGUF file or a Hugging Face checkpoint folder (config.json + safetensors).
// Every tensor of the schema is checked (present, supported type, expected shape); an error names
// the file and the tensor.
Result<std::unique_ptr<Model>> load_model(const std::string& path);

}  // namespace mvllm
