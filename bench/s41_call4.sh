# The forty-first session's fourth call (bench/NOTES.md): the F32 kernel's L2 prefetch alone
# (.carry/s41c: the previous kernel plus the prefetch loop before the wait, off by default), at 0 /
# 2 / 4 / 8 tiles a warp, against the previous binary (.carry/s40h), and that binary with the split
# merge's parts always loaded ahead (MVLLM_ATTN_F32_MERGE_BATCH=1). The attention tests first, with
# the prefetch on.
. bench/s40_common.sh
s40_setup .carry/s41c .carry/s40h/mvllm.xz
MVLLM_ATTN_F32_PREFETCH=4 s40_tests 'CudaAttention.*'
q() { quick_rows "$@"; }  # NAME BINARY [ENV...]
for round in 1 2; do
  q old_$round bin/mvllm-old
  for pf in 0 2 4 8; do q pf${pf}_$round bin/mvllm MVLLM_ATTN_F32_PREFETCH=$pf; done
  q ahead_$round bin/mvllm-old MVLLM_ATTN_F32_MERGE_BATCH=1
done
