# The forty-second session's first call (bench/NOTES.md): every pipeline stage of the decode
# attention kernels (F32 SIMT and F16/BF16 tensor-core) starts its tile copy before the PDL wait
# (.carry/s42a: this tree's binaries, mvllm-old.xz the binary of 6788bc9). test_cuda, B1's quick rows
# old / new / new with MVLLM_ATTN_EARLY_ALL=0, then batch-1 decode after 4K tokens, old against new.
. bench/s40_common.sh
early_ab .carry/s42a
q4_models
for round in 1 2; do
  dec d05_4k_old_$round bin/mvllm-old $M5 4096
  dec d05_4k_new_$round bin/mvllm $M5 4096
  dec d7_4k_old_$round bin/mvllm-old $M7 4096
  dec d7_4k_new_$round bin/mvllm $M7 4096
done
