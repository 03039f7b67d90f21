# The forty-fourth session's second call (bench/NOTES.md). .carry/s44c: mvllm.xz (3e03126) and
# test_cuda.xz (the V-apart test's poison fixed), mvllm-old.xz (9dab3b2), lib.txz.
# 1. test_cuda (all). 2. q4_0 batch-1 decode after 128 tokens, old and new, two rounds (the shared
# GEMV body changed; q4_0 files keep the stacked path). 3. Q4_K_M decode of the new binary after
# 128, 2,048 and 32,768 tokens (B3's ratios).
. bench/s40_common.sh
s40_setup .carry/s44c .carry/s44c/mvllm-old.xz
s40_tests
q4_models
M=/tmp/mvllm-models
for preset in qwen2.5-0.5b qwen2.5-7b; do
  timeout 200 bin/mvllm make-model $M/$preset-q4_k_m.gguf --preset $preset --type q4_k_m > /dev/null 2>&1; echo "model $preset rc=$?"
done
for round in 1 2; do
  for m in $M5 $M7; do
    n=$(basename $m .gguf)
    dec old_${n}_128_$round bin/mvllm-old $m 128
    dec new_${n}_128_$round bin/mvllm $m 128
  done
done
for preset in qwen2.5-0.5b qwen2.5-7b; do
  for p in 128 2048 32768; do dec km_${preset}_$p bin/mvllm $M/$preset-q4_k_m.gguf $p; done
done
