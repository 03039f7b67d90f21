#include "core/tensor.h"

namespace mvllm {

std::string shape_string(const std::array<int64_t, 4>& ne) {
    int n_dims = 4;
    while (n_dims > 1 && ne[n_dims - 1] == 1) --n_dims;
    std::string s = "[";
    for (int i = 0; i < n_dims; ++i) {
        if (i) s += ", ";
        s += std::to_string(ne[i]);
    }
    return s + "]";
}

}  // namespace mvllm
