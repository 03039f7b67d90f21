# The forty-third session's second call (bench/NOTES.md): no change; where the K-quant GEMVs stand.
# .carry/s43b: mvllm.xz (59f1cf2, CUDA code of 6788bc9), mvllm-tl.xz (the step-timeline build of
# call 1), lib.txz. 1. `bench kernels` for q4_0 / q8_0 / q4_k / q6_k at one token column on the 7B
# shapes (issue 5's first deliverable: >= 85 % of the copy rate). 2. ncu's full set on the Q4_K GEMV
# (3584 x 18944) and the Q6_K one (18944 x 3584): stall samples per SASS line. 3. The step timeline
# of the 7B and 0.5B Q4_K_M files after 128 tokens, and their batch-1 decode with mvllm-kq.xz (the
# K-quant gate/up pair unrolled two items a lane instead of one) against mvllm.xz.
. bench/s40_common.sh
s40_setup .carry/s43b
for b in tl kq; do xz -dc .carry/s43b/mvllm-$b.xz > bin/mvllm-$b && chmod +x bin/mvllm-$b; done
timeout 120 bin/mvllm bench kernels --types q4_0,q8_0,q4_k,q6_k --tokens 1 --json-out $R/kernels.json > $R/kernels.log 2>&1
echo "kernels rc=$?"; cat $R/kernels.log | head -40
ncu_gemv() {  # NAME TYPE SHAPE
  timeout 150 ncu --clock-control none -k "regex:gemv_" --launch-skip 6 --launch-count 1 --set full -f \
    -o $R/ncu_$1 bin/mvllm bench kernels --types $2 --shapes $3 --tokens 1 --replays 2 > $R/ncu_$1.log 2>&1
  echo "ncu $1 rc=$?"
  ncu -i $R/ncu_$1.ncu-rep --page source --csv --print-source sass > $R/ncu_$1_src.csv 2> $R/ncu_$1_src.err
  ncu -i $R/ncu_$1.ncu-rep --page details > $R/ncu_$1.txt 2>&1
  grep -E "Duration|Registers Per|Warp Cycles Per Issued|Achieved Occupancy|Grid Size|DRAM Throughput|Issue Slots Busy|L1/TEX Hit|Executed Ipc A" $R/ncu_$1.txt | head -12
  python3 bench/ncu_stalls.py $R/ncu_$1_src.csv 12
  rm -f $R/ncu_$1.ncu-rep
}
ncu_gemv q4k_up q4_k 3584:18944
ncu_gemv q6k_down q6_k 18944:3584
ncu_gemv q40_up q4_0 3584:18944
M=/tmp/mvllm-models; mkdir -p $M
for preset in qwen2.5-0.5b qwen2.5-7b; do
  timeout 200 bin/mvllm make-model $M/$preset-q4_k_m.gguf --preset $preset --type q4_k_m > /dev/null 2>&1; echo "model $preset rc=$?"
  MVLLM_STEP_TIMELINE_OUT=$R/tl_km_$preset.csv timeout 90 bin/mvllm-tl bench decode -m $M/$preset-q4_k_m.gguf --device cuda \
    --kv-dtype f16 --prompt-len 128 -n 127 > $R/tl_km_$preset.log 2>&1
  echo "timeline $preset rc=$?: $(tail -n1 $R/tl_km_$preset.log | awk -F'|' '{print $3 "|" $10}')"
  python3 scripts/step_timeline.py $R/tl_km_$preset.csv > $R/tl_km_$preset.txt 2>&1; rm -f $R/tl_km_$preset.csv
  sed -n 1,16p $R/tl_km_$preset.txt; tail -14 $R/tl_km_$preset.txt
  for round in 1 2; do
    dec km_${preset}_$round bin/mvllm $M/$preset-q4_k_m.gguf 128
    dec kmu2_${preset}_$round bin/mvllm-kq $M/$preset-q4_k_m.gguf 128
  done
done
