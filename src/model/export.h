// Writing models as GGUF: the per-tensor type policy of each file type (q4_k_m mixes Q4_K and
// Q6_K), the architecture metadata, and the GGUF tensor names and Q/K row order, shared by
// `mvllm convert` (from a loaded checkpoint) and `mvllm make-model` (random weights).
#pragma once

#include <functional>
#include <string>

#include "core/thread_pool.h"
#include "model/model.h"

namespace mvllm {

enum class FileType { F32, F16, BF16, Q8_0, Q4_0, Q4_K_M };
bool parse_file_type(const std::string& name, FileType* out);  // "f32", "q4_k_m", ...
const char* file_type_name(FileType type);

// The stored type of one tensor under a file type; falls back to a type whose block fits the
// row length (e.g. Q4_K needs rows of multiples of 256).
DType tensor_type_for(FileType file_type, WeightId id, int64_t n_in, bool tied_embeddings);

// Fills a GGUF tensor's bytes: dst holds rows of the tensor's type in GGUF row order.
using TensorFill = std::function<void(const WeightSlot& slot, DType type, void* dst)>;

// Writes config metadata (+ a placeholder vocabulary of n_vocab tokens) and every tensor of the
// schema, in GGUF names. `fill` is asked for each tensor present in `present` (a slot with a null
// view is skipped unless required).
// With a tokenizer, its vocabulary and chat template are written (tokenizer.ggml.*); without one,
// a placeholder vocabulary of n_vocab tokens.
Status write_model_gguf(const std::string& path, const ModelConfig& config, FileType file_type,
                        const ModelWeights& present, const TensorFill& fill, const std::string& name,
                        const Tokenizer* tokenizer = nullptr);

// Converts a loaded model (any format) to a GGUF file of `file_type`.
Status convert_model(const Model& model, const std::string& out_path, FileType file_type, ThreadPool& pool);

// Presets: the real geometries of BENCHMARKS.md ("qwen2.5-0.5b", "qwen2.5-7b", "llama-3.2-1b", ...).
Result<ModelConfig> preset_config(const std::string& name);
std::vector<std::string> preset_names();
// Writes a random-weight model of a preset geometry (norms 1, small biases, random quant payload).
Status make_random_model(const ModelConfig& config, const std::string& out_path, FileType file_type,
                         uint64_t seed, ThreadPool& pool);

}  // namespace mvllm
