#!/usr/bin/env bash
# One call on the GPU machine, in stages (STAGES="build test kernels gemm gemmncu serve attention decode sample throughput profile"
# by default; any subset, in this order). Builds in build-gpu/ (kept between calls on a warm
# machine), prints the lines that matter, and packs logs and JSON results into $OUT/run.tgz.
# Dependencies: scripts/device_deps.sh (carry .devdeps). Usage (repo root):
#   OUT=dir STAGES="build test" bash bench/h200_run.sh
set -u -o pipefail
OUT=${OUT:-$(mktemp -d)}
STAGES=${STAGES:-build test kernels decode throughput spec sweep long profile}
LOG=$(mktemp -d)
M=${MODELS:-/tmp/mvllm-models}   # make-model files (kept between calls on a warm machine)
mkdir -p "$OUT" "$M"
trap 'tar czf "$OUT/run.tgz" -C "$LOG" . 2>/dev/null' EXIT
source scripts/device_deps.sh unpack
B=build-gpu/bin/mvllm
t0=$(date +%s)
has() { [[ " $STAGES " == *" $1 "* ]]; }
model() {  # model PRESET TYPE -> path (made once)
  local f=$M/$1-$2.gguf
  [ -f "$f" ] || timeout 200 $B make-model "$f" --preset "$1" --type "$2" > "$LOG/make_$1_$2.log" 2>&1 || echo "make-model $1 $2 failed" >&2
  echo "$f"
}
if has build; then
  # COMMIT=hash: the commit stamped into the results (the machine's copy of the tree may carry
  # stale git metadata: pass it from the checkout that sent the tree, e.g. in a carried file).
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DMVLLM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90a} \
    -DMVLLM_BUILD_BENCH=OFF -DMVLLM_COMMIT="${COMMIT:-}" > "$LOG/build.log" 2>&1 || { tail -30 "$LOG/build.log"; exit 1; }
  cmake --build build-gpu -j16 --target test_cuda mvllm >> "$LOG/build.log" 2>&1 ||
    { grep -E "error" -A3 "$LOG/build.log" | head -40; exit 1; }
  echo "build done in $(( $(date +%s) - t0 )) s"
fi
if has test; then
  timeout 240 build-gpu/bin/test_cuda ${TEST_FILTER:+--gtest_filter=$TEST_FILTER} > "$LOG/test_cuda.log" 2>&1
  echo "test_cuda rc=$?"
  grep -E "^\[  (FAILED|PASSED|SKIPPED)|rel err|Failure|Expected|Which is|which is|error|CHECK" "$LOG/test_cuda.log" | head -80
fi
if has kernels; then
  for ks in ${KSPLITS:-1 auto}; do
    e=""; [ $ks != auto ] && e="MVLLM_GEMV_KSPLIT=$ks"
    env $e timeout 120 $B bench kernels --device cuda --types q4_0,q8_0,q4_k,q6_k --tokens 1,8 \
      --shapes 4864:896,3584:4608,3584:18944,18944:3584,3584:152064 --replays 10 \
      --json-out "$LOG/kernels_ks$ks.json" > "$LOG/kernels_ks$ks.log" 2>&1
    echo "== bench kernels ks=$ks rc=$?"; cat "$LOG/kernels_ks$ks.log"
  done
fi
if has gemm; then  # the quantised tile GEMM, every variant, against cuBLAS on the F16 copies (issue 6)
  timeout 300 $B bench kernels --device cuda --types "" --gemm-tokens ${GEMM_TOKENS:-16,64,256} \
    --shapes ${GEMM_SHAPES:-3584:4608,3584:3584,3584:18944,18944:3584} --replays 10 \
    --json-out "$LOG/gemm.json" > "$LOG/gemm.log" 2>&1
  echo "== bench kernels (GEMM) rc=$?"; cat "$LOG/gemm.log"
fi
if has gemmncu; then  # ncu sections of each tile-GEMM variant: q4_0 3584 -> 18944, 64 tokens
  for v in ${GEMM_NCU_VARIANTS:-428 248}; do  # row warps, k warps, n tiles
    timeout 120 ncu --kernel-name-base demangled -k "regex:Tile<.int.${v:0:1}, .int.${v:1:1}, .int.${v:2:1}, " --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis \
      --section ComputeWorkloadAnalysis --section LaunchStats \
      $B bench kernels --device cuda --types "" --gemm-tokens 64 --gemm-types q4_0 --shapes 3584:18944 --replays 1 \
      > "$LOG/ncu_gemm_$v.txt" 2>&1
    echo "== ncu tile variant $v (row warps, k warps, n tiles) rc=$?"
    grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Stall|Issue Slot|Executed Ipc A|Bank|Shared Memory|L2 Hit|Block Limit|Waves Per SM|Grid Size" \
      "$LOG/ncu_gemm_$v.txt" | head -40
  done
fi
if has serve; then  # issue 7: mvllm bench serve at 1, 16 and 64 streaming clients against mvllm serve
  mkdir -p "$LOG/serve"
  for p in qwen2.5-0.5b qwen2.5-7b; do
    f=$(model $p q4_0)
    timeout 240 bash scripts/bench_serve.sh --mvllm $B -m "$f" --device cuda --name "h200_$p" --input-len 512 \
      --output-len 256 --out "$LOG/serve" -- --kv-cache-memory 80% > "$LOG/serve_$p.log" 2>&1
    echo "bench serve $p rc=$?"; grep -E "^\|" "$LOG/serve_$p.log" | head -8
  done
fi
# AB_ENV="VAR=value ...": the attention, decode, throughput and long stages also run with each variable setting
# (an A/B of one switch in the same call, e.g. AB_ENV=MVLLM_CUDA_PDL=0); results get the suffix _ab_<value>.
variants() { echo base ${AB_ENV:-}; }
with_env() { local e=$1; shift; if [ "$e" = base ]; then "$@"; else env "$e" "$@"; fi; }
suffix() { [ "$1" = base ] && echo "" || echo "_ab_$(echo "${1#*=}" | tr -c 'A-Za-z0-9\n' '_')"; }
if has attention; then  # B1 (issue 4): the fused kernel at 4K and 32K (--quick), or every row (ATTN_FULL=1)
  for e in $(variants); do
    x=$(suffix $e)
    with_env $e timeout 200 $B bench attention $([ -n "${ATTN_FULL:-}" ] || echo --quick) ${ATTN_CONTEXTS:+--contexts $ATTN_CONTEXTS} --json-out "$LOG/attn$x.json" > "$LOG/attn$x.log" 2>&1
    echo "== bench attention [$e] rc=$?"; grep -E "^\|" "$LOG/attn$x.log" | head -40
  done
fi
if has decode; then
  for p in qwen2.5-0.5b qwen2.5-7b; do
    f=$(model $p q4_0)
    for e in $(variants); do
      x=$(suffix $e)
      with_env $e timeout 120 $B bench decode -m "$f" --device cuda --kv-dtype f16 --prompt-len 512 -n 127 --repeat 3 \
        --json-out "$LOG/decode_${p}_q4_0$x.json" > "$LOG/decode_$p$x.log" 2>&1
      echo "bench decode $p q4_0 [$e] rc=$?: $(tail -2 "$LOG/decode_$p$x.log" | tr '\n' ' ')"
    done
  done
fi
if has sample; then  # sampled decode: greedy, a device draw (temperature), the host sampler (top_p)
  ids=$(python3 -c "import random; random.seed(1); print(' '.join(str(random.randrange(1000, 100000)) for _ in range(512)))")
  for p in qwen2.5-0.5b qwen2.5-7b; do
    f=$(model $p q4_0)
    sets=("--temperature 0" "--temperature 1 --seed 1" "--temperature 1 --min-p 0.05 --seed 1"
          "--temperature 1 --top-p 0.95 --seed 1")
    [ -n "${SAMPLE_HOST_ONLY:-}" ] && sets=("--temperature 1 --top-p 0.95 --seed 1")  # the host sampler's row only
    for s in "${sets[@]}"; do
      timeout 120 $B generate -m "$f" --device cuda --kv-dtype f16 --prompt-ids "$ids" -n 256 --ids-out $s \
        > "$LOG/sample_$p.ids" 2> "$LOG/sample_$p.log"
      echo "generate $p [$s] rc=$?: $(grep -o 'decode [0-9.]* tok/s' "$LOG/sample_$p.log")"
    done
  done
  f=$(model qwen2.5-0.5b q4_0)  # B4(b) as nano-vllm runs it (temperature 0.6)
  [ -n "${SAMPLE_HOST_ONLY:-}" ] || timeout 150 $B bench throughput -m "$f" --device cuda --num-requests 256 --input-len 100:1024 --output-len 100:1024 \
    --kv-cache-memory 90% --kv-dtype f16 --activation-dtype f16 --temperature 0.6 \
    --json-out "$LOG/b4b_q05_t06.json" > "$LOG/b4b_q05_t06.log" 2>&1
  echo "B4b 0.5B temperature 0.6 rc=$?: $(tail -1 "$LOG/b4b_q05_t06.log")"
fi
if has throughput; then  # B4(a) with F16 KV and activations (llama.cpp's defaults), B4(b) nano-vllm shape
  for p in ${B4_MODELS:-qwen2.5-0.5b qwen2.5-7b}; do
    f=$(model $p q4_0)
    for n in ${B4_SIZES:-1 16 64 256}; do
      [ $p = qwen2.5-7b ] && [ $n = 256 ] && continue
      # B4_TILES: MVLLM_GEMM_TILES_MAX_ROWS values to run ("default": unset, the built-in rule).
      # B4_AB=1: also with the quantised tile GEMM instead of cuBLAS on the F16 copies. Every prompt
      # is prefilled in one step (--max-batched-tokens B x 512), then all B sequences decode in
      # lockstep, as llama-batched-bench runs them.
      for tiles in ${B4_TILES:-0} ${B4_AB:+256}; do
        for e in $(variants); do
          x=$(suffix $e)
          tenv=MVLLM_GEMM_TILES_MAX_ROWS=$tiles; [ $tiles = default ] && tenv=MVLLM_GEMM_TILES_DEFAULT=1
          # B4_EXTRA: more bench throughput arguments (e.g. --no-warmup), B4_TAG: their file-name suffix.
          r="b4a_${p}_b${n}_tiles$tiles$x${B4_TAG:-}"
          with_env $e env $tenv MVLLM_CUDA_STEP_TIMING=1 timeout 150 $B bench throughput \
            -m "$f" --device cuda --num-requests $n ${B4_EXTRA:-} \
            --max-seqs $n --input-len 512 --output-len 256 --max-batched-tokens $((n * 512)) --kv-cache-memory 90% \
            --kv-dtype f16 --activation-dtype f16 --json-out "$LOG/$r.json" > "$LOG/$r.log" 2>&1
          echo "B4a $p B=$n tiles<=$tiles [$e] ${B4_EXTRA:-} rc=$?: $(tail -1 "$LOG/$r.log")"
          grep -h -E "graph launches|warm-up|graph ablation|% \|$" "$LOG/$r.log" | head -60
        done
      done
    done
  done
  f=$(model qwen2.5-0.5b q4_0)
  [ -n "${SKIP_B4B:-}" ] || timeout 150 $B bench throughput -m "$f" --device cuda --num-requests 256 --input-len 100:1024 --output-len 100:1024 \
    --kv-cache-memory 90% --kv-dtype f16 --activation-dtype f16 --json-out "$LOG/b4b_q05.json" > "$LOG/b4b_q05.log" 2>&1 &&
    echo "B4b 0.5B: $(tail -1 "$LOG/b4b_q05.log")"
fi
if has spec; then  # issue 9 on the H200: the shipped model and its draft
  mkdir -p "$LOG/spec"
  timeout 150 python3 scripts/bench_spec.py --mvllm $B --device cuda --name h200_spec --out "$LOG/spec" > "$LOG/spec.log" 2>&1
  echo "bench spec rc=$?"; tail -16 "$LOG/spec.log"
fi
if has sweep; then  # B2 / B3 / B5 over both geometries in q4_0 and Q4_K_M
  mkdir -p "$LOG/sweep"
  B=$B RES="$LOG/sweep" LOG="$LOG" M="$M" timeout 400 bash bench/cuda_decode_sweep.sh
fi
if has long; then  # B3 rows after long prompts (LONG_PROMPTS), with the prefill tok/s of those prompts
  for p in ${LONG_MODELS:-qwen2.5-7b qwen2.5-0.5b}; do
    f=$(model $p q4_0)
    for len in ${LONG_PROMPTS:-32768}; do
      for e in $(variants); do
        x=$(suffix $e)
        with_env $e timeout 150 $B bench decode -m "$f" --device cuda --kv-dtype f16 --prompt-len $len -n ${LONG_N:-127} \
          ${LONG_CHUNK:+--prefill-chunk $LONG_CHUNK} --json-out "$LOG/b3_${p}_q4_0_p$len$x.json" > "$LOG/b3_${p}_long_$len$x.log" 2>&1
        echo "B3 $p q4_0 prompt $len [$e] rc=$?: $(tail -2 "$LOG/b3_${p}_long_$len$x.log" | tr '\n' ' ')"
      done
    done
  done
fi
if has profile; then  # kernel time per kernel name (real clocks, warm caches): 7B batch-64 decode steps
  command -v ncu > /dev/null || echo "no ncu"
  f=$(model qwen2.5-7b q4_0)
  timeout ${PROFILE_TIMEOUT:-200} ncu --csv --clock-control none --cache-control none --metrics gpu__time_duration.sum --launch-skip ${PROFILE_SKIP:-0} --launch-count ${PROFILE_COUNT:-2500} \
    $B bench throughput -m "$f" --device cuda --num-requests 64 --max-seqs 64 --input-len 16 --output-len 64 \
    --kv-cache-memory 16GiB --kv-dtype f16 --activation-dtype f16 > "$LOG/ncu_7b_b64.csv" 2>&1
  echo "ncu 7B batch 64 rc=$?"; python3 bench/ncu_summary.py "$LOG/ncu_7b_b64.csv" 25
fi
echo "total $(( $(date +%s) - t0 )) s"
