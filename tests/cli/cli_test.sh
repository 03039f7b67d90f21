#!/usr/bin/env bash
# End-to-end checks of the mvllm CLI tools on the transformers fixtures.
# Usage: cli_test.sh path/to/mvllm path/to/tests/fixtures
set -u
MVLLM=$1
FIX=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0; fail=0
ok()   { pass=$((pass + 1)); echo "ok   $1"; }
bad()  { fail=$((fail + 1)); echo "FAIL $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
json() { python3 -c "import json,sys; print(' '.join(map(str, json.load(open(sys.argv[1]))[sys.argv[2]])))" "$@"; }

LLAMA=$FIX/tiny-llama
QWEN=$FIX/tiny-qwen2
PROMPT=$(json "$LLAMA/reference.json" prompt_ids)
GREEDY=$(json "$LLAMA/reference.json" greedy_ids)

# generate on the HF folder reproduces transformers' greedy continuation
out=$("$MVLLM" generate -m "$LLAMA" --prompt-ids "$PROMPT" -n 32 --ids-out -t 2 2>/dev/null)
check "generate (HF folder) == transformers greedy" '[ "$out" = "$GREEDY" ]'

# convert to GGUF (llama: Q/K rows permuted on write, un-permuted on load) and generate again
"$MVLLM" convert "$LLAMA" "$TMP/llama-f32.gguf" --type f32 -t 2 2>/dev/null
check "convert f32 writes a file" '[ -s "$TMP/llama-f32.gguf" ]'
out=$("$MVLLM" generate -m "$TMP/llama-f32.gguf" --prompt-ids "$PROMPT" -n 32 --ids-out -t 2 2>/dev/null)
check "generate (GGUF f32) == transformers greedy" '[ "$out" = "$GREEDY" ]'
for type in f16 bf16 q8_0 q4_0 q4_k_m; do
  "$MVLLM" convert "$QWEN" "$TMP/qwen-$type.gguf" --type $type -t 2 2>/dev/null
  check "convert qwen2 --type $type loads and generates" \
    '"$MVLLM" generate -m "$TMP/qwen-$type.gguf" --prompt-ids "1 2 3" -n 4 -t 2 >/dev/null 2>&1'
done

# inspect shows metadata and the tensor table
ins=$("$MVLLM" inspect "$TMP/llama-f32.gguf")
check "inspect lists metadata" 'grep -q "llama.attention.head_count_kv" <<<"$ins"'
check "inspect lists tensors" 'grep -q "blk.1.ffn_down.weight" <<<"$ins"'
check "inspect lists rope_freqs (llama3 scaling)" 'grep -q "rope_freqs.weight" <<<"$ins"'

# logits --json: a JSON array of n_vocab numbers whose argmax is transformers' top-1
"$MVLLM" logits -m "$QWEN" --prompt-ids "$(json "$QWEN/reference.json" prompt_ids)" --json -t 2 >"$TMP/logits.json" 2>/dev/null
check "logits --json argmax == transformers top1" \
  'python3 -c "import json,sys; l=json.load(open(sys.argv[1])); r=json.load(open(sys.argv[2])); sys.exit(0 if len(l)==384 and max(range(len(l)), key=l.__getitem__)==r[\"top1\"][-1] else 1)" "$TMP/logits.json" "$QWEN/reference.json"'

# make-model writes a loadable model in a real geometry
"$MVLLM" make-model "$TMP/q05.gguf" --preset qwen2.5-0.5b --type q4_0 -t 2 2>/dev/null
check "make-model qwen2.5-0.5b q4_0 generates" '"$MVLLM" generate -m "$TMP/q05.gguf" --prompt-ids "1 2 3" -n 2 -t 2 >/dev/null 2>&1'

# bad input: a clear error (exit 1, the file named), never a crash
expect_error() {  # name, expected text, command...
  local name=$1 text=$2; shift 2
  local err rc
  err=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 1 ] && grep -q -- "$text" <<<"$err"; then ok "$name"; else bad "$name (rc=$rc: $err)"; fi
}
head -c 1000 "$TMP/llama-f32.gguf" >"$TMP/truncated.gguf"
printf 'GGUX0000000000000000000000' >"$TMP/badmagic.gguf"
expect_error "truncated GGUF" "truncated.gguf" "$MVLLM" generate -m "$TMP/truncated.gguf" --prompt-ids "1" -n 1
expect_error "bad magic" "badmagic.gguf" "$MVLLM" inspect "$TMP/badmagic.gguf"
expect_error "missing model" "no such file" "$MVLLM" generate -m "$TMP/nope.gguf" --prompt-ids "1" -n 1
expect_error "token id outside the vocabulary" "outside the vocabulary" "$MVLLM" generate -m "$QWEN" --prompt-ids "1 99999" -n 1
expect_error "malformed ids" "not a token id" "$MVLLM" generate -m "$QWEN" --prompt-ids "1 x" -n 1
mkdir -p "$TMP/broken-hf" && cp "$QWEN/model.safetensors" "$TMP/broken-hf/" && sed 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' "$QWEN/config.json" >"$TMP/broken-hf/config.json"
expect_error "HF checkpoint missing a tensor" "missing tensor model.layers.2" "$MVLLM" generate -m "$TMP/broken-hf" --prompt-ids "1" -n 1

# perplexity (llama.cpp's method) of the default model on the held-out Austen sample (728 tokens):
# one window of 728 scores its second half (363 tokens); the decoder's perplexity over every token
# of the sample is 43.33 (tests/model/default_model_test.cpp), a unigram model's 544.8
HELDOUT="$FIX/../data/heldout.txt"
"$MVLLM" perplexity -f "$HELDOUT" --ctx 728 -t 2 --json-out "$TMP/ppl.json" >"$TMP/ppl.txt" 2>/dev/null
check "perplexity of the held-out sample: 1 window, 363 scored, 10 < PPL < 80" \
  'python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r[\"windows\"]==1 and r[\"scored\"]==363 and 10<r[\"ppl\"]<80 else 1)" "$TMP/ppl.json"'
check "perplexity prints PPL = X +/- Y" 'grep -q "PPL = [0-9.]* +/- [0-9.]*" "$TMP/ppl.txt"'
expect_error "perplexity of a text shorter than a window" "at least one window of 4096" \
  "$MVLLM" perplexity -f "$HELDOUT" --ctx 4096
# perplexity --ids of the llama fixture's 24 prompt tokens in one window: the same PPL as
# transformers' logits give for tokens 13..23
json "$LLAMA/reference.json" prompt_ids >"$TMP/ids.txt"
"$MVLLM" perplexity -m "$LLAMA" --ids -f "$TMP/ids.txt" --ctx 24 -t 2 --json-out "$TMP/ppl_ids.json" >/dev/null 2>&1
cat >"$TMP/ppl_ref.py" <<'PY'
import json, math, struct, sys
d, out = sys.argv[1], json.load(open(sys.argv[2]))
ref = json.load(open(d + "/reference.json"))
n, v = ref["logits_shape"]
raw = open(d + "/" + ref["logits_file"], "rb").read()
ids = ref["prompt_ids"]
nll = []
for k in range(12, 23):
    row = struct.unpack_from("<%df" % v, raw, 4 * k * v)
    m = max(row)
    nll.append(-(row[ids[k + 1]] - m - math.log(sum(math.exp(x - m) for x in row))))
want = math.exp(sum(nll) / len(nll))
sys.exit(0 if out["scored"] == 11 and abs(out["ppl"] - want) < 1e-3 * want else 1)
PY
check "perplexity --ids (one window of 24) == transformers' logits" 'python3 "$TMP/ppl_ref.py" "$LLAMA" "$TMP/ppl_ids.json"'

# text generation with the shipped default model (no -m)
a=$("$MVLLM" generate --prompt "It is a truth universally acknowledged" -n 24 --seed 7 -t 2 2>/dev/null)
b=$("$MVLLM" generate --prompt "It is a truth universally acknowledged" -n 24 --seed 7 -t 2 2>/dev/null)
check "generate --prompt with the default model writes text" '[ ${#a} -gt 40 ]'
check "same seed, same text" '[ "$a" = "$b" ]'
stats=$("$MVLLM" generate --prompt "Elizabeth" -n 8 --temperature 0 -t 2 2>&1 >/dev/null)
check "statistics line on stderr" 'grep -q "prompt .* tokens, generated 8 tokens .* decode .* tok/s" <<<"$stats"'
g=$("$MVLLM" generate --prompt "Elizabeth" -n 40 --temperature 0 -t 2 2>/dev/null)
word=$(awk '{print $3}' <<<"$g")
if [ -n "$word" ]; then
  s2=$("$MVLLM" generate --prompt "Elizabeth" -n 40 --temperature 0 --stop "$word" -t 2 2>/dev/null)
  check "a stop string ends the text and is not printed" '[ "${g%%"$word"*}" = "$s2" ]'
fi
# speculative decoding with the shipped draft: the same greedy text, draft statistics on stderr
DRAFT=$FIX/../../models/mvllm-austen-draft-q8_0.gguf
sd=$("$MVLLM" generate --prompt "Elizabeth" -n 40 --temperature 0 -t 2 --draft-model "$DRAFT" --draft-tokens 3 2>"$TMP/spec.err")
check "generate --draft-model gives the same greedy text" '[ "$sd" = "$g" ]'
check "draft statistics in the stats line" 'grep -q "draft: proposed [0-9]*, accepted [0-9]* (.*), .* tokens/verification, .*accepted lengths \[" "$TMP/spec.err"'
out=$("$MVLLM" generate -m "$LLAMA" --prompt-ids "$PROMPT" -n 32 --ids-out -t 2 --draft-model "$LLAMA" --draft-policy accepted-length 2>/dev/null)
check "generate with the model as its own draft == transformers greedy" '[ "$out" = "$GREEDY" ]'
expect_error "draft with another vocabulary" "same vocabulary" "$MVLLM" generate -m "$LLAMA" --prompt-ids "1 2" -n 2 --draft-model "$QWEN"
expect_error "missing draft model" "no such file" "$MVLLM" generate --prompt "x" -n 2 --draft-model "$TMP/nope.gguf"
c=$(printf 'Who is Mr. Darcy?\nAnd his sister?\n' | "$MVLLM" chat -n 16 --seed 1 -t 2 2>/dev/null)
check "chat answers each piped turn" '[ "$(grep -c . <<<"$c")" -ge 2 ]'

# the engine benchmarks and the KV pool options (shipped model, small runs)
bi=$("$MVLLM" bench throughput --num-requests 3 --input-len 8:40 --output-len 2:6 --batch-invariant \
     --kv-cache-memory 2% -t 2 --json-out "$TMP/tp.json" 2>&1)
check "bench throughput --batch-invariant with a 2% pool reports the budget" \
  'grep -q "budget: 2% of the .* GiB free" <<<"$bi" && grep -q "\"batch_invariant\": true" "$TMP/tp.json"'
expect_error "a pool percentage out of range" "not a percentage" "$MVLLM" bench throughput --num-requests 1 --kv-cache-memory 101%
expect_error "a utilization that leaves nothing" "nothing is left for the KV cache" \
  "$MVLLM" bench throughput --num-requests 1 --gpu-memory-utilization 0.00001
"$MVLLM" bench prefix --prompt-len 64 --overlaps 0,100 --repeat 2 -t 2 --json-out "$TMP/prefix.json" >/dev/null 2>&1
check "bench prefix: 0% reuses nothing, 100% the 3 full blocks before the last token" \
  '[ "$(grep -o "\"prefix_tokens_reused\": [0-9]*" "$TMP/prefix.json" | tr -d "\n ")" = "\"prefix_tokens_reused\":0\"prefix_tokens_reused\":48" ]'
"$MVLLM" bench hol --long-len 200 --short-len 8 --num-short 2 --max-batched-tokens 64 --repeat 1 -t 2 \
  --json-out "$TMP/hol.json" >/dev/null 2>&1
check "bench hol writes the four configurations" '[ "$(grep -c "\"short_ttft_median_s\"" "$TMP/hol.json")" = 4 ]'

"$MVLLM" bench decode --prompt-len 16 -n 4 --repeat 2 --warmup 1 -t 2 --json-out "$TMP/decode.json" >/dev/null 2>&1
check "bench decode: one warm-up run outside the medians, then two timed runs, positive medians" \
  'python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if len(r[\"runs\"])==2 and len(r[\"warmup_runs\"])==1 and r[\"warmup_runs\"][0][\"decode_tok_s\"]>0 and r[\"decode_tok_s_median\"]>0 and r[\"prefill_tok_s_median\"]>0 and r[\"decode_steps\"]==4 else 1)" "$TMP/decode.json"'

# text tools on the real tokenizers (fetched by scripts/fetch_tokenizers.sh)
TOK=$FIX/../data/tokenizers/qwen3
if [ -s "$TOK/tokenizer.json" ]; then
  ids=$("$MVLLM" tokenize -m "$TOK" --text "Hello world" --json)
  check "tokenize --json (Qwen3: Hello world)" '[ "$(tr -d " " <<<"$ids")" = "[9707,1879]" ]'
  # convert carries the tokenizer and chat template into the GGUF
  mkdir -p "$TMP/qwen-with-tok" && cp "$QWEN"/config.json "$QWEN"/model.safetensors "$TOK"/tokenizer*.json "$TMP/qwen-with-tok/"
  "$MVLLM" convert "$TMP/qwen-with-tok" "$TMP/qwen-tok.gguf" --type f32 -t 2 2>/dev/null
  check "convert writes tokenizer.ggml.* and the chat template" \
    '"$MVLLM" inspect "$TMP/qwen-tok.gguf" | grep -q "tokenizer.chat_template"'
  text="Ünïcödé 🤖 and code: for (int i = 0; i < 10; ++i) {}"
  check "tokenize via the converted GGUF == via tokenizer.json" \
    '[ "$("$MVLLM" tokenize -m "$TMP/qwen-tok.gguf" --text "$text" --json)" = "$("$MVLLM" tokenize -m "$TOK" --text "$text" --json)" ]'
  printf '[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]' >"$TMP/msgs.json"
  check "template via GGUF == via tokenizer_config.json" \
    '[ "$("$MVLLM" template -m "$TMP/qwen-tok.gguf" --messages "$TMP/msgs.json" --add-generation-prompt)" = "$("$MVLLM" template -m "$TOK" --messages "$TMP/msgs.json" --add-generation-prompt)" ]'
  check "template renders ChatML with a generation prompt" \
    '"$MVLLM" template -m "$TOK" --messages "$TMP/msgs.json" --add-generation-prompt | tail -n 1 | grep -qx "<|im_start|>assistant"'
  printf '{"role": 1}' >"$TMP/bad.json"
  expect_error "template rejects messages that are not an array" "array of messages" "$MVLLM" template -m "$TOK" --messages "$TMP/bad.json"
else
  bad "real tokenizers missing: run scripts/fetch_tokenizers.sh"
fi

# bench serve: an HTTP load generator against a running server (here the default model)
expect_error "bench serve without a server" "cannot reach" "$MVLLM" bench serve --url http://127.0.0.1:9 --concurrency 1
expect_error "bench serve rejects a bad --url" "is not http://" "$MVLLM" bench serve --url ftp://x
"$MVLLM" serve --port 0 -t 2 2>"$TMP/serve.log" &
server=$!
port=""
for _ in $(seq 1 300); do
  port=$(sed -n 's|^serving .* on http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$TMP/serve.log")
  [ -n "$port" ] && break
  sleep 0.1
done
if [ -n "$port" ]; then
  "$MVLLM" bench serve --url "http://127.0.0.1:$port/v1" --concurrency 1,3 --num-requests 3 --input-len 8:16 \
    --output-len 5 --json-out "$TMP/bench_serve.json" >"$TMP/bench_serve.txt" 2>&1
  check "bench serve: two levels, 3 requests each, 15 output tokens each, no failure" \
    'python3 -c "import json,sys; r=json.load(open(sys.argv[1])); l=r[\"levels\"]; sys.exit(0 if [x[\"concurrency\"] for x in l]==[1,3] and all(x[\"completed\"]==3 and x[\"failed\"]==0 and x[\"output_tokens\"]==15 and x[\"ttft\"][\"n\"]==3 and x[\"itl\"][\"n\"]>0 for x in l) else 1)" "$TMP/bench_serve.json"'
  check "bench serve prints a table row per level" '[ "$(grep -c "^| [13] | 3 | 0 |" "$TMP/bench_serve.txt")" = 2 ]'
  expect_error "bench serve: lengths beyond the server's context" "max_model_len 1024" \
    "$MVLLM" bench serve --url "http://127.0.0.1:$port" --input-len 1000 --output-len 100
else
  bad "serve did not start: $(cat "$TMP/serve.log")"
fi
kill "$server" 2>/dev/null; wait "$server" 2>/dev/null

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
