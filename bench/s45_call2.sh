# The forty-fifth session's second call (bench/NOTES.md). .carry/s45b: mvllm.xz and test_cuda.xz
# (Q6_K's first loop step before the PDL wait at one column outside a pair and the RoPE epilogue),
# mvllm-tl.xz (its step-timeline build, the attention's own stamps off), mvllm-k2.xz (probe: Q4_K
# likewise, two items), mvllm-old.xz (378ca5d), lib.txz.
# 1. test_cuda but the batch-invariance tests (they read the shipped model). 2. Q4_K_M batch-1 decode after 128 tokens, old / new, two rounds (both geometries),
# and the q4_0 0.5B once each. 3. The decode attention's plan at short contexts, by environment
# only: the q4_0 files after 128 and 512 tokens with one split per row (MVLLM_ATTN_SPLITS=1), with
# 4 warps, with both, with clusters off. 4. The step timeline of the 0.5B q4_0 after 128 tokens.
. bench/s40_common.sh
s40_setup .carry/s45b .carry/s45b/mvllm-old.xz
for b in tl k2; do xz -dc .carry/s45b/mvllm-$b.xz > bin/mvllm-$b && chmod +x bin/mvllm-$b; done
s40_tests '-CudaBatchInvariance*'  # the shipped model (its fixture) does not travel in this call
M=/tmp/mvllm-models; mkdir -p $M
q4_models
for preset in qwen2.5-0.5b qwen2.5-7b; do
  timeout 200 bin/mvllm make-model $M/$preset-q4_k_m.gguf --preset $preset --type q4_k_m > /dev/null 2>&1; echo "model $preset rc=$?"
done
for round in 1 2; do
  for preset in qwen2.5-0.5b qwen2.5-7b; do
    dec km_${preset}_old_$round bin/mvllm-old $M/$preset-q4_k_m.gguf 128
    dec km_${preset}_new_$round bin/mvllm $M/$preset-q4_k_m.gguf 128
    [ $preset = qwen2.5-7b ] && dec km_${preset}_k2_$round bin/mvllm-k2 $M/$preset-q4_k_m.gguf 128
  done
done
dec q40_05_old bin/mvllm-old $M5 128; dec q40_05_new bin/mvllm $M5 128
for m in $M5 $M7; do
  n=$(basename $m .gguf)
  dec a_${n}_128_base bin/mvllm $m 128
  dec a_${n}_128_s1 bin/mvllm $m 128 MVLLM_ATTN_SPLITS=1
  dec a_${n}_128_w4 bin/mvllm $m 128 MVLLM_ATTN_WARPS=4
  dec a_${n}_128_s1w4 bin/mvllm $m 128 MVLLM_ATTN_SPLITS=1 MVLLM_ATTN_WARPS=4
  dec a_${n}_128_c0 bin/mvllm $m 128 MVLLM_ATTN_CLUSTER=0
  dec a_${n}_512_base bin/mvllm $m 512
  dec a_${n}_512_s1 bin/mvllm $m 512 MVLLM_ATTN_SPLITS=1
done
for b in mvllm mvllm-k2; do
  timeout 60 bin/$b bench kernels --types q4_k,q6_k --tokens 1 --json-out $R/kb_$b.json > $R/kb_$b.log 2>&1
  echo "kernels $b rc=$?"; grep -iE "^\| (q4_k|q6_k) " $R/kb_$b.log | cut -c1-80
done
MVLLM_STEP_TIMELINE_OUT=$R/tl_q40_05.csv timeout 90 bin/mvllm-tl bench decode -m $M5 --device cuda \
  --kv-dtype f16 --prompt-len 128 -n 127 > $R/tl_q40_05.log 2>&1
echo "timeline rc=$?"
python3 scripts/step_timeline.py $R/tl_q40_05.csv > $R/tl_q40_05.txt 2>&1; rm -f $R/tl_q40_05.csv
sed -n 1,22p $R/tl_q40_05.txt; tail -14 $R/tl_q40_05.txt
