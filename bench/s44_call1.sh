# The forty-fourth session's first call (bench/NOTES.md). .carry/s44c: mvllm.xz and test_cuda.xz
# of branch s44-q4k-layout (Q4_K weights split, weight_layout.h; and Q and K stacked with V apart,
# backend.h, in one GEMV launch with the RoPE / K-V store epilogue), mvllm-old.xz (9dab3b2, main's
# CUDA code), lib.txz.
# 1. test_cuda (all). 2. `bench kernels` q4_k at one column, old and new. 3. Batch-1 decode of the
# Q4_K_M files (F16 KV) after 128 tokens: old, new (two rounds), and new with MVLLM_QKV_V_APART=0
# (the layout alone: the projections unfused as before).
. bench/s40_common.sh
s40_setup .carry/s44c .carry/s44c/mvllm-old.xz
s40_tests
for b in old new; do
  bin=bin/mvllm-$b; [ $b = new ] && bin=bin/mvllm
  timeout 60 $bin bench kernels --types q4_k --tokens 1 --json-out $R/kernels_$b.json > $R/kernels_$b.log 2>&1
  echo "kernels $b rc=$?"; grep -E "^\| q4_K" $R/kernels_$b.log | awk -F'|' '{print $3 "|" $5 "|" $8}' | tr '\n' ';'; echo
done
M=/tmp/mvllm-models; mkdir -p $M
for preset in qwen2.5-0.5b qwen2.5-7b; do
  timeout 200 bin/mvllm make-model $M/$preset-q4_k_m.gguf --preset $preset --type q4_k_m > /dev/null 2>&1; echo "model $preset rc=$?"
done
for round in 1 2; do
  for preset in qwen2.5-0.5b qwen2.5-7b; do
    dec old_${preset}_128_$round bin/mvllm-old $M/$preset-q4_k_m.gguf 128
    dec new_${preset}_128_$round bin/mvllm $M/$preset-q4_k_m.gguf 128
    [ $round = 2 ] || dec lay_${preset}_128_$round bin/mvllm $M/$preset-q4_k_m.gguf 128 MVLLM_QKV_V_APART=0
  done
done
