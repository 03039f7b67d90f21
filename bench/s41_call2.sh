# The forty-first session's second call (bench/NOTES.md): call 1's binary (.carry/s41a) with both
# of its changes switched off, against the previous tree's binary (.carry/s40h) and against that
# binary with only its merge kernel's loads made L2 loads (__ldcg; .carry/s41b): which of the edits
# gave call 1's 16 x 4K row its 10 µs. And the previous binary without the attention's early tile
# copies (MVLLM_EARLY_LOADS=6): how much the copies before the wait give at all.
. bench/s40_common.sh
s40_setup .carry/s41b .carry/s40h/mvllm.xz
xz -dc .carry/s41a/mvllm.xz > bin/mvllm-fold && chmod +x bin/mvllm-fold
s40_tests 'CudaAttention.*'
q() { quick_rows "$@"; }  # NAME BINARY [ENV...]
for round in 1 2; do
  q ldcg_$round bin/mvllm
  q old_$round bin/mvllm-old
  q foldoff_$round bin/mvllm-fold MVLLM_ATTN_F32_FOLD_MERGE=0 MVLLM_ATTN_F32_PREFETCH=0
  q noearly_$round bin/mvllm-old MVLLM_EARLY_LOADS=6
done
