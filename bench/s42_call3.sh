# The forty-second session's third call (bench/NOTES.md): no kernel change. .carry/s42c holds the
# binary of 6788bc9 (mvllm.xz) and the same tree built with -DMVLLM_STEP_TIMELINE=ON (mvllm-tl.xz).
# First the step timeline after 4,096-token prompts on both geometries (summaries only: the CSVs are
# large); batch-1 decode with one early attention tile against two (mvllm-e1.xz: 6788bc9 plus the
# MVLLM_ATTN_EARLY_TILES=1 switch); then the whole B2 / B3 / B5 sweep (bench/cuda_decode_sweep.sh)
# with the plain binary.
. bench/s40_common.sh
s40_setup .carry/s42c
xz -dc .carry/s42c/mvllm-tl.xz > bin/mvllm-tl && chmod +x bin/mvllm-tl
M=/tmp/mvllm-models; mkdir -p $M $R/sweeplog
for preset in qwen2.5-0.5b qwen2.5-7b; do
  timeout 150 bin/mvllm make-model $M/$preset-q4_0.gguf --preset $preset --type q4_0 > /dev/null 2>&1
  MVLLM_STEP_TIMELINE_OUT=$R/tl_$preset.csv timeout 90 bin/mvllm-tl bench decode -m $M/$preset-q4_0.gguf --device cuda \
    --kv-dtype f16 --prompt-len 4096 -n 127 > $R/tl_$preset.log 2>&1
  echo "timeline $preset rc=$?: $(tail -n1 $R/tl_$preset.log | awk -F'|' '{print $3 "|" $10}')"
  python3 scripts/step_timeline.py $R/tl_$preset.csv > $R/tl_$preset.txt 2>&1; rm -f $R/tl_$preset.csv
  head -40 $R/tl_$preset.txt
done
xz -dc .carry/s42c/mvllm-e1.xz > bin/mvllm-e1 && chmod +x bin/mvllm-e1
for round in 1 2; do
  for p in 4096 32768; do
    dec e2_05_${p}_$round bin/mvllm-e1 $M5 $p
    dec e1_05_${p}_$round bin/mvllm-e1 $M5 $p MVLLM_ATTN_EARLY_TILES=1
  done
  dec e2_7_4096_$round bin/mvllm-e1 $M7 4096
  dec e1_7_4096_$round bin/mvllm-e1 $M7 4096 MVLLM_ATTN_EARLY_TILES=1
done
RES=$R LOG=$R/sweeplog M=$M B=bin/mvllm timeout 360 bash bench/cuda_decode_sweep.sh
