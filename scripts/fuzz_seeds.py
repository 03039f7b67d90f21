#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/) from the project's own files.

Usage: scripts/fuzz_seeds.py OUT_DIR      -> OUT_DIR/<target>/<seed files>

Seeds are small on purpose (libFuzzer mutates every byte of an input, so a 25 MB model would make
each run slow): GGUF and safetensors seeds are micro models in the real layouts, with the shipped
model's tokenizer cut down to its first tokens; tokenizer.json seeds are the real Qwen3 / Llama-3
files (when scripts/fetch_tokenizers.sh has fetched them) and the shipped vocabulary, cut the same
way; text, templates, conversations and config.json files are taken as they are. Every multi-part
input uses the separator of tests/fuzz/fuzz_util.h.
"""
import json
import os
import struct
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SEP = b"\n#--mvllm-fuzz-part--#\n"
SHIPPED = os.path.join(ROOT, "models", "mvllm-austen-q8_0.gguf")
DATA = os.path.join(ROOT, "tests", "data")

# ---- GGUF -------------------------------------------------------------------------------------
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
SCALAR = {T_U8: "B", T_I8: "b", T_U16: "H", T_I16: "h", T_U32: "I", T_I32: "i", T_F32: "f",
          T_BOOL: "?", T_U64: "Q", T_I64: "q", T_F64: "d"}


def read_gguf_metadata(path):
    """[(key, type, value)] of a GGUF file (arrays as (elem_type, [values]))."""
    with open(path, "rb") as f:
        magic, _version, _n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
        assert magic == b"GGUF", path

        def read_str():
            (n,) = struct.unpack("<Q", f.read(8))
            return f.read(n).decode("utf-8")

        def read_value(t):
            if t == T_STR:
                return read_str()
            if t == T_ARR:
                et, n = struct.unpack("<IQ", f.read(12))
                return (et, [read_value(et) for _ in range(n)])
            c = SCALAR[t]
            return struct.unpack("<" + c, f.read(struct.calcsize(c)))[0]

        out = []
        for _ in range(n_kv):
            key = read_str()
            (t,) = struct.unpack("<I", f.read(4))
            out.append((key, t, read_value(t)))
        return out


def gguf_bytes(metadata, tensors, alignment=32):
    """metadata: [(key, type, value)]; tensors: [(name, ggml_type, ne, data bytes)]."""
    def s(x):
        b = x.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def value(t, v):
        if t == T_STR:
            return s(v)
        if t == T_ARR:
            et, items = v
            return struct.pack("<IQ", et, len(items)) + b"".join(value(et, i) for i in items)
        return struct.pack("<" + SCALAR[t], v)

    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, t, v in metadata:
        out += s(key) + struct.pack("<I", t) + value(t, v)
    offset = 0
    for name, ggml_type, ne, data in tensors:
        out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", ggml_type, offset)
        offset += (len(data) + alignment - 1) // alignment * alignment
    out += b"\0" * (-len(out) % alignment)
    for _name, _t, _ne, data in tensors:
        out += data + b"\0" * (-len(data) % alignment)
    return out


def cut_tokenizer(metadata, n_keep):
    """The shipped tokenizer.* metadata with only the first n_keep tokens and the merges among them."""
    out = []
    tokens = dict((k, v) for k, _t, v in metadata)["tokenizer.ggml.tokens"][1][:n_keep]
    kept = set(tokens)
    for key, t, v in metadata:
        if not key.startswith("tokenizer."):
            continue
        if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
            v = (v[0], v[1][:n_keep])
        elif key == "tokenizer.ggml.merges":
            v = (v[0], [m for m in v[1] if all(p in kept for p in m.split(" ")) and m.replace(" ", "") in kept])
        out.append((key, t, v))
    return out, len(tokens)


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def f16(values):
    return struct.pack("<%de" % len(values), *values)


def micro_model(arch, n_vocab, ggml_type, qkv_bias, tied):
    """A 1-layer model of hidden size 16 (2 heads / 1 KV head x 8) in the GGUF names of weights.cpp."""
    n_embd, n_head, n_kv, head_dim, n_ff = 16, 2, 1, 8, 32
    pack, type_id = (f32, 0) if ggml_type == "f32" else (f16, 1)

    def w(rows, cols, seed):
        return [((i * 7 + seed * 13) % 17 - 8) / 64.0 for i in range(rows * cols)]

    tensors = [("token_embd.weight", type_id, [n_embd, n_vocab], pack(w(n_vocab, n_embd, 1))),
               ("output_norm.weight", 0, [n_embd], f32([1.0] * n_embd))]
    if not tied:
        tensors.append(("output.weight", type_id, [n_embd, n_vocab], pack(w(n_vocab, n_embd, 2))))
    blk = [("attn_norm.weight", 0, [n_embd], None), ("attn_q.weight", type_id, [n_embd, n_head * head_dim], None),
           ("attn_k.weight", type_id, [n_embd, n_kv * head_dim], None),
           ("attn_v.weight", type_id, [n_embd, n_kv * head_dim], None),
           ("attn_output.weight", type_id, [n_head * head_dim, n_embd], None),
           ("ffn_norm.weight", 0, [n_embd], None), ("ffn_gate.weight", type_id, [n_embd, n_ff], None),
           ("ffn_up.weight", type_id, [n_embd, n_ff], None), ("ffn_down.weight", type_id, [n_ff, n_embd], None)]
    if qkv_bias:
        blk += [("attn_q.bias", 0, [n_head * head_dim], None), ("attn_k.bias", 0, [n_kv * head_dim], None),
                ("attn_v.bias", 0, [n_kv * head_dim], None)]
    for i, (name, t, ne, _) in enumerate(blk):
        n = 1
        for d in ne:
            n *= d
        values = w(1, n, i + 3)
        tensors.append(("blk.0." + name, t, ne, f32(values) if t == 0 else pack(values)))
    metadata = [("general.architecture", T_STR, arch), ("general.name", T_STR, "fuzz-seed"),
                (arch + ".vocab_size", T_U32, n_vocab), (arch + ".context_length", T_U32, 64),
                (arch + ".embedding_length", T_U32, n_embd), (arch + ".block_count", T_U32, 1),
                (arch + ".feed_forward_length", T_U32, n_ff), (arch + ".attention.head_count", T_U32, n_head),
                (arch + ".attention.head_count_kv", T_U32, n_kv),
                (arch + ".attention.layer_norm_rms_epsilon", T_F32, 1e-6),
                (arch + ".rope.freq_base", T_F32, 10000.0), (arch + ".rope.dimension_count", T_U32, head_dim)]
    return metadata, tensors


def gguf_seeds():
    shipped = read_gguf_metadata(SHIPPED)
    tok, n_vocab = cut_tokenizer(shipped, 320)
    seeds = {}
    meta, tensors = micro_model("qwen2", n_vocab, "f32", qkv_bias=True, tied=True)
    seeds["micro-qwen2-f32.gguf"] = gguf_bytes(meta + tok, tensors)
    meta, tensors = micro_model("llama", n_vocab, "f16", qkv_bias=False, tied=False)
    seeds["micro-llama-f16.gguf"] = gguf_bytes(meta + tok, tensors)
    seeds["vocab-only.gguf"] = gguf_bytes([("general.architecture", T_STR, "qwen2")] + tok, [])
    # SentencePiece-style vocabulary: <unk> <s> </s>, byte fallback tokens, a few pieces with scores.
    pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + \
             ["\u2581", "\u2581the", "\u2581a", "e", "t", "\u2581Mr", ".", "\u2581Darcy"]
    types = [2, 3, 3] + [6] * 256 + [1] * 8
    scores = [0.0] * 259 + [-float(i) for i in range(8)]
    spm = [("general.architecture", T_STR, "llama"), ("tokenizer.ggml.model", T_STR, "llama"),
           ("tokenizer.ggml.tokens", T_ARR, (T_STR, pieces)), ("tokenizer.ggml.token_type", T_ARR, (T_I32, types)),
           ("tokenizer.ggml.scores", T_ARR, (T_F32, scores)), ("tokenizer.ggml.bos_token_id", T_U32, 1),
           ("tokenizer.ggml.eos_token_id", T_U32, 2), ("tokenizer.ggml.unknown_token_id", T_U32, 0),
           ("tokenizer.ggml.add_bos_token", T_BOOL, True)]
    seeds["vocab-only-spm.gguf"] = gguf_bytes(spm, [])
    return seeds


# ---- safetensors ------------------------------------------------------------------------------
def safetensors_bytes(tensors):
    """tensors: [(name, dtype, shape, data)]."""
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, dtype, shape, blob in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    seeds = {}
    micro = [("model.embed_tokens.weight", "F32", [4, 8], f32([0.5] * 32)),
             ("model.layers.0.self_attn.q_proj.weight", "F16", [8, 8], f16([0.25] * 64)),
             ("model.layers.0.self_attn.q_proj.bias", "BF16", [8], b"\x80\x3f" * 8),
             ("model.norm.weight", "F32", [8], f32([1.0] * 8)),
             ("empty", "F32", [0, 8], b"")]
    seeds["single.bin"] = b"\0" + safetensors_bytes(micro)
    index = {"metadata": {"total_size": 16}, "weight_map": {"x": "a.safetensors", "y": "b.safetensors"}}
    seeds["index.bin"] = b"\1" + json.dumps(index).encode()
    # The real header of a fixture (its tensor data cut to the first tensor's bytes).
    with open(os.path.join(ROOT, "tests", "fixtures", "tiny-qwen2", "model.safetensors"), "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = f.read(n)
    seeds["fixture-header.bin"] = b"\0" + struct.pack("<Q", n) + header + b"\0" * 64
    return seeds


# ---- tokenizer.json ---------------------------------------------------------------------------
def cut_tokenizer_json(tj, n_keep):
    """The first n_keep tokens and the merges among them; added tokens renumbered after them (a
    vocabulary of 150k ids with holes would make every run of the seed slow)."""
    model = tj["model"]
    vocab = {t: i for t, i in model["vocab"].items() if i < n_keep}
    added = [dict(a, id=n_keep + k) for k, a in enumerate(tj.get("added_tokens", []))]
    tj = dict(tj, added_tokens=added)
    merges = []
    for m in model.get("merges", []):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    model = dict(model, vocab=vocab, merges=merges)
    return dict(tj, model=model)


def tokenizer_json_seeds():
    seeds = {}
    for name in ("qwen3", "llama3"):
        folder = os.path.join(DATA, "tokenizers", name)
        if not os.path.exists(os.path.join(folder, "tokenizer.json")):
            continue
        with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
            tj = cut_tokenizer_json(json.load(f), 400)
        with open(os.path.join(folder, "tokenizer_config.json"), "rb") as f:
            config = f.read()
        seeds[name + ".bin"] = json.dumps(tj, ensure_ascii=False).encode() + SEP + config
        seeds[name + "-no-config.bin"] = json.dumps(tj, ensure_ascii=False).encode()
    # The shipped vocabulary as a tokenizer.json (always available).
    shipped = dict((k, v) for k, _t, v in read_gguf_metadata(SHIPPED))
    tokens, types = shipped["tokenizer.ggml.tokens"][1][:400], shipped["tokenizer.ggml.token_type"][1][:400]
    kept = set(tokens)
    merges = [m for m in shipped["tokenizer.ggml.merges"][1]
              if all(p in kept for p in m.split(" ")) and m.replace(" ", "") in kept]
    tj = {"version": "1.0",
          "added_tokens": [{"id": i, "content": t, "special": True} for i, t in enumerate(tokens) if types[i] == 3],
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
              {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
               "behavior": "Isolated", "invert": False},
              {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
          "model": {"type": "BPE", "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges,
                    "ignore_merges": False}}
    config = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "add_bos_token": False, "chat_template": shipped["tokenizer.chat_template"]}
    seeds["shipped.bin"] = json.dumps(tj, ensure_ascii=False).encode() + SEP + json.dumps(config).encode()
    tj_pairs = dict(tj, model=dict(tj["model"], merges=[m.split(" ") for m in merges]))
    del tj_pairs["pre_tokenizer"]["pretokenizers"][0]
    seeds["shipped-pairs-bytelevel.bin"] = json.dumps(tj_pairs).encode()
    return seeds


# ---- text, templates, conversations, requests -------------------------------------------------
def texts():
    out = []
    with open(os.path.join(DATA, "tokenizer", "corpus.jsonl"), encoding="utf-8") as f:
        out += [json.loads(line) for line in f if line.strip()]
    with open(os.path.join(DATA, "heldout.txt"), encoding="utf-8") as f:
        out.append(f.read(2000))
    out.append("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    out.append("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>")
    return out


def conversations():
    with open(os.path.join(DATA, "chat", "expected.json"), encoding="utf-8") as f:
        return [c["messages"] for c in json.load(f)["conversations"]]


def templates():
    folder = os.path.join(DATA, "chat", "templates")
    return [(n, open(os.path.join(folder, n), "rb").read()) for n in sorted(os.listdir(folder)) if n.endswith(".jinja")]


REQUESTS = [
    (0, {"model": "mvllm", "prompt": "It is a truth", "max_tokens": 16, "temperature": 0}),
    (0, {"prompt": ["a", "b"], "n": 2, "stream": True, "stream_options": {"include_usage": True}, "logprobs": 3}),
    (0, {"prompt": [1, 2, 3], "top_k": -1, "top_p": 0.9, "min_p": 0.1, "seed": -5, "stop": ["\n", "."]}),
    (0, {"prompt": [[1, 2], [3]], "max_tokens": 3.0, "repetition_penalty": 1.1, "presence_penalty": -2,
         "frequency_penalty": 2, "ignore_eos": True, "user": "u", "echo": False}),
    (1, {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
         "max_completion_tokens": 8, "logprobs": True, "top_logprobs": 2, "stop": "x"}),
    (1, {"messages": [{"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                      {"role": "assistant"}, {"role": "user", "content": "<|im_end|>"}], "stream": True}),
    (0, {"prompt": [5, 6, 7], "max_tokens": 1, "echo": True, "logprobs": 1, "logit_bias": {"7": -100, "50": 2.5}}),
    (2, {"prompt": "Mr. Darcy", "add_special_tokens": False}),
    (2, {"messages": [{"role": "user", "content": "Hi"}]}),
    (3, {"tokens": [1, 2, 3, 8191]}),
]


def write(out_dir, target, name, data):
    folder = os.path.join(out_dir, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    for name, data in gguf_seeds().items():
        write(out, "gguf", name, data)
    for name, data in safetensors_seeds().items():
        write(out, "safetensors", name, data)
    for fixture in ("tiny-llama", "tiny-qwen2"):
        with open(os.path.join(ROOT, "tests", "fixtures", fixture, "config.json"), "rb") as f:
            write(out, "hf_config", fixture + ".json", f.read())
    for name, data in tokenizer_json_seeds().items():
        write(out, "tokenizer_json", name, data)
    for i, text in enumerate(texts()):
        for selector in (0, 1, 2, 8 | 16, 4 | 8 | 1):
            write(out, "tokenize", "text%03d-%02x" % (i, selector), bytes([selector]) + text.encode("utf-8"))
    convs = conversations()
    for name, source in templates():
        write(out, "jinja", name, source)
        write(out, "jinja", name + ".ctx", source + SEP + json.dumps(
            {"messages": convs[len(name) % len(convs)], "add_generation_prompt": True, "bos_token": "<s>"}).encode())
    for i, messages in enumerate(convs):
        for selector in (i % 11, 16 | (i % 11), 32 | 64 | 128 | (i % 11)):
            write(out, "chat_template", "conv%02d-%02x" % (i, selector), bytes([selector]) + json.dumps(messages).encode())
    for i, (selector, body) in enumerate(REQUESTS):
        write(out, "openai_request", "request%02d" % i, bytes([selector]) + json.dumps(body).encode())
    write(out, "openai_request", "bearer", b"\4Bearer sk-test-key")


if __name__ == "__main__":
    main()
