# The forty-fifth session's fourth call (bench/NOTES.md). .carry/s45d: mvllm.xz and test_cuda.xz
# (the decode attention's one-row rules at the 256 bucket: 4 warps at head_dim 64, one split at
# 128), lib.txz; the shipped model travels.
# 1. test_cuda, all of it. 2. Batch-1 decode of both q4_0 files after 128 tokens: new, new with
# MVLLM_ATTN_SHORT=0 (the rules off: 4aea27e's plans), two
# rounds; the 0.5B after 600 (a bucket the rules
# leave alone).
. bench/s40_common.sh
s40_setup .carry/s45d
s40_tests
q4_models
for round in 1 2; do
  for m in $M5 $M7; do
    n=$(basename $m .gguf)
    dec n_${n}_$round bin/mvllm $m 128
    dec off_${n}_$round bin/mvllm $m 128 MVLLM_ATTN_SHORT=0
  done
done
dec n_05_600 bin/mvllm $M5 600; dec off_05_600 bin/mvllm $M5 600 MVLLM_ATTN_SHORT=0
