# The fortieth session's fifth call (bench/NOTES.md): the F32 kernel's first tiles copied before its
# wait where their tokens were cached before the step (MVLLM_EARLY_LOADS bit 1, as the F16/BF16
# kernel does), and the split merge with its first 16 parts a thread loaded before the reductions.
# Binaries in .carry/s40e, call 4's (.carry/s40d) as "old"; then B1 as BENCHMARKS.md specifies it
# (the whole table) and the torch anchor (.carry/s40e/attn_torch.py, a copy of the shared anchor)
# in the same run on the same card.
. bench/s40_common.sh
s40_setup .carry/s40e .carry/s40d/mvllm.xz
s40_tests
for v in mvllm mvllm-old early6; do
  b=$v; e=""; [ $v = early6 ] && { b=mvllm; e="MVLLM_EARLY_LOADS=6"; }
  env $e timeout 100 bin/$b bench attention --quick --contexts 128,1024,4096,32768 --json-out $R/quick_$v.json > $R/quick_$v.log 2>&1
  echo "quick $v rc=$?"; f32rows $R/quick_$v.log
done
s40_ncu_times
s40_b1_anchor .carry/s40e
