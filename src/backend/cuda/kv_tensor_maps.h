// The KV cache as the copy engine (TMA) sees it: each layer's K and V are 2-D tensors
// [rows][head_dim] of 16-bit values (rows: the cache's (block, KV head, token) rows, KvCache's HND
// layout), read in boxes of 16 rows x 64 values with the 128-byte swizzle. A 16-token tile of one
// KV head lies in one block, i.e. 16 consecutive rows: one box (head_dim 64) or two (128). The
// decode attention (attention_mma.cuh) takes its K/V tiles this way where the cache allows it.
#pragma once

#include <cuda.h>  // CUtensorMap and the encoder's enums (the function itself: a driver entry point)
#include <cuda_runtime.h>

#include "backend/cuda/device_batch.h"

namespace mvllm::cuda {

struct KvTensorMaps {
    CUtensorMap k, v;
};
constexpr int kKvMapRows = 16;  // rows per box: the decode kernel's tile of tokens

// Head dims whose rows the boxes cover (one or two 128-byte boxes per row).
__host__ __device__ constexpr bool tma_head_dim(int hd) { return hd == 64 || hd == 128; }

// Whether the decode kernel's tiles come by tensor copies where the cache allows it: on sm_90 and
// later, unless MVLLM_ATTN_TMA=0 (cp.async everywhere, for A/B measurements) or a test forced it
// (force_attention_tma, attention.cuh).
bool attention_tma_enabled();

// The maps of a layer's K and V, made once per (cache storage, size) and kept. False where the
// decode kernel must use cp.async: tensor copies off, a head_dim or block size the boxes do not
// fit, rows past int32, or a driver without the encoder.
bool kv_tensor_maps(const DeviceKvLayer& kv, KvTensorMaps* maps);

}  // namespace mvllm::cuda
