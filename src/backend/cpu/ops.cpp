#include "backend/cpu/ops.h"

#include <cmath>
#include <vector>

#include "core/status.h"

namespace mvllm::cpu {

void load_row(const TensorView& x, int64_t row, float* dst) {
    dequantize_row(x.type, x.row(row), dst, x.ne[0]);
}

void store_row(const TensorView& x, int64_t row, const float* src) {
    MVLLM_CHECK(x.type == DType::F32 || x.type == DType::F16) << type_name(x.type);
    quantize_row(x.type, src, x.row(row), x.ne[0]);
}

namespace {
// Runs fn(row, scratch[width]) over all rows on the pool.
template <typename Fn>
void for_each_row(ThreadPool& pool, int64_t n_rows, int64_t width, Fn fn) {
    pool.parallel_for(n_rows, [&](int64_t begin, int64_t end) {
        std::vector<float> a(width), b(width);
        for (int64_t r = begin; r < end; ++r) fn(r, a.data(), b.data());
    });
}
}  // namespace

void embed(ThreadPool& pool, const TensorView& table, const int32_t* ids, const TensorView& out) {
    const int64_t width = table.ne[0];
    for_each_row(pool, out.ne[1], width, [&](int64_t r, float* a, float*) {
        dequantize_row(table.type, table.row(ids[r]), a, width);
        store_row(out, r, a);
    });
}

void rms_norm(ThreadPool& pool, const TensorView& x, const TensorView& weight, float eps,
              const TensorView& out) {
    const int64_t width = x.ne[0];
    const float* w = weight.as<float>();
    for_each_row(pool, x.ne[1], width, [&](int64_t r, float* a, float*) {
        load_row(x, r, a);
        double sum = 0;
        for (int64_t i = 0; i < width; ++i) sum += static_cast<double>(a[i]) * a[i];
        const float scale = static_cast<float>(1.0 / std::sqrt(sum / width + eps));
        for (int64_t i = 0; i < width; ++i) a[i] = a[i] * scale * w[i];
        store_row(out, r, a);
    });
}

void add_bias(const TensorView& x, const TensorView& bias) {
    MVLLM_CHECK(x.type == DType::F32 && bias.type == DType::F32);
    const float* b = bias.as<float>();
    for (int64_t r = 0; r < x.ne[1]; ++r) {
        float* row = static_cast<float*>(x.row(r));
        for (int64_t i = 0; i < x.ne[0]; ++i) row[i] += b[i];
    }
}

void rope(ThreadPool& pool, const TensorView& x, int32_t n_heads, int32_t head_dim,
          const int32_t* positions, const float* inv_freq) {
    const int32_t half = head_dim / 2;
    for_each_row(pool, x.ne[1], x.ne[0], [&](int64_t r, float* a, float* cs) {
        load_row(x, r, a);
        // cos in cs[0..half), sin in cs[half..head_dim): computed once per row, used by every head.
        for (int32_t i = 0; i < half; ++i) {
            const double angle = static_cast<double>(positions[r]) * inv_freq[i];
            cs[i] = static_cast<float>(std::cos(angle));
            cs[half + i] = static_cast<float>(std::sin(angle));
        }
        for (int32_t h = 0; h < n_heads; ++h) {
            float* v = a + static_cast<int64_t>(h) * head_dim;
            for (int32_t i = 0; i < half; ++i) {
                const float x0 = v[i], x1 = v[i + half];
                v[i] = x0 * cs[i] - x1 * cs[half + i];
                v[i + half] = x1 * cs[i] + x0 * cs[half + i];
            }
        }
        store_row(x, r, a);
    });
}

void silu_mul(ThreadPool& pool, const TensorView& gate, const TensorView& up, const TensorView& out) {
    const int64_t width = gate.ne[0];
    for_each_row(pool, gate.ne[1], width, [&](int64_t r, float* g, float* u) {
        load_row(gate, r, g);
        load_row(up, r, u);
        for (int64_t i = 0; i < width; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
        store_row(out, r, g);
    });
}

void add(const TensorView& acc, const TensorView& x) {
    MVLLM_CHECK(acc.type == DType::F32 && x.type == DType::F32);
    float* a = acc.as<float>();
    const float* b = x.as<float>();
    const int64_t n = acc.n_elements();
    for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

}  // namespace mvllm::cpu
