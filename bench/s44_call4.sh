# The forty-fourth session's fourth call (bench/NOTES.md): test_cuda with Q4_K's first item loaded
# before the PDL wait (bench/s44_kq_first.patch, applied on branch s44-kf), and that binary's 7B and
# 0.5B Q4_K_M batch-1 decode after 128 tokens. .carry/s44e: mvllm.xz, test_cuda.xz, lib.txz.
. bench/s40_common.sh
s40_setup .carry/s44e
s40_tests
M=/tmp/mvllm-models; mkdir -p $M
for preset in qwen2.5-0.5b qwen2.5-7b; do
  timeout 200 bin/mvllm make-model $M/$preset-q4_k_m.gguf --preset $preset --type q4_k_m > /dev/null 2>&1; echo "model $preset rc=$?"
  dec kf_${preset}_128 bin/mvllm $M/$preset-q4_k_m.gguf 128
done
