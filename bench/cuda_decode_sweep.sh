#!/usr/bin/env bash
# BENCHMARKS.md B2 / B3 / B5 on the GPU machine with `mvllm bench decode --device cuda` (F16 KV,
# fused attention, greedy, batch 1) on make-model files: Qwen2.5-0.5B and -7B in q4_0 and
# Q4_K_M. Called by cuda_decode_run.sh (SWEEP=1) after the build; writes one JSON per run to $RES.
set -u -o pipefail
RES=${RES:?} LOG=${LOG:?} M=${M:?}
B=${B:-build/bin/mvllm}
for preset in qwen2.5-0.5b qwen2.5-7b; do
  for type in q4_0 q4_k_m; do
    f=$M/$preset-$type.gguf
    [ -f $f ] || timeout 150 $B make-model $f --preset $preset --type $type > "$LOG/make_${preset}_${type}.log" 2>&1 ||
      { echo "make-model $preset $type failed"; continue; }
    # B3: 127 decode steps after prompts of 128 .. 32768 tokens. B5 (pp512): the 512 row runs three
    # times and its median prefill is the figure. Each row's first run is an untimed warm-up (bench
    # decode --warmup 1, from session 54 on): before it, a single run's figures were the cold ones,
    # with cuBLASLt's algorithm timing and the first graphs in them.
    for p in 128 512 1024 2048 4096 16384 32768; do
      [ $type = q4_k_m ] && [ $p -ne 128 ] && [ $p -ne 2048 ] && [ $p -ne 32768 ] && continue
      rep=1; [ $p -eq 512 ] && rep=3
      timeout 120 $B bench decode -m $f --device cuda --kv-dtype f16 --prompt-len $p -n 127 --repeat $rep \
        --json-out "$RES/b3_${preset}_${type}_p$p.json" > "$LOG/b3_${preset}_${type}_p$p.log" 2>&1
      echo "B3 $preset $type prompt $p rc=$?: $(tail -1 "$LOG/b3_${preset}_${type}_p$p.log")"
    done
    # B2: prompt 20 -> 292 generated, 36 -> 948 (q4_0 only).
    if [ $type = q4_0 ]; then
      for pn in 20:292 36:948; do
        p=${pn%:*} n=${pn#*:}
        timeout 120 $B bench decode -m $f --device cuda --kv-dtype f16 --prompt-len $p -n $n \
          --json-out "$RES/b2_${preset}_${type}_p${p}_n$n.json" > "$LOG/b2_${preset}_${type}_p$p.log" 2>&1
        echo "B2 $preset $type $p -> $n rc=$?: $(tail -1 "$LOG/b2_${preset}_${type}_p$p.log")"
      done
    fi
  done
done
