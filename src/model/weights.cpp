#include "model/weights.h"

#include <cstring>

namespace mvllm {

std::vector<WeightSlot> weight_slots(const ModelConfig& c, ModelWeights* w) {
    using A = std::array<int64_t, 4>;
    const int64_t e = c.n_embd, q = c.q_dim(), kv = c.kv_dim(), ff = c.n_ff, v = c.n_vocab;
    std::vector<WeightSlot> slots = {
        {WeightId::TokenEmbd, -1, &w->token_embd, A{e, v, 1, 1}, 2, true},
        {WeightId::OutputNorm, -1, &w->output_norm, A{e, 1, 1, 1}, 1, true},
        {WeightId::Output, -1, &w->output, A{e, v, 1, 1}, 2, !c.tied_embeddings},
        {WeightId::RopeFreqs, -1, &w->rope_freqs, A{c.head_dim / 2, 1, 1, 1}, 1, false},
    };
    w->layers.resize(c.n_layers);
    for (int l = 0; l < c.n_layers; ++l) {
        LayerWeights& L = w->layers[l];
        const bool b = c.qkv_bias;
        const WeightSlot layer_slots[] = {
            {WeightId::AttnNorm, l, &L.attn_norm, A{e, 1, 1, 1}, 1, true},
            {WeightId::Wq, l, &L.wq, A{e, q, 1, 1}, 2, true},
            {WeightId::Wk, l, &L.wk, A{e, kv, 1, 1}, 2, true},
            {WeightId::Wv, l, &L.wv, A{e, kv, 1, 1}, 2, true},
            {WeightId::Bq, l, &L.bq, A{q, 1, 1, 1}, 1, b},
            {WeightId::Bk, l, &L.bk, A{kv, 1, 1, 1}, 1, b},
            {WeightId::Bv, l, &L.bv, A{kv, 1, 1, 1}, 1, b},
            {WeightId::Wo, l, &L.wo, A{q, e, 1, 1}, 2, true},
            {WeightId::FfnNorm, l, &L.ffn_norm, A{e, 1, 1, 1}, 1, true},
            {WeightId::WGate, l, &L.w_gate, A{e, ff, 1, 1}, 2, true},
            {WeightId::WUp, l, &L.w_up, A{e, ff, 1, 1}, 2, true},
            {WeightId::WDown, l, &L.w_down, A{ff, e, 1, 1}, 2, true},
        };
        slots.insert(slots.end(), std::begin(layer_slots), std::end(layer_slots));
    }
    return slots;
}

namespace {
struct NameRow {
    WeightId id;
    const char* gguf;  // "%d" is the layer
    const char* hf;
};
// clang-format off
const NameRow kNames[] = {
    {WeightId::TokenEmbd,  "token_embd.weight",        "model.embed_tokens.weight"},
    {WeightId::OutputNorm, "output_norm.weight",       "model.norm.weight"},
    {WeightId::Output,     "output.weight",            "lm_head.weight"},
    {WeightId::RopeFreqs,  "rope_freqs.weight",        "rope_freqs.weight"},
    {WeightId::AttnNorm,   "blk.%d.attn_norm.weight",  "model.layers.%d.input_layernorm.weight"},
    {WeightId::Wq,         "blk.%d.attn_q.weight",     "model.layers.%d.self_attn.q_proj.weight"},
    {WeightId::Wk,         "blk.%d.attn_k.weight",     "model.layers.%d.self_attn.k_proj.weight"},
    {WeightId::Wv,         "blk.%d.attn_v.weight",     "model.layers.%d.self_attn.v_proj.weight"},
    {WeightId::Bq,         "blk.%d.attn_q.bias",       "model.layers.%d.self_attn.q_proj.bias"},
    {WeightId::Bk,         "blk.%d.attn_k.bias",       "model.layers.%d.self_attn.k_proj.bias"},
    {WeightId::Bv,         "blk.%d.attn_v.bias",       "model.layers.%d.self_attn.v_proj.bias"},
    {WeightId::Wo,         "blk.%d.attn_output.weight","model.layers.%d.self_attn.o_proj.weight"},
    {WeightId::FfnNorm,    "blk.%d.ffn_norm.weight",   "model.layers.%d.post_attention_layernorm.weight"},
    {WeightId::WGate,      "blk.%d.ffn_gate.weight",   "model.layers.%d.mlp.gate_proj.weight"},
    {WeightId::WUp,        "blk.%d.ffn_up.weight",     "model.layers.%d.mlp.up_proj.weight"},
    {WeightId::WDown,      "blk.%d.ffn_down.weight",   "model.layers.%d.mlp.down_proj.weight"},
};
// clang-format on
}  // namespace

std::string weight_name(CheckpointFormat format, WeightId id, int layer) {
    for (const NameRow& row : kNames) {
        if (row.id != id) continue;
        const char* pattern = format == CheckpointFormat::Gguf ? row.gguf : row.hf;
        char buf[128];
        std::snprintf(buf, sizeof(buf), pattern, layer);
        return buf;
    }
    return {};
}

// GGUF row r of head h (r = 2i + j, j in {0,1}) holds HF row j * head_dim/2 + i of that head.
void permute_qk_rows(const void* src, void* dst, int n_heads, int head_dim, size_t row_bytes,
                     QkPermute direction) {
    const int half = head_dim / 2;
    const auto* s = static_cast<const uint8_t*>(src);
    auto* d = static_cast<uint8_t*>(dst);
    for (int h = 0; h < n_heads; ++h)
        for (int i = 0; i < half; ++i)
            for (int j = 0; j < 2; ++j) {
                const size_t gguf_row = static_cast<size_t>(h) * head_dim + 2 * i + j;
                const size_t hf_row = static_cast<size_t>(h) * head_dim + j * half + i;
                const bool to_gguf = direction == QkPermute::ToGguf;
                std::memcpy(d + (to_gguf ? gguf_row : hf_row) * row_bytes,
                            s + (to_gguf ? hf_row : gguf_row) * row_bytes, row_bytes);
            }
}

}  // namespace mvllm
