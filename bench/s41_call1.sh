# The forty-first session's first call (bench/NOTES.md): the F32 kernel merging its own splits and
# prefetching its further cached tiles into L2 before the wait (binaries in .carry/s41a), against
# each change switched off and against the previous tree's binary (.carry/s40h/mvllm.xz); test_cuda
# first. Two rounds of the quick F32 / F16 rows.
. bench/s40_common.sh
s40_setup .carry/s41a .carry/s40h/mvllm.xz
s40_tests
q() { quick_rows "$@"; }  # NAME BINARY [ENV...]
for round in 1 2; do
  q new_$round bin/mvllm
  q nofold_$round bin/mvllm MVLLM_ATTN_F32_FOLD_MERGE=0
  q nopf_$round bin/mvllm MVLLM_ATTN_F32_PREFETCH=0
  q old_$round bin/mvllm-old
done
