# The forty-first session's fifth call (bench/NOTES.md): the F32 split merge staging its parts in
# shared memory (.carry/s41d; the default below 128 splits) against the previous binary
# (.carry/s40h) and against the new binary's loop (MVLLM_ATTN_F32_MERGE=0) and ahead (=1) ways.
# The attention tests first (the three ways give the same bits).
. bench/s40_common.sh
s40_setup .carry/s41d .carry/s40h/mvllm.xz
s40_tests 'CudaAttention.*'
q() { quick_rows "$@"; }  # NAME BINARY [ENV...]
for round in 1 2; do
  q old_$round bin/mvllm-old
  q staged_$round bin/mvllm
  q loop_$round bin/mvllm MVLLM_ATTN_F32_MERGE=0
  q ahead_$round bin/mvllm MVLLM_ATTN_F32_MERGE=1
done
