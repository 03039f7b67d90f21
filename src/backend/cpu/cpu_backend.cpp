#include "backend/cpu/cpu_backend.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "backend/cpu/ops.h"

namespace mvllm {
namespace {
// {n_heads * head_dim, n_rows} -> {head_dim, n_heads, n_rows}: the shape the attention kernels take.
TensorView as_heads(const TensorView& t, int32_t head_dim) {
    TensorView r = t;
    r.ne = {head_dim, t.ne[0] / head_dim, t.ne[1], 1};
    return r;
}
}  // namespace

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : options_(options),
      pool_(options.n_threads > 0 ? options.n_threads : ThreadPool::hardware_threads()) {}

std::string CpuBackend::name() const {
    return std::string("cpu (") + cpu_isa_name(cpu_isa()) + ", " + std::to_string(pool_.size()) +
           " threads, attention " + attention_variant_name(options_.attention) +
           (options_.batch_invariant ? ", batch-invariant" : "") + ")";
}

Result<DeviceMemory> CpuBackend::memory_info() const {
    std::ifstream in("/proc/meminfo");
    DeviceMemory m;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string key;
        size_t kib = 0;
        fields >> key >> kib;
        if (key == "MemTotal:") m.total = kib * 1024;
        if (key == "MemAvailable:") m.free = kib * 1024;
    }
    if (m.total == 0 || m.free == 0) return make_error("host memory size unknown (no MemTotal/MemAvailable in /proc/meminfo)");
    return m;
}

void CpuBackend::begin(const Batch& batch) {
    batch_ = &batch;
    arena_next_ = 0;
}

TensorView CpuBackend::alloc(DType type, int64_t width, int64_t n_rows) {
    TensorView t;
    t.type = type;
    t.ne = {width, n_rows, 1, 1};
    if (arena_next_ == arena_.size()) arena_.emplace_back();
    std::vector<uint8_t>& slot = arena_[arena_next_++];
    // 64 spare bytes: SIMD kernels may read a vector past the end of a row.
    if (slot.size() < t.n_bytes() + 64) slot.resize(t.n_bytes() + 64);
    t.data = slot.data();
    return t;
}

void CpuBackend::embed(const TensorView& table, const TensorView& out) {
    cpu::embed(pool_, table, batch_->token_ids.data(), out);
}

void CpuBackend::rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& out) {
    cpu::rms_norm(pool_, x, weight, eps, out);
}

void CpuBackend::matmul(const TensorView& w, const TensorView& x, const TensorView& bias,
                        const TensorView& out) {
    mvllm::matmul(pool_, w, x, out, matmul_scratch_, cpu_isa(), options_.batch_invariant);
    if (bias.data) cpu::add_bias(out, bias);
}

void CpuBackend::rope(const TensorView& x, int32_t n_heads, const RopeParams& rope) {
    cpu::rope(pool_, x, n_heads, rope.head_dim, batch_->positions.data(), rope.inv_freq);
}

void CpuBackend::kv_store(KvCache& cache, int32_t layer, const TensorView& k, const TensorView& v) {
    const KvLayerView kv = cache.layer(layer);
    mvllm::kv_store(*batch_, as_heads(k, kv.head_dim), as_heads(v, kv.head_dim), kv);
}

void CpuBackend::attention(KvCache& cache, int32_t layer, const TensorView& q, const TensorView& out,
                           int32_t n_heads, float scale) {
    const KvLayerView kv = cache.layer(layer);
    mvllm::attention(pool_, options_.attention, *batch_, kv, as_heads(q, kv.head_dim),
                     as_heads(out, kv.head_dim), n_heads, scale, attention_scratch_, options_.batch_invariant);
}

void CpuBackend::silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out) {
    cpu::silu_mul(pool_, gate, up, out);
}

void CpuBackend::add(const TensorView& acc, const TensorView& x) { cpu::add(acc, x); }

void CpuBackend::gather_logit_rows(const TensorView& x, const TensorView& out) {
    for (size_t j = 0; j < batch_->logit_rows.size(); ++j)
        std::memcpy(out.row(static_cast<int64_t>(j)), x.row(batch_->logit_rows[j]), x.row_bytes());
}

void CpuBackend::to_host(const TensorView& x, float* dst) {
    for (int64_t r = 0; r < x.n_rows(); ++r) cpu::load_row(x, r, dst + r * x.ne[0]);
}

}  // namespace mvllm
