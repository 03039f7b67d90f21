#!/usr/bin/env bash
# The sampling checks and A/B timings of the twenty-eighth session (bench/NOTES.md), for one or two
# device calls: the binned first step of the top_k / top_p cut (MVLLM_CUDA_BINNED_CUT), the
# penalties on the device (MVLLM_CUDA_PENALTIES) and the draw's out-of-line score
# (MVLLM_CUDA_DRAW_OUTLINED), each off and on in the same call.
#   test   the whole test_cuda (with the new CudaOps.PenalisedPicksEqualTheHost,
#          EngineWarmUp.DevicePenaltiesEqualHostSampling, TruncatedDrawEqualsTheHost both ways)
#   gen05 / gen7   `generate`, 512-token prompt, 256 tokens, decode tok/s (batch 1), 0.5B / 7B q4_0,
#          the KV cache in the CUDA default (f16; session 29's first call ran f32, the default then)
#   b4b    B4(b) on the 0.5B (256 requests, inputs and outputs 100..1024), output tok/s
#   ppl    `perplexity --ids` on the 0.5B, 16 windows of 512, prompt rows scored on the host and
#          on the device (MVLLM_CUDA_ROW_SCORES)
#   ncu    the cut's kernels, binned, in one 0.5B top_p step of 128 rows
# Usage (repo root, scripts/device_deps.sh's files carried):
#   OUT=dir STAGES="build test gen05 b4b" bash bench/sampling_device_run.sh
# (B4B_SHORT=1: B4(b) at T 0.6 plain, with the cuts, a repetition penalty and top logprobs only)
set -u -o pipefail
OUT=${OUT:-$(mktemp -d)}
STAGES=${STAGES:-build test gen05 gen7 b4b}
R=$OUT/r
mkdir -p "$R"
trap 'tar czf "$OUT/r.tgz" -C "$OUT" r 2>/dev/null' EXIT
t0=$(date +%s)
has() { [[ " $STAGES " == *" $1 "* ]]; }
stamp() { echo "t=$(( $(date +%s) - t0 )) s"; }
if has build; then OUT=$R/build STAGES=build bash bench/h200_run.sh 2>&1 | tail -3; fi
source scripts/device_deps.sh unpack
B=build-gpu/bin/mvllm
M=${MODELS:-/tmp/mvllm-models}
mkdir -p "$M"
model() {  # preset -> q4_0 file (made once)
  [ -f "$M/$1-q4_0.gguf" ] || timeout 200 $B make-model "$M/$1-q4_0.gguf" --preset "$1" --type q4_0 > /dev/null 2>&1
  echo "$M/$1-q4_0.gguf"
}
if has test; then
  timeout 300 build-gpu/bin/test_cuda > "$R/test_cuda.log" 2>&1
  echo "test_cuda rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$R/test_cuda.log" | tr '\n' ' ')"
  grep -E "FAILED|Failure|Expected|Which is|which is" "$R/test_cuda.log" | head -30
  stamp
fi
ids=$(for i in $(seq 512); do printf '%d ' $(( (i * 7919) % 150000 + 10 )); done)
gen() {  # preset tag "flags" env...
  local p=$1 tag=$2 flags=$3
  shift 3
  env "$@" timeout 90 $B generate -m "$(model "$p")" --device cuda --prompt-ids "$ids" -n 256 --ignore-eos --seed 1 \
    $flags > "$R/gen_${p}_$tag.log" 2>&1
  echo "| $p | $tag | $* | $(grep -o 'decode [0-9.]* tok/s' "$R/gen_${p}_$tag.log") |"
}
for p in qwen2.5-0.5b qwen2.5-7b; do
  [ "$p" = qwen2.5-0.5b ] && ! has gen05 && continue
  [ "$p" = qwen2.5-7b ] && ! has gen7 && continue
  echo "| model | run | env | decode |"
  echo "|---|---|---|---|"
  gen $p greedy "--temperature 0"
  gen $p t1 "--temperature 1"
  [ "$p" = qwen2.5-0.5b ] && gen $p t1_outlined "--temperature 1" MVLLM_CUDA_DRAW_OUTLINED=1
  for c in 0 1; do
    gen $p p095_cut$c "--temperature 1 --top-p 0.95" MVLLM_CUDA_BINNED_CUT=$c
    gen $p k40_cut$c "--temperature 1 --top-k 40" MVLLM_CUDA_BINNED_CUT=$c
    [ "$p" = qwen2.5-0.5b ] && gen $p all_cut$c "--temperature 1 --top-k 40 --top-p 0.95 --min-p 0.05" MVLLM_CUDA_BINNED_CUT=$c
  done
  for d in 0 1; do
    gen $p rep_pen$d "--temperature 1 --repeat-penalty 1.1 --frequency-penalty 0.2" MVLLM_CUDA_PENALTIES=$d
    [ "$p" = qwen2.5-0.5b ] && gen $p greedy_rep_pen$d "--temperature 0 --repeat-penalty 1.1" MVLLM_CUDA_PENALTIES=$d
  done
  stamp
done
if has b4b; then
  b4b() {  # tag "flags" env...
    local tag=$1 flags=$2
    shift 2
    env "$@" timeout 120 $B bench throughput -m "$(model qwen2.5-0.5b)" --device cuda --num-requests 256 \
      --input-len 100:1024 --output-len 100:1024 --kv-cache-memory 90% --kv-dtype f16 --activation-dtype f16 \
      $flags --json-out "$R/b4b_$tag.json" > "$R/b4b_$tag.log" 2>&1
    echo "| $tag | $* | $(tail -n1 "$R/b4b_$tag.log" | awk -F'|' '{print $9}') |"
  }
  echo "| B4(b) run | env | output tok/s |"
  echo "|---|---|---|"
  [ -z "${B4B_SHORT:-}" ] && b4b t0 "--temperature 0"
  b4b t06 "--temperature 0.6"
  [ -z "${B4B_SHORT:-}" ] && b4b t06_outlined "--temperature 0.6" MVLLM_CUDA_DRAW_OUTLINED=1
  for c in 0 1; do
    b4b p095_cut$c "--temperature 0.6 --top-p 0.95" MVLLM_CUDA_BINNED_CUT=$c
    b4b k40_cut$c "--temperature 0.6 --top-k 40" MVLLM_CUDA_BINNED_CUT=$c
  done
  # (the host path with penalties, MVLLM_CUDA_PENALTIES=0, did not finish in 120 s: 256 host races a step)
  b4b rep_pen1 "--temperature 0.6 --repeat-penalty 1.1" MVLLM_CUDA_PENALTIES=1
  b4b t06_lp5 "--temperature 0.6 --logprobs 5"   # picked and scored on the device (launch_row_scores)
  b4b t06_lp20 "--temperature 0.6 --logprobs 20"
  b4b t06_lp5_copies "--temperature 0.6 --logprobs 5" MVLLM_CUDA_TOP_SCORES=0   # the rows copied, scored on the host
  stamp
fi
if has ppl; then
  python3 -c "import random; random.seed(1); print(' '.join(str(random.randrange(151000)) for _ in range(8192)))" > "$R/ids.txt"
  for s in 0 1; do
    MVLLM_CUDA_ROW_SCORES=$s timeout 120 $B perplexity -m "$(model qwen2.5-0.5b)" --device cuda --ids -f "$R/ids.txt" \
      --ctx 512 --parallel 16 --json-out "$R/ppl_scores$s.json" > "$R/ppl_scores$s.log" 2>&1
    echo "perplexity, device scores $s: $(tail -n1 "$R/ppl_scores$s.log")"
  done
  stamp
fi
if has ncu; then
  MVLLM_CUDA_BINNED_CUT=1 timeout 200 ncu -k "regex:cut_|draw_cut" --launch-skip 30 --launch-count 3 \
    --section SpeedOfLight --section WarpStateStats --section LaunchStats \
    $B bench throughput -m "$(model qwen2.5-0.5b)" --device cuda --num-requests 128 --input-len 64 --output-len 16 \
    --temperature 0.6 --top-p 0.95 > "$R/ncu_cut.txt" 2>&1
  echo "ncu rc=$?"
  grep -E "cut_|draw_cut|Duration|Compute \(SM\) Throughput|Memory Throughput|Grid Size" "$R/ncu_cut.txt" | head -40
  stamp
fi
