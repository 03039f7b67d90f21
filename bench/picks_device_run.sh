#!/usr/bin/env bash
# The thirty-first session's device calls (bench/NOTES.md): the new tree built here for sm_90, as
# the base binary (an earlier tree, built on the build machine for sm_90 and carried xz-compressed
# in .carry/), so that both run the same kernels where the trees agree. Stages:
#   test   test_cuda of the new tree
#   b4b    B4(b) on the 0.5B q4_0, plain and with a repetition penalty, base and new alternating,
#          with MVLLM_CUDA_STEP_TIMING; then new with frequency + presence penalties and with top_p
#   lp     batch 1 (512-token prompt, 256 tokens, T 0.6) with 5 top logprobs, base and new
#          alternating, and new without logprobs
#   ncu    the row-score kernels of one batch-1 step with 5 top logprobs
#   draw   B4(b) at T 0.6 and with top_p 0.9, batch 1 at T 0.6, base and new alternating; B4(b)
#          greedy (base); ncu of the draw's race kernel in a 256-row step, base and new
#   decode (thirty-second session) batch-1 `bench decode` after 512 tokens, 0.5B and 7B q4_0, the new
#          binary with its defaults and with each switch of AB_VARS set to 0, in turn, two rounds
#          (DEC_MODELS="0.5b 7b" by default; ROUNDS=2; DEC_PROMPT=512, or several: "1024 2048"); an AB_VARS item VAR=VALUE[,VAR2=VALUE2] sets those values instead
#   timeline the step timeline (a -DMVLLM_STEP_TIMELINE=ON binary: TIMELINE_BIN=path.xz, carried,
#          built here for sm_90; without it, built there in build-tl/) of 0.5B batch-1 decode after
#          512 tokens, with each AB_VARS switch at its default and at 0; scripts/step_timeline.py
#          summarises each CSV, and only the summaries come back (TL_VARS: other switches than AB_VARS)
#   attn   (thirty-fourth session) B1, `bench attention --quick` over ATTN_CONTEXTS (e.g. 4096,32768),
#          with the defaults and each ATTN_VARS item
#   batches (thirty-fifth session) small batches: `bench throughput` with N requests of a P-token
#          prompt and 256 output tokens each (BATCH_CASES="model:N:P ...", model 0.5b or 7b), decode
#          tok/s with the defaults and each AB_VARS item, two rounds
#   atl    (thirty-third session) the decode attention's phase timeline (ATL_BIN, a -DMVLLM_ATTN_TIMELINE=ON
#          build carried xz-compressed) in batch-1 decode after ATL_PROMPT (512) tokens, DEC_MODELS,
#          with the defaults and each ATL_VARS item; scripts/attention_timeline.py summarises
#   ncusrc (thirty-sixth session) ncu's warp-stall samples per SASS instruction of one decode-attention
#          launch: B1 (`bench attention --quick`, NCU_CONTEXT, 4096) and batch-1 decode after
#          NCU_PROMPT (2048) tokens, NCU_KERNELS (regexes of the demangled name, "decode_kernel<128
#          decode_kernel<64"); the source page as CSV, the details page as text
# NEW_BIN=path.xz: the new binary built here for sm_90 and carried (no build there; the test stage
# then needs TEST_BIN=path.xz, a carried test_cuda).
# Usage (repo root, .devdeps and .carry carried): OUT=dir STAGES="test b4b lp" bash bench/picks_device_run.sh
# Without .carry/mvllm-base.xz the stages that compare with the base binary run the new one only.
set -u -o pipefail
OUT=${OUT:-$(mktemp -d)}
STAGES=${STAGES:-test b4b lp}
has() { [[ " $STAGES " == *" $1 "* ]]; }
R=$OUT/r; mkdir -p $R
trap 'tar czf "$OUT/r.tgz" -C "$OUT" r 2>/dev/null; rm -rf "$R"' EXIT  # one file back, not one per run
mkdir -p bin
if [ -n "${NEW_BIN:-}" ]; then  # a binary of this tree built on the build machine (sm_90), xz-compressed
  source scripts/device_deps.sh unpack > /dev/null 2>&1
  # LIB_TXZ=path: the runtime libraries (lib/ in a tar.xz) instead of a carried .devdeps
  [ -z "${LIB_TXZ:-}" ] || { mkdir -p /tmp/carried && tar xJf "$LIB_TXZ" -C /tmp/carried &&
    export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/tmp/carried/lib; }
  xz -dc "$NEW_BIN" > bin/mvllm-new && chmod +x bin/mvllm-new
else
  CUDA_ARCH=90 OUT=$R/build STAGES=build bash bench/h200_run.sh 2>&1 | tail -2
  source scripts/device_deps.sh unpack > /dev/null 2>&1
  cp build-gpu/bin/mvllm bin/mvllm-new
fi
# EXTRA_BINS="name=path.xz ...": more carried binaries, bin/mvllm-name; an AB_VARS item @name runs one
# with its defaults.
for e in ${EXTRA_BINS:-}; do xz -dc "${e#*=}" > bin/mvllm-${e%%=*} && chmod +x bin/mvllm-${e%%=*}; done
# An AB_VARS item: VAR=VALUE as given, a bare VAR set to 0, "none" the defaults; tag(): a file-name form.
assign() { [[ $1 == @* ]] && echo MVLLM_NONE=0 || { [[ $1 == *=* ]] && echo "${1//,/ }" || echo "${1/#none/MVLLM_NONE}=0"; }; }
bin_of() { [[ $1 == @* ]] && echo bin/mvllm-${1#@} || echo bin/mvllm-new; }
tag_of() { local t=${1//=/_}; echo "${t//,/_}"; }
if [ -f .carry/mvllm-base.xz ]; then xz -dc .carry/mvllm-base.xz > bin/mvllm-base && chmod +x bin/mvllm-base
else ln -sf mvllm-new bin/mvllm-base; fi
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
if has test; then  # TEST_BIN=path.xz: a test_cuda built here for sm_90 and carried
  tc=build-gpu/bin/test_cuda
  [ -z "${TEST_BIN:-}" ] || { xz -dc "$TEST_BIN" > bin/test_cuda && chmod +x bin/test_cuda && tc=bin/test_cuda; }
  timeout 240 $tc > $R/test_cuda.log 2>&1; echo "test_cuda rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/test_cuda.log | tr '\n' ' ')"
  grep -E "FAILED|Failure" $R/test_cuda.log | head -20
fi
M=/tmp/mvllm-models/qwen2.5-0.5b-q4_0.gguf; mkdir -p /tmp/mvllm-models
[ -f $M ] || timeout 200 bin/mvllm-new make-model $M --preset qwen2.5-0.5b --type q4_0 > /dev/null 2>&1
b4b() {  # binary tag extra-flags...
  local bin=$1 tag=$2; shift 2
  MVLLM_CUDA_STEP_TIMING=1 timeout 150 bin/$bin bench throughput -m $M --device cuda --num-requests 256 \
    --input-len 100:1024 --output-len 100:1024 --kv-cache-memory 90% --kv-dtype f16 --activation-dtype f16 \
    --temperature ${T:-0.6} "$@" --json-out $R/$tag.json > $R/$tag.log 2>&1
  echo "$tag: $(tail -n1 $R/$tag.log | awk -F'|' '{print $9}') | $(grep -o 'cuda: .*' $R/$tag.log)"
}
if has b4b; then
  for round in 1 2; do
    for v in base new; do b4b mvllm-$v ${v}_plain_$round; done
    for v in base new; do b4b mvllm-$v ${v}_rep_$round --repeat-penalty 1.1; done
  done
  b4b mvllm-new new_freq --frequency-penalty 0.5 --presence-penalty 0.3
  b4b mvllm-new new_top_p --top-p 0.9
fi
one() {  # binary tag extra-flags...: batch 1
  local bin=$1 tag=$2; shift 2
  timeout 60 bin/$bin bench throughput -m $M --device cuda --num-requests 1 --input-len 512 --output-len 256 \
    --kv-dtype f16 --activation-dtype f16 --temperature 0.6 "$@" --json-out $R/$tag.json > $R/$tag.log 2>&1
  echo "$tag: $(tail -n1 $R/$tag.log | awk -F'|' '{print $9}')"
}
if has lp; then
  for round in 1 2; do for v in base new; do one mvllm-$v ${v}_b1_lp5_$round --logprobs 5; done; done
  one mvllm-new new_b1_plain
  one mvllm-new new_b1_lp20 --logprobs 20
fi
if has ncu; then
  timeout 150 ncu -k regex:row_scores --launch-skip 20 --launch-count 2 --section SpeedOfLight --section WarpStateStats \
    --section LaunchStats --section Occupancy \
    bin/mvllm-new bench throughput -m $M --device cuda --num-requests 1 --input-len 64 --output-len 64 \
    --temperature 0.6 --logprobs 5 > $R/ncu_scores.txt 2>&1
  grep -E "row_scores|Duration|DRAM Throughput|Warp Cycles Per Issued|Achieved Occupancy" $R/ncu_scores.txt | head -16
fi
if has draw; then
  for v in base new; do
    timeout 150 ncu -k regex:draw_partial --launch-skip 30 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
      --section ComputeWorkloadAnalysis bin/mvllm-$v bench throughput -m $M --device cuda --num-requests 256 \
      --input-len 64 --output-len 64 --temperature 0.6 > $R/ncu_draw_$v.txt 2>&1
    echo "ncu draw $v:"; grep -E "Duration|DRAM Throughput|Compute \(SM\) Throughput|Executed Ipc A|Warp Cycles Per Issued" $R/ncu_draw_$v.txt | head -6
  done
  for round in 1 2; do
    for v in base new; do b4b mvllm-$v ${v}_t06_$round; done
    for v in base new; do b4b mvllm-$v ${v}_top_p_$round --top-p 0.9; done
    for v in base new; do one mvllm-$v ${v}_b1_t06_$round; done
  done
  T=0 b4b mvllm-base base_greedy
fi
if has decode; then
  M7=/tmp/mvllm-models/qwen2.5-7b-q4_0.gguf
  [[ "${DEC_MODELS:-0.5b 7b}" != *7b* ]] || [ -f $M7 ] ||
    timeout 200 bin/mvllm-new make-model $M7 --preset qwen2.5-7b --type q4_0 > /dev/null 2>&1
  models=""; for s in ${DEC_MODELS:-0.5b 7b}; do [ $s = 7b ] && models="$models $M7" || models="$models $M"; done
  for p in ${DEC_PROMPT:-512}; do  # one prompt length or several ("1024 2048 4096")
    for round in $(seq ${ROUNDS:-2}); do
      for off in none ${AB_VARS:-MVLLM_SWIGLU_QX}; do
        for m in $models; do
          tag=dec_$(basename $m .gguf)_${p}_$(tag_of $off)_$round
          env $(assign $off) timeout 90 $(bin_of $off) bench decode -m $m --device cuda --kv-dtype f16 \
            --prompt-len $p -n 127 --repeat 3 --json-out $R/$tag.json > $R/$tag.log 2>&1
          echo "$tag: $(tail -n1 $R/$tag.log)"
        done
      done
    done
  done
fi
if has timeline; then
  if [ -n "${TIMELINE_BIN:-}" ]; then xz -dc "$TIMELINE_BIN" > bin/mvllm-tl && chmod +x bin/mvllm-tl
  else
    cmake -S . -B build-tl -DCMAKE_BUILD_TYPE=Release -DMVLLM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DMVLLM_BUILD_BENCH=OFF -DMVLLM_STEP_TIMELINE=ON > $R/build_tl.log 2>&1 &&
      cmake --build build-tl -j16 --target mvllm >> $R/build_tl.log 2>&1 && cp build-tl/bin/mvllm bin/mvllm-tl
  fi
  for off in none ${TL_VARS-${AB_VARS:-MVLLM_ATTN_ROPE}}; do
    t=$(tag_of $off)
    env $(assign $off) MVLLM_STEP_TIMELINE_OUT=$R/tl_$t.csv timeout 90 bin/mvllm-tl bench decode -m $M \
      --device cuda --kv-dtype f16 --prompt-len 512 -n 127 > $R/tl_$t.log 2>&1
    python3 scripts/step_timeline.py $R/tl_$t.csv > $R/tl_$t.txt 2>&1; rm -f $R/tl_$t.csv
    echo "timeline $off: $(tail -n1 $R/tl_$t.log | awk -F'|' '{print $10}') tok/s"; head -16 $R/tl_$t.txt; tail -14 $R/tl_$t.txt
  done
fi
if has attn; then  # (thirty-fourth session) B1: bench attention --quick (ATTN_CONTEXTS), defaults and each ATTN_VARS item
  for off in none ${ATTN_VARS:-}; do
    t=attn_$(tag_of $off)
    env $(assign $off) timeout 200 $(bin_of $off) bench attention --quick ${ATTN_CONTEXTS:+--contexts $ATTN_CONTEXTS} \
      --json-out $R/$t.json > $R/$t.log 2>&1
    echo "$t rc=$?"; grep -E "^\|" $R/$t.log | head -24
  done
fi
if has batches; then
  for round in 1 2; do
    for c in ${BATCH_CASES:-0.5b:2:4096 0.5b:4:2048 0.5b:8:2048 0.5b:8:4096 7b:2:2048 7b:3:4096}; do
      IFS=: read -r s n p <<< "$c"
      m=$M; [ $s = 7b ] && m=/tmp/mvllm-models/qwen2.5-7b-q4_0.gguf
      [ -f $m ] || timeout 200 bin/mvllm-new make-model $m --preset qwen2.5-7b --type q4_0 > /dev/null 2>&1
      for off in none ${AB_VARS:-MVLLM_ATTN_ONE_CLUSTER_TOKENS}; do
        tag=bt_${s}_${n}x${p}_$(tag_of $off)_$round
        env $(assign $off) timeout 90 $(bin_of $off) bench throughput -m $m --device cuda --num-requests $n \
          --input-len $p --output-len 256 --kv-dtype f16 --activation-dtype f16 --temperature 0 \
          --json-out $R/$tag.json > $R/$tag.log 2>&1
        echo "$tag: decode $(tail -n1 $R/$tag.log | awk -F'|' '{print $12}') tok/s"
      done
    done
  done
fi
if has atl; then  # the decode attention's phases in the step (ATL_BIN: a -DMVLLM_ATTN_TIMELINE=ON build, carried)
  xz -dc "$ATL_BIN" > bin/mvllm-atl && chmod +x bin/mvllm-atl
  for s in ${DEC_MODELS:-0.5b 7b}; do
    m=$M; [ $s = 7b ] && m=/tmp/mvllm-models/qwen2.5-7b-q4_0.gguf
    [ -f $m ] || timeout 200 bin/mvllm-new make-model $m --preset qwen2.5-7b --type q4_0 > /dev/null 2>&1
    for off in none ${ATL_VARS:-}; do
      t=atl_${s}_$(tag_of $off)
      env $(assign $off) MVLLM_ATTN_TIMELINE_OUT=$R/$t timeout 90 bin/mvllm-atl bench decode -m $m --device cuda \
        --kv-dtype f16 --prompt-len ${ATL_PROMPT:-512} -n 127 > $R/$t.log 2>&1
      python3 scripts/attention_timeline.py --detail $R/${t}_model.csv > $R/$t.txt 2>&1; rm -f $R/${t}_model.csv
      echo "$t: $(tail -n1 $R/$t.log | awk -F'|' '{print $10}') tok/s"; cat $R/$t.txt
    done
  done
fi
if has ncusrc; then
  for k in ${NCU_KERNELS:-decode_kernel<128 decode_kernel<64}; do
    for what in b1 step; do
      t=ncu_${what}_$(echo "$k" | tr -c 'a-z0-9\n' '_')
      if [ $what = b1 ]; then set -- bench attention --quick --contexts ${NCU_CONTEXT:-4096}
      else m=$M; [[ $k == *128* ]] && m=/tmp/mvllm-models/qwen2.5-7b-q4_0.gguf
        [ -f $m ] || timeout 200 bin/mvllm-new make-model $m --preset qwen2.5-7b --type q4_0 > /dev/null 2>&1
        set -- bench decode -m $m --device cuda --kv-dtype f16 --prompt-len ${NCU_PROMPT:-2048} -n 63 --repeat 1; fi
      timeout 200 ncu --clock-control none --cache-control none --kernel-name-base demangled -k "regex:$k" \
        --launch-skip ${NCU_SKIP:-200} --launch-count 1 --set full -f -o $R/$t bin/mvllm-new "$@" > $R/$t.log 2>&1
      echo "$t rc=$?"; tail -n 3 $R/$t.log
      ncu -i $R/$t.ncu-rep --page source --csv --print-source sass > $R/${t}_src.csv 2> $R/${t}_src.err
      ncu -i $R/$t.ncu-rep --page details > $R/$t.txt 2>&1
      grep -E "Duration|Registers Per|Warp Cycles Per Issued|Achieved Occupancy|Grid Size|Cluster Size" $R/$t.txt | head -8
      rm -f $R/$t.ncu-rep
    done
  done
fi
