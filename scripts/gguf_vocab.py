#!/usr/bin/env python3
"""Writes the BPE vocabulary of a GGUF file as JSON: {"model", "pre", "tokens", "merges",
"token_types", "eos_token_id"}, so that a new model can be trained on exactly the same tokenizer
(scripts/train_default_model.py --tokenizer-vocab FILE; the speculative-decoding draft model is
trained this way, models/README.md).

Only the metadata section of the GGUF is read (format: magic "GGUF", u32 version (2 or 3), u64
tensor count, u64 key/value count, then the key/value pairs: u64-length key, u32 value type,
value; arrays carry their element type and u64 length). Pure Python, no dependencies.

    python3 scripts/gguf_vocab.py models/mvllm-austen-q8_0.gguf vocab.json
"""
import json
import struct
import sys

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def value(self, vtype):
        if vtype in SCALARS:
            return self.take(SCALARS[vtype])
        if vtype == STRING:
            return self.string()
        if vtype == ARRAY:
            etype, n = self.take("<I"), self.take("<Q")
            return [self.value(etype) for _ in range(n)]
        raise ValueError("unknown GGUF value type %d at byte %d" % (vtype, self.pos))


def read_metadata(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"GGUF":
        raise ValueError("%s: not a GGUF file" % path)
    r = Reader(data)
    r.pos = 4
    version = r.take("<I")
    if version not in (2, 3):
        raise ValueError("%s: GGUF version %d (2 or 3 expected)" % (path, version))
    r.take("<Q")  # tensor count
    meta = {}
    for _ in range(r.take("<Q")):
        key = r.string()
        meta[key] = r.value(r.take("<I"))
    return meta


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gguf_vocab.py MODEL.gguf OUT.json")
    meta = read_metadata(sys.argv[1])
    if meta.get("tokenizer.ggml.model") != "gpt2":
        sys.exit("%s: tokenizer.ggml.model is %r, only byte-level BPE (gpt2) is supported" %
                 (sys.argv[1], meta.get("tokenizer.ggml.model")))
    out = {"model": "gpt2", "pre": meta.get("tokenizer.ggml.pre"), "tokens": meta["tokenizer.ggml.tokens"],
           "merges": meta.get("tokenizer.ggml.merges", []), "token_types": meta.get("tokenizer.ggml.token_type", []),
           "eos_token_id": meta.get("tokenizer.ggml.eos_token_id")}
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
    print("%s: %d tokens, %d merges -> %s" % (sys.argv[1], len(out["tokens"]), len(out["merges"]), sys.argv[2]))


if __name__ == "__main__":
    main()
