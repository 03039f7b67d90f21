# The forty-third session's third call (bench/NOTES.md): the unfused projections' RoPE and K/V store
# in one kernel (rope_qk_kv_store; what a Q4_K_M file runs, its V being Q6_K). .carry/s43c: mvllm.xz
# and test_cuda.xz of the change, mvllm-old.xz (59f1cf2), lib.txz.
# 1. test_cuda (all). 2. Batch-1 decode of the Q4_K_M files (F16 KV) after 128 tokens, old binary
# against new, two rounds (trimmed to fit the device time left).
. bench/s40_common.sh
s40_setup .carry/s43c .carry/s43c/mvllm-old.xz
s40_tests
M=/tmp/mvllm-models; mkdir -p $M
for preset in qwen2.5-0.5b qwen2.5-7b; do
  timeout 200 bin/mvllm make-model $M/$preset-q4_k_m.gguf --preset $preset --type q4_k_m > /dev/null 2>&1; echo "model $preset rc=$?"
done
for round in 1 2; do
  for preset in qwen2.5-0.5b qwen2.5-7b; do
    dec old_${preset}_128_$round bin/mvllm-old $M/$preset-q4_k_m.gguf 128
    dec new_${preset}_128_$round bin/mvllm $M/$preset-q4_k_m.gguf 128
  done
done
