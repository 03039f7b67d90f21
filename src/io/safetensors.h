// safetensors: u64 header length N | N bytes of JSON {"name": {"dtype": "F32", "shape": [..],
// "data_offsets": [begin, end]}, "__metadata__": {...}} | raw little-endian data (offsets relative
// to the end of the header). A sharded checkpoint has model.safetensors.index.json whose
// "weight_map" names the shard file of each tensor.
//
// Supported dtypes: F32, F16, BF16. Shapes are row-major (outermost first); views expose them in
// the GGUF order (ne[0] innermost). Every header is validated against the file size.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace mvllm {

struct SafetensorInfo {
    std::string name;
    TensorView view;  // points into the mapped shard
    int n_dims = 1;
    std::string file;  // the shard it lives in
};

class SafetensorsCheckpoint {
public:
    // path: a .safetensors file, or a folder holding model.safetensors or
    // model.safetensors.index.json with its shards.
    static Result<std::unique_ptr<SafetensorsCheckpoint>> open(const std::string& path);
    ~SafetensorsCheckpoint();

    const std::vector<SafetensorInfo>& tensors() const { return tensors_; }
    const SafetensorInfo* find(std::string_view name) const;

private:
    SafetensorsCheckpoint() = default;
    struct Mapping;
    std::vector<std::unique_ptr<Mapping>> mappings_;
    std::vector<SafetensorInfo> tensors_;
    friend class SafetensorsParser;
};

}  // namespace mvllm
