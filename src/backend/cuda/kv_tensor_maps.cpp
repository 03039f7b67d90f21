#include "backend/cuda/kv_tensor_maps.h"

#include <atomic>
#include <climits>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/env.h"

namespace mvllm::cuda {
namespace {

std::atomic<int> forced_tma{-1};  // force_attention_tma

// One layer's K (or V) as a 2-D tensor [rows][head_dim] of 16-bit values, boxes of 16 rows x 64
// values, 128-byte swizzle (attention_mma.cuh's tile layout). False when the driver cannot make it.
bool encode_kv_map(const void* base, int64_t n_rows, int32_t head_dim, CUtensorMap* map) {
    using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
    static void* encode = [] {
        void* f = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            f = nullptr;
        cudaGetLastError();
        return f;
    }();
    if (encode == nullptr) return false;
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(n_rows)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(head_dim) * 2};
    const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(kKvMapRows)};
    const cuuint32_t elem_strides[2] = {1, 1};
    return reinterpret_cast<Encode>(encode)(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void*>(base), dims,
                                            strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

bool attention_tma_enabled() {
    static const bool sm90 = [] {
        int device = 0, major = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
        cudaGetLastError();
        return major >= 9;
    }();
    static const bool env_on = env_int("MVLLM_ATTN_TMA", 1) != 0;
    const int forced = forced_tma.load();
    return sm90 && (forced >= 0 ? forced == 1 : env_on);
}

void force_attention_tma(int mode) { forced_tma.store(mode); }

bool kv_tensor_maps(const DeviceKvLayer& kv, KvTensorMaps* maps) {
    if (!attention_tma_enabled() || !tma_head_dim(kv.head_dim) || kv.block_size % kKvMapRows != 0 ||
        kv.n_rows <= 0 || kv.n_rows > INT32_MAX)
        return false;
    using Key = std::tuple<const void*, const void*, int64_t, int32_t>;
    static std::mutex mu;
    static std::map<Key, std::pair<bool, KvTensorMaps>> made;
    std::lock_guard<std::mutex> lock(mu);
    auto [it, fresh] = made.try_emplace(Key{kv.k, kv.v, kv.n_rows, kv.head_dim});
    if (fresh)
        it->second.first = encode_kv_map(kv.k, kv.n_rows, kv.head_dim, &it->second.second.k) &&
                           encode_kv_map(kv.v, kv.n_rows, kv.head_dim, &it->second.second.v);
    if (it->second.first) *maps = it->second.second;
    return it->second.first;
}

}  // namespace mvllm::cuda
