# The forty-fifth session's third call (bench/NOTES.md). .carry/s45c: mvllm.xz and test_cuda.xz of
# 4aea27e (call 2's binaries: the Q6_K rule), lib.txz; the shipped model travels this time.
# 1. test_cuda, all of it. 2. The decode attention's warps and splits by context, environment only:
# the 0.5B q4_0 with 8 warps (default) and 4 (MVLLM_ATTN_WARPS=4) after 128, 300, 600, 1,200 and
# 2,200 tokens (buckets 256, 1K, 4K; 300 and 1,200 cut for device time), the 7B q4_0 by default and with one split
# (MVLLM_ATTN_SPLITS=1) after 128 and 300. 3. B3's Q4_K_M 0.5B rows (128, 2,048).
. bench/s40_common.sh
s40_setup .carry/s45c
s40_tests
M=/tmp/mvllm-models; mkdir -p $M
q4_models
for p in 128 600 2200; do
  dec w_05_${p}_base bin/mvllm $M5 $p
  dec w_05_${p}_w4 bin/mvllm $M5 $p MVLLM_ATTN_WARPS=4
done
for p in 128 300; do
  dec s_7_${p}_base bin/mvllm $M7 $p
  dec s_7_${p}_s1 bin/mvllm $M7 $p MVLLM_ATTN_SPLITS=1
done
timeout 200 bin/mvllm make-model $M/qwen2.5-0.5b-q4_k_m.gguf --preset qwen2.5-0.5b --type q4_k_m > /dev/null 2>&1
for p in 128 2048; do dec b3_km_05_$p bin/mvllm $M/qwen2.5-0.5b-q4_k_m.gguf $p; done
