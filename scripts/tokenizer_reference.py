#!/usr/bin/env python3
"""Reference token ids from Hugging Face `tokenizers` for tests/tokenizer.

For every line of the corpus (a JSON string per line) and every tokenizer.json given, writes
expected_<name>.json holding two passes, ids only:
  "special": tok.encode(text, add_special_tokens=False) -- HF's default: added tokens written in
             the text (special or not) are matched as tokens. Compared with mvllm's
             encode(text, add_bos=false, parse_special=true).
  "plain":   the same with tok.encode_special_tokens = True -- special added tokens are split as
             ordinary text, non-special added tokens (<tool_call>, ...) are still matched.
             Compared with mvllm's encode(text, add_bos=false, parse_special=false).
"nfc_changed" lists the lines that NFC normalisation would change (mvllm does not normalise).

Usage: tokenizer_reference.py --corpus tests/data/tokenizer/corpus.jsonl \
           --tokenizer qwen3=DIR --tokenizer llama3=DIR --out OUT_DIR
"""
import argparse
import json
import os
import sys
import traceback
import unicodedata


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--tokenizer", action="append", required=True, help="NAME=DIR holding tokenizer.json")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import tokenizers
    from tokenizers import Tokenizer

    with open(args.corpus, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    print(f"tokenizers {tokenizers.__version__}, {len(lines)} corpus lines", flush=True)
    os.makedirs(args.out, exist_ok=True)
    status = 0
    for spec in args.tokenizer:
        name, directory = spec.split("=", 1)
        try:
            tok = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
            special = [tok.encode(s, add_special_tokens=False).ids for s in lines]
            tok.encode_special_tokens = True
            plain = [tok.encode(s, add_special_tokens=False).ids for s in lines]
            tok.encode_special_tokens = False
            result = {
                "tokenizer": name,
                "tokenizers_version": tokenizers.__version__,
                "n_lines": len(lines),
                "nfc_changed": [i for i, s in enumerate(lines) if unicodedata.normalize("NFC", s) != s],
                "special": special,
                "plain": plain,
            }
            path = os.path.join(args.out, f"expected_{name}.json")
            with open(path, "w", encoding="utf-8") as f:
                f.write("{\n")
                for key in ("tokenizer", "tokenizers_version", "n_lines", "nfc_changed"):
                    f.write(f" {json.dumps(key)}: {json.dumps(result[key])},\n")
                for key in ("special", "plain"):
                    rows = ",\n  ".join(json.dumps(r, separators=(",", ":")) for r in result[key])
                    f.write(f' {json.dumps(key)}: [\n  {rows}\n ]{"," if key == "special" else ""}\n')
                f.write("}\n")
            n_diff = sum(a != b for a, b in zip(special, plain))
            print(f"{name}: {sum(map(len, special))} ids, {n_diff} lines differ special/plain -> {path}", flush=True)
        except Exception:
            traceback.print_exc()
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
