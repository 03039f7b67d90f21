# The forty-sixth session's second call (bench/NOTES.md). .carry/s46b: mvllm-v2.xz and
# test_cuda-v2.xz (the fold's second form, v2, without call 1's SwiGLU QX), lib.txz; the shipped model travels.
# 1. test_cuda, all of it. 2. Batch-1 decode after 128 tokens, the 0.5B and 7B
# q4_0 files: v2 with the fold off (MVLLM_NORM_FOLD=0: main's kernels), on, and on with every
# kernel preferring one carveout (MVLLM_CUDA_CARVEOUT=8; the 0.5B only). (The attention timeline
# planned here was cut: device time.)
. bench/s40_common.sh
s40_setup .carry/s46b
for b in mvllm test_cuda; do xz -dc .carry/s46b/$b-v2.xz > bin/$b && chmod +x bin/$b; done
s40_tests
q4_models
for m in $M5 $M7; do
  n=$(basename $m .gguf)
  dec v2off_$n bin/mvllm $m 128 MVLLM_NORM_FOLD=0
  dec v2fold_$n bin/mvllm $m 128
  [ $m = $M5 ] && dec v2cv8_$n bin/mvllm $m 128 MVLLM_CUDA_CARVEOUT=8
done
