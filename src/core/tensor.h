// A non-owning view of a tensor: element type, shape and a data pointer (host or device memory).
//
// Shapes follow the GGUF convention: ne[0] is the innermost (contiguous) dimension. A weight
// matrix for y = W x with x of length in and y of length out has ne = {in, out, 1, 1}, i.e. the
// row-major [out, in] layout of a Hugging Face checkpoint. Quantised rows are stored as blocks.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/types.h"

namespace mvllm {

struct TensorView {
    DType type = DType::F32;
    std::array<int64_t, 4> ne = {0, 1, 1, 1};
    void* data = nullptr;

    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
    size_t row_bytes() const { return row_size(type, ne[0]); }
    size_t n_bytes() const { return row_bytes() * static_cast<size_t>(n_rows()); }
    template <typename T>
    T* as() const { return static_cast<T*>(data); }
    void* row(int64_t i) const { return static_cast<char*>(data) + row_bytes() * static_cast<size_t>(i); }
};

std::string shape_string(const std::array<int64_t, 4>& ne);

}  // namespace mvllm
