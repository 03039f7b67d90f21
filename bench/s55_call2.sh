# The fifty-fifth session's second call (bench/NOTES.md): where main stands on the card that comes
# (asked for an H200), with the warm-up run that `bench decode` has taken since session 54.
# 1. `bench kernels` at one token column, every type (issue 5's first deliverable; the last H200
#    table is the twelfth session's). 2. B1 at 128 tokens, 0.5B F16, batch 1, warm and --cold-l2,
#    the default plan and the one split of 8 warps (call 1's reading: the one-split plan wins in B1
#    only because the KV stays in L2 there). 3. The q4_0 files: decode after 128 / 512 (three runs:
#    pp512) / 2K / 32K tokens and B2's two rows, each after one untimed warm-up run. 4. The step
#    timeline of both q4_0 files after 128 tokens (-DMVLLM_STEP_TIMELINE=ON build).
# .carry/s55b (git-ignored): mvllm.xz (main's build), mvllm-stl.xz (the timeline build), lib.txz as
# .carry/s52d. Move bench/results and the model files out of the tree first (64 MiB).
. bench/s40_common.sh
C=${C:-.carry/s55b}
t0=$(date +%s)
s40_setup $C
xz -dc $C/mvllm-stl.xz > bin/mvllm-stl && chmod +x bin/mvllm-stl
timeout 120 bin/mvllm bench kernels --tokens 1 --json-out $R/kernels_t1.json > $R/kernels_t1.log 2>&1
echo "kernels rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^device|^\| [a-z]" $R/kernels_t1.log | head -60
for cold in warm cold; do
  flag=; [ $cold = cold ] && flag=--cold-l2
  for plan in def s1w8; do
    e=; [ $plan = s1w8 ] && e="MVLLM_ATTN_SPLITS=1 MVLLM_ATTN_WARPS=8"
    env $e timeout 60 bin/mvllm bench attention --quick --contexts 128,1024 --batches 1 $flag \
      --json-out $R/b1_${cold}_$plan.json > $R/b1_${cold}_$plan.log 2>&1
    echo "b1 $cold $plan rc=$?: $(grep -E '^qwen.* f16 ' $R/b1_${cold}_$plan.log | awk -F'|' '{print $1 "|" $2}' | tr '\n' ';' | tr -s ' ')"
  done
done
q4_models
echo "models at $(( $(date +%s) - t0 )) s"
for m in $M5 $M7; do
  n=$(basename $m .gguf)
  for p in 128 2048 32768; do
    timeout 120 bin/mvllm bench decode -m $m --device cuda --kv-dtype f16 --prompt-len $p -n 127 \
      --json-out $R/b3_${n}_p$p.json > $R/b3_${n}_p$p.log 2>&1
    echo "B3 $n $p rc=$?: $(tail -1 $R/b3_${n}_p$p.log | awk -F'|' '{print $9 "|" $10}')"
  done
  timeout 120 bin/mvllm bench decode -m $m --device cuda --kv-dtype f16 --prompt-len 512 -n 127 --repeat 3 \
    --json-out $R/b3_${n}_p512.json > $R/b3_${n}_p512.log 2>&1
  echo "B3/B5 $n 512 rc=$?: $(tail -1 $R/b3_${n}_p512.log | awk -F'|' '{print $9 "|" $10}')"
  for pn in 20:292 36:948; do
    p=${pn%:*} k=${pn#*:}
    timeout 120 bin/mvllm bench decode -m $m --device cuda --kv-dtype f16 --prompt-len $p -n $k \
      --json-out $R/b2_${n}_p${p}_n$k.json > $R/b2_${n}_p$p.log 2>&1
    echo "B2 $n $p -> $k rc=$?: $(tail -1 $R/b2_${n}_p$p.log | awk -F'|' '{print $10}')"
  done
  echo "$n done at $(( $(date +%s) - t0 )) s"
done
# 5. The GEMV launch knobs on this card (tuned on the H100 in sessions 23 and 33), after 128 tokens,
#    two runs each after a warm-up, the default between them. Only on an H200 (the H100 is where
#    they were tuned).
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
dec k_7_def1 bin/mvllm $M7 128
dec k_7_tw1024 bin/mvllm $M7 128 MVLLM_GEMV_TARGET_WARPS=1024
dec k_7_tw4096 bin/mvllm $M7 128 MVLLM_GEMV_TARGET_WARPS=4096
dec k_7_trig0 bin/mvllm $M7 128 MVLLM_GEMV_TRIGGER_MB=0
dec k_7_trig20 bin/mvllm $M7 128 MVLLM_GEMV_TRIGGER_MB=20
dec k_7_def2 bin/mvllm $M7 128
dec k_05_def1 bin/mvllm $M5 128
dec k_05_tw1024 bin/mvllm $M5 128 MVLLM_GEMV_TARGET_WARPS=1024
dec k_05_tw4096 bin/mvllm $M5 128 MVLLM_GEMV_TARGET_WARPS=4096
dec k_05_def2 bin/mvllm $M5 128
echo "knobs done at $(( $(date +%s) - t0 )) s"
fi
for m in $M5 $M7; do
  n=$(basename $m .gguf)
  MVLLM_STEP_TIMELINE_OUT=$R/tl_$n.csv timeout 90 bin/mvllm-stl bench decode -m $m --device cuda \
    --kv-dtype f16 --prompt-len 128 -n 127 > $R/tl_$n.log 2>&1
  echo "timeline $n rc=$?: $(tail -1 $R/tl_$n.log | awk -F'|' '{print $10}')"
  python3 scripts/step_timeline.py $R/tl_$n.csv > $R/tl_$n.txt 2>&1; rm -f $R/tl_$n*.csv
  sed -n 1,40p $R/tl_$n.txt
done
echo "all done at $(( $(date +%s) - t0 )) s"
